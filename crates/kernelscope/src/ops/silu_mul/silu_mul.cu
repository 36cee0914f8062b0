// silu(gate) * up, elementwise in f32, stored in the output's dtype (f32, or
// the weights' dtype for the down projection's GEMM), rounded to nearest even.
template <typename O>
__device__ void silu_mul(const float* gate, const float* up, O* out, u32 n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    from_f32(silu(g) * up[i], out + i);
}

extern "C" __global__ void silu_mul_f32(const float* gate, const float* up, float* out, u32 n) {
    wait_for_previous_kernel();
    silu_mul(gate, up, out, n);
}
extern "C" __global__ void silu_mul_f16(const float* gate, const float* up, f16* out, u32 n) {
    wait_for_previous_kernel();
    silu_mul(gate, up, out, n);
}
extern "C" __global__ void silu_mul_bf16(const float* gate, const float* up, bf16* out, u32 n) {
    wait_for_previous_kernel();
    silu_mul(gate, up, out, n);
}
