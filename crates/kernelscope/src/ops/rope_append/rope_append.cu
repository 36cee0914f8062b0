// RoPE and the KV-cache append of one decode position as one dispatch: the
// query heads are rotated in place, the key heads rotated on their way into
// the key cache and the values copied into the value cache, at the position
// positions[first]. One thread per rotated pair, then one per value element;
// the arithmetic is the RoPE and KV-append ops' own (the prelude's
// rope_cos_sin and rope_rotate), so fused and unfused agree bit for bit. A
// position beyond the cache stores nothing (the host checks positions
// before they get here).
template <typename C>
__device__ void rope_append(float* query, const float* key, const float* value, C* key_cache, C* value_cache,
                            const float* inverse_frequencies, const u32* positions, u32 first, u32 max_positions,
                            u32 query_heads, u32 kv_heads, u32 head_dim, float attention_scaling) {
    const u32 half = head_dim / 2, kv_dim = kv_heads * head_dim;
    const u32 position = positions[first];
    const bool stored = position < max_positions;
    const size_t item = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t rotations = (size_t)(query_heads + kv_heads) * half;
    if (item < rotations) {
        const u32 i = item % half, head = item / half;
        float c, s;
        rope_cos_sin(position, inverse_frequencies[i], attention_scaling, &c, &s);
        if (head < query_heads) {
            float* h = query + (size_t)head * head_dim;
            const float2 rotated = rope_rotate(h[i], h[i + half], c, s);
            h[i] = rotated.x;
            h[i + half] = rotated.y;
        } else if (stored) {
            const u32 at = (head - query_heads) * head_dim;
            const float2 rotated = rope_rotate(key[at + i], key[at + i + half], c, s);
            C* row = key_cache + (size_t)position * kv_dim + at;
            from_f32(rotated.x, &row[i]);
            from_f32(rotated.y, &row[i + half]);
        }
    } else if (item < rotations + kv_dim && stored) {
        const u32 i = item - rotations;
        from_f32(value[i], &value_cache[(size_t)position * kv_dim + i]);
    }
}

extern "C" __global__ void rope_append_f32(float* query, const float* key, const float* value, float* key_cache,
                                           float* value_cache, const float* inverse_frequencies, const u32* positions,
                                           u32 first, u32 max_positions, u32 query_heads, u32 kv_heads,
                                           u32 head_dim, float attention_scaling) {
    wait_for_previous_kernel();
    rope_append(query, key, value, key_cache, value_cache, inverse_frequencies, positions, first, max_positions,
                query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_f16(float* query, const float* key, const float* value, f16* key_cache,
                                           f16* value_cache, const float* inverse_frequencies, const u32* positions,
                                           u32 first, u32 max_positions, u32 query_heads, u32 kv_heads,
                                           u32 head_dim, float attention_scaling) {
    wait_for_previous_kernel();
    rope_append(query, key, value, key_cache, value_cache, inverse_frequencies, positions, first, max_positions,
                query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_bf16(float* query, const float* key, const float* value, bf16* key_cache,
                                            bf16* value_cache, const float* inverse_frequencies,
                                            const u32* positions, u32 first, u32 max_positions, u32 query_heads,
                                            u32 kv_heads, u32 head_dim, float attention_scaling) {
    wait_for_previous_kernel();
    rope_append(query, key, value, key_cache, value_cache, inverse_frequencies, positions, first, max_positions,
                query_heads, kv_heads, head_dim, attention_scaling);
}
