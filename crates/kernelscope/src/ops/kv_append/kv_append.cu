// Stores this position's key and value rows into the layer's caches.
extern "C" __global__ void kv_append_f32(const float* key, const float* value, float* key_cache, float* value_cache,
                                        const u32* position_slot, u32 index, u32 max_positions, u32 kv_dim) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    u32 position = position_slot[index];
    if (i >= kv_dim || position >= max_positions) return;
    key_cache[(size_t)position * kv_dim + i] = key[i];
    value_cache[(size_t)position * kv_dim + i] = value[i];
}
