// The second step of split decode attention (see attention.cu).
// One block per query head: out = sum over splits of each split's output
// weighted by exp(its max - the overall max), over the same-weighted sums.
// A split with no positions has max -inf and sum 0 and weighs nothing.
extern "C" __global__ void attention_combine_f32(const float* partials, float* out, u32 query_heads, u32 dim,
                                                u32 splits) {
    u32 head = blockIdx.x;
    if (head >= query_heads) return;
    u32 stride = dim + 2;
    float best = -INFINITY;
    for (u32 s = 0; s < splits; ++s) best = fmaxf(best, partials[((size_t)s * query_heads + head) * stride + dim]);
    for (u32 d = threadIdx.x; d < dim; d += blockDim.x) {
        float total = 0.0f, value = 0.0f;
        for (u32 s = 0; s < splits; ++s) {
            const float* split = partials + ((size_t)s * query_heads + head) * stride;
            float weight = split[dim] == -INFINITY ? 0.0f : __expf(split[dim] - best);
            total += split[dim + 1] * weight;
            value += split[d] * weight;
        }
        out[(size_t)head * dim + d] = value / total;
    }
}
