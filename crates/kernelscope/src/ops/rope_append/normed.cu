// Qwen3's per-head RMSNorm of q and k, RoPE and the KV-cache append of one
// decode position as one dispatch: a warp per head stages the head in its
// shared memory, normalises it (the sum of squares reduced as head_norm.cu
// reduces it), rotates it (as rope_append.cu rotates) and writes the query
// back in place or the key into the cache; then every thread copies values.
// The arithmetic is the unfused ops' own, so fused and unfused agree to f32
// rounding (the compiler may contract a rotation's two products into a
// multiply-add either way round). A position beyond the cache stores
// nothing (the host checks first).
template <typename W, typename C>
__device__ void rope_append_normed(float* query, const float* key, const float* value, C* key_cache,
                                   C* value_cache, const W* query_norm, const W* key_norm, float eps,
                                   const float* inverse_frequencies, const u32* positions, u32 first,
                                   u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
                                   float attention_scaling) {
    extern __shared__ float staged_heads[];
    const u32 warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* staged = staged_heads + warp * head_dim;
    const u32 half = head_dim / 2, kv_dim = kv_heads * head_dim;
    const u32 position = positions[first];
    const bool stored = position < max_positions;
    const u32 head = blockIdx.x * warps + warp;
    // Uniform per warp: every lane of a warp takes the same head.
    if (head < query_heads + kv_heads) {
        const bool is_query = head < query_heads;
        const u32 at = is_query ? head * head_dim : (head - query_heads) * head_dim;
        const float* source = is_query ? query + at : key + at;
        const W* weight = is_query ? query_norm : key_norm;
        float squares = 0.0f;
        for (u32 i = lane; i < head_dim; i += 32) {
            const float v = source[i];
            staged[i] = v;
            squares += v * v;
        }
        for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
        const float scale = rsqrtf(squares / head_dim + eps);
        for (u32 i = lane; i < head_dim; i += 32) staged[i] = staged[i] * scale * to_f32(weight[i]);
        __syncwarp();
        for (u32 i = lane; i < half; i += 32) {
            float c, s;
            rope_cos_sin(position, inverse_frequencies[i], attention_scaling, &c, &s);
            const float2 rotated = rope_rotate(staged[i], staged[i + half], c, s);
            if (is_query) {
                query[at + i] = rotated.x;
                query[at + i + half] = rotated.y;
            } else if (stored) {
                C* row = key_cache + (size_t)position * kv_dim + at;
                from_f32(rotated.x, &row[i]);
                from_f32(rotated.y, &row[i + half]);
            }
        }
    }
    if (stored)
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < kv_dim; i += gridDim.x * blockDim.x)
            from_f32(value[i], &value_cache[(size_t)position * kv_dim + i]);
}

extern "C" __global__ void rope_append_normed_f32_f32(float* query, const float* key, const float* value, float* key_cache,
        float* value_cache, const float* query_norm, const float* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_normed_f32_f16(float* query, const float* key, const float* value, f16* key_cache,
        f16* value_cache, const float* query_norm, const float* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_normed_f32_bf16(float* query, const float* key, const float* value, bf16* key_cache,
        bf16* value_cache, const float* query_norm, const float* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_normed_f16_f32(float* query, const float* key, const float* value, float* key_cache,
        float* value_cache, const f16* query_norm, const f16* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_normed_f16_f16(float* query, const float* key, const float* value, f16* key_cache,
        f16* value_cache, const f16* query_norm, const f16* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_normed_f16_bf16(float* query, const float* key, const float* value, bf16* key_cache,
        bf16* value_cache, const f16* query_norm, const f16* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_normed_bf16_f32(float* query, const float* key, const float* value, float* key_cache,
        float* value_cache, const bf16* query_norm, const bf16* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_normed_bf16_f16(float* query, const float* key, const float* value, f16* key_cache,
        f16* value_cache, const bf16* query_norm, const bf16* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
extern "C" __global__ void rope_append_normed_bf16_bf16(float* query, const float* key, const float* value, bf16* key_cache,
        bf16* value_cache, const bf16* query_norm, const bf16* key_norm, float eps, const float* inverse_frequencies,
        const u32* positions, u32 first, u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
        float attention_scaling) {
    wait_for_previous_kernel();
    rope_append_normed(query, key, value, key_cache, value_cache, query_norm, key_norm, eps, inverse_frequencies,
                       positions, first, max_positions, query_heads, kv_heads, head_dim, attention_scaling);
}
