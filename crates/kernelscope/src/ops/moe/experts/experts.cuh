// What the experts' gate/up kernels share (gate_up.cu stages x, and
// norm_gate_up.cu rmsnorm(x), in shared memory first): the rows of the
// expert a block's id names, computed as the fused dense kernel does
// (rows.cuh): one warp reads row i of both matrices, so gate and up are
// never stored. Only the chosen experts' weights are read.
//
// Four loads in flight per row (eight per warp) and at least four blocks per
// SM: the expert kernels run a few waves, not dozens, so occupancy matters
// more than loads per warp (ncu on an H200: 89 registers a thread held the
// rows.cuh default to two blocks per SM, 25 % occupancy, 50 % of DRAM).
#define MOE_UNROLL 4
#define MOE_BLOCKS_PER_SM 4

// out[row, j] = silu(gate[e] · staged) * (up[e] · staged), e = ids[row, j],
// for the input `staged` [hidden] f32 in shared memory. Every thread of the
// block must call it.
template <typename W>
__device__ void expert_gate_up(const float* staged, const u32* ids, const W* gate, const W* up, float* out, u32 row,
                               u32 j, u32 hidden, u32 expert_rows, u32 experts, u32 k) {
    const u32 expert = ids[(size_t)row * k + j];
    float* output = out + ((size_t)row * k + j) * expert_rows;
    if (expert >= experts) {
        // Not an expert the router can choose: nothing to read.
        for (u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < expert_rows; i += gridDim.x * blockDim.x)
            output[i] = 0.0f;
        return;
    }
    const W* gate_rows = gate + (size_t)expert * expert_rows * hidden;
    const W* up_rows = up + (size_t)expert * expert_rows * hidden;
    const bool packed = packed_rows(gate_rows, staged, hidden) && packed_rows(up_rows, staged, hidden);
    matvec_rows<W, 2, MOE_UNROLL>(
        expert_rows, hidden, staged, packed,
        [&](u32 i, const W** pointers) {
            pointers[0] = gate_rows + (size_t)i * hidden;
            pointers[1] = up_rows + (size_t)i * hidden;
        },
        [&](u32 i, const float* sums) { output[i] = silu(sums[0]) * sums[1]; });
}
