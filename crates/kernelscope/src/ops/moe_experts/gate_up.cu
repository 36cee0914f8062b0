// The chosen experts' gate and up projections with SiLU·mul, read from the
// router's ids in device memory: block (g, j, row) stages x[row] in shared
// memory as f32, then its warps compute rows of expert ids[row, j] as the
// fused dense kernel does (rows.cuh): one warp reads row i of both
// matrices, so gate and up are never stored. Only the chosen experts'
// weights are read.
// Four loads in flight per row (eight per warp) and at least four blocks per
// SM: the expert kernels run a few waves, not dozens, so occupancy matters
// more than loads per warp (ncu on an H200: 89 registers a thread held the
// rows.cuh default to two blocks per SM, 25 % occupancy, 50 % of DRAM).
#define MOE_UNROLL 4
#define MOE_BLOCKS_PER_SM 4

template <typename W, typename X>
__device__ void moe_gate_up(const X* x, const u32* ids, const W* gate, const W* up, float* out, u32 rows,
                            u32 hidden, u32 expert_rows, u32 experts, u32 k) {
    extern __shared__ float4 staged_storage[];
    float* staged = (float*)staged_storage;
    const u32 row = blockIdx.z, j = blockIdx.y;
    if (row >= rows || j >= k) return;
    const X* input = x + (size_t)row * hidden;
    for (u32 i = threadIdx.x; i < hidden; i += blockDim.x) staged[i] = to_f32(input[i]);
    __syncthreads();
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
        // The same expression as the SiLU·mul op, so every path agrees.
        [&](u32 i, const float* sums) { output[i] = sums[0] / (1.0f + expf(-sums[0])) * sums[1]; });
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_gate_up_f32(const float* x, const u32* ids, const float* gate, const float* up, float* out, u32 rows, u32 hidden_size,
        u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_gate_up(x, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_gate_up_f16(const float* x, const u32* ids, const f16* gate, const f16* up, float* out, u32 rows, u32 hidden_size,
        u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_gate_up(x, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_gate_up_bf16(const float* x, const u32* ids, const bf16* gate, const bf16* up, float* out, u32 rows, u32 hidden_size,
        u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_gate_up(x, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_gate_up_narrow_f32(const float* x, const u32* ids, const float* gate, const float* up, float* out, u32 rows, u32 hidden_size,
        u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_gate_up(x, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_gate_up_narrow_f16(const f16* x, const u32* ids, const f16* gate, const f16* up, float* out, u32 rows, u32 hidden_size,
        u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_gate_up(x, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_gate_up_narrow_bf16(const bf16* x, const u32* ids, const bf16* gate, const bf16* up, float* out, u32 rows, u32 hidden_size,
        u32 expert_rows, u32 experts, u32 k) {
    wait_for_previous_kernel();
    moe_gate_up(x, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k);
}
