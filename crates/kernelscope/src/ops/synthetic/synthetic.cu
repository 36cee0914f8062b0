// Seeded synthetic weights made on the device: element i of the cut is
// element `index` of the whole tensor (row `first_row + i / columns`, column
// `first_column + i % columns`, rows of `row_length`), whose value is the
// `index`-th output of SplitMix64 from `seed`, its top 24 bits scaled to
// [low, high) with one rounded multiply and one rounded add (no fused
// multiply-add, so the bits are those the CPU generator writes), then
// rounded to nearest even into the weights' dtype.
__device__ __forceinline__ unsigned long long splitmix_at(unsigned long long seed, unsigned long long index) {
    unsigned long long z = seed + (index + 1ull) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

template <typename W>
__device__ void synthetic_fill(W* out, unsigned long long count, unsigned long long seed,
                               unsigned long long row_length, unsigned long long first_row,
                               unsigned long long first_column, unsigned long long columns, float low, float high) {
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
        unsigned long long row = i / columns;
        unsigned long long index = (first_row + row) * row_length + first_column + (i - row * columns);
        float unit = (float)(splitmix_at(seed, index) >> 40) * (1.0f / 16777216.0f);
        float value = __fadd_rn(low, __fmul_rn(__fsub_rn(high, low), unit));
        from_f32(value, out + i);
    }
}

extern "C" __global__ void synthetic_fill_f32(float* out, unsigned long long count, unsigned long long seed,
                                              unsigned long long row_length, unsigned long long first_row,
                                              unsigned long long first_column, unsigned long long columns,
                                              float low, float high) {
    wait_for_previous_kernel();
    synthetic_fill(out, count, seed, row_length, first_row, first_column, columns, low, high);
}
extern "C" __global__ void synthetic_fill_f16(f16* out, unsigned long long count, unsigned long long seed,
                                              unsigned long long row_length, unsigned long long first_row,
                                              unsigned long long first_column, unsigned long long columns,
                                              float low, float high) {
    wait_for_previous_kernel();
    synthetic_fill(out, count, seed, row_length, first_row, first_column, columns, low, high);
}
extern "C" __global__ void synthetic_fill_bf16(bf16* out, unsigned long long count, unsigned long long seed,
                                               unsigned long long row_length, unsigned long long first_row,
                                               unsigned long long first_column, unsigned long long columns,
                                               float low, float high) {
    wait_for_previous_kernel();
    synthetic_fill(out, count, seed, row_length, first_row, first_column, columns, low, high);
}
