// Argmax by one block: the first index of the largest value; NaN never wins.
extern "C" __global__ void argmax_f32(const float* logits, u32* out, u32 n) {
    __shared__ float best_values[32];
    __shared__ u32 best_indices[32];
    float best = -INFINITY;
    u32 best_index = 0xffffffffu;
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
        float v = logits[i];
        if (v > best || (best_index == 0xffffffffu && !isnan(v))) { best = v; best_index = i; }
    }
    // Warp then block reduction; ties go to the smaller index.
    for (int offset = 16; offset > 0; offset >>= 1) {
        float other = __shfl_xor_sync(0xffffffffu, best, offset);
        u32 other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
        if (other > best || (other == best && other_index < best_index)) { best = other; best_index = other_index; }
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { best_values[warp] = best; best_indices[warp] = best_index; }
    __syncthreads();
    if (warp == 0) {
        int warps = blockDim.x >> 5;
        best = lane < warps ? best_values[lane] : -INFINITY;
        best_index = lane < warps ? best_indices[lane] : 0xffffffffu;
        for (int offset = 16; offset > 0; offset >>= 1) {
            float other = __shfl_xor_sync(0xffffffffu, best, offset);
            u32 other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
            if (other > best || (other == best && other_index < best_index)) { best = other; best_index = other_index; }
        }
        if (lane == 0) out[0] = best_index == 0xffffffffu ? 0 : best_index;
    }
}
