// The streamed products (streamed.cuh, sm_90 and later). Q4_K's gate/up:
// one kernel per number of x's pairs of sub-blocks a lane holds in
// registers, for rows of up to 4,096 and 8,192 values (shorter rows keep
// the register loop, which was as fast on llama-3.2-1b). out[i] =
// silu(gate[i] · x) * (up[i] · x), x quantized by norm_quantize_q8;
// `stages` slots a warp. Every kernel here issues its first copies before
// it waits for the previous kernel (streamed_rows, SplitRows::begin), and
// the kernels before them let them launch at their own start
// (`let_next_kernel_launch`), so the rings fill during that kernel's run.
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_silu_q4_k_held2(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k, u32 stages) {
    reads_weights_before_waiting();
    streamed_silu_held_x<2>(x, gate, up, out, n, k, stages, nullptr, 0.0f);
}
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_silu_q4_k_held4(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k, u32 stages) {
    reads_weights_before_waiting();
    streamed_silu_held_x<4>(x, gate, up, out, n, k, stages, nullptr, 0.0f);
}
// The same over x o_proj staged before its norm (chunked.cuh), `squares`
// its blocks' sums of squares.
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_silu_q4_k_held2_norm(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k, u32 stages,
                                const float* squares, float eps) {
    reads_weights_before_waiting();
    streamed_silu_held_x<2>(x, gate, up, out, n, k, stages, squares, eps);
}
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_silu_q4_k_held4_norm(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k, u32 stages,
                                const float* squares, float eps) {
    reads_weights_before_waiting();
    streamed_silu_held_x<4>(x, gate, up, out, n, k, stages, squares, eps);
}
// q, k and v's products of Q4_K rows with RoPE and the KV append in their
// stores (streamed_matvecs_rope_held_x), rows of up to 4,096 and 8,192
// values, x quantized by norm_quantize_q8, bf16 caches; `stages` slots of
// a pair of rows a warp.
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_matvecs_rope_q4_k_held2_bf16(const u8* x, const u8* weight_a, const u8* weight_b, const u8* weight_c,
                                        u32 rows_a, u32 rows_b, u32 rows_c, u32 k, u32 first_row, float* query,
                                        bf16* key_cache, bf16* value_cache, const float* inverse_frequencies,
                                        const u32* positions, u32 first, u32 max_positions, u32 query_heads,
                                        u32 kv_heads, u32 head_dim, float attention_scaling, u32 stages) {
    reads_weights_before_waiting();
    streamed_matvecs_rope_held_x<2, bf16>(x, weight_a, weight_b, weight_c, rows_a, rows_b, rows_c, k, first_row,
                                          query, key_cache, value_cache, inverse_frequencies, positions, first,
                                          max_positions, query_heads, kv_heads, head_dim, attention_scaling,
                                          stages);
}
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_matvecs_rope_q4_k_held4_bf16(const u8* x, const u8* weight_a, const u8* weight_b, const u8* weight_c,
                                        u32 rows_a, u32 rows_b, u32 rows_c, u32 k, u32 first_row, float* query,
                                        bf16* key_cache, bf16* value_cache, const float* inverse_frequencies,
                                        const u32* positions, u32 first, u32 max_positions, u32 query_heads,
                                        u32 kv_heads, u32 head_dim, float attention_scaling, u32 stages) {
    reads_weights_before_waiting();
    streamed_matvecs_rope_held_x<4, bf16>(x, weight_a, weight_b, weight_c, rows_a, rows_b, rows_c, k, first_row,
                                          query, key_cache, value_cache, inverse_frequencies, positions, first,
                                          max_positions, query_heads, kv_heads, head_dim, attention_scaling,
                                          stages);
}
// o_proj streamed (streamed_add_norm_staged): a block a chunk of 32 Q4_K
// rows of up to 4,096 and 8,192 values, the residual added, staged times
// the MLP norm's weight for gate/up with the chunk's sum of squares; the
// arguments of matvec_add_q4_k_q8_norm_stage.
extern "C" __global__ void __launch_bounds__(NORM_STAGE_WARPS * 32)
    stream_add_q4_k_held2_norm_stage(const u8* weight, const u8* x, float* out, u32 n, u32 k,
                                     const float* norm_weight, u8* staged, float* squares) {
    reads_weights_before_waiting();
    streamed_add_norm_staged<2>(weight, x, out, n, k, norm_weight, staged, squares);
}
extern "C" __global__ void __launch_bounds__(NORM_STAGE_WARPS * 32)
    stream_add_q4_k_held4_norm_stage(const u8* weight, const u8* x, float* out, u32 n, u32 k,
                                     const float* norm_weight, u8* staged, float* squares) {
    reads_weights_before_waiting();
    streamed_add_norm_staged<4>(weight, x, out, n, k, norm_weight, staged, squares);
}
// The streamed down projections (out += W · x, x quantized by
// quantize_q8): each row split over two warps, each holding x for 2 or 4
// units a lane (rows of up to 8,192 or 16,384 values) of Q4_K (read in
// pairs of sub-blocks) and Q6_K.
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_add_q4_k_split2_held2(const u8* weight, const u8* x, float* out, u32 n, u32 k, u32 stages) {
    reads_weights_before_waiting();
    streamed_add_split<Q4_K_Pairs, 2, 2>(weight, x, out, n, k, stages);
}
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_add_q4_k_split2_held4(const u8* weight, const u8* x, float* out, u32 n, u32 k, u32 stages) {
    reads_weights_before_waiting();
    streamed_add_split<Q4_K_Pairs, 4, 2>(weight, x, out, n, k, stages);
}
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_add_q6_k_split2_held2(const u8* weight, const u8* x, float* out, u32 n, u32 k, u32 stages) {
    reads_weights_before_waiting();
    streamed_add_split<Q6_K, 2, 2>(weight, x, out, n, k, stages);
}
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_add_q6_k_split2_held4(const u8* weight, const u8* x, float* out, u32 n, u32 k, u32 stages) {
    reads_weights_before_waiting();
    streamed_add_split<Q6_K, 4, 2>(weight, x, out, n, k, stages);
}
