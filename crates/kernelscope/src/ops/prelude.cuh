// Shared by every kernel source (prepended at registration): the weight
// element types as 16-bit storage with explicit widening, so no CUDA header
// is needed under NVRTC, and warp/block reductions.
typedef unsigned int u32;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
struct bf16 { unsigned short bits; };
struct f16 { unsigned short bits; };

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16 x) { return __uint_as_float(((u32)x.bits) << 16); }
__device__ __forceinline__ float to_f32(f16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}

// Narrowing stores, round to nearest even as torch's `.to(dtype)` does, so
// an activation written in the weights' dtype (a GEMM's input, a bf16 KV
// cache) holds what PyTorch would hold. NaN stays NaN.
__device__ __forceinline__ void from_f32(float value, float* out) { *out = value; }
__device__ __forceinline__ void from_f32(float value, bf16* out) {
    u32 bits = __float_as_uint(value);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        out->bits = (unsigned short)((bits >> 16) | 0x40u);
        return;
    }
    bits += 0x7fffu + ((bits >> 16) & 1u);
    out->bits = (unsigned short)(bits >> 16);
}
__device__ __forceinline__ void from_f32(float value, f16* out) {
    unsigned short bits;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
    out->bits = bits;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ float block_sum(float v) {
    __shared__ float partial[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.0f;
        w = warp_sum(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    float result = total;
    __syncthreads();
    return result;
}

__device__ float block_max(float v) {
    __shared__ float partial[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_max(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < (int)(blockDim.x >> 5) ? partial[lane] : -INFINITY;
        w = warp_max(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    float result = total;
    __syncthreads();
    return result;
}

// The first index of the largest non-NaN value of values[0..n) (0 when there
// is none), and that value through `best_value`, for every thread of the
// block (blockDim.x a multiple of 32, at most 1024). Ties go to the smaller
// index, as torch.argmax.
__device__ u32 block_argmax(const float* values, u32 n, float* best_value) {
    __shared__ float best_values[32];
    __shared__ u32 best_indices[32];
    float best = -INFINITY;
    u32 best_index = 0xffffffffu;
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
        float v = values[i];
        if (v > best || (best_index == 0xffffffffu && !isnan(v))) { best = v; best_index = i; }
    }
    for (int round = 0; round < 2; ++round) {
        for (int offset = 16; offset > 0; offset >>= 1) {
            float other = __shfl_xor_sync(0xffffffffu, best, offset);
            u32 other_index = __shfl_xor_sync(0xffffffffu, best_index, offset);
            if (other > best || (other == best && other_index < best_index)) { best = other; best_index = other_index; }
        }
        if (round == 1) break;
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0) { best_values[warp] = best; best_indices[warp] = best_index; }
        __syncthreads();
        int warps = blockDim.x >> 5;
        best = lane < warps ? best_values[lane] : -INFINITY;
        best_index = lane < warps ? best_indices[lane] : 0xffffffffu;
        __syncthreads();
    }
    // After the second round every warp holds the block's answer.
    *best_value = best;
    return best_index == 0xffffffffu ? 0 : best_index;
}
