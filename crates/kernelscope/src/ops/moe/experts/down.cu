// The chosen experts' down projections, weighted and summed into the
// residual stream: hidden[row][r] += Σ_j weights[row, j] · (down[e_j][r] ·
// activated[row, j]). `slices` warps own output row r and walk the k
// experts' rows as one run of 16-byte chunks split between them (loads in
// flight across experts, where expert rows are short and output rows few);
// one lane adds the row's sum, so no atomics are needed.
template <typename W>
__device__ void moe_down_add(const float* activated, const u32* ids, const float* weights, const W* down,
                             float* hidden, u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k,
                             u32 slices) {
    constexpr int UNROLL = MATVEC_UNROLL;
    __shared__ float partial[MATVEC_WARPS];
    const u32 row = blockIdx.y;
    if (row >= rows) return;
    const u32 warp = uniform_warp(), lane = threadIdx.x & 31;
    // `slices` warps share an output row, each walking its part of the
    // row's k expert rows (more loads in flight where rows are few).
    const u32 per_block = MATVEC_WARPS / slices, slice = warp % slices;
    const u32* row_ids = ids + (size_t)row * k;
    const float* row_weights = weights + (size_t)row * k;
    const float* row_activated = activated + (size_t)row * k * expert_rows;
    constexpr u32 elements = 16 / sizeof(W);
    const bool packed = expert_rows % elements == 0 && (size_t)down % 16 == 0 && (size_t)activated % 16 == 0;
    const u32 groups = (hidden_size + per_block - 1) / per_block;
    for (u32 group = blockIdx.x; group < groups; group += gridDim.x) {
        const u32 r = group * per_block + warp / slices;
        float total = 0.0f;
        if (r < hidden_size && packed) {
            const u32 chunks = expert_rows / elements, all = chunks * k;
            const u32 begin = (u32)((unsigned long long)all * slice / slices);
            const u32 end = (u32)((unsigned long long)all * (slice + 1) / slices);
            // This lane's chunk as (expert slot j, chunk c of its row), stepped
            // by 32 without dividing (one division per row, not per load).
            u32 j = (begin + lane) / chunks, c = (begin + lane) % chunks;
            for (u32 base = begin; base < end; base += 32 * UNROLL) {
                uint4 loaded[UNROLL];
                // Where this batch starts, to step again when multiplying
                // (two registers, where arrays of each load's place cost 16).
                const u32 first_j = j, first_c = c;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    loaded[u] = make_uint4(0, 0, 0, 0);
                    if (base + u * 32 + lane < end) {
                        const u32 expert = row_ids[j];
                        if (expert < experts)
                            loaded[u] = load_streaming(down + ((size_t)expert * hidden_size + r) * expert_rows +
                                                       (size_t)c * elements);
                    }
                    c += 32;
                    while (c >= chunks) {
                        c -= chunks;
                        ++j;
                    }
                }
                u32 at_j = first_j, at_c = first_c;
                #pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    if (base + u * 32 + lane < end)
                        total += row_weights[at_j] *
                                 dot_packed(loaded[u],
                                            row_activated + (size_t)at_j * expert_rows + (size_t)at_c * elements, W());
                    at_c += 32;
                    while (at_c >= chunks) {
                        at_c -= chunks;
                        ++at_j;
                    }
                }
            }
        } else if (r < hidden_size) {
            for (u32 j = slice; j < k; j += slices) {
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
        if (slices == 1) {
            if (r < hidden_size && lane == 0) hidden[(size_t)row * hidden_size + r] += total;
        } else {
            if (lane == 0) partial[warp] = total;
            __syncthreads();
            if (r < hidden_size && slice == 0 && lane == 0) {
                float sum = 0.0f;
                for (u32 s = 0; s < slices; ++s) sum += partial[warp + s];
                hidden[(size_t)row * hidden_size + r] += sum;
            }
            __syncthreads();
        }
    }
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, 4)
    moe_down_add_f32(const float* activated, const u32* ids, const float* weights, const float* down, float* hidden,
                     u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k, u32 slices) {
    wait_for_previous_kernel();
    moe_down_add(activated, ids, weights, down, hidden, rows, hidden_size, expert_rows, experts, k, slices);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, 4)
    moe_down_add_f16(const float* activated, const u32* ids, const float* weights, const f16* down, float* hidden,
                     u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k, u32 slices) {
    wait_for_previous_kernel();
    moe_down_add(activated, ids, weights, down, hidden, rows, hidden_size, expert_rows, experts, k, slices);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, 4)
    moe_down_add_bf16(const float* activated, const u32* ids, const float* weights, const bf16* down, float* hidden,
                      u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k, u32 slices) {
    wait_for_previous_kernel();
    moe_down_add(activated, ids, weights, down, hidden, rows, hidden_size, expert_rows, experts, k, slices);
}
