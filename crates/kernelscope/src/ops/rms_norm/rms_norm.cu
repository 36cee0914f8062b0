// RMSNorm over one vector by one block: sum of squares reduced in f32.
template <typename W>
__device__ void rms_norm(const float* x, const W* weight, float* out, float eps, u32 n) {
    float squares = 0.0f;
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) squares += x[i] * x[i];
    float scale = rsqrtf(block_sum(squares) / n + eps);
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) out[i] = x[i] * scale * to_f32(weight[i]);
}

extern "C" __global__ void rms_norm_f32(const float* x, const float* weight, float* out, float eps, u32 n) {
    rms_norm(x, weight, out, eps, n);
}
extern "C" __global__ void rms_norm_f16(const float* x, const f16* weight, float* out, float eps, u32 n) {
    rms_norm(x, weight, out, eps, n);
}
extern "C" __global__ void rms_norm_bf16(const float* x, const bf16* weight, float* out, float eps, u32 n) {
    rms_norm(x, weight, out, eps, n);
}
