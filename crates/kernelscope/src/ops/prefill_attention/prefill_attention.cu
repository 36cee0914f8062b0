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
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f32_f16(const float* query, const float* key_cache, const float* value_cache,
                                                 const u32* positions, f16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f32_bf16(const float* query, const float* key_cache, const float* value_cache,
                                                 const u32* positions, bf16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f16_f32(const float* query, const f16* key_cache, const f16* value_cache,
                                                 const u32* positions, float* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f16_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                 const u32* positions, f16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_f16_bf16(const float* query, const f16* key_cache, const f16* value_cache,
                                                 const u32* positions, bf16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_bf16_f32(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                 const u32* positions, float* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_bf16_f16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                 const u32* positions, f16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}
extern "C" __global__ void prefill_attention_bf16_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                 const u32* positions, bf16* out, u32 first, u32 rows, u32 query_heads,
                                                 u32 kv_heads, u32 dim, u32 max_positions, u32 tile_rows,
                                                 u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads, dim,
                      max_positions, tile_rows, tile_keys);
}

// The tensor-core path for bf16 caches and head dims of 64 or 128 (every
// Llama 3 / Qwen2 / Mistral size): FlashAttention-2's layout on
// mma.sync.m16n8k16 (bf16 in, f32 accumulate). A block takes 64 query rows
// of one head, 16 per warp; the scaled queries live in registers as A
// fragments, rounded to bf16; each tile of 64 cached positions is staged in
// shared memory with 16-byte loads (keys and values row-major, rows padded
// by 16 bytes so ldmatrix's eight row reads hit distinct banks), and the B
// fragments come from ldmatrix (transposed for V); S = Q·Kᵀ stays in registers, is
// masked (key position > the row's own), goes through an online softmax per
// row (a row's 64 scores are spread over the 4 lanes of a quad), and P,
// rounded to bf16 in registers, multiplies V into the f32 output
// accumulators. Nothing rows x positions is ever stored. tile_rows and
// tile_keys are unused (the tiles are fixed at 64 x 64).
__device__ __forceinline__ u32 pack_bf16(float low, float high) {
    bf16 a, b;
    from_f32(low, &a);
    from_f32(high, &b);
    return (u32)a.bits | ((u32)b.bits << 16);
}

// Four 8x8 b16 matrices from shared memory; lane l gives the address of
// row l % 8 of matrix l / 8 and receives one 32-bit register of each.
__device__ __forceinline__ void load_matrices(u32* r, const unsigned short* row) {
    u32 address = (u32)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
__device__ __forceinline__ void load_matrices_transposed(u32* r, const unsigned short* row) {
    u32 address = (u32)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

__device__ __forceinline__ void mma_bf16_16816(float* c, const u32* a, const u32* b) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int D, typename O>
__device__ void prefill_attention_tc(const float* query, const bf16* key_cache, const bf16* value_cache,
                                     const u32* positions, O* out, u32 first, u32 rows, u32 query_heads,
                                     u32 kv_heads, u32 max_positions) {
    const int TILE = 64, STRIDE = D + 8;
    extern __shared__ uint4 staged[];
    unsigned short* keys = (unsigned short*)staged;    // [TILE][STRIDE]
    unsigned short* values = keys + TILE * STRIDE;     // [TILE][STRIDE]
    __shared__ int block_last;
    u32 head = blockIdx.y;
    u32 row_begin = blockIdx.x * TILE;
    if (head >= query_heads || row_begin >= rows) return;
    u32 kv_head = head / (query_heads / kv_heads);
    size_t kv_dim = (size_t)kv_heads * D;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int group = lane >> 2, quad = lane & 3;
    u32 row_low = row_begin + warp * 16 + group, row_high = row_low + 8;
    int limit_low = row_low < rows ? (int)min(positions[first + row_low], max_positions - 1) : -1;
    int limit_high = row_high < rows ? (int)min(positions[first + row_high], max_positions - 1) : -1;
    if (threadIdx.x == 0) block_last = -1;
    __syncthreads();
    atomicMax(&block_last, max(limit_low, limit_high));
    float scale = rsqrtf((float)D);
    u32 query_fragments[D / 16][4];
#pragma unroll
    for (int step = 0; step < D / 16; ++step) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            u32 row = (r & 1) ? row_high : row_low;
            int column = step * 16 + 2 * quad + ((r & 2) ? 8 : 0);
            float low = 0.0f, high = 0.0f;
            if (row < rows) {
                const float* q = query + ((size_t)row * query_heads + head) * D + column;
                low = q[0] * scale;
                high = q[1] * scale;
            }
            query_fragments[step][r] = pack_bf16(low, high);
        }
    }
    float output[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) output[n][0] = output[n][1] = output[n][2] = output[n][3] = 0.0f;
    float running_max[2] = {-INFINITY, -INFINITY}, running_sum[2] = {0.0f, 0.0f};
    int warp_last = max(limit_low, limit_high);
    for (int offset = 16; offset > 0; offset >>= 1) warp_last = max(warp_last, __shfl_xor_sync(0xffffffffu, warp_last, offset));
    __syncthreads();
    // Broadcast from lane 0 so the compiler sees the loop bound and the
    // skip below are the warp's: otherwise every shuffle and mma in the loop
    // is wrapped in a collective loop of its own.
    int last = __shfl_sync(0xffffffffu, block_last, 0);
    warp_last = __shfl_sync(0xffffffffu, warp_last, 0);
    // ldmatrix row addresses: for K, matrices (keys j*8.., dims +0 | +8) x
    // (j | j+1); for V, (keys +0 | +8, dims n*8..) x (n | n+1).
    int matrix_row = lane & 7, matrix = lane >> 3;
    int key_row = ((matrix >> 1) * 8 + matrix_row) * STRIDE + (matrix & 1) * 8;
    int value_row = ((matrix & 1) * 8 + matrix_row) * STRIDE + (matrix >> 1) * 8;
    const bf16* key_head = key_cache + kv_head * D;
    const bf16* value_head = value_cache + kv_head * D;
    for (int tile = 0; tile <= last; tile += TILE) {
        __syncthreads();  // the previous tile is no longer read
        for (int item = threadIdx.x; item < TILE * D / 8; item += blockDim.x) {
            int key = item / (D / 8), chunk = item % (D / 8);
            int position = tile + key;
            uint4 key_chunk = make_uint4(0, 0, 0, 0), value_chunk = make_uint4(0, 0, 0, 0);
            if (position <= last) {
                size_t offset = (size_t)position * kv_dim + chunk * 8;
                key_chunk = *(const uint4*)(key_head + offset);
                value_chunk = *(const uint4*)(value_head + offset);
            }
            *(uint4*)(keys + key * STRIDE + chunk * 8) = key_chunk;
            *(uint4*)(values + key * STRIDE + chunk * 8) = value_chunk;
        }
        __syncthreads();
        if (tile > warp_last) continue;  // none of this warp's rows sees this tile
        float scores[TILE / 8][4];
#pragma unroll
        for (int j = 0; j < TILE / 8; ++j) scores[j][0] = scores[j][1] = scores[j][2] = scores[j][3] = 0.0f;
#pragma unroll
        for (int step = 0; step < D / 16; ++step) {
#pragma unroll
            for (int j = 0; j < TILE / 8; j += 2) {
                u32 b[4];
                load_matrices(b, keys + j * 8 * STRIDE + step * 16 + key_row);
                mma_bf16_16816(scores[j], query_fragments[step], b);
                mma_bf16_16816(scores[j + 1], query_fragments[step], b + 2);
            }
        }
        float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < TILE / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int key = tile + j * 8 + 2 * quad + (e & 1);
                int limit = e < 2 ? limit_low : limit_high;
                if (key > limit) scores[j][e] = -INFINITY;
                tile_max[e >> 1] = fmaxf(tile_max[e >> 1], scores[j][e]);
            }
        }
        float correction[2], tile_sum[2] = {0.0f, 0.0f}, new_max[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 1));
            tile_max[h] = fmaxf(tile_max[h], __shfl_xor_sync(0xffffffffu, tile_max[h], 2));
            new_max[h] = fmaxf(running_max[h], tile_max[h]);
            correction[h] = new_max[h] == -INFINITY ? 1.0f : __expf(running_max[h] - new_max[h]);
        }
#pragma unroll
        for (int j = 0; j < TILE / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                int h = e >> 1;
                float p = scores[j][e] == -INFINITY ? 0.0f : __expf(scores[j][e] - new_max[h]);
                scores[j][e] = p;
                tile_sum[h] += p;
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            tile_sum[h] += __shfl_xor_sync(0xffffffffu, tile_sum[h], 1);
            tile_sum[h] += __shfl_xor_sync(0xffffffffu, tile_sum[h], 2);
            running_sum[h] = running_sum[h] * correction[h] + tile_sum[h];
            running_max[h] = new_max[h];
        }
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            output[n][0] *= correction[0];
            output[n][1] *= correction[0];
            output[n][2] *= correction[1];
            output[n][3] *= correction[1];
        }
#pragma unroll
        for (int step = 0; step < TILE / 16; ++step) {
            u32 a[4] = {pack_bf16(scores[2 * step][0], scores[2 * step][1]),
                        pack_bf16(scores[2 * step][2], scores[2 * step][3]),
                        pack_bf16(scores[2 * step + 1][0], scores[2 * step + 1][1]),
                        pack_bf16(scores[2 * step + 1][2], scores[2 * step + 1][3])};
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                u32 b[4];
                load_matrices_transposed(b, values + step * 16 * STRIDE + n * 8 + value_row);
                mma_bf16_16816(output[n], a, b);
                mma_bf16_16816(output[n + 1], a, b + 2);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        u32 row = h ? row_high : row_low;
        if (row >= rows) continue;
        float inverse = 1.0f / running_sum[h];
        O* destination = out + ((size_t)row * query_heads + head) * D;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
            int d = n * 8 + 2 * quad;
            from_f32(output[n][2 * h] * inverse, &destination[d]);
            from_f32(output[n][2 * h + 1] * inverse, &destination[d + 1]);
        }
    }
}

extern "C" __global__ void prefill_attention_tc64_bf16_f32(const float* query, const bf16* key_cache,
                                                       const bf16* value_cache, const u32* positions, float* out,
                                                       u32 first, u32 rows, u32 query_heads, u32 kv_heads, u32 dim,
                                                       u32 max_positions, u32 tile_rows, u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention_tc<64>(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads,
                             max_positions);
}
extern "C" __global__ void prefill_attention_tc64_bf16_f16(const float* query, const bf16* key_cache,
                                                       const bf16* value_cache, const u32* positions, f16* out,
                                                       u32 first, u32 rows, u32 query_heads, u32 kv_heads, u32 dim,
                                                       u32 max_positions, u32 tile_rows, u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention_tc<64>(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads,
                             max_positions);
}
extern "C" __global__ void prefill_attention_tc64_bf16_bf16(const float* query, const bf16* key_cache,
                                                       const bf16* value_cache, const u32* positions, bf16* out,
                                                       u32 first, u32 rows, u32 query_heads, u32 kv_heads, u32 dim,
                                                       u32 max_positions, u32 tile_rows, u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention_tc<64>(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads,
                             max_positions);
}
extern "C" __global__ void prefill_attention_tc128_bf16_f32(const float* query, const bf16* key_cache,
                                                       const bf16* value_cache, const u32* positions, float* out,
                                                       u32 first, u32 rows, u32 query_heads, u32 kv_heads, u32 dim,
                                                       u32 max_positions, u32 tile_rows, u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention_tc<128>(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads,
                             max_positions);
}
extern "C" __global__ void prefill_attention_tc128_bf16_f16(const float* query, const bf16* key_cache,
                                                       const bf16* value_cache, const u32* positions, f16* out,
                                                       u32 first, u32 rows, u32 query_heads, u32 kv_heads, u32 dim,
                                                       u32 max_positions, u32 tile_rows, u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention_tc<128>(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads,
                             max_positions);
}
extern "C" __global__ void prefill_attention_tc128_bf16_bf16(const float* query, const bf16* key_cache,
                                                       const bf16* value_cache, const u32* positions, bf16* out,
                                                       u32 first, u32 rows, u32 query_heads, u32 kv_heads, u32 dim,
                                                       u32 max_positions, u32 tile_rows, u32 tile_keys) {
    wait_for_previous_kernel();
    prefill_attention_tc<128>(query, key_cache, value_cache, positions, out, first, rows, query_heads, kv_heads,
                             max_positions);
}
