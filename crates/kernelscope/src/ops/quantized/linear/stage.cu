// x quantized once per product, for every block of decode's fused quantized
// products (kernels.cu) to read from L2: 8-bit blocks of 32 with their
// scales and scaled sums, the `Staged` layout of quantized.cuh in global
// memory (`staged_bytes(k)` bytes). Eight lanes quantize a block of 32, four
// values each; the grid covers x once (k / 1024 blocks of 256 threads).

__device__ __forceinline__ void quantize_to_global(float4 v, u32 k, u8* out) {
    const u32 thread = blockIdx.x * blockDim.x + threadIdx.x, block = thread / 8, at = block * 32 + (thread % 8) * 4;
    float scale, sum;
    const u32 packed = quantize_four(v, &scale, &sum);
    if (block < k / 32) {
        *(u32*)(out + at) = packed;
        if (thread % 8 == 0) {
            float* scales = (float*)(out + k);
            scales[block] = scale;
            scales[k / 32 + block] = sum;
        }
    }
}

// Where this thread's four values of x start, and whether it has any.
__device__ __forceinline__ u32 quantized_position(u32 k, bool* live) {
    const u32 thread = blockIdx.x * blockDim.x + threadIdx.x;
    *live = thread / 8 < k / 32;
    return (thread / 8) * 32 + (thread % 8) * 4;
}

__device__ __forceinline__ void quantize_q8_body(const float* x, u8* out, u32 k) {
    bool live;
    const u32 at = quantized_position(k, &live);
    quantize_to_global(live ? *(const float4*)(x + at) : make_float4(0.0f, 0.0f, 0.0f, 0.0f), k, out);
}

// x quantized for a product of register loops: the product may launch
// once this has waited (let_next_kernel_launch), its blocks started while
// this runs.
extern "C" __global__ void quantize_q8(const float* x, u8* out, u32 k) {
    wait_for_previous_kernel();
    let_next_kernel_launch();
    quantize_q8_body(x, out, k);
}

// x quantized for a streamed product (llama-3-8b's down), whose grid fills
// every multiprocessor at once: it may launch before this kernel waits, so
// its blocks take each multiprocessor as the product before this leaves
// it and its rings fill during that product's tail and this run
// (let_next_kernel_launch_then_wait).
extern "C" __global__ void quantize_q8_streamed_reader(const float* x, u8* out, u32 k) {
    let_next_kernel_launch_then_wait();
    quantize_q8_body(x, out, k);
}

// rmsnorm(x) * norm_weight, quantized: every block sums all of x's squares
// itself (k is a few thousand; one block's share would need a grid-wide
// barrier), with the same reduction as the RMSNorm op.
// This block's own four values and their norm weights are loaded with the
// sum's first loads, so the kernel waits on L2 once, not twice.
__device__ __forceinline__ void norm_quantize_q8_body(const float* x, const float* norm_weight, u8* out, u32 k,
                                                      float eps) {
    bool live;
    const u32 at = quantized_position(k, &live);
    float4 value = make_float4(0.0f, 0.0f, 0.0f, 0.0f), weight = value;
    if (live) {
        value = *(const float4*)(x + at);
        weight = *(const float4*)(norm_weight + at);
    }
    float squares = 0.0f;
    for (u32 i = 4 * threadIdx.x; i < k; i += 4 * blockDim.x) {
        const float4 v = *(const float4*)(x + i);
        squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float norm = rsqrtf(block_sum(squares) / k + eps);
    const float4 v = make_float4(value.x * norm * weight.x, value.y * norm * weight.y, value.z * norm * weight.z,
                                 value.w * norm * weight.w);
    quantize_to_global(v, k, out);
}

// The norm for a product of register loops: its reader may launch once
// this has waited (llama-3.2-1b's register gate/up: 8.1 µs a token less,
// docs/PERF.md run AW); let launch before, the LM head after the final
// norm took 37 µs a token more (llama-3-8b Q4_K_M, H100, run AZ).
extern "C" __global__ void norm_quantize_q8(const float* x, const float* norm_weight, u8* out, u32 k, float eps) {
    wait_for_previous_kernel();
    let_next_kernel_launch();
    norm_quantize_q8_body(x, norm_weight, out, k, eps);
}

// The norm for a streamed reader (q/k/v), which may launch before this
// waits, as quantize_q8_streamed_reader lets down.
extern "C" __global__ void norm_quantize_q8_streamed_reader(const float* x, const float* norm_weight, u8* out,
                                                           u32 k, float eps) {
    let_next_kernel_launch_then_wait();
    norm_quantize_q8_body(x, norm_weight, out, k, eps);
}
