// RMSNorm, q/k/v's mat-vecs, RoPE and the KV-cache append in one kernel for
// one decode position (positions[first]), caches in the weights' dtype:
// norm_matvec's products over [q; k; v] (the same staged x and dot_rows, so
// the same sums bit for bit), rotated and stored as rope_append stores them
// (the prelude's rotation). Warps take q's and k's rows in pairs: warps 2j
// and 2j + 1 of a block take rows i and i + half of one head, swap their
// sums through shared memory at a barrier of their own (64 threads) and
// each stores its rotated value, the query's into `query`, the key's into
// the key cache; v's rows go to the value cache as they are. A position
// beyond the cache stores no key or value (the host checks positions).
template <typename W>
__device__ void norm_matvec_rope(const float* x, const W* norm_weight, const W* weight_q, const W* weight_k,
                                 const W* weight_v, float* query, W* key_cache, W* value_cache,
                                 const float* inverse_frequencies, const u32* positions, u32 first, u32 max_positions,
                                 u32 query_heads, u32 kv_heads, u32 head_dim, u32 k, float eps,
                                 float attention_scaling) {
    extern __shared__ float4 staged_storage[];
    // Each warp's sum for its partner, in two rounds' slots: a warp writes
    // a slot again only after both have passed the barrier between.
    __shared__ float exchanged[2][MATVEC_WARPS];
    float* staged = (float*)staged_storage;
    stage_normed(x, norm_weight, eps, k, staged);
    const u32 half = head_dim / 2, query_rows = query_heads * head_dim, kv_dim = kv_heads * head_dim;
    const u32 rotated = query_rows + kv_dim, n = rotated + kv_dim;
    const bool packed =
        packed_rows(weight_q, staged, k) && packed_rows(weight_k, staged, k) && packed_rows(weight_v, staged, k);
    const u32 position = positions[first];
    const bool stored = position < max_positions;
    const u32 warp = uniform_warp(), lane = threadIdx.x & 31;
    const u32 groups = (n + MATVEC_WARPS - 1) / MATVEC_WARPS;
    u32 round = 0;
    for (u32 group = blockIdx.x; group < groups; group += gridDim.x) {
        // Slots 2p and 2p + 1 are pair p's rows; past the rotated rows a
        // slot is its row. Both warps of a pair are on the same side, as
        // `rotated` and MATVEC_WARPS are even.
        const u32 slot = group * MATVEC_WARPS + warp;
        u32 row = slot;
        if (slot < rotated) {
            const u32 pair = slot >> 1, head = pair / half;
            row = head * head_dim + (pair - head * half) + (slot & 1) * half;
        }
        float sum = 0.0f;
        if (slot < n) {
            const W* rows[1] = {row < query_rows ? weight_q + (size_t)row * k
                                : row < rotated  ? weight_k + (size_t)(row - query_rows) * k
                                                 : weight_v + (size_t)(row - rotated) * k};
            dot_rows<W, 1>(rows, staged, k, packed, 0, 1, &sum);
        }
        if (slot < rotated) {
            if (lane == 0) exchanged[round][warp] = sum;
            warp_pair_barrier<MATVEC_WARPS>(warp);
            if (lane == 0) {
                const float other = exchanged[round][warp ^ 1];
                const bool second = slot & 1;
                float c, s;
                rope_cos_sin(position, inverse_frequencies[(slot >> 1) % half], attention_scaling, &c, &s);
                const float2 pair = rope_rotate(second ? other : sum, second ? sum : other, c, s);
                const float value = second ? pair.y : pair.x;
                if (row < query_rows)
                    query[row] = value;
                else if (stored)
                    from_f32(value, &key_cache[(size_t)position * kv_dim + (row - query_rows)]);
            }
            round ^= 1;
        } else if (slot < n && lane == 0 && stored) {
            from_f32(sum, &value_cache[(size_t)position * kv_dim + (row - rotated)]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_rope_f32(const float* x, const float* norm_weight, const float* weight_q, const float* weight_k,
                        const float* weight_v, float* query, float* key_cache, float* value_cache,
                        const float* inverse_frequencies, const u32* positions, u32 first, u32 max_positions,
                        u32 query_heads, u32 kv_heads, u32 head_dim, u32 k, float eps, float attention_scaling) {
    wait_for_previous_kernel();
    norm_matvec_rope(x, norm_weight, weight_q, weight_k, weight_v, query, key_cache, value_cache, inverse_frequencies,
                     positions, first, max_positions, query_heads, kv_heads, head_dim, k, eps, attention_scaling);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_rope_f16(const float* x, const f16* norm_weight, const f16* weight_q, const f16* weight_k,
                        const f16* weight_v, float* query, f16* key_cache, f16* value_cache,
                        const float* inverse_frequencies, const u32* positions, u32 first, u32 max_positions,
                        u32 query_heads, u32 kv_heads, u32 head_dim, u32 k, float eps, float attention_scaling) {
    wait_for_previous_kernel();
    norm_matvec_rope(x, norm_weight, weight_q, weight_k, weight_v, query, key_cache, value_cache, inverse_frequencies,
                     positions, first, max_positions, query_heads, kv_heads, head_dim, k, eps, attention_scaling);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    norm_matvec_rope_bf16(const float* x, const bf16* norm_weight, const bf16* weight_q, const bf16* weight_k,
                        const bf16* weight_v, float* query, bf16* key_cache, bf16* value_cache,
                        const float* inverse_frequencies, const u32* positions, u32 first, u32 max_positions,
                        u32 query_heads, u32 kv_heads, u32 head_dim, u32 k, float eps, float attention_scaling) {
    wait_for_previous_kernel();
    norm_matvec_rope(x, norm_weight, weight_q, weight_k, weight_v, query, key_cache, value_cache, inverse_frequencies,
                     positions, first, max_positions, query_heads, kv_heads, head_dim, k, eps, attention_scaling);
}
