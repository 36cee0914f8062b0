// RMSNorm of each row of x [rows, n], one block per row (a single warp when
// n is small): the sum of squares reduced in f32, then x * scale * weight
// stored in the output's dtype, rounded to nearest even. Rows whose length
// is a multiple of 4 on aligned pointers move 4 elements per load and store,
// so a 4096-wide row is one float4 per thread of a 1024-thread block.
__device__ __forceinline__ void store4(float* p, const float v[4]) {
    float4 q;
    q.x = v[0]; q.y = v[1]; q.z = v[2]; q.w = v[3];
    *(float4*)p = q;
}
template <typename H>
__device__ __forceinline__ void store4_halves(H* p, const float v[4]) {
    H h[4];
    for (int j = 0; j < 4; ++j) from_f32(v[j], &h[j]);
    uint2 q;
    q.x = (u32)h[0].bits | ((u32)h[1].bits << 16);
    q.y = (u32)h[2].bits | ((u32)h[3].bits << 16);
    *(uint2*)p = q;
}
__device__ __forceinline__ void store4(bf16* p, const float v[4]) { store4_halves(p, v); }
__device__ __forceinline__ void store4(f16* p, const float v[4]) { store4_halves(p, v); }

template <typename W, typename O>
__device__ void rms_norm(const float* x, const W* weight, O* out, float eps, u32 n, u32 rows) {
    u32 row = blockIdx.x;
    // Uniform per block, so no thread is left waiting in block_sum.
    if (row >= rows) return;
    const float* source = x + (size_t)row * n;
    O* destination = out + (size_t)row * n;
    bool vector = n % 4 == 0 && (size_t)source % 16 == 0 && (size_t)weight % (4 * sizeof(W)) == 0 &&
                  (size_t)destination % (4 * sizeof(O)) == 0;
    float squares = 0.0f;
    if (vector) {
        for (u32 i = 4 * threadIdx.x; i < n; i += 4 * blockDim.x) {
            float v[4];
            load4(source + i, v);
            squares += v[0] * v[0] + v[1] * v[1] + v[2] * v[2] + v[3] * v[3];
        }
    } else {
        for (u32 i = threadIdx.x; i < n; i += blockDim.x) squares += source[i] * source[i];
    }
    float scale = rsqrtf(block_sum(squares) / n + eps);
    if (vector) {
        for (u32 i = 4 * threadIdx.x; i < n; i += 4 * blockDim.x) {
            float v[4], w[4];
            load4(source + i, v);
            load4(weight + i, w);
            for (int j = 0; j < 4; ++j) v[j] = v[j] * scale * w[j];
            store4(destination + i, v);
        }
    } else {
        for (u32 i = threadIdx.x; i < n; i += blockDim.x) from_f32(source[i] * scale * to_f32(weight[i]), destination + i);
    }
}

extern "C" __global__ void rms_norm_f32(const float* x, const float* weight, float* out, float eps, u32 n, u32 rows) {
    wait_for_previous_kernel();
    rms_norm(x, weight, out, eps, n, rows);
}
extern "C" __global__ void rms_norm_f16(const float* x, const f16* weight, float* out, float eps, u32 n, u32 rows) {
    wait_for_previous_kernel();
    rms_norm(x, weight, out, eps, n, rows);
}
extern "C" __global__ void rms_norm_bf16(const float* x, const bf16* weight, float* out, float eps, u32 n, u32 rows) {
    wait_for_previous_kernel();
    rms_norm(x, weight, out, eps, n, rows);
}
extern "C" __global__ void rms_norm_f16_f16(const float* x, const f16* weight, f16* out, float eps, u32 n, u32 rows) {
    wait_for_previous_kernel();
    rms_norm(x, weight, out, eps, n, rows);
}
extern "C" __global__ void rms_norm_bf16_bf16(const float* x, const bf16* weight, bf16* out, float eps, u32 n,
                                              u32 rows) {
    wait_for_previous_kernel();
    rms_norm(x, weight, out, eps, n, rows);
}
// f32 weights (a GGUF file's norms), bf16 output: the input of prefill's
// GEMMs over quantized weights, which run on bf16 tensor cores.
extern "C" __global__ void rms_norm_f32_bf16(const float* x, const float* weight, bf16* out, float eps, u32 n,
                                             u32 rows) {
    wait_for_previous_kernel();
    rms_norm(x, weight, out, eps, n, rows);
}
