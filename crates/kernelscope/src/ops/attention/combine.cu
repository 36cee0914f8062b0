// The second step of split decode attention (see attention.cu).
// out = sum over splits of each split's output weighted by exp(its max -
// the overall max), over the same-weighted sums. A split with no positions
// has max -inf and sum 0 and weighs nothing. Block (head, chunk) owns 32
// dims of one query head; its warps take every warps-th split, so each
// thread has only a few loads to wait on, and the warps are summed through
// shared memory (a loop over every split per thread made this step a tenth
// of the attention's time at long context).
#define COMBINE_WARPS 8
extern "C" __global__ void attention_combine_f32(const float* partials, float* out, u32 query_heads, u32 dim,
                                                u32 splits) {
    wait_for_previous_kernel();
    __shared__ float values[COMBINE_WARPS][32];
    __shared__ float totals[COMBINE_WARPS];
    u32 head = blockIdx.x;
    u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 d = blockIdx.y * 32 + lane;
    if (head >= query_heads) return;
    u32 stride = dim + 2;
    const float* first = partials + (size_t)head * stride;
    size_t split_stride = (size_t)query_heads * stride;
    // The overall max: each warp over its splits, then across the warps.
    __shared__ float maxima[COMBINE_WARPS];
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
    if (warp == 0 && d < dim) {
        float sum = 0.0f, weight_sum = 0.0f;
#pragma unroll
        for (u32 w = 0; w < COMBINE_WARPS; ++w) {
            sum += values[w][lane];
            weight_sum += totals[w];
        }
        out[(size_t)head * dim + d] = sum / weight_sum;
    }
}
