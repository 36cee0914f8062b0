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
