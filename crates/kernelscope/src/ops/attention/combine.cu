// The second step of split decode attention (see attention.cu).
// out = sum over splits of each split's output weighted by exp(its max -
// the overall max), over the same-weighted sums. A split with no positions
// has max -inf and sum 0 and weighs nothing. Block (head, chunk) owns 32
// dims of one query head; its warps take every warps-th split, so each
// thread has only a few loads to wait on, and the warps are summed through
// shared memory (a loop over every split per thread made this step a tenth
// of the attention's time at long context).
#define COMBINE_WARPS 8

// The combined value of this thread's dim: every thread of the block calls
// it; true on warp 0's lanes whose dim is in the head, `value` then set.
__device__ __forceinline__ bool combine_chunk(const float* partials, u32 query_heads, u32 dim, u32 splits,
                                              float* value_out) {
    __shared__ float values[COMBINE_WARPS][32];
    __shared__ float totals[COMBINE_WARPS];
    __shared__ float maxima[COMBINE_WARPS];
    const u32 head = blockIdx.x;
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const u32 d = blockIdx.y * 32 + lane;
    const u32 stride = dim + 2;
    const float* first = partials + (size_t)head * stride;
    const size_t split_stride = (size_t)query_heads * stride;
    // The overall max: each warp over its splits, then across the warps.
    float best = -INFINITY;
    for (u32 s = warp; s < splits; s += COMBINE_WARPS) best = fmaxf(best, first[s * split_stride + dim]);
    if (lane == 0) maxima[warp] = best;
    __syncthreads();
#pragma unroll
    for (u32 w = 0; w < COMBINE_WARPS; ++w) best = fmaxf(best, maxima[w]);
    float value = 0.0f, total = 0.0f;
    for (u32 s = warp; s < splits; s += COMBINE_WARPS) {
        const float* split = first + s * split_stride;
        float split_max = split[dim];
        float weight = split_max == -INFINITY ? 0.0f : __expf(split_max - best);
        total += split[dim + 1] * weight;
        if (d < dim) value += split[d] * weight;
    }
    values[warp][lane] = value;
    if (lane == 0) totals[warp] = total;
    __syncthreads();
    if (warp != 0 || d >= dim) return false;
    float sum = 0.0f, weight_sum = 0.0f;
#pragma unroll
    for (u32 w = 0; w < COMBINE_WARPS; ++w) {
        sum += values[w][lane];
        weight_sum += totals[w];
    }
    *value_out = sum / weight_sum;
    return true;
}

extern "C" __global__ void attention_combine_f32(const float* partials, float* out, u32 query_heads, u32 dim,
                                                u32 splits) {
    wait_for_previous_kernel();
    if (blockIdx.x >= query_heads) return;
    float value;
    if (combine_chunk(partials, query_heads, dim, splits, &value))
        out[(size_t)blockIdx.x * dim + blockIdx.y * 32 + (threadIdx.x & 31)] = value;
}

// The same, and the output also quantized for o_proj's fused product
// (the `Staged` layout of quantized.cuh, query_heads * dim values): warp 0
// of a block holds one block of 32 values (dim is a multiple of 32), which
// it quantizes with quantize_q8's arithmetic, bit for bit, so the kernel
// that quantized the output before o_proj is not needed.
extern "C" __global__ void attention_combine_q8(const float* partials, float* out, u8* quantized, u32 query_heads,
                                               u32 dim, u32 splits) {
    wait_for_previous_kernel();
    // o_proj may launch now: its blocks start while this runs. Let launch
    // before this waited, a streamed o_proj's resident blocks slowed the
    // attention split (llama-3-8b Q4_K_M: attention +52 µs a token, H100,
    // docs/PERF.md run AZ).
    let_next_kernel_launch();
    if (blockIdx.x >= query_heads) return;
    float value;
    if (!combine_chunk(partials, query_heads, dim, splits, &value)) return;
    const u32 lane = threadIdx.x & 31, at = blockIdx.x * dim + blockIdx.y * 32 + lane;
    out[at] = value;
    float largest = fabsf(value);
    for (int offset = 16; offset > 0; offset >>= 1)
        largest = larger_keeping_nan(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    const float scale = largest / 127.0f;
    const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    const int rounded = (int)roundf(value * inverse);
    int sum = rounded;
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    quantized[at] = (u8)(rounded & 0xff);
    if (lane == 0) {
        const u32 k = query_heads * dim, block = at / 32;
        float* scales = (float*)(quantized + k);
        scales[block] = scale;
        scales[k / 32 + block] = scale * (float)sum;
    }
}
