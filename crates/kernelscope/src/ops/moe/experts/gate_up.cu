// The chosen experts' gate and up projections with SiLU·mul, read from the
// router's ids in device memory: block (g, j, row) stages x[row] in shared
// memory as f32, then computes rows of expert ids[row, j] (experts.cuh).
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
    expert_gate_up(staged, ids, gate, up, out, row, j, hidden, expert_rows, experts, k);
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
