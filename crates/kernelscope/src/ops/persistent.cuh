// What a persistent kernel (one launch running several of a model's steps,
// its blocks all resident at once) needs beyond a plain one: a barrier
// across the whole grid between steps, and stamps of the global timer at
// step boundaries so the profile can still see each step's time inside
// the launch (Nsight sees one kernel; `kscope` splits it by these).

// Every block of the grid waits here until all have arrived, and sees every
// write made before any block's arrival. `arrivals` is a word of global
// memory, zero when first used, that no other barrier shares while this
// one can be in use: block 0 adds 2^31 - (blocks - 1), the others 1, so
// the top bit flips exactly when the last block arrives, and the word
// needs no reset between uses (as cooperative groups' grid sync does).
// The grid must fit on the GPU at once (the host sizes it by occupancy).
__device__ __forceinline__ void grid_barrier(unsigned int* arrivals) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        __threadfence();
        const unsigned int before = atomicAdd(arrivals, add);
        unsigned int now;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(arrivals) : "memory");
        } while (((before ^ now) & 0x80000000u) == 0);
    }
    __syncthreads();
}

__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    return now;
}

// Launches whose stamps stay readable: a ring belongs to one dispatch (one
// layer's), which runs once a token, and the host reads a launch's slot
// once its token is done, with a token or two more in flight
// (`runtime::STAMP_RING`, which a test holds equal).
#define STAMP_RING 8

// The stamps of one launch. Thread 0 of each block stores its block's
// start and the end of every step but the last (the launch's own end
// closes that one) into `scratch` (device memory: the ring's launch count,
// then `phases` words a block), plain stores to addresses no other block
// touches. After the grid's last barrier every block's stamps are visible,
// and block 0, once its own work is done, reduces them (the earliest
// start; per step the latest end and the sum of ends, unsigned and
// wrapping: the host subtracts blocks * earliest start and the small true
// sum remains) into the launch's slot of `stamps` (host memory mapped for
// the device, or null when the profile does not look inside): STAMP_RING
// slots of 3 + 2 * (phases - 1) words, the launch's number, its blocks,
// the earliest start, the latest ends, the sums. Every block writing its
// own stamps across the bus had cost 7 % of profiled decode, and atomics
// of all blocks on the same few words more (each grid barrier's fence
// waited for hundreds of them).
#define PHASE_STAMPS_MOST 8
struct PhaseStamps {
    unsigned long long* scratch;
    unsigned long long* slot;
    unsigned long long launch;
    unsigned int phases;

    __device__ __forceinline__ void open(unsigned long long* launches, unsigned long long* stamps,
                                         unsigned int phase_count) {
        scratch = nullptr;
        phases = phase_count;
        if (stamps == nullptr) return;
        scratch = launches;
        if (blockIdx.x != 0 || threadIdx.x != 0) return;
        launch = *(volatile unsigned long long*)launches;
        slot = stamps + (launch % STAMP_RING) * (3 + 2 * (size_t)(phase_count - 1));
    }
    // Stamp `index` (< phases) of this block: 0 its start, i the end of step i.
    __device__ __forceinline__ void mark(unsigned int index) const {
        if (scratch != nullptr && threadIdx.x == 0)
            scratch[1 + (size_t)blockIdx.x * phases + index] = global_timer_ns();
    }
    // Every thread of every block calls it after the grid's last barrier
    // and its own last work; block 0 reduces the stamps through `shared`
    // (at least warps * (2 * phases - 1) words of the block's shared
    // memory, free by then), writes the launch's slot and counts the
    // launch (only it reads the count, at its start). At most
    // PHASE_STAMPS_MOST phases.
    __device__ __forceinline__ void close(void* shared) const {
        if (scratch == nullptr || blockIdx.x != 0) return;
        __syncthreads();
        const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
        const unsigned int words = 2 * phases - 1;
        unsigned long long* partial = (unsigned long long*)shared;
        // Per thread: the complement of the earliest start (so a max finds
        // it), then per step but the last the latest end, then the sums.
        unsigned long long mine[2 * PHASE_STAMPS_MOST - 1];
        for (unsigned int word = 0; word < words; ++word) mine[word] = 0;
        for (unsigned int block = threadIdx.x; block < gridDim.x; block += blockDim.x) {
            const unsigned long long* row = scratch + 1 + (size_t)block * phases;
            mine[0] = max(mine[0], ~__ldcg(row));
            for (unsigned int step = 1; step < phases; ++step) {
                const unsigned long long end = __ldcg(row + step);
                mine[step] = max(mine[step], end);
                mine[phases - 1 + step] += end;
            }
        }
        for (unsigned int word = 0; word < words; ++word) {
            unsigned long long value = mine[word];
            for (int offset = 16; offset > 0; offset >>= 1) {
                const unsigned long long other = __shfl_xor_sync(0xffffffffu, value, offset);
                value = word < phases ? max(value, other) : value + other;
            }
            if (lane == 0) partial[warp * words + word] = value;
        }
        __syncthreads();
        if (threadIdx.x != 0) return;
        for (unsigned int word = 0; word < words; ++word) {
            unsigned long long value = partial[word];
            for (unsigned int other = 1; other < warps; ++other) {
                const unsigned long long next = partial[other * words + word];
                value = word < phases ? max(value, next) : value + next;
            }
            slot[2 + word] = word == 0 ? ~value : value;
        }
        slot[0] = launch;
        slot[1] = gridDim.x;
        *(volatile unsigned long long*)scratch = launch + 1;
    }
};
