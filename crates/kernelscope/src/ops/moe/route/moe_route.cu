// A mixture-of-experts router's choice for each row of logits [rows,
// experts], on the device so a decode step needs no host sync: the softmax
// over every expert (in f32, as transformers computes it), the k experts of
// the largest probabilities (ties to the lower index), and their weights,
// renormalised to sum to 1 where asked (Mixtral, Qwen3-MoE's
// norm_topk_prob). One warp per row, with no block barrier: each lane
// holds the experts lane, lane + 32, ...; k rounds of a warp argmax pick
// the experts. (A block-wide argmax cost 6.5 µs per layer on an H200 for
// Qwen3-MoE's 8 of 128, a warp rescanning global memory each round 9.4;
// logits in registers are the fast path.)
__device__ __forceinline__ bool route_better(float value, u32 index, float best, u32 best_index) {
    return value > best || (value == best && index < best_index);
}

// Writes row `row`'s choice from its `chosen` experts and their softmax
// probabilities (every lane holds them).
// Also tallies each choice in `counts` (one atomic add per choice).
__device__ __forceinline__ void route_store(u32* ids, float* weights, u32* counts, u32 row, u32 k, u32 renormalize,
                                            const u32* chosen, const float* probability, u32 lane) {
    float kept = 0.0f;
    for (u32 c = 0; c < k; ++c) kept += probability[c];
    for (u32 c = lane; c < k; c += 32) {
        ids[(size_t)row * k + c] = chosen[c];
        atomicAdd(counts + chosen[c], 1u);
        weights[(size_t)row * k + c] = renormalize ? probability[c] / kept : probability[c];
    }
}

// The warp's argmax of (best, best_index) over its lanes, ties to the lower
// index; every lane ends holding the winner.
__device__ __forceinline__ void warp_argmax(float& best, u32& best_index) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, best, offset);
        const u32 other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
        if (route_better(other, other_index, best, best_index)) {
            best = other;
            best_index = other_index;
        }
    }
}

// Up to 32 * REGISTERS experts: each lane keeps its logits in registers and
// marks the chosen ones in a bit mask, so a round is a few compares and a
// warp argmax (Qwen3-MoE's 8 of 128 in about a microsecond).
template <int REGISTERS>
__device__ void route_in_registers(const float* values, u32* ids, float* weights, u32* counts, u32 row, u32 experts, u32 k,
                                   u32 renormalize, u32 lane) {
    float mine[REGISTERS];
    float largest = -INFINITY;
    #pragma unroll
    for (int s = 0; s < REGISTERS; ++s) {
        const u32 e = lane + 32 * s;
        mine[s] = e < experts ? values[e] : -INFINITY;
        largest = fmaxf(largest, mine[s]);
    }
    largest = warp_max(largest);
    float total = 0.0f;
    #pragma unroll
    for (int s = 0; s < REGISTERS; ++s)
        if (lane + 32 * s < experts) total += expf(mine[s] - largest);
    total = warp_sum(total);
    u32 taken = 0;
    u32 chosen[32];
    float probability[32];
    for (u32 round = 0; round < k; ++round) {
        float best = -INFINITY;
        u32 best_index = 0xffffffffu;
        #pragma unroll
        for (int s = 0; s < REGISTERS; ++s) {
            const u32 e = lane + 32 * s;
            if (e < experts && !(taken >> s & 1u) && route_better(mine[s], e, best, best_index)) {
                best = mine[s];
                best_index = e;
            }
        }
        warp_argmax(best, best_index);
        if (best_index % 32 == lane) taken |= 1u << (best_index / 32);
        chosen[round] = best_index;
        probability[round] = expf(best - largest) / total;
    }
    route_store(ids, weights, counts, row, k, renormalize, chosen, probability, lane);
}

// Any number of experts: each round rescans the row, skipping the chosen.
__device__ void route_any(const float* values, u32* ids, float* weights, u32* counts, u32 row, u32 experts, u32 k,
                          u32 renormalize, u32 lane) {
    float largest = -INFINITY;
    for (u32 e = lane; e < experts; e += 32) largest = fmaxf(largest, values[e]);
    largest = warp_max(largest);
    float total = 0.0f;
    for (u32 e = lane; e < experts; e += 32) total += expf(values[e] - largest);
    total = warp_sum(total);
    u32 chosen[32];
    float probability[32];
    for (u32 round = 0; round < k; ++round) {
        float best = -INFINITY;
        u32 best_index = 0xffffffffu;
        for (u32 e = lane; e < experts; e += 32) {
            bool taken = false;
            for (u32 c = 0; c < round; ++c) taken |= chosen[c] == e;
            if (!taken && route_better(values[e], e, best, best_index)) {
                best = values[e];
                best_index = e;
            }
        }
        warp_argmax(best, best_index);
        chosen[round] = best_index;
        probability[round] = expf(best - largest) / total;
    }
    route_store(ids, weights, counts, row, k, renormalize, chosen, probability, lane);
}

extern "C" __global__ void moe_route_f32(const float* logits, u32* ids, float* weights, u32* counts, u32 rows,
                                         u32 experts, u32 k, u32 renormalize) {
    wait_for_previous_kernel();
    const u32 row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* values = logits + (size_t)row * experts;
    if (experts <= 32 * 8) {
        route_in_registers<8>(values, ids, weights, counts, row, experts, k, renormalize, lane);
    } else {
        route_any(values, ids, weights, counts, row, experts, k, renormalize, lane);
    }
}
