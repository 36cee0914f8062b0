// Decode attention, split over the cached positions (flash-decoding). The
// position is read from device memory, so the grid depends only on the
// cache's size: block (g, s, z) takes KV head g and split s of the positions
// 0..=pos (each split ceil((pos + 1) / splits) of them), and serves the
// query heads z·GROUP.. of g's group (all of them where z is one: K and V
// read once per group; a short cache spreads a group over more blocks). Each warp
// walks its share of the split's positions with an online softmax per
// head (running max, running sum, unnormalised output; lanes own dims
// lane, lane + 32, ...); the warps are merged through shared memory and
// the split's (max, sum, output) per head go to `partials`
// [splits][query_heads][dim + 2]. attention_combine_f32 merges the splits.
#define ATTENTION_MAX_GROUP 8
#define ATTENTION_MAX_PER_LANE 8

// Thread t merges entry t of the warps' states in `merge` ([warps][heads]
// [dim + 2]: unnormalised output, max, sum) and writes the split's
// partials for query heads first_head .. first_head + heads, maxima in
// base e for the combine step. BASE2: the states' maxima are in base 2.
// Call after the barrier that publishes `merge`.
template <bool BASE2>
__device__ void write_split(const float* merge, float* partials, u32 warps, u32 heads, u32 dim, u32 split,
                            u32 query_heads, u32 first_head) {
    u32 stride = dim + 2;
    for (u32 item = threadIdx.x; item < heads * dim; item += blockDim.x) {
        u32 h = item / dim, d = item % dim;
        float best = -INFINITY;
        for (u32 w = 0; w < warps; ++w) best = fmaxf(best, merge[((size_t)w * heads + h) * stride + dim]);
        float total = 0.0f, value = 0.0f;
        for (u32 w = 0; w < warps; ++w) {
            const float* theirs = merge + ((size_t)w * heads + h) * stride;
            float shifted = theirs[dim] - best;
            float weight = theirs[dim] == -INFINITY ? 0.0f : (BASE2 ? exp2f(shifted) : __expf(shifted));
            total += theirs[dim + 1] * weight;
            value += theirs[d] * weight;
        }
        float* out = partials + ((size_t)split * query_heads + first_head + h) * stride;
        out[d] = value;
        if (d == 0) {
            out[dim] = BASE2 && best != -INFINITY ? best * 0.6931471805599453f : best;
            out[dim + 1] = total;
        }
    }
}

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
    write_split<false>(merge, partials, warps, group, dim, split, query_heads, kv_head * group);
}

extern "C" __global__ void attention_split_f32(const float* query, const float* key_cache, const float* value_cache,
                                              const u32* position_slot, float* partials, u32 index, u32 query_heads,
                                              u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split(query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim,
                    max_positions, splits);
}
extern "C" __global__ void attention_split_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                              const u32* position_slot, float* partials, u32 index, u32 query_heads,
                                              u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split(query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim,
                    max_positions, splits);
}
extern "C" __global__ void attention_split_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                               const u32* position_slot, float* partials, u32 index, u32 query_heads,
                                               u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split(query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim,
                    max_positions, splits);
}

// The vector kernels: the same split and the same partials, for heads of at
// most PADDED_DIM elements (a multiple of a 16-byte load) and groups of at
// most GROUP query heads. The generic kernel above walks one position per
// warp at a time, so each step waits a full memory latency on 256 bytes and
// the decode at long context ran at a tenth of the bandwidth. Here each lane
// loads 16 bytes of a row, LANES lanes cover a head, a warp covers
// 32 / LANES positions per load and UNROLL loads of K and of V are in flight
// before any is used; each group of LANES lanes keeps its own online softmax
// over its positions (one max and one rescale per UNROLL positions, not per
// position), and the groups are merged by shuffles, then the warps through
// shared memory.
#define ATTENTION_UNROLL 4

// Element e of a 16-byte load, widened where it is used, so the loads stay
// packed in registers until then.
__device__ __forceinline__ u32 word(uint4 raw, u32 index) {
    return index == 0 ? raw.x : index == 1 ? raw.y : index == 2 ? raw.z : raw.w;
}
__device__ __forceinline__ float element(uint4 raw, u32 e, bf16) {
    u32 w = word(raw, e / 2);
    return __uint_as_float(e % 2 == 0 ? w << 16 : w & 0xffff0000u);
}
__device__ __forceinline__ float element(uint4 raw, u32 e, f16) {
    u32 w = word(raw, e / 2);
    f16 half = {(unsigned short)(e % 2 == 0 ? w & 0xffffu : w >> 16)};
    return to_f32(half);
}
__device__ __forceinline__ float element(uint4 raw, u32 e, float) { return __uint_as_float(word(raw, e)); }

// What the RoPE-fused kernels take besides: this position's key and value
// as the q/k/v mat-vecs left them (f32 [kv_heads][dim], the key not yet
// rotated), where they go in the caches, and RoPE's frequencies.
template <typename C>
struct FreshPosition {
    const float* key;
    const float* value;
    C* key_cache;
    C* value_cache;
    const float* inverse_frequencies;  // [dim / 2]
    float attention_scaling;
};

// The 16-byte load a cache row of C holds for `values` (element e in the
// lower half of its word first, as element() reads it).
template <typename C, u32 PER_LOAD>
__device__ __forceinline__ uint4 pack_row(const float (&values)[PER_LOAD]) {
    union {
        uint4 raw;
        C elements[PER_LOAD];
    } packed;
#pragma unroll
    for (u32 e = 0; e < PER_LOAD; ++e) from_f32(values[e], &packed.elements[e]);
    return packed.raw;
}

// RoPE's cosines and sines, scaled, for dims first_dim.. of a head of
// PADDED_DIM at `position`: rope_append.cu's arithmetic.
template <u32 PER_LOAD, u32 PADDED_DIM, typename C>
__device__ __forceinline__ void rope_angles(u32 position, u32 first_dim, const FreshPosition<C>& fresh,
                                            float (&cosines)[PER_LOAD], float (&sines)[PER_LOAD]) {
#pragma unroll
    for (u32 e = 0; e < PER_LOAD; ++e) {
        rope_cos_sin(position, fresh.inverse_frequencies[(first_dim + e) % (PADDED_DIM / 2)],
                     fresh.attention_scaling, &cosines[e], &sines[e]);
    }
}

// RoPE of the PER_LOAD elements of a head a lane holds, from dims
// first_dim.. of a head of `dim` = LANES · PER_LOAD elements: element d is
// paired with d ± dim / 2, which the lane LANES / 2 away holds at the same
// e, so the pair's other value comes by one shuffle. The arithmetic is
// rope_append.cu's. Every lane of the warp must call it.
template <u32 PER_LOAD, u32 LANES>
__device__ __forceinline__ void rotate_held(float (&values)[PER_LOAD], const float (&cosines)[PER_LOAD],
                                            const float (&sines)[PER_LOAD], bool first_half) {
#pragma unroll
    for (u32 e = 0; e < PER_LOAD; ++e) {
        const float mine = values[e];
        const float other = __shfl_xor_sync(0xffffffffu, mine, LANES / 2);
        values[e] = first_half ? mine * cosines[e] - other * sines[e] : mine * cosines[e] + other * sines[e];
    }
}

// ROPE: the RoPE-fused kernels (attention_rope_split_*), for a head of
// exactly PADDED_DIM elements. They take the query as the q mat-vec left it
// and rotate it in registers; the current position's key (rotated) and
// value, rounded to the cache's dtype as rope_append stores them, come from
// `fresh` in place of the cache's row, which no block reads; the block of
// the split holding the position (and the first of its z) stores them
// there for the next tokens. So RoPE and the KV append need no kernel of
// their own, and what attention computes is what rope_append then
// attention compute.
template <typename C, u32 PADDED_DIM, u32 GROUP, bool ROPE>
__device__ void attention_split_vector(const float* query, const C* key_cache, const C* value_cache,
                                       const u32* position_slot, float* partials, u32 index, u32 query_heads,
                                       u32 kv_heads, u32 dim, u32 max_positions, u32 splits,
                                       FreshPosition<C> fresh) {
    // The combine after may launch now: its blocks wait while this runs.
    let_next_kernel_launch();
    constexpr u32 PER_LOAD = 16 / sizeof(C);        // elements of one 16-byte load
    constexpr u32 LANES = PADDED_DIM / PER_LOAD;    // lanes per position
    constexpr u32 ROWS = 32 / LANES;                // positions per warp per load
    constexpr u32 STEP = ROWS * ATTENTION_UNROLL;   // positions per warp per iteration
    static_assert(LANES >= 1 && LANES <= 32, "a head must fit one warp's loads");
    extern __shared__ float merge[];  // [warps][heads][dim + 2]
    u32 kv_head = blockIdx.x, split = blockIdx.y;
    u32 group = query_heads / kv_heads;
    // Block z serves heads z·GROUP .. of the group (all of it where the grid
    // has one z): at short context a few KV heads' splits are a few blocks,
    // so a group's heads are spread over more of them.
    u32 first_head = blockIdx.z * GROUP;
    u32 heads = first_head < group ? min(GROUP, group - first_head) : 0;
    u32 position = position_slot[index];
    // No early return before the shuffles, for the same reason as the trip
    // count below: an invalid block walks no positions and writes nothing.
    bool valid = kv_head < kv_heads && position < max_positions && heads > 0;
    u32 count = valid ? position + 1 : 0;
    u32 per_split = (count + splits - 1) / splits;
    u32 begin = split * per_split;
    u32 end = min(begin + per_split, count);
    u32 kv_dim = kv_heads * dim;
    u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    u32 chunk = lane % LANES, row = lane / LANES;
    u32 first_dim = chunk * PER_LOAD;
    bool has_dims = first_dim < dim;
    // Scores in base 2: q carries 1/sqrt(d) and log2(e), so exp2 gives exp.
    float scale = rsqrtf((float)dim) * 1.4426950408889634f;
    const bool first_half = chunk < LANES / 2;
    float q[GROUP][PER_LOAD], acc[GROUP][PER_LOAD], running_max[GROUP], running_sum[GROUP];
    {
        // RoPE's angles for the dims this lane holds.
        float cosines[PER_LOAD], sines[PER_LOAD];
        if constexpr (ROPE) rope_angles<PER_LOAD, PADDED_DIM>(valid ? position : 0u, first_dim, fresh, cosines, sines);
#pragma unroll
        for (u32 h = 0; h < GROUP; ++h) {
            running_max[h] = -INFINITY;
            running_sum[h] = 0.0f;
#pragma unroll
            for (u32 e = 0; e < PER_LOAD; ++e) {
                q[h][e] = (valid && h < heads && has_dims)
                              ? query[(size_t)(kv_head * group + first_head + h) * dim + first_dim + e]
                              : 0.0f;
                acc[h][e] = 0.0f;
            }
            if constexpr (ROPE) rotate_held<PER_LOAD, LANES>(q[h], cosines, sines, first_half);
#pragma unroll
            for (u32 e = 0; e < PER_LOAD; ++e) q[h][e] *= scale;
        }
    }
    size_t head_offset = (size_t)kv_head * dim + first_dim;
    // Whether this block's split holds the current position, which the
    // RoPE-fused kernels take from `fresh` after the cached ones.
    const bool holds_position = ROPE && valid && begin <= position && position < end;
    const u32 cached_end = holds_position ? position : end;
    // One tile: a row's UNROLL loads of K and V (present[u]: a position of
    // the split) folded into each head's online softmax.
    auto fold_tile = [&](const uint4 (&key_raw)[ATTENTION_UNROLL], const uint4 (&value_raw)[ATTENTION_UNROLL],
                         const bool (&present)[ATTENTION_UNROLL]) {
        // Every padded head too (its query is 0): no branch between shuffles.
#pragma unroll
        for (u32 h = 0; h < GROUP; ++h) {
            float score[ATTENTION_UNROLL];
#pragma unroll
            for (u32 u = 0; u < ATTENTION_UNROLL; ++u) {
                float partial = 0.0f;
#pragma unroll
                for (u32 e = 0; e < PER_LOAD; ++e) partial += q[h][e] * element(key_raw[u], e, C());
#pragma unroll
                for (u32 offset = LANES / 2; offset > 0; offset >>= 1)
                    partial += __shfl_xor_sync(0xffffffffu, partial, offset);
                score[u] = present[u] ? partial : -INFINITY;
            }
            float tile_max = score[0];
#pragma unroll
            for (u32 u = 1; u < ATTENTION_UNROLL; ++u) tile_max = fmaxf(tile_max, score[u]);
            float new_max = fmaxf(running_max[h], tile_max);
            // -inf while this row has seen no position: every weight and
            // the correction are then exp2(-inf) = 0, not NaN.
            float shift = new_max == -INFINITY ? 0.0f : new_max;
            float correction = exp2f(running_max[h] - shift);
            float weight[ATTENTION_UNROLL];
            float weight_sum = 0.0f;
#pragma unroll
            for (u32 u = 0; u < ATTENTION_UNROLL; ++u) {
                weight[u] = exp2f(score[u] - shift);
                weight_sum += weight[u];
            }
            running_sum[h] = running_sum[h] * correction + weight_sum;
#pragma unroll
            for (u32 e = 0; e < PER_LOAD; ++e) {
                float sum = acc[h][e] * correction;
#pragma unroll
                for (u32 u = 0; u < ATTENTION_UNROLL; ++u) sum += weight[u] * element(value_raw[u], e, C());
                acc[h][e] = sum;
            }
            running_max[h] = new_max;
        }
    };
    // The trip count is broadcast from lane 0 so the compiler sees it is
    // the warp's (shuffles in a loop whose bound it cannot prove uniform are
    // wrapped in collective loops, and twice the registers spilled).
    u32 first_base = begin + warp * STEP;
    u32 trips = first_base < cached_end ? (cached_end - first_base + warps * STEP - 1) / (warps * STEP) : 0;
    trips = __shfl_sync(0xffffffffu, trips, 0);
    for (u32 trip = 0; trip < trips; ++trip) {
        u32 base = first_base + trip * warps * STEP;
        uint4 key_raw[ATTENTION_UNROLL], value_raw[ATTENTION_UNROLL];
        bool present[ATTENTION_UNROLL];
#pragma unroll
        for (u32 u = 0; u < ATTENTION_UNROLL; ++u) {
            u32 p = base + u * ROWS + row;
            present[u] = p < cached_end;
            bool load = present[u] && has_dims;
            size_t offset = (size_t)p * kv_dim + head_offset;
            key_raw[u] = load ? __ldg((const uint4*)(key_cache + offset)) : make_uint4(0, 0, 0, 0);
            value_raw[u] = load ? __ldg((const uint4*)(value_cache + offset)) : make_uint4(0, 0, 0, 0);
        }
        fold_tile(key_raw, value_raw, present);
    }
    if constexpr (ROPE) {
        // The current position: its key rotated and both rows rounded to C,
        // as rope_append stores them, folded in by row 0 of warp 0 (the
        // branch is the whole warp's), and stored by the first z's block.
        if (holds_position && warp == 0) {
            float cosines[PER_LOAD], sines[PER_LOAD], key_row[PER_LOAD], value_row[PER_LOAD];
            rope_angles<PER_LOAD, PADDED_DIM>(position, first_dim, fresh, cosines, sines);
#pragma unroll
            for (u32 e = 0; e < PER_LOAD; ++e) {
                key_row[e] = fresh.key[head_offset + e];
                value_row[e] = fresh.value[head_offset + e];
            }
            rotate_held<PER_LOAD, LANES>(key_row, cosines, sines, first_half);
            uint4 key_raw[ATTENTION_UNROLL], value_raw[ATTENTION_UNROLL];
            bool present[ATTENTION_UNROLL];
            // Only row 0 holds the rows: elsewhere zeros, as the cached
            // loop loads for a position it lacks (0 · an infinite f16 value
            // would be NaN).
            const uint4 packed_key = pack_row<C, PER_LOAD>(key_row), packed_value = pack_row<C, PER_LOAD>(value_row);
#pragma unroll
            for (u32 u = 0; u < ATTENTION_UNROLL; ++u) {
                present[u] = u == 0 && row == 0;
                key_raw[u] = present[u] ? packed_key : make_uint4(0, 0, 0, 0);
                value_raw[u] = present[u] ? packed_value : make_uint4(0, 0, 0, 0);
            }
            fold_tile(key_raw, value_raw, present);
            if (blockIdx.z == 0 && row == 0) {
                const size_t at = (size_t)position * kv_dim + head_offset;
                *(uint4*)(fresh.key_cache + at) = packed_key;
                *(uint4*)(fresh.value_cache + at) = packed_value;
            }
        }
    }
    // Merge the rows of the warp (lanes LANES apart hold the same dims).
#pragma unroll
    for (u32 offset = LANES; offset < 32; offset <<= 1) {
#pragma unroll
        for (u32 h = 0; h < GROUP; ++h) {
            float other_max = __shfl_xor_sync(0xffffffffu, running_max[h], offset);
            float other_sum = __shfl_xor_sync(0xffffffffu, running_sum[h], offset);
            float best = fmaxf(running_max[h], other_max);
            float mine_weight = running_max[h] == -INFINITY ? 0.0f : exp2f(running_max[h] - best);
            float other_weight = other_max == -INFINITY ? 0.0f : exp2f(other_max - best);
            running_sum[h] = running_sum[h] * mine_weight + other_sum * other_weight;
#pragma unroll
            for (u32 e = 0; e < PER_LOAD; ++e) {
                float other = __shfl_xor_sync(0xffffffffu, acc[h][e], offset);
                acc[h][e] = acc[h][e] * mine_weight + other * other_weight;
            }
            running_max[h] = best;
        }
    }
    if (!valid) return;  // the same for the whole block
    // Merge the warps: row 0 of each writes its state, then thread t merges
    // entry t. The maxima stay in base 2 until the partials are written.
    u32 stride = dim + 2;
    if (row == 0) {
#pragma unroll
        for (u32 h = 0; h < GROUP; ++h) {
            if (h >= heads) continue;
            float* mine = merge + ((size_t)warp * heads + h) * stride;
            if (has_dims) {
#pragma unroll
                for (u32 e = 0; e < PER_LOAD; ++e)
                    if (first_dim + e < dim) mine[first_dim + e] = acc[h][e];
            }
            if (lane == 0) {
                mine[dim] = running_max[h];
                mine[dim + 1] = running_sum[h];
            }
        }
    }
    __syncthreads();
    write_split<true>(merge, partials, warps, heads, dim, split, query_heads, kv_head * group + first_head);
}
