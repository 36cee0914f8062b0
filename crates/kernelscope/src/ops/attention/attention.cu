// Decode attention: one block per query head. Scores for positions 0..=pos
// go to dynamic shared memory (max_positions floats), softmax in f32 with
// block reductions, then each thread accumulates some of the head's outputs.
extern "C" __global__ void attention_f32(const float* query, const float* key_cache, const float* value_cache,
                                        const u32* position_slot, float* out, u32 index, u32 query_heads,
                                        u32 kv_heads, u32 dim, u32 max_positions) {
    extern __shared__ float scores[];
    u32 head = blockIdx.x;
    u32 position = position_slot[index];
    if (head >= query_heads || position >= max_positions) return;
    u32 kv_dim = kv_heads * dim;
    u32 kv_offset = (head / (query_heads / kv_heads)) * dim;
    const float* q = query + (size_t)head * dim;
    float scale = rsqrtf((float)dim);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    // One warp per position: lanes split the head dimension.
    for (u32 p = warp; p <= position; p += warps) {
        const float* k = key_cache + (size_t)p * kv_dim + kv_offset;
        float partial = 0.0f;
        for (u32 d = lane; d < dim; d += 32) partial += q[d] * k[d];
        partial = warp_sum(partial);
        if (lane == 0) scores[p] = partial * scale;
    }
    __syncthreads();
    float local_max = -INFINITY;
    for (u32 p = threadIdx.x; p <= position; p += blockDim.x) local_max = fmaxf(local_max, scores[p]);
    float max_score = block_max(local_max);
    float local_sum = 0.0f;
    for (u32 p = threadIdx.x; p <= position; p += blockDim.x) {
        float e = __expf(scores[p] - max_score);
        scores[p] = e;
        local_sum += e;
    }
    float total = block_sum(local_sum);
    for (u32 d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.0f;
        for (u32 p = 0; p <= position; ++p) acc += scores[p] * value_cache[(size_t)p * kv_dim + kv_offset + d];
        out[(size_t)head * dim + d] = acc / total;
    }
}
