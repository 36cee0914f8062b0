// x += y in place (x f32; y f32 residuals or weight-dtype biases).
template <typename W>
__device__ void add(float* x, const W* y, u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += to_f32(y[i]);
}

extern "C" __global__ void add_f32(float* x, const float* y, u32 n) { add(x, y, n); }
extern "C" __global__ void add_f16(float* x, const f16* y, u32 n) { add(x, y, n); }
extern "C" __global__ void add_bf16(float* x, const bf16* y, u32 n) { add(x, y, n); }
