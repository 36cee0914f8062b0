// RMSNorm, q/k/v's mat-vecs, RoPE and the KV-cache append in one kernel for
// one decode position (positions[first]), caches in the weights' dtype:
// norm_matvec's products over [q; k; v] (the same staged x and dot_rows, so
// the same sums bit for bit), rotated and stored as rope_append stores them
// by the prelude's RotatingStores: neighbouring warps take rows i and
// i + half of one head and swap their sums at a barrier of their own; v's
// rows go to the value cache as they are. A position beyond the cache
// stores no key or value (the host checks positions).
template <typename W>
__device__ void norm_matvec_rope(const float* x, const W* norm_weight, const W* weight_q, const W* weight_k,
                                 const W* weight_v, float* query, W* key_cache, W* value_cache,
                                 const float* inverse_frequencies, const u32* positions, u32 first, u32 max_positions,
                                 u32 query_heads, u32 kv_heads, u32 head_dim, u32 k, float eps,
                                 float attention_scaling) {
    extern __shared__ float4 staged_storage[];
    __shared__ float exchanged[2][MATVEC_WARPS];
    float* staged = (float*)staged_storage;
    stage_normed(x, norm_weight, eps, k, staged);
    const u32 query_rows = query_heads * head_dim, kv_dim = kv_heads * head_dim;
    const u32 rotated = query_rows + kv_dim, n = rotated + kv_dim;
    const bool packed =
        packed_rows(weight_q, staged, k) && packed_rows(weight_k, staged, k) && packed_rows(weight_v, staged, k);
    const u32 position = positions[first];
    RotatingStores<W, MATVEC_WARPS> stores{query,    key_cache,  value_cache, inverse_frequencies,
                                           attention_scaling, position, head_dim, head_dim / 2, query_rows,
                                           kv_dim,   rotated,    position < max_positions, exchanged, 0};
    const u32 warp = uniform_warp(), lane = threadIdx.x & 31;
    const u32 groups = (n + MATVEC_WARPS - 1) / MATVEC_WARPS;
    for (u32 group = blockIdx.x; group < groups; group += gridDim.x) {
        // Both warps of a pair are on the same side of `rotated`, as it and
        // MATVEC_WARPS are even, and take the same groups.
        const u32 slot = group * MATVEC_WARPS + warp, row = stores.row_of(slot);
        if (slot < n) {
            float sum;
            const W* rows[1] = {row < query_rows ? weight_q + (size_t)row * k
                                : row < rotated  ? weight_k + (size_t)(row - query_rows) * k
                                                 : weight_v + (size_t)(row - rotated) * k};
            dot_rows<W, 1>(rows, staged, k, packed, 0, 1, &sum);
            stores.store(slot, row, sum, warp, lane);
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
