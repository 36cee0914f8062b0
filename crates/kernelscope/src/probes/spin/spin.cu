// The calibration kernel: one warp spins for `cycles` SM clock cycles, so a
// dispatch lasts a known time (cycles over the SM clock rate, which the
// calibration measures from a long spin against the global timer). Lane 0
// records, as u32 pairs (low word first) in `record` [6], the global timer
// (ns) when the spin began and ended and the cycles that passed.
extern "C" __global__ void spin_u32(unsigned long long cycles, u32* record) {
    unsigned long long began, ended;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(began));
    const long long start = clock64();
    long long now = start;
    while ((unsigned long long)(now - start) < cycles) now = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ended));
    if (threadIdx.x == 0) {
        const unsigned long long spun = (unsigned long long)(now - start);
        record[0] = (u32)began;
        record[1] = (u32)(began >> 32);
        record[2] = (u32)ended;
        record[3] = (u32)(ended >> 32);
        record[4] = (u32)spun;
        record[5] = (u32)(spun >> 32);
    }
}
