// Adds each row's k expert outputs, weighted, into the residual stream:
// hidden[row][r] += Σ_j weights[row, j] · expert_out[position[row, j]][r],
// summed in order of j. A block per row; each element written by one thread.
extern "C" __global__ void moe_combine_f32(const float* expert_out, const u32* position, const float* weights,
                                           float* hidden, u32 rows, u32 width, u32 k) {
    wait_for_previous_kernel();
    const u32 row = blockIdx.x;
    if (row >= rows) return;
    for (u32 r = threadIdx.x; r < width; r += blockDim.x) {
        float total = 0.0f;
        for (u32 j = 0; j < k; ++j)
            total += weights[(size_t)row * k + j] * expert_out[(size_t)position[(size_t)row * k + j] * width + r];
        hidden[(size_t)row * width + r] += total;
    }
}
