// RMSNorm, the gate and up projections and SiLU·mul as one dispatch:
// out[i] = silu(gate[i] · h) * (up[i] · h) with h = rmsnorm(x) * norm_weight
// staged in shared memory. One warp reads row i of both matrices, so the
// product is formed in registers and gate and up are never stored.
template <typename W>
__device__ void norm_matvec_silu(const float* x, const W* norm_weight, const W* gate, const W* up, float* out,
                                 u32 n, u32 k, float eps) {
    extern __shared__ float4 staged_storage[];
    float* staged = (float*)staged_storage;
    stage_normed(x, norm_weight, eps, k, staged);
    const bool packed = packed_rows(gate, staged, k) && packed_rows(up, staged, k);
    matvec_rows<W, 2>(
        n, k, staged, packed,
        [&](u32 row, const W** rows) {
            rows[0] = gate + (size_t)row * k;
            rows[1] = up + (size_t)row * k;
        },
        [&](u32 row, const float* sums) { out[row] = silu(sums[0]) * sums[1]; });
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_silu_f32(const float* x, const float* norm_weight, const float* gate, const float* up, float* out,
                         u32 n, u32 k, float eps) {
    wait_for_previous_kernel();
    norm_matvec_silu(x, norm_weight, gate, up, out, n, k, eps);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_silu_f16(const float* x, const f16* norm_weight, const f16* gate, const f16* up, float* out,
                         u32 n, u32 k, float eps) {
    wait_for_previous_kernel();
    norm_matvec_silu(x, norm_weight, gate, up, out, n, k, eps);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_silu_bf16(const float* x, const bf16* norm_weight, const bf16* gate, const bf16* up, float* out,
                          u32 n, u32 k, float eps) {
    wait_for_previous_kernel();
    norm_matvec_silu(x, norm_weight, gate, up, out, n, k, eps);
}
