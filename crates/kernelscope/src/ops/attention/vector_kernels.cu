// The vector split kernels of decode attention (attention.cu's
// attention_split_vector), instantiated per cache dtype, padded head
// dimension and padded group; compiled in one source after attention.cu.
// One kernel per cache dtype, padded head dim and padded group; two blocks
// of 256 threads fit an SM (128 registers a thread) except for groups of 8,
// whose 16 accumulators a lane would spill.
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g1_f32(const float* query, const float* key_cache, const float* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<float, 64, 1, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<float>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g2_f32(const float* query, const float* key_cache, const float* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<float, 64, 2, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<float>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g4_f32(const float* query, const float* key_cache, const float* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<float, 64, 4, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<float>{});
}
extern "C" __global__ void __launch_bounds__(256, 1) attention_split_d64_g8_f32(const float* query, const float* key_cache, const float* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<float, 64, 8, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<float>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g1_f32(const float* query, const float* key_cache, const float* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<float, 128, 1, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<float>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g2_f32(const float* query, const float* key_cache, const float* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<float, 128, 2, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<float>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g4_f32(const float* query, const float* key_cache, const float* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<float, 128, 4, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<float>{});
}
extern "C" __global__ void __launch_bounds__(256, 1) attention_split_d128_g8_f32(const float* query, const float* key_cache, const float* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<float, 128, 8, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<float>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g1_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 64, 1, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<f16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g2_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 64, 2, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<f16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g4_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 64, 4, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<f16>{});
}
extern "C" __global__ void __launch_bounds__(256, 1) attention_split_d64_g8_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 64, 8, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<f16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g1_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 128, 1, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<f16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g2_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 128, 2, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<f16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g4_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 128, 4, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<f16>{});
}
extern "C" __global__ void __launch_bounds__(256, 1) attention_split_d128_g8_f16(const float* query, const f16* key_cache, const f16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 128, 8, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<f16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g1_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 64, 1, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<bf16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g2_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 64, 2, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<bf16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d64_g4_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 64, 4, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<bf16>{});
}
extern "C" __global__ void __launch_bounds__(256, 1) attention_split_d64_g8_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 64, 8, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<bf16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g1_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 128, 1, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<bf16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g2_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 128, 2, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<bf16>{});
}
extern "C" __global__ void __launch_bounds__(256, 2) attention_split_d128_g4_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 128, 4, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<bf16>{});
}
extern "C" __global__ void __launch_bounds__(256, 1) attention_split_d128_g8_bf16(const float* query, const bf16* key_cache, const bf16* value_cache,
                                                const u32* position_slot, float* partials, u32 index,
                                                u32 query_heads, u32 kv_heads, u32 dim, u32 max_positions, u32 splits) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 128, 8, false>(query, key_cache, value_cache, position_slot, partials, index,
                                          query_heads, kv_heads, dim, max_positions, splits, FreshPosition<bf16>{});
}

