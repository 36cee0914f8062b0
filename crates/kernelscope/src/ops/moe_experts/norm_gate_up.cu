// The experts' gate/up + SiLU·mul with the RMSNorm before them fused in:
// each block stages rmsnorm(x[row]) * norm_weight in shared memory as the
// RMSNorm op computes it (rows.cuh's stage_normed), then runs the chosen
// expert's rows as gate_up.cu does. A sparse layer's decode then needs no
// separate norm: the router's mat-vec normalises x itself too.
// As gate_up.cu: fewer loads per warp, more blocks per SM.
#define MOE_UNROLL 4
#define MOE_BLOCKS_PER_SM 4

template <typename W>
__device__ void moe_norm_gate_up(const float* x, const W* norm_weight, const u32* ids, const W* gate, const W* up,
                                 float* out, u32 rows, u32 hidden, u32 expert_rows, u32 experts, u32 k, float eps) {
    extern __shared__ float4 staged_storage[];
    float* staged = (float*)staged_storage;
    const u32 row = blockIdx.z, j = blockIdx.y;
    if (row >= rows || j >= k) return;
    stage_normed(x + (size_t)row * hidden, norm_weight, eps, hidden, staged);
    const u32 expert = ids[(size_t)row * k + j];
    float* output = out + ((size_t)row * k + j) * expert_rows;
    if (expert >= experts) {
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
        [&](u32 i, const float* sums) { output[i] = sums[0] / (1.0f + expf(-sums[0])) * sums[1]; });
}

extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_norm_gate_up_f32(const float* x, const float* norm_weight, const u32* ids, const float* gate,
                         const float* up, float* out, u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k,
                         float eps) {
    wait_for_previous_kernel();
    moe_norm_gate_up(x, norm_weight, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k, eps);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_norm_gate_up_f16(const float* x, const f16* norm_weight, const u32* ids, const f16* gate, const f16* up,
                         float* out, u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k, float eps) {
    wait_for_previous_kernel();
    moe_norm_gate_up(x, norm_weight, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k, eps);
}
extern "C" __global__ void __launch_bounds__(MATVEC_THREADS, MOE_BLOCKS_PER_SM)
    moe_norm_gate_up_bf16(const float* x, const bf16* norm_weight, const u32* ids, const bf16* gate, const bf16* up,
                          float* out, u32 rows, u32 hidden_size, u32 expert_rows, u32 experts, u32 k, float eps) {
    wait_for_previous_kernel();
    moe_norm_gate_up(x, norm_weight, ids, gate, up, out, rows, hidden_size, expert_rows, experts, k, eps);
}
