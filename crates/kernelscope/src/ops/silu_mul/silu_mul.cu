// silu(gate) * up, elementwise.
extern "C" __global__ void silu_mul_f32(const float* gate, const float* up, float* out, u32 n) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
}
