// The chosen experts' products over block-quantized weights, read from the
// router's ids in device memory (after quantized_linear's quantized.cuh,
// formats.cuh and products.cuh; instantiated per format, `{format}` and
// `{Format}` replaced as in kernels.cu). x comes quantized to 8-bit blocks
// of 32 by quantize_q8 as one flat vector of `vectors` rows of `length`
// values (rows of x, or each row's k activations): row v's values start at
// v · length, its scales and scaled sums at v · length / 32 of theirs, so
// one quantize dispatch serves every row.

// Row `v` of a staged vector of `total` values in rows of `length`.
__device__ __forceinline__ Staged staged_row(const u8* storage, u32 total, u32 length, u32 v) {
    const Staged all = staged_at(storage, total);
    const size_t blocks = (size_t)v * (length / 32);
    return Staged{all.values + (size_t)v * length, all.scales + blocks, all.sums + blocks};
}

// out[row, j, i] = silu(gate[e, i] · x[row]) * (up[e, i] · x[row]), e =
// ids[row, j]: block (g, j, row) reads rows of expert e as the dense
// quantized gate/up kernel does (one warp a row of both matrices, in
// GateUpUnits). Stacked weights: expert e's rows follow e · expert_rows
// rows of `row_bytes` (planes).
template <typename Format>
__device__ void moe_quantized_gate_up(const u8* x, const u32* ids, const u8* gate, const u8* up, float* out, u32 rows,
                                      u32 hidden, u32 expert_rows, u32 experts, u32 k) {
    using F = typename GateUpUnits<Format>::type;
    const u32 row = blockIdx.z, j = blockIdx.y;
    if (row >= rows || j >= k) return;
    const u32 expert = ids[(size_t)row * k + j];
    float* output = out + ((size_t)row * k + j) * expert_rows;
    if (expert >= experts) {
        // Not an expert the router can choose: nothing to read.
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < expert_rows; i += gridDim.x * blockDim.x)
            output[i] = 0.0f;
        return;
    }
    const u32 blocks = hidden / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const u8* gate_rows = gate + (size_t)expert * expert_rows * row_bytes;
    const u8* up_rows = up + (size_t)expert * expert_rows * row_bytes;
    const auto pointers = [&](u32 i, const u8** pointed) {
        pointed[0] = gate_rows + i * row_bytes;
        pointed[1] = up_rows + i * row_bytes;
    };
    prefetch_first_rows<2, 1>(expert_rows, row_bytes, pointers);
    quantized_rows<F, 2, 1>(
        expert_rows, blocks, staged_row(x, rows * hidden, hidden, row), pointers,
        [&](u32 i, const float* sums) { output[i] = silu(sums[0]) * sums[1]; });
}

// hidden[row, r] += Σ_j weights[row, j] · (down[e_j, r] · activated[row, j]):
// a warp owns output row r and walks the k chosen experts' rows as one run
// of units (an expert's row of a few hundred values is a few units a lane;
// the run keeps every lane loading), F::UNROLL units a lane in flight. One
// lane adds the row's sum, so no atomics are needed.
template <typename F>
__device__ void moe_quantized_down(const u8* activated, const u32* ids, const float* weights, const u8* down,
                                   float* hidden, u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k) {
    const u32 row = blockIdx.y;
    if (row >= rows) return;
    const u32 lane = threadIdx.x & 31;
    const u32 blocks = expert_rows / F::BLOCK, units = blocks * F::UNITS, all = units * k;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const u32 total = rows * k * expert_rows;
    const u32* row_ids = ids + (size_t)row * k;
    const float* row_weights = weights + (size_t)row * k;
    for (u32 r = blockIdx.x * QUANT_WARPS + quant_uniform_warp(); r < hidden_size; r += gridDim.x * QUANT_WARPS) {
        float sum = 0.0f;
        for (u32 base = 0; base < all; base += 32 * F::UNROLL) {
            typename F::Unit loaded[F::UNROLL];
            bool live[F::UNROLL];
            #pragma unroll
            for (u32 u = 0; u < F::UNROLL; ++u) {
                const u32 at = base + u * 32 + lane, j = at / units;
                live[u] = at < all && row_ids[j] < experts;
                if (live[u])
                    loaded[u] = F::load(down + ((size_t)row_ids[j] * hidden_size + r) * row_bytes, blocks, at - j * units);
            }
            #pragma unroll
            for (u32 u = 0; u < F::UNROLL; ++u) {
                const u32 at = base + u * 32 + lane, j = at / units;
                if (live[u])
                    sum += row_weights[j] *
                           F::dot(loaded[u], at - j * units, staged_row(activated, total, expert_rows, row * k + j));
            }
        }
        sum = warp_sum(sum);
        if (lane == 0) hidden[(size_t)row * hidden_size + r] += sum;
    }
}

extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    moe_gate_up_{format}_q8(const u8* x, const u32* ids, const u8* gate, const u8* up, float* out, u32 rows,
                            u32 hidden_size, u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_quantized_gate_up<{Format}>(x, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k);
}
extern "C" __global__ void __launch_bounds__(QUANT_THREADS)
    moe_down_add_{format}_q8(const u8* activated, const u32* ids, const float* weights, const u8* down,
                             float* hidden, u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_quantized_down<{Format}>(activated, ids, weights, down, hidden, rows, hidden_size, expert_rows, experts, k);
}
