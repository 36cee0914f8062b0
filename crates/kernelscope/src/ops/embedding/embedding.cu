// Embedding row lookup; the token id is read from device memory. An id
// beyond the vocabulary writes NaN (the host checks ids before they get here).
template <typename W>
__device__ void embedding(const W* table, const u32* token_slot, float* out, u32 vocab, u32 hidden) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= hidden) return;
    u32 token = token_slot[0];
    out[i] = token < vocab ? to_f32(table[(size_t)token * hidden + i]) : __int_as_float(0x7fc00000);
}

extern "C" __global__ void embedding_f32(const float* table, const u32* token_slot, float* out, u32 vocab, u32 hidden) {
    embedding(table, token_slot, out, vocab, hidden);
}
extern "C" __global__ void embedding_f16(const f16* table, const u32* token_slot, float* out, u32 vocab, u32 hidden) {
    embedding(table, token_slot, out, vocab, hidden);
}
extern "C" __global__ void embedding_bf16(const bf16* table, const u32* token_slot, float* out, u32 vocab, u32 hidden) {
    embedding(table, token_slot, out, vocab, hidden);
}
