// Mat-mul, one warp per output element (token m, row n): correct and simple;
// prefill still runs token by token, so this is not yet on a hot path.
template <typename W>
__device__ void matmul(const W* weight, const float* x, float* out, u32 m, u32 n, u32 k) {
    size_t item = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (item >= (size_t)m * n) return;
    u32 token = item / n, row = item % n;
    const W* w = weight + (size_t)row * k;
    const float* v = x + (size_t)token * k;
    float sum = 0.0f;
    for (u32 i = threadIdx.x & 31; i < k; i += 32) sum += to_f32(w[i]) * v[i];
    sum = warp_sum(sum);
    if ((threadIdx.x & 31) == 0) out[(size_t)token * n + row] = sum;
}

extern "C" __global__ void matmul_f32(const float* weight, const float* x, float* out, u32 m, u32 n, u32 k) {
    matmul(weight, x, out, m, n, k);
}
extern "C" __global__ void matmul_f16(const f16* weight, const float* x, float* out, u32 m, u32 n, u32 k) {
    matmul(weight, x, out, m, n, k);
}
extern "C" __global__ void matmul_bf16(const bf16* weight, const float* x, float* out, u32 m, u32 n, u32 k) {
    matmul(weight, x, out, m, n, k);
}
