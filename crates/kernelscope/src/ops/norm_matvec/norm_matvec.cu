// RMSNorm fused into the mat-vec that reads it: out = [A; B; C] · (rmsnorm(x)
// * norm_weight), where A, B and C are up to three weight matrices [rows_*,
// k] read as one (q_proj, k_proj and v_proj; or the LM head alone, with
// rows_b = rows_c = 0) and out [rows_a + rows_b + rows_c] holds their rows in
// that order. Each block normalises x into shared memory once (k floats of
// dynamic shared memory), then its warps stream weight rows (rows.cuh).
template <typename W>
__device__ void norm_matvec(const float* x, const W* norm_weight, const W* weight_a, const W* weight_b,
                            const W* weight_c, float* out, u32 rows_a, u32 rows_b, u32 rows_c, u32 k, float eps) {
    extern __shared__ float4 staged_storage[];
    float* staged = (float*)staged_storage;
    stage_normed(x, norm_weight, eps, k, staged);
    const bool packed = packed_rows(weight_a, staged, k) && packed_rows(weight_b, staged, k) &&
                        packed_rows(weight_c, staged, k);
    matvec_rows<W, 1>(
        rows_a + rows_b + rows_c, k, staged, packed,
        [&](u32 row, const W** rows) {
            rows[0] = row < rows_a            ? weight_a + (size_t)row * k
                      : row < rows_a + rows_b ? weight_b + (size_t)(row - rows_a) * k
                                              : weight_c + (size_t)(row - rows_a - rows_b) * k;
        },
        [&](u32 row, const float* sums) { out[row] = sums[0]; });
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_f32(const float* x, const float* norm_weight, const float* weight_a, const float* weight_b,
                    const float* weight_c, float* out, u32 rows_a, u32 rows_b, u32 rows_c, u32 k, float eps) {
    wait_for_previous_kernel();
    norm_matvec(x, norm_weight, weight_a, weight_b, weight_c, out, rows_a, rows_b, rows_c, k, eps);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_f16(const float* x, const f16* norm_weight, const f16* weight_a, const f16* weight_b,
                    const f16* weight_c, float* out, u32 rows_a, u32 rows_b, u32 rows_c, u32 k, float eps) {
    wait_for_previous_kernel();
    norm_matvec(x, norm_weight, weight_a, weight_b, weight_c, out, rows_a, rows_b, rows_c, k, eps);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_bf16(const float* x, const bf16* norm_weight, const bf16* weight_a, const bf16* weight_b,
                     const bf16* weight_c, float* out, u32 rows_a, u32 rows_b, u32 rows_c, u32 k, float eps) {
    wait_for_previous_kernel();
    norm_matvec(x, norm_weight, weight_a, weight_b, weight_c, out, rows_a, rows_b, rows_c, k, eps);
}
