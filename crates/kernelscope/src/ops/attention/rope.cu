// The RoPE-fused split kernels (FreshPosition in attention.cu, which this
// file follows in one source): the vector kernels' split and partials, the
// query given before RoPE, this position's key and value taken from the
// q/k/v mat-vecs' output and stored in the caches. One kernel per cache
// dtype, head dim and padded group, with the vector kernels' bounds.

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g1_f32(
        const float* query, const float* key, const float* value, float* key_cache, float* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<float, 64, 1, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<float>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g2_f32(
        const float* query, const float* key, const float* value, float* key_cache, float* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<float, 64, 2, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<float>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g4_f32(
        const float* query, const float* key, const float* value, float* key_cache, float* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<float, 64, 4, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<float>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 1) attention_rope_split_d64_g8_f32(
        const float* query, const float* key, const float* value, float* key_cache, float* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<float, 64, 8, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<float>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g1_f32(
        const float* query, const float* key, const float* value, float* key_cache, float* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<float, 128, 1, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<float>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g2_f32(
        const float* query, const float* key, const float* value, float* key_cache, float* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<float, 128, 2, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<float>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g4_f32(
        const float* query, const float* key, const float* value, float* key_cache, float* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<float, 128, 4, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<float>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 1) attention_rope_split_d128_g8_f32(
        const float* query, const float* key, const float* value, float* key_cache, float* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<float, 128, 8, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<float>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g1_f16(
        const float* query, const float* key, const float* value, f16* key_cache, f16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 64, 1, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<f16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g2_f16(
        const float* query, const float* key, const float* value, f16* key_cache, f16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 64, 2, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<f16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g4_f16(
        const float* query, const float* key, const float* value, f16* key_cache, f16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 64, 4, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<f16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 1) attention_rope_split_d64_g8_f16(
        const float* query, const float* key, const float* value, f16* key_cache, f16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 64, 8, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<f16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g1_f16(
        const float* query, const float* key, const float* value, f16* key_cache, f16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 128, 1, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<f16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g2_f16(
        const float* query, const float* key, const float* value, f16* key_cache, f16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 128, 2, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<f16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g4_f16(
        const float* query, const float* key, const float* value, f16* key_cache, f16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 128, 4, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<f16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 1) attention_rope_split_d128_g8_f16(
        const float* query, const float* key, const float* value, f16* key_cache, f16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<f16, 128, 8, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<f16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g1_bf16(
        const float* query, const float* key, const float* value, bf16* key_cache, bf16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 64, 1, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<bf16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g2_bf16(
        const float* query, const float* key, const float* value, bf16* key_cache, bf16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 64, 2, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<bf16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d64_g4_bf16(
        const float* query, const float* key, const float* value, bf16* key_cache, bf16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 64, 4, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<bf16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 1) attention_rope_split_d64_g8_bf16(
        const float* query, const float* key, const float* value, bf16* key_cache, bf16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 64, 8, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<bf16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g1_bf16(
        const float* query, const float* key, const float* value, bf16* key_cache, bf16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 128, 1, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<bf16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g2_bf16(
        const float* query, const float* key, const float* value, bf16* key_cache, bf16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 128, 2, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<bf16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 2) attention_rope_split_d128_g4_bf16(
        const float* query, const float* key, const float* value, bf16* key_cache, bf16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 128, 4, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<bf16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}

extern "C" __global__ void __launch_bounds__(256, 1) attention_rope_split_d128_g8_bf16(
        const float* query, const float* key, const float* value, bf16* key_cache, bf16* value_cache,
        const float* inverse_frequencies, const u32* position_slot, float* partials, u32 index, u32 query_heads,
        u32 kv_heads, u32 dim, u32 max_positions, u32 splits, float attention_scaling) {
    wait_for_previous_kernel();
    attention_split_vector<bf16, 128, 8, true>(
        query, key_cache, value_cache, position_slot, partials, index, query_heads, kv_heads, dim, max_positions, splits,
        FreshPosition<bf16>{key, value, key_cache, value_cache, inverse_frequencies, attention_scaling});
}
