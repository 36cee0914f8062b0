// A prefill chunk's f32 activations narrowed to bf16 (round to nearest
// even, as torch's `.to(torch.bfloat16)`) for the tensor-core GEMM over
// dequantized quantized weights. Eight values a thread (two 16-byte loads,
// one 16-byte store) where both buffers are 16-byte aligned: a value a
// thread, 4-byte loads and 2-byte stores, ran at 46 % of the read ceiling
// (llama-3-8b's prefill, H200). What is left over, or everything where a
// buffer is not aligned, goes a value at a time.
extern "C" __global__ void narrow_f32_bf16(const float* x, bf16* out, u32 count) {
    wait_for_previous_kernel();
    const u32 thread = blockIdx.x * blockDim.x + threadIdx.x, threads = gridDim.x * blockDim.x;
    const bool aligned = ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(out)) & 15) == 0;
    const u32 vectors = aligned ? count / 8 : 0;
    for (u32 v = thread; v < vectors; v += threads) {
        const float4 low = reinterpret_cast<const float4*>(x)[2 * v];
        const float4 high = reinterpret_cast<const float4*>(x)[2 * v + 1];
        const float values[8] = {low.x, low.y, low.z, low.w, high.x, high.y, high.z, high.w};
        u32 packed[4];
        #pragma unroll
        for (u32 e = 0; e < 4; ++e)
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed[e]) : "f"(values[2 * e + 1]), "f"(values[2 * e]));
        reinterpret_cast<uint4*>(out)[v] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
    for (u32 i = vectors * 8 + thread; i < count; i += threads) from_f32(x[i], &out[i]);
}

// The reverse, exact: a bf16 input of fewer rows than the GEMM takes,
// widened to f32 for the mat-vec kernels (a prefill chunk's last row into
// the LM head). Eight values a thread where both buffers are 16-byte aligned.
extern "C" __global__ void widen_bf16_f32(const bf16* x, float* out, u32 count) {
    wait_for_previous_kernel();
    const u32 thread = blockIdx.x * blockDim.x + threadIdx.x, threads = gridDim.x * blockDim.x;
    const bool aligned = ((reinterpret_cast<size_t>(x) | reinterpret_cast<size_t>(out)) & 15) == 0;
    const u32 vectors = aligned ? count / 8 : 0;
    for (u32 v = thread; v < vectors; v += threads) {
        const uint4 packed = reinterpret_cast<const uint4*>(x)[v];
        const u32 words[4] = {packed.x, packed.y, packed.z, packed.w};
        float values[8];
        #pragma unroll
        for (u32 e = 0; e < 4; ++e) {
            values[2 * e] = __uint_as_float(words[e] << 16);
            values[2 * e + 1] = __uint_as_float(words[e] & 0xffff0000u);
        }
        reinterpret_cast<float4*>(out)[2 * v] = make_float4(values[0], values[1], values[2], values[3]);
        reinterpret_cast<float4*>(out)[2 * v + 1] = make_float4(values[4], values[5], values[6], values[7]);
    }
    for (u32 i = vectors * 8 + thread; i < count; i += threads) out[i] = to_f32(x[i]);
}
