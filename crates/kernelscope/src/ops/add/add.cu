// x += y in place, y repeated over x's rows: x[i] += y[i % columns], where
// columns is y's length (x's whole length for a residual, a row's for a
// bias). x is f32; y f32 residuals or weight-dtype biases.
template <typename W>
__device__ void add(float* x, const W* y, u32 n, u32 columns) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += to_f32(y[i % columns]);
}

extern "C" __global__ void add_f32(float* x, const float* y, u32 n, u32 columns) {
    wait_for_previous_kernel();
    add(x, y, n, columns);
}
extern "C" __global__ void add_f16(float* x, const f16* y, u32 n, u32 columns) {
    wait_for_previous_kernel();
    add(x, y, n, columns);
}
extern "C" __global__ void add_bf16(float* x, const bf16* y, u32 n, u32 columns) {
    wait_for_previous_kernel();
    add(x, y, n, columns);
}
