// The chosen experts' down projections, weighted and summed into the
// residual stream: hidden[row][r] += Σ_j weights[row, j] · (down[e_j][r] ·
// activated[row, j]). A warp owns output row r and walks the k experts'
// rows as one run of 16-byte chunks (several loads in flight across
// experts, where expert rows are short), so each output element is written
// by one lane and no atomics are needed.
template <typename W>
__device__ void moe_down_add(const float* activated, const u32* ids, const float* weights, const W* down,
                             float* hidden, u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k) {
    constexpr int UNROLL = MATVEC_UNROLL;
    const u32 row = blockIdx.y;
    if (row >= rows) return;
    const u32 warp = uniform_warp(), lane = threadIdx.x & 31;
    const u32* row_ids = ids + (size_t)row * k;
    const float* row_weights = weights + (size_t)row * k;
    const float* row_activated = activated + (size_t)row * k * expert_rows;
    constexpr u32 elements = 16 / sizeof(W);
    const bool packed = expert_rows % elements == 0 && (size_t)down % 16 == 0 && (size_t)activated % 16 == 0;
    const u32 groups = (hidden_size + MATVEC_WARPS - 1) / MATVEC_WARPS;
    for (u32 group = blockIdx.x; group < groups; group += gridDim.x) {
        const u32 r = group * MATVEC_WARPS + warp;
        if (r >= hidden_size) continue;
        float total = 0.0f;
        if (packed) {
            const u32 chunks = expert_rows / elements, all = chunks * k;
            for (u32 base = 0; base < all; base += 32 * UNROLL) {
                uint4 loaded[UNROLL];
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const u32 chunk = base + u * 32 + lane;
                    loaded[u] = make_uint4(0, 0, 0, 0);
                    if (chunk < all) {
                        const u32 expert = row_ids[chunk / chunks];
                        if (expert < experts)
                            loaded[u] = load_streaming(down + ((size_t)expert * hidden_size + r) * expert_rows +
                                                       (size_t)(chunk % chunks) * elements);
                    }
                }
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const u32 chunk = base + u * 32 + lane;
                    if (chunk < all) {
                        const u32 j = chunk / chunks;
                        total += row_weights[j] *
                                 dot_packed(loaded[u], row_activated + (size_t)j * expert_rows +
                                                           (size_t)(chunk % chunks) * elements,
                                            W());
                    }
                }
            }
        } else {
            for (u32 j = 0; j < k; ++j) {
                const u32 expert = row_ids[j];
                if (expert >= experts) continue;
                const W* weight_row = down + ((size_t)expert * hidden_size + r) * expert_rows;
                const float* input = row_activated + (size_t)j * expert_rows;
                float sum = 0.0f;
                for (u32 i = lane; i < expert_rows; i += 32) sum += to_f32(weight_row[i]) * input[i];
                total += row_weights[j] * sum;
            }
        }
        total = warp_sum(total);
        if (lane == 0) hidden[(size_t)row * hidden_size + r] += total;
    }
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    moe_down_add_f32(const float* activated, const u32* ids, const float* weights, const float* down, float* hidden,
                     u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_down_add(activated, ids, weights, down, hidden, rows, hidden_size, expert_rows, experts, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    moe_down_add_f16(const float* activated, const u32* ids, const float* weights, const f16* down, float* hidden,
                     u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_down_add(activated, ids, weights, down, hidden, rows, hidden_size, expert_rows, experts, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS)
    moe_down_add_bf16(const float* activated, const u32* ids, const float* weights, const bf16* down, float* hidden,
                      u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_down_add(activated, ids, weights, down, hidden, rows, hidden_size, expert_rows, experts, k);
}
