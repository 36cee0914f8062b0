// Mat-mul, one warp per output element (token m, row n), x in the weight's
// dtype: correct and simple. Batched prefill on CUDA goes to a library GEMM
// on tensor cores; this kernel is the reference it replaces.
template <typename W>
__device__ void matmul(const W* weight, const W* x, float* out, u32 m, u32 n, u32 k) {
    size_t item = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (item >= (size_t)m * n) return;
    u32 token = item / n, row = item % n;
    const W* w = weight + (size_t)row * k;
    const W* v = x + (size_t)token * k;
    float sum = 0.0f;
    for (u32 i = threadIdx.x & 31; i < k; i += 32) sum += to_f32(w[i]) * to_f32(v[i]);
    sum = warp_sum(sum);
    if ((threadIdx.x & 31) == 0) out[(size_t)token * n + row] = sum;
}

extern "C" __global__ void matmul_f32(const float* weight, const float* x, float* out, u32 m, u32 n, u32 k) {
    wait_for_previous_kernel();
    matmul(weight, x, out, m, n, k);
}
extern "C" __global__ void matmul_f16(const f16* weight, const f16* x, float* out, u32 m, u32 n, u32 k) {
    wait_for_previous_kernel();
    matmul(weight, x, out, m, n, k);
}
extern "C" __global__ void matmul_bf16(const bf16* weight, const bf16* x, float* out, u32 m, u32 n, u32 k) {
    wait_for_previous_kernel();
    matmul(weight, x, out, m, n, k);
}
