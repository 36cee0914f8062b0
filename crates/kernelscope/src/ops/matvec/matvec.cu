// Mat-vec: one warp per output row. Rows whose length is a multiple of 8
// (and 16-byte aligned) are read 16 bytes per lane per step, so a warp
// streams 512 bytes at a time; other shapes take the scalar loop.
__device__ __forceinline__ float dot8(uint4 packed, const float* x, bf16) {
    const u32 words[4] = {packed.x, packed.y, packed.z, packed.w};
    float sum = 0.0f;
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        sum += __uint_as_float(words[j] << 16) * x[2 * j];
        sum += __uint_as_float(words[j] & 0xffff0000u) * x[2 * j + 1];
    }
    return sum;
}

__device__ __forceinline__ float dot8(uint4 packed, const float* x, f16) {
    const u32 words[4] = {packed.x, packed.y, packed.z, packed.w};
    float sum = 0.0f;
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        f16 low = {(unsigned short)(words[j] & 0xffffu)}, high = {(unsigned short)(words[j] >> 16)};
        sum += to_f32(low) * x[2 * j] + to_f32(high) * x[2 * j + 1];
    }
    return sum;
}

template <typename W>
__device__ float row_dot(const W* row, const float* x, u32 k) {
    int lane = threadIdx.x & 31;
    float sum = 0.0f;
    bool vector = sizeof(W) == 2 && (k % 8 == 0) && ((size_t)row % 16 == 0) && ((size_t)x % 16 == 0);
    if (vector) {
        const uint4* packed = (const uint4*)row;
        for (u32 i = lane; i < k / 8; i += 32) {
            float chunk[8];
            float4 a = ((const float4*)x)[2 * i], b = ((const float4*)x)[2 * i + 1];
            chunk[0] = a.x; chunk[1] = a.y; chunk[2] = a.z; chunk[3] = a.w;
            chunk[4] = b.x; chunk[5] = b.y; chunk[6] = b.z; chunk[7] = b.w;
            sum += dot8(packed[i], chunk, W());
        }
    } else {
        for (u32 i = lane; i < k; i += 32) sum += to_f32(row[i]) * x[i];
    }
    return warp_sum(sum);
}

__device__ float row_dot(const float* row, const float* x, u32 k) {
    int lane = threadIdx.x & 31;
    float sum = 0.0f;
    if (k % 4 == 0 && (size_t)row % 16 == 0 && (size_t)x % 16 == 0) {
        for (u32 i = lane; i < k / 4; i += 32) {
            float4 w = ((const float4*)row)[i], v = ((const float4*)x)[i];
            sum += w.x * v.x + w.y * v.y + w.z * v.z + w.w * v.w;
        }
    } else {
        for (u32 i = lane; i < k; i += 32) sum += row[i] * x[i];
    }
    return warp_sum(sum);
}

template <typename W>
__device__ void matvec(const W* weight, const float* x, float* out, u32 n, u32 k) {
    u32 row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= n) return;
    float sum = row_dot(weight + (size_t)row * k, x, k);
    if ((threadIdx.x & 31) == 0) out[row] = sum;
}

extern "C" __global__ void matvec_f32(const float* weight, const float* x, float* out, u32 n, u32 k) {
    matvec(weight, x, out, n, k);
}
extern "C" __global__ void matvec_f16(const f16* weight, const float* x, float* out, u32 n, u32 k) {
    matvec(weight, x, out, n, k);
}
extern "C" __global__ void matvec_bf16(const bf16* weight, const float* x, float* out, u32 n, u32 k) {
    matvec(weight, x, out, n, k);
}
