// The experts' gate/up + SiLU·mul with the RMSNorm before them fused in:
// each block stages rmsnorm(x[row]) * norm_weight in shared memory as the
// RMSNorm op computes it (rows.cuh's stage_normed), then computes the rows
// of the expert its id names (experts.cuh). A sparse layer's decode then
// needs no separate norm: the router's mat-vec normalises x itself too.
template <typename W>
__device__ void moe_norm_gate_up(const float* x, const W* norm_weight, const u32* ids, const W* gate, const W* up,
                                 float* out, u32 rows, u32 hidden, u32 expert_rows, u32 experts, u32 k, float eps) {
    extern __shared__ float4 staged_storage[];
    float* staged = (float*)staged_storage;
    const u32 row = blockIdx.z, j = blockIdx.y;
    if (row >= rows || j >= k) return;
    stage_normed(x + (size_t)row * hidden, norm_weight, eps, hidden, staged);
    expert_gate_up(staged, ids, gate, up, out, row, j, hidden, expert_rows, experts, k);
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
