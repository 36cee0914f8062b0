// Stores rows of keys and values (f32) into a layer's caches, in the cache's
// dtype (rounded to nearest even), row r at position positions[first + r].
// One thread per element; a position beyond the cache is skipped (the host
// checks positions before they get here).
template <typename C>
__device__ void kv_append(const float* key, const float* value, C* key_cache, C* value_cache, const u32* positions,
                          u32 first, u32 rows, u32 max_positions, u32 kv_dim) {
    size_t item = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (size_t)rows * kv_dim) return;
    u32 row = item / kv_dim, i = item % kv_dim;
    u32 position = positions[first + row];
    if (position >= max_positions) return;
    size_t at = (size_t)position * kv_dim + i;
    from_f32(key[item], &key_cache[at]);
    from_f32(value[item], &value_cache[at]);
}

extern "C" __global__ void kv_append_f32(const float* key, const float* value, float* key_cache, float* value_cache,
                                        const u32* positions, u32 first, u32 rows, u32 max_positions, u32 kv_dim) {
    wait_for_previous_kernel();
    kv_append(key, value, key_cache, value_cache, positions, first, rows, max_positions, kv_dim);
}
extern "C" __global__ void kv_append_f16(const float* key, const float* value, f16* key_cache, f16* value_cache,
                                        const u32* positions, u32 first, u32 rows, u32 max_positions, u32 kv_dim) {
    wait_for_previous_kernel();
    kv_append(key, value, key_cache, value_cache, positions, first, rows, max_positions, kv_dim);
}
extern "C" __global__ void kv_append_bf16(const float* key, const float* value, bf16* key_cache, bf16* value_cache,
                                         const u32* positions, u32 first, u32 rows, u32 max_positions, u32 kv_dim) {
    wait_for_previous_kernel();
    kv_append(key, value, key_cache, value_cache, positions, first, rows, max_positions, kv_dim);
}
