// Causal attention of a prefill chunk, flash-attention style: block (t, h)
// takes query head h of `tile_rows` consecutive rows from t * tile_rows,
// and walks the KV cache in tiles of `tile_keys` positions held in shared
// memory (widened to f32), up to the largest position among its rows. Row
// r attends to positions 0..=positions[first + r]. Each warp owns
// tile_rows / 4 rows with an online softmax per row (running max, sum and
// unnormalised output; lanes own dims lane, lane + 32, ...): for scores a
// lane takes one key of the tile (its dot product read from shared
// memory, rows padded by one float so the lanes hit different banks), for
// the output each lane accumulates its dims over the tile's keys. No score
// matrix is kept anywhere: memory is O(tile), whatever the context.
#define PREFILL_MAX_ROWS_PER_WARP 4
#define PREFILL_MAX_PER_LANE 8

template <typename C, typename O>
__device__ void prefill_attention(const float* query, const C* key_cache, const C* value_cache, const u32* positions,
                                  O* out, u32 first, u32 rows, u32 query_heads, u32 kv_heads, u32 dim,
                                  u32 max_positions, u32 tile_rows, u32 tile_keys) {
    extern __shared__ float tiles[];
    u32 head = blockIdx.y;
    u32 row_begin = blockIdx.x * tile_rows;
    if (head >= query_heads || row_begin >= rows) return;
    u32 group = query_heads / kv_heads;
    u32 kv_head = head / group;
    u32 kv_dim = kv_heads * dim;
    u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 rows_per_warp = tile_rows / 4;
    float* query_tile = tiles;                                  // [tile_rows][dim]
    float* key_tile = query_tile + (size_t)tile_rows * dim;     // [tile_keys][dim + 1]
    float* value_tile = key_tile + (size_t)tile_keys * (dim + 1);  // [tile_keys][dim]
    __shared__ u32 last_position;
    float scale = rsqrtf((float)dim);

    for (u32 item = threadIdx.x; item < tile_rows * dim; item += blockDim.x) {
        u32 r = item / dim, d = item % dim;
        u32 row = row_begin + r;
        query_tile[item] = row < rows ? query[((size_t)row * query_heads + head) * dim + d] * scale : 0.0f;
    }
    if (threadIdx.x == 0) {
        u32 last = 0;
        for (u32 r = 0; r < tile_rows && row_begin + r < rows; ++r) last = max(last, positions[first + row_begin + r]);
        last_position = min(last, max_positions - 1);
    }
    u32 limit[PREFILL_MAX_ROWS_PER_WARP];
    bool valid[PREFILL_MAX_ROWS_PER_WARP];
    float running_max[PREFILL_MAX_ROWS_PER_WARP], running_sum[PREFILL_MAX_ROWS_PER_WARP];
    float acc[PREFILL_MAX_ROWS_PER_WARP][PREFILL_MAX_PER_LANE];
#pragma unroll
    for (u32 i = 0; i < PREFILL_MAX_ROWS_PER_WARP; ++i) {
        u32 row = row_begin + warp * rows_per_warp + i;
        valid[i] = i < rows_per_warp && row < rows;
        limit[i] = valid[i] ? min(positions[first + row], max_positions - 1) : 0;
        running_max[i] = -INFINITY;
        running_sum[i] = 0.0f;
#pragma unroll
        for (u32 j = 0; j < PREFILL_MAX_PER_LANE; ++j) acc[i][j] = 0.0f;
    }
    __syncthreads();
    u32 end = last_position + 1;
    for (u32 tile = 0; tile < end; tile += tile_keys) {
        __syncthreads();  // the previous tile is no longer read
        for (u32 item = threadIdx.x; item < tile_keys * dim; item += blockDim.x) {
            u32 c = item / dim, d = item % dim;
            u32 p = tile + c;
            float k = 0.0f, v = 0.0f;
            if (p < end) {
                size_t at = (size_t)p * kv_dim + (size_t)kv_head * dim + d;
                k = to_f32(key_cache[at]);
                v = to_f32(value_cache[at]);
            }
            key_tile[(size_t)c * (dim + 1) + d] = k;
            value_tile[(size_t)c * dim + d] = v;
        }
        __syncthreads();
#pragma unroll
        for (u32 i = 0; i < PREFILL_MAX_ROWS_PER_WARP; ++i) {
            if (!valid[i] || tile > limit[i]) continue;
            const float* q = query_tile + (size_t)(warp * rows_per_warp + i) * dim;
            u32 key = tile + lane;
            float score = -INFINITY;
            if (lane < tile_keys && key <= limit[i]) {
                const float* k = key_tile + (size_t)lane * (dim + 1);
                float dot = 0.0f;
                for (u32 d = 0; d < dim; ++d) dot += q[d] * k[d];
                score = dot;
            }
            float tile_max = warp_max(score);
            float new_max = fmaxf(running_max[i], tile_max);
            float correction = __expf(running_max[i] - new_max);
            float weight = score == -INFINITY ? 0.0f : __expf(score - new_max);
            running_sum[i] = running_sum[i] * correction + warp_sum(weight);
#pragma unroll
            for (u32 j = 0; j < PREFILL_MAX_PER_LANE; ++j) acc[i][j] *= correction;
            u32 keys = min(tile_keys, limit[i] + 1 - tile);
            for (u32 c = 0; c < keys; ++c) {
                float w = __shfl_sync(0xffffffffu, weight, c);
                const float* v = value_tile + (size_t)c * dim;
#pragma unroll
                for (u32 j = 0; j < PREFILL_MAX_PER_LANE; ++j) {
                    u32 d = lane + 32 * j;
                    if (d < dim) acc[i][j] += w * v[d];
                }
            }
            running_max[i] = new_max;
        }
    }
#pragma unroll
    for (u32 i = 0; i < PREFILL_MAX_ROWS_PER_WARP; ++i) {
        if (!valid[i]) continue;
        u32 row = row_begin + warp * rows_per_warp + i;
        O* destination = out + ((size_t)row * query_heads + head) * dim;
        float inverse = 1.0f / running_sum[i];
#pragma unroll
        for (u32 j = 0; j < PREFILL_MAX_PER_LANE; ++j) {
            u32 d = lane + 32 * j;
            if (d < dim) from_f32(acc[i][j] * inverse, &destination[d]);
        }
    }
}

extern "C" __global__ void prefill_attention_f32_f32(const float* query, const float* key_cache, const float* value_cache,
                                                 const u32* positions, float* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f32_f16(const float* query, const float* key_cache, const float* value_cache,
                                                 const u32* positions, f16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f32_bf16(const float* query, const float* key_cache, const float* value_cache,
                                                 const u32* positions, bf16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f16_f32(const float* query, const f16* key_cache, const f16* value_cache,
                                                 const u32* positions, float* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f16_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                 const u32* positions, f16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f16_bf16(const float* query, const f16* key_cache, const f16* value_cache,
                                                 const u32* positions, bf16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_bf16_f32(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                 const u32* positions, float* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_bf16_f16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                 const u32* positions, f16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_bf16_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                 const u32* positions, bf16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
