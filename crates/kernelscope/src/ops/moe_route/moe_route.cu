// A mixture-of-experts router's choice for each row of logits [rows,
// experts], on the device so a decode step needs no host sync: the softmax
// over every expert (in f32, as transformers computes it), the k experts of
// the largest probabilities (ties to the lower index), and their weights,
// renormalised to sum to 1 where asked (Mixtral, Qwen3-MoE's
// norm_topk_prob). A block per row; each thread holds the experts t,
// t + blockDim.x, ...; k rounds of a block-wide argmax pick the experts.
__device__ __forceinline__ bool route_better(float value, u32 index, float best, u32 best_index) {
    return value > best || (value == best && index < best_index);
}

extern "C" __global__ void moe_route_f32(const float* logits, u32* ids, float* weights, u32 rows, u32 experts, u32 k,
                                         u32 renormalize) {
    wait_for_previous_kernel();
    __shared__ float best_values[32];
    __shared__ u32 best_indices[32];
    __shared__ u32 chosen[32];
    __shared__ float chosen_probability[32];
    const u32 row = blockIdx.x;
    if (row >= rows) return;
    const float* values = logits + (size_t)row * experts;
    float largest = -INFINITY;
    for (u32 e = threadIdx.x; e < experts; e += blockDim.x) largest = fmaxf(largest, values[e]);
    largest = block_max(largest);
    float total = 0.0f;
    for (u32 e = threadIdx.x; e < experts; e += blockDim.x) total += expf(values[e] - largest);
    total = block_sum(total);
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (u32 round = 0; round < k; ++round) {
        float best = -INFINITY;
        u32 best_index = 0xffffffffu;
        for (u32 e = threadIdx.x; e < experts; e += blockDim.x) {
            bool taken = false;
            for (u32 c = 0; c < round; ++c) taken |= chosen[c] == e;
            if (!taken && route_better(values[e], e, best, best_index)) {
                best = values[e];
                best_index = e;
            }
        }
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float other = __shfl_xor_sync(0xffffffffu, best, offset);
            const u32 other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
            if (route_better(other, other_index, best, best_index)) {
                best = other;
                best_index = other_index;
            }
        }
        if (lane == 0) {
            best_values[warp] = best;
            best_indices[warp] = best_index;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (u32 w = 1; w < warps; ++w)
                if (route_better(best_values[w], best_indices[w], best, best_index)) {
                    best = best_values[w];
                    best_index = best_indices[w];
                }
            chosen[round] = best_index;
            chosen_probability[round] = expf(best - largest) / total;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        float kept = 0.0f;
        for (u32 c = 0; c < k; ++c) kept += chosen_probability[c];
        for (u32 c = 0; c < k; ++c) {
            ids[(size_t)row * k + c] = chosen[c];
            weights[(size_t)row * k + c] = renormalize ? chosen_probability[c] / kept : chosen_probability[c];
        }
    }
}
