// Streaming write of 32-bit words: the memory-write ceiling's probe. Word i
// becomes i * 2654435761 ^ seed (a pattern the caller can check, and no
// store the compiler can drop), 16 bytes per thread per step with the
// streaming hint (the data is not read back soon); the odd tail word by
// word. The word count is 64-bit: a 16 GiB buffer holds 2^32 words.
__device__ __forceinline__ u32 pattern_word(size_t index, u32 seed) {
    return (u32)index * 2654435761u ^ seed;
}

extern "C" __global__ void stream_write(u32* out, unsigned long long words, u32 seed) {
    wait_for_previous_kernel();
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    size_t vectors = 0;
    if ((size_t)out % 16 == 0) {
        vectors = words / 4;
        uint4* to = (uint4*)out;
        for (size_t i = first; i < vectors; i += stride) {
            size_t word = 4 * i;
            uint4 v = make_uint4(pattern_word(word, seed), pattern_word(word + 1, seed),
                                 pattern_word(word + 2, seed), pattern_word(word + 3, seed));
            asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                         :
                         : "l"(to + i), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                         : "memory");
        }
    }
    for (size_t i = vectors * 4 + first; i < words; i += stride) out[i] = pattern_word(i, seed);
}
