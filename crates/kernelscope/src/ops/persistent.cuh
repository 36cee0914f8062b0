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

// The stamps of one launch of a kernel of PHASES steps (at most
// PHASE_STAMPS_MOST). Thread 0 of each block keeps, in registers, the
// launch number's and its start's low 32 bits and each step's end but the
// last (the launch's own end closes it) as a 32-bit offset from its start,
// and writes them once, as it ends, as one 16-byte row of the launch's
// slot in `stamps` (host memory mapped for the device, or null when the
// profile does not look inside): STAMP_RING slots of 2 + 2 * blocks
// words, the launch's number and block 0's whole start, then the blocks'
// rows. `launches` (device memory) counts the ring's launches: every block
// reads it at its start, and block 0 advances it after the grid's last
// barrier. The kernel passes its arguments to every call, so nothing but
// those five words stays live across its steps (the kernel is at its
// register bound). Five stamps a block written across the bus as the
// kernel ran had cost 7 % of profiled decode; atomics of every block on a
// few shared words 12 %, each grid barrier's fence waiting out hundreds of
// them; block 0 reducing every block's stamps after its own work 8 %.
#define PHASE_STAMPS_MOST 4
template <int PHASES>
struct PhaseStamps {
    static_assert(PHASES >= 1 && PHASES <= PHASE_STAMPS_MOST, "a row holds a start and three ends");
    unsigned int launch;
    unsigned int start;
    unsigned int offsets[PHASE_STAMPS_MOST - 1];

    __device__ __forceinline__ void open(const unsigned long long* launches, const unsigned long long* stamps) {
        if (stamps == nullptr || threadIdx.x != 0) return;
        launch = (unsigned int)*(const volatile unsigned long long*)launches;
#pragma unroll
        for (int i = 0; i < PHASE_STAMPS_MOST - 1; ++i) offsets[i] = 0;
    }
    // Stamp `index` (< PHASES) of this block: 0 its start, i the end of step i.
    __device__ __forceinline__ void mark(const unsigned long long* stamps, int index) {
        if (stamps == nullptr || threadIdx.x != 0) return;
        const unsigned int now = (unsigned int)global_timer_ns();
        if (index == 0) {
            start = now;
        } else {
            offsets[index - 1] = now - start;
        }
    }
    // Every block calls it after the grid's last barrier and its own work.
    __device__ __forceinline__ void close(unsigned long long* launches, unsigned long long* stamps) const {
        if (stamps == nullptr || threadIdx.x != 0) return;
        unsigned long long* slot = stamps + (launch % STAMP_RING) * (2 + 2 * (size_t)gridDim.x);
        ((uint4*)(slot + 2))[blockIdx.x] = make_uint4(start, offsets[0], offsets[1], offsets[2]);
        if (blockIdx.x != 0) return;
        // Block 0 alone writes the count, so its whole value is still this
        // launch's; its whole start is now less the time since (< 4 s).
        const unsigned long long number = *(volatile unsigned long long*)launches;
        const unsigned long long now = global_timer_ns();
        slot[0] = number;
        slot[1] = now - (unsigned int)((unsigned int)now - start);
        *(volatile unsigned long long*)launches = number + 1;
    }
};
