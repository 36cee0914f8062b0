// Mat-vec with the residual add in its epilogue: out[n] += weight[n, k] ·
// x[k] (o_proj and down_proj adding into the residual stream), one dispatch
// where there were two. Each row is added by one lane, so no two threads
// touch the same element.
template <typename W>
__device__ void matvec_add(const W* weight, const float* x, float* out, u32 n, u32 k) {
    matvec_rows<W, 1>(
        n, k, x, packed_rows(weight, x, k), [&](u32 row, const W** rows) { rows[0] = weight + (size_t)row * k; },
        [&](u32 row, const float* sums) { out[row] += sums[0]; });
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS) matvec_add_f32(const float* weight, const float* x,
                                                                             float* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    matvec_add(weight, x, out, n, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS) matvec_add_f16(const f16* weight, const float* x,
                                                                             float* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    matvec_add(weight, x, out, n, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS) matvec_add_bf16(const bf16* weight, const float* x,
                                                                              float* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    matvec_add(weight, x, out, n, k);
}
