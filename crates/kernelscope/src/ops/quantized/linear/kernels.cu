// The kernels of one quantized format, instantiated from quantized.cuh:
// the registry replaces `{format}` with the format's name and `{Format}`
// with its struct (`q4_k`, `Q4_K`) and compiles one source per format.
// matvec and matmul are one kernel under two names (one position, or a
// prefill chunk's rows); the profile tells them apart by name.
extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    matvec_{format}_q8(const u8* weight, const float* x, float* out, u32 n, u32 k, u32 rows) {
    wait_for_previous_kernel();
    quantized_matvec<{Format}>(weight, x, out, n, k, rows);
}
extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    matmul_{format}(const u8* weight, const float* x, float* out, u32 n, u32 k, u32 rows) {
    wait_for_previous_kernel();
    quantized_matvec<{Format}>(weight, x, out, n, k, rows);
}
// The fused products over x quantized by stage.cu's kernels.
extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    matvec_add_{format}_q8(const u8* weight, const u8* x, float* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    quantized_matvec_add<{Format}>(weight, x, out, n, k);
}
// The same, the new residual staged for the next RMSNorm's readers
// before it is normalised (chunked.cuh). Its reader, the streamed gate/up,
// may launch at once and fill its rings while this runs
// (let_next_kernel_launch); so may the streamed down after the staging
// gate/up kernels below.
extern "C" __global__ void __launch_bounds__(NORM_STAGE_WARPS * 32)
    matvec_add_{format}_q8_norm_stage(const u8* weight, const u8* x, float* out, u32 n, u32 k,
                                      const float* norm_weight, u8* staged, float* squares) {
    wait_for_previous_kernel();
    let_next_kernel_launch();
    quantized_matvec_add_norm_staged<{Format}>(weight, x, out, n, k, norm_weight, staged, squares);
}
extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    matvecs_{format}_q8(const u8* x, const u8* weight_a, const u8* weight_b, const u8* weight_c, float* out,
                        u32 rows_a, u32 rows_b, u32 rows_c, u32 k) {
    wait_for_previous_kernel();
    quantized_matvecs<{Format}>(x, weight_a, weight_b, weight_c, out, rows_a, rows_b, rows_c, k);
}
// The same over q, k and v, RoPE and the append into bf16 caches in its
// stores.
extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    matvecs_rope_{format}_q8_bf16(const u8* x, const u8* weight_a, const u8* weight_b, const u8* weight_c,
                                  u32 rows_a, u32 rows_b, u32 rows_c, u32 k, u32 first_row, float* query,
                                  bf16* key_cache, bf16* value_cache, const float* inverse_frequencies,
                                  const u32* positions, u32 first, u32 max_positions, u32 query_heads,
                                  u32 kv_heads, u32 head_dim, float attention_scaling) {
    wait_for_previous_kernel();
    quantized_matvecs_rope<{Format}>(x, weight_a, weight_b, weight_c, rows_a, rows_b, rows_c, k, first_row, query,
                                     key_cache, value_cache, inverse_frequencies, positions, first, max_positions,
                                     query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    matvec_silu_{format}_q8(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    quantized_matvec_silu<{Format}>(x, gate, up, out, n, k);
}
// The same, its output also staged for the down projection.
extern "C" __global__ void __launch_bounds__(CHUNK_WARPS * 32)
    matvec_silu_{format}_q8_stage(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k,
                                  u8* staged) {
    wait_for_previous_kernel();
    let_next_kernel_launch();
    quantized_matvec_silu_staged<{Format}>(x, gate, up, out, staged, n, k, nullptr, 0.0f);
}
// The same over x o_proj staged unnormalised (chunked.cuh), `squares` its
// chunks' sums of squares.
extern "C" __global__ void __launch_bounds__(CHUNK_WARPS * 32)
    matvec_silu_{format}_q8_norm_stage(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k,
                                       u8* staged, const float* squares, float eps) {
    wait_for_previous_kernel();
    let_next_kernel_launch();
    quantized_matvec_silu_staged<{Format}>(x, gate, up, out, staged, n, k, squares, eps);
}
extern "C" __global__ void dequantize_{format}_bf16(const u8* weight, bf16* out, u32 n, u32 k) {
    wait_for_previous_kernel();
    quantized_dequantize_bf16<{Format}>(weight, out, n, k);
}
