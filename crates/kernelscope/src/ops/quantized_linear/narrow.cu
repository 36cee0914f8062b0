// A prefill chunk's f32 activations narrowed to bf16 (round to nearest
// even, as torch's `.to(torch.bfloat16)`) for the tensor-core GEMM over
// dequantized quantized weights.
extern "C" __global__ void narrow_f32_bf16(const float* x, bf16* out, u32 count) {
    wait_for_previous_kernel();
    for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) from_f32(x[i], &out[i]);
}
