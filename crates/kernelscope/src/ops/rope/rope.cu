// RoPE, rotate-half layout, in place: one thread per (head, i < d/2) pair.
// The angle position * inv_freq is formed in f32 like transformers does; cos and
// sin are multiplied by attention_scaling (YaRN's attention factor, else 1).
extern "C" __global__ void rope_f32(float* x, const float* inverse_frequencies, const u32* position_slot, u32 index,
                                   u32 heads, u32 head_dim, float attention_scaling) {
    u32 half = head_dim / 2;
    u32 item = blockIdx.x * blockDim.x + threadIdx.x;
    if (item >= heads * half) return;
    u32 head = item / half, i = item % half;
    float angle = (float)position_slot[index] * inverse_frequencies[i];
    float s, c;
    sincosf(angle, &s, &c);
    // transformers scales cos and sin (YaRN's attention factor; 1 otherwise).
    s *= attention_scaling;
    c *= attention_scaling;
    float* h = x + (size_t)head * head_dim;
    float x0 = h[i], x1 = h[i + half];
    h[i] = x0 * c - x1 * s;
    h[i + half] = x1 * c + x0 * s;
}
