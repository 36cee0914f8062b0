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

// The stamps of one launch, reduced over its blocks as they run, so that
// only a few words cross the bus a launch whatever the grid (every block
// writing its own stamps to host memory had cost 7 % of profiled decode).
// `totals` (device memory, zeroed when allocated) holds 3 + 2 * phases
// words: the ring's launches so far, the blocks done with this launch, the
// bitwise complement of the earliest block start (so an atomic max finds
// the earliest from a zeroed word), then per phase the latest block's end,
// then per phase the sum of every block's end (unsigned, wrapping: the
// host subtracts blocks * earliest start and the small true sum remains).
// `stamps` (host memory mapped for the device, or null when the profile
// does not look inside) holds STAMP_RING slots of 3 + 2 * phases words:
// the launch's number, its blocks, the earliest start, the latest ends and
// the sums. The last block to finish writes its launch's slot, zeroes the
// totals for the next launch and only then advances the count of launches
// (every block has read it by then: it read it at its start).
struct PhaseStamps {
    unsigned long long* totals;
    unsigned long long* slot;
    unsigned long long launch;
    unsigned int phases;

    __device__ __forceinline__ void open(unsigned long long* launches, unsigned long long* stamps,
                                         unsigned int phase_count) {
        totals = nullptr;
        if (stamps == nullptr || threadIdx.x != 0) return;
        totals = launches;
        phases = phase_count;
        launch = *(volatile unsigned long long*)launches;
        slot = stamps + (launch % STAMP_RING) * (3 + 2 * (size_t)phase_count);
    }
    // Stamp `index` of this block: 0 its start, i the end of its step i.
    __device__ __forceinline__ void mark(unsigned int index) const {
        if (totals == nullptr) return;
        const unsigned long long now = global_timer_ns();
        if (index == 0) {
            atomicMax(totals + 2, ~now);
        } else {
            atomicMax(totals + 2 + index, now);
            atomicAdd(totals + 2 + phases + index, now);
        }
    }
    // Counts this block out after its last stamp; the last block out
    // writes the launch's slot and readies the totals for the next one.
    __device__ __forceinline__ void close() const {
        if (totals == nullptr) return;
        __threadfence();
        if (atomicAdd(totals + 1, 1ull) != gridDim.x - 1) return;
        // Every other block fenced its stamps before counting itself out.
        __threadfence();
        slot[0] = launch;
        slot[1] = gridDim.x;
        slot[2] = ~atomicExch(totals + 2, 0ull);
        for (unsigned int word = 3; word < 3 + 2 * phases; ++word) slot[word] = atomicExch(totals + word, 0ull);
        atomicExch(totals + 1, 0ull);
        __threadfence_system();
        *(volatile unsigned long long*)totals = launch + 1;
    }
};
