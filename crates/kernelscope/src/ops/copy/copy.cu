// Copy of 32-bit words (copies are dtype-blind): 16 bytes per thread per
// step where both ends are 16-byte aligned, so the probe measures memory,
// not instruction issue; the odd tail word by word.
// The word count is 64-bit: a 16 GiB buffer already holds 2^32 words.
extern "C" __global__ void copy_bytes(const u32* source, u32* destination, unsigned long long words) {
    wait_for_previous_kernel();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t vectors = 0;
    if (((size_t)source % 16 == 0) && ((size_t)destination % 16 == 0)) {
        vectors = words / 4;
        const uint4* from = (const uint4*)source;
        uint4* to = (uint4*)destination;
        for (size_t i = first; i < vectors; i += stride) to[i] = from[i];
    }
    for (size_t i = vectors * 4 + first; i < words; i += stride) destination[i] = source[i];
}
