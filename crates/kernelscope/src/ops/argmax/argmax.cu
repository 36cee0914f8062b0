// Argmax by one block: the first index of the largest value; NaN never wins.
extern "C" __global__ void argmax_f32(const float* logits, u32* out, u32 n) {
    float best;
    u32 index = block_argmax(logits, n, &best);
    if (threadIdx.x == 0) out[0] = index;
}
