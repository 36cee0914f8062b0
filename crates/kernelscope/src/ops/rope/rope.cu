// RoPE, rotate-half layout, in place on x [rows, heads, head_dim]: one thread
// per (row, head, i < d/2) pair, row r rotated by positions[first + r]. The
// angle position * inv_freq is formed in f32 like transformers does; cos and
// sin are multiplied by attention_scaling (YaRN's attention factor, else 1).
extern "C" __global__ void rope_f32(float* x, const float* inverse_frequencies, const u32* positions, u32 first,
                                   u32 rows, u32 heads, u32 head_dim, float attention_scaling) {
    wait_for_previous_kernel();
    u32 half = head_dim / 2;
    size_t item = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= (size_t)rows * heads * half) return;
    u32 i = item % half;
    size_t head = item / half;  // over all rows: row * heads + head within the row
    u32 row = head / heads;
    // transformers scales cos and sin (YaRN's attention factor; 1 otherwise).
    float c, s;
    rope_cos_sin(positions[first + row], inverse_frequencies[i], attention_scaling, &c, &s);
    float* h = x + head * head_dim;
    const float2 rotated = rope_rotate(h[i], h[i + half], c, s);
    h[i] = rotated.x;
    h[i + half] = rotated.y;
}
