// Decode attention, split over the cached positions (flash-decoding). The
// position is read from device memory, so the grid depends only on the
// cache's size: block (g, s) takes KV head g and split s of the positions
// 0..=pos (each split ceil((pos + 1) / splits) of them), and serves every
// query head of g's group, so K and V are read once per group. Each warp
// walks its share of the split's positions with an online softmax per
// head (running max, running sum, unnormalised output; lanes own dims
// lane, lane + 32, ...); the warps are merged through shared memory and
// the split's (max, sum, output) per head go to `partials`
// [splits][query_heads][dim + 2]. attention_combine_f32 merges the splits.
#define ATTENTION_MAX_GROUP 8
#define ATTENTION_MAX_PER_LANE 8

template <typename C>
__device__ void attention_split(const float* query, const C* key_cache, const C* value_cache, const u32* position_slot,
                                float* partials, u32 index, u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions,
                                u32 splits) {
    extern __shared__ float merge[];  // [warps][group][dim + 2]
    u32 kv_head = blockIdx.x, split = blockIdx.y;
    u32 group = query_heads / kv_heads;
    u32 position = position_slot[index];
    if (kv_head >= kv_heads || position >= max_positions) return;
    u32 count = position + 1;
    u32 per_split = (count + splits - 1) / splits;
    u32 begin = split * per_split;
    u32 end = min(begin + per_split, count);
    u32 kv_dim = kv_heads * dim;
    u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float scale = rsqrtf((float)dim);
    float q[ATTENTION_MAX_GROUP][ATTENTION_MAX_PER_LANE];
    float acc[ATTENTION_MAX_GROUP][ATTENTION_MAX_PER_LANE];
    float running_max[ATTENTION_MAX_GROUP], running_sum[ATTENTION_MAX_GROUP];
#pragma unroll
    for (u32 h = 0; h < ATTENTION_MAX_GROUP; ++h) {
        running_max[h] = -INFINITY;
        running_sum[h] = 0.0f;
#pragma unroll
        for (u32 j = 0; j < ATTENTION_MAX_PER_LANE; ++j) {
            u32 d = lane + 32 * j;
            q[h][j] = (h < group && d < dim) ? query[(size_t)(kv_head * group + h) * dim + d] : 0.0f;
            acc[h][j] = 0.0f;
        }
    }
    for (u32 p = begin + warp; p < end; p += warps) {
        const C* k = key_cache + (size_t)p * kv_dim + (size_t)kv_head * dim;
        const C* v = value_cache + (size_t)p * kv_dim + (size_t)kv_head * dim;
        float kd[ATTENTION_MAX_PER_LANE], vd[ATTENTION_MAX_PER_LANE];
#pragma unroll
        for (u32 j = 0; j < ATTENTION_MAX_PER_LANE; ++j) {
            u32 d = lane + 32 * j;
            kd[j] = d < dim ? to_f32(k[d]) : 0.0f;
            vd[j] = d < dim ? to_f32(v[d]) : 0.0f;
        }
#pragma unroll
        for (u32 h = 0; h < ATTENTION_MAX_GROUP; ++h) {
            if (h >= group) continue;
            float partial = 0.0f;
#pragma unroll
            for (u32 j = 0; j < ATTENTION_MAX_PER_LANE; ++j) partial += q[h][j] * kd[j];
            float score = warp_sum(partial) * scale;
            float new_max = fmaxf(running_max[h], score);
            float correction = __expf(running_max[h] - new_max);
            float weight = __expf(score - new_max);
            running_sum[h] = running_sum[h] * correction + weight;
#pragma unroll
            for (u32 j = 0; j < ATTENTION_MAX_PER_LANE; ++j) acc[h][j] = acc[h][j] * correction + weight * vd[j];
            running_max[h] = new_max;
        }
    }
    // Merge the warps: each writes its state, then thread t merges entry t.
    u32 stride = dim + 2;
#pragma unroll
    for (u32 h = 0; h < ATTENTION_MAX_GROUP; ++h) {
        if (h >= group) continue;
        float* mine = merge + ((size_t)warp * group + h) * stride;
#pragma unroll
        for (u32 j = 0; j < ATTENTION_MAX_PER_LANE; ++j) {
            u32 d = lane + 32 * j;
            if (d < dim) mine[d] = acc[h][j];
        }
        if (lane == 0) {
            mine[dim] = running_max[h];
            mine[dim + 1] = running_sum[h];
        }
    }
    __syncthreads();
    for (u32 item = threadIdx.x; item < group * dim; item += blockDim.x) {
        u32 h = item / dim, d = item % dim;
        float best = -INFINITY;
        for (u32 w = 0; w < warps; ++w) best = fmaxf(best, merge[((size_t)w * group + h) * stride + dim]);
        float total = 0.0f, value = 0.0f;
        for (u32 w = 0; w < warps; ++w) {
            const float* theirs = merge + ((size_t)w * group + h) * stride;
            float weight = theirs[dim] == -INFINITY ? 0.0f : __expf(theirs[dim] - best);
            total += theirs[dim + 1] * weight;
            value += theirs[d] * weight;
        }
        float* out = partials + ((size_t)split * query_heads + kv_head * group + h) * stride;
        out[d] = value;
        if (d == 0) {
            out[dim] = best;
            out[dim + 1] = total;
        }
    }
}

extern "C" __global__ void attention_split_f32(const float* query, const float* key_cache, const float* value_cache,
                                              const u32* position_slot, float* partials, u32 index, u32 query_heads,
                                              u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    attention_split(query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim,
                    max_positions, splits);
}
extern "C" __global__ void attention_split_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                              const u32* position_slot, float* partials, u32 index, u32 query_heads,
                                              u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    attention_split(query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim,
                    max_positions, splits);
}
extern "C" __global__ void attention_split_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                               const u32* position_slot, float* partials, u32 index, u32 query_heads,
                                               u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    attention_split(query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim,
                    max_positions, splits);
}
