// RMSNorm of every head of x [count, head_dim] in place (Qwen3's q_norm and
// k_norm, before RoPE): a warp per head, the sum of squares reduced by
// shuffles, each lane rewriting only the elements it read, so the norm can
// run in place.
template <typename W>
__device__ void head_norm(float* x, const W* weight, float eps, u32 count, u32 head_dim) {
    const u32 warps = blockDim.x / 32, lane = threadIdx.x % 32;
    for (u32 head = blockIdx.x * warps + threadIdx.x / 32; head < count; head += gridDim.x * warps) {
        float* values = x + (size_t)head * head_dim;
        float squares = 0.0f;
        for (u32 i = lane; i < head_dim; i += 32) squares += values[i] * values[i];
        for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
        const float scale = rsqrtf(squares / head_dim + eps);
        for (u32 i = lane; i < head_dim; i += 32) values[i] = values[i] * scale * to_f32(weight[i]);
    }
}

extern "C" __global__ void head_norm_f32(float* x, const float* weight, float eps, u32 count, u32 head_dim) {
    wait_for_previous_kernel();
    head_norm(x, weight, eps, count, head_dim);
}
extern "C" __global__ void head_norm_f16(float* x, const f16* weight, float eps, u32 count, u32 head_dim) {
    wait_for_previous_kernel();
    head_norm(x, weight, eps, count, head_dim);
}
extern "C" __global__ void head_norm_bf16(float* x, const bf16* weight, float eps, u32 count, u32 head_dim) {
    wait_for_previous_kernel();
    head_norm(x, weight, eps, count, head_dim);
}
