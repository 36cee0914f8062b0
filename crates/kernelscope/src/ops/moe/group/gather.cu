// Copies the rows a chunk's experts read into runs grouped by expert:
// out[p] = x[order[p]], a block per output row.
template <typename T, typename O>
__device__ void moe_gather(const T* x, const u32* order, O* out, u32 positions, u32 width) {
    const u32 p = blockIdx.x;
    if (p >= positions) return;
    const T* from = x + (size_t)order[p] * width;
    O* to = out + (size_t)p * width;
    for (u32 i = threadIdx.x; i < width; i += blockDim.x) from_f32(to_f32(from[i]), &to[i]);
}

extern "C" __global__ void moe_gather_f32(const float* x, const u32* order, float* out, u32 positions, u32 width) {
    wait_for_previous_kernel();
    moe_gather(x, order, out, positions, width);
}
extern "C" __global__ void moe_gather_f16(const f16* x, const u32* order, f16* out, u32 positions, u32 width) {
    wait_for_previous_kernel();
    moe_gather(x, order, out, positions, width);
}
extern "C" __global__ void moe_gather_bf16(const bf16* x, const u32* order, bf16* out, u32 positions, u32 width) {
    wait_for_previous_kernel();
    moe_gather(x, order, out, positions, width);
}
// f32 rows into bf16 runs (rounded to nearest even): a quantized model's
// normed rows (f32) as the input of the bf16 GEMMs over its experts
// dequantized, narrowed in the copy rather than by a dispatch per GEMM.
extern "C" __global__ void moe_gather_narrow_bf16(const float* x, const u32* order, bf16* out, u32 positions,
                                                  u32 width) {
    wait_for_previous_kernel();
    moe_gather(x, order, out, positions, width);
}
