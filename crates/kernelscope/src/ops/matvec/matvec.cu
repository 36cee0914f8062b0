// Mat-vec: out[n] = weight[n, k] · x[k], whole rows per warp (see rows.cuh).
template <typename W>
__device__ void matvec(const W* weight, const float* x, float* out, u32 n, u32 k) {
    matvec_rows<W, 1>(
        n, k, x, packed_rows(weight, x, k), [&](u32 row, const W** rows) { rows[0] = weight + (size_t)row * k; },
        [&](u32 row, const float* sums) { out[row] = sums[0]; });
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS) matvec_f32(const float* weight, const float* x,
                                                                         float* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    matvec(weight, x, out, n, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS) matvec_f16(const f16* weight, const float* x,
                                                                         float* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    matvec(weight, x, out, n, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS) matvec_bf16(const bf16* weight, const float* x,
                                                                          float* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    matvec(weight, x, out, n, k);
}
