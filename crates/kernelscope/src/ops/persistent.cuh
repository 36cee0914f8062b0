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

// The stamps of one launch: `launches` (device memory) counts the ring's
// launches so far, and `stamps` (host memory mapped for the device, or null
// when the profile does not look inside) holds STAMP_RING slots, each the
// launch's number and, per block, `per_block` stamps. Thread 0 of each
// block writes its block's stamps; they cross the bus as the kernel runs.
// The counter stays in device memory: every block reads it at its start,
// and a read over the bus would have been on each block's path.
struct PhaseStamps {
    unsigned long long* mine;
    unsigned long long* counter;
    unsigned long long launch;

    __device__ __forceinline__ void open(unsigned long long* launches, unsigned long long* stamps,
                                         unsigned int per_block) {
        mine = nullptr;
        counter = launches;
        if (stamps == nullptr || threadIdx.x != 0) return;
        launch = *(volatile unsigned long long*)launches;
        unsigned long long* slot = stamps + (launch % STAMP_RING) * (1 + (size_t)gridDim.x * per_block);
        if (blockIdx.x == 0) slot[0] = launch;
        mine = slot + 1 + (size_t)blockIdx.x * per_block;
    }
    // Stamp `index` of this block: 0 its start, i the end of its step i.
    __device__ __forceinline__ void mark(unsigned int index) const {
        if (mine != nullptr) mine[index] = global_timer_ns();
    }
    // Counts the launch: called by every block after the grid's last
    // barrier (every block has read the counter by then), before it ends.
    __device__ __forceinline__ void close() const {
        if (mine != nullptr && blockIdx.x == 0) *counter = launch + 1;
    }
};
