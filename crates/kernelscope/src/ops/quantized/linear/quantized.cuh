// Decode-time products over block-quantized weights (GGUF's Q4_0 ... Q6_K)
// on CUDA, reading the blocks in place: no dequantized copy of a matrix
// ever exists. Rows are laid out in planes (`quant::planes`): each field of
// every block of a row stored together (all the 4-bit values, then all the
// scales), so the values of a block are read with 16-byte loads whatever the
// block's size, and the row is padded to 16 bytes.
//
// Activations: x is quantized (after RMSNorm where the op normalises) to
// 8-bit blocks of 32, with each block's scale and scaled sum, as llama.cpp's
// q8_1 does: once per product into global memory for decode's fused kernels
// (stage.cu), by each block of threads into its shared memory for the
// unfused mat-vec and short prefill chunks (`stage_activations`); the weight blocks
// are then multiplied with dp4a (four 8-bit products per instruction) and
// scaled once per block. Dequantizing 4-bit weights to f32 and multiplying
// in floats costs about four times the instructions per byte, which at
// Hopper's bandwidth makes the kernel compute-bound; the 8-bit activation
// error (at most half a step of 1/127 of each block's largest value) is
// what llama.cpp runs with.
//
// This file holds what every format shares: the loads, x staged as 8-bit
// blocks and the integer dot products; formats.cuh the formats themselves,
// products.cuh the row loops and kernel bodies (chunked.cuh those whose
// blocks quantize their own output), which kernels.cu
// instantiates per format, its `{format}` and `{Format}` replaced by the
// format's name and struct (`q4_k`, `Q4_K`).
typedef unsigned char u8;

#define QUANT_THREADS 256
#define QUANT_WARPS (QUANT_THREADS / 32)
// Rows a warp reads at once in the one-matrix kernels (`GROUP` below; gate
// and up already read two): quantized::linear::ROWS_PER_WARP in Rust, which
// sizes the grid by it. One: two measured slower on an H100 (llama-3.2-1b
// Q4_K_M 1,063 against 1,109 tok/s; the 8B's q/k/v 15.8 against 13.8 µs),
// as halving the grid halved the SMs streaming the small matrices.
#define MATVEC_GROUP 1

// Weight values stream through once per token: 16-byte loads that skip L1.
__device__ __forceinline__ uint4 stream16(const u8* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}
// Scales and other small fields, shared by neighbouring lanes: cached loads.
__device__ __forceinline__ u32 field32(const u8* p) { return __ldg((const unsigned int*)p); }
__device__ __forceinline__ u32 field16(const u8* p) { return __ldg((const unsigned short*)p); }
// Where a format's `load` reads a unit's bytes from: global memory (the
// loads above), or a row the streaming loops (streamed.cuh) copied into
// shared memory.
struct FromGlobal {
    __device__ static __forceinline__ uint4 stream16(const u8* p) { return ::stream16(p); }
    __device__ static __forceinline__ uint4 cached16(const u8* p) { return __ldg((const uint4*)p); }
    __device__ static __forceinline__ u32 field32(const u8* p) { return ::field32(p); }
    __device__ static __forceinline__ u32 field16(const u8* p) { return ::field16(p); }
};
// Plain loads: the streaming loop's pointers derive from its shared array,
// so the compiler emits shared loads, ordered after the slot's wait (an
// asm with a memory clobber), and free to share x's loads between rows.
struct FromShared {
    __device__ static __forceinline__ uint4 stream16(const u8* p) { return *(const uint4*)p; }
    __device__ static __forceinline__ uint4 cached16(const u8* p) { return *(const uint4*)p; }
    __device__ static __forceinline__ u32 field32(const u8* p) { return *(const u32*)p; }
    __device__ static __forceinline__ u32 field16(const u8* p) { return *(const unsigned short*)p; }
};
__device__ __forceinline__ float half_to_float(u32 bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(bits & 0xffffu)));
    return f;
}

// x quantized in shared memory: k int8 values, and per block of 32 its scale
// and its scale times the sum of its values (the sum of the block's x as
// the products see it, for the formats with a minimum or an offset).
struct Staged {
    const signed char* values;
    const float* scales;
    const float* sums;
};
__device__ __forceinline__ int4 staged16(const Staged& x, u32 offset) {
    return *(const int4*)(x.values + offset);
}

// Shared memory of a block staging k activations.
__device__ __forceinline__ u32 staged_bytes(u32 k) { return k + 8 * (k / 32); }

// The larger of two magnitudes, NaN where either is: fmaxf drops a NaN,
// and a block holding one would quantize to numbers (its NaN lost); with a
// NaN scale every product over the block is NaN, as in f32.
// Ampere and later have it as one instruction (`max.NaN`), as cheap as
// fmaxf: the two tests and selects before it cost 1.4 % of 1B Q4_K_M
// decode on an H200.
__device__ __forceinline__ float larger_keeping_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
    float larger;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(larger) : "f"(a), "f"(b));
    return larger;
#else
    return isnan(a) ? a : (isnan(b) ? b : fmaxf(a, b));
#endif
}

// Quantizes the four values `v` of a lane to 8 bits within their block of
// 32 (eight neighbouring lanes, aligned, hold one block): returns the four
// as packed bytes, and sets the block's scale (largest / 127) and its scale
// times the sum of its quantized values. Every lane of the warp calls it.
__device__ __forceinline__ u32 quantize_four(float4 v, float* scale, float* scaled_sum) {
    float largest = larger_keeping_nan(larger_keeping_nan(fabsf(v.x), fabsf(v.y)),
                                       larger_keeping_nan(fabsf(v.z), fabsf(v.w)));
    for (int offset = 4; offset > 0; offset >>= 1)
        largest = larger_keeping_nan(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    *scale = largest / 127.0f;
    const float inverse = *scale != 0.0f ? 1.0f / *scale : 0.0f;
    const int q0 = (int)roundf(v.x * inverse), q1 = (int)roundf(v.y * inverse);
    const int q2 = (int)roundf(v.z * inverse), q3 = (int)roundf(v.w * inverse);
    int sum = q0 + q1 + q2 + q3;
    for (int offset = 4; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    *scaled_sum = *scale * (float)sum;
    return (q0 & 0xff) | ((q1 & 0xff) << 8) | ((q2 & 0xff) << 16) | ((u32)(q3 & 0xff) << 24);
}

// x as `Staged` at `storage` (shared or global memory): k values, then the
// k / 32 scales, then the k / 32 scaled sums (`staged_bytes(k)` in all).
__device__ __forceinline__ Staged staged_at(const u8* storage, u32 k) {
    const float* scales = (const float*)(storage + k);
    return Staged{(const signed char*)storage, scales, scales + k / 32};
}

// Quantizes x into shared memory as `Staged`, eight lanes per block of 32,
// four values each: the unfused mat-vec and the short prefill chunks, whose
// x no other kernel quantized. Every thread of the block must call it; the
// staged vector is complete when it returns. k is a multiple of 32 (every
// format's block is).
__device__ Staged stage_activations(const float* x, u32 k, u8* storage) {
    signed char* values = (signed char*)storage;
    float* scales = (float*)(storage + k);
    float* sums = scales + k / 32;
    const u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const u32 blocks = k / 32;
    // STAGE_UNROLL passes' loads are issued before any is used: one pass at a
    // time, each waiting on its L2 read, left a 14,336-element x (down_proj)
    // a serial chain of 14 reads per warp before any weight was read.
    constexpr u32 STAGE_UNROLL = 4;
    for (u32 first = warp * 4; first < blocks; first += warps * 4 * STAGE_UNROLL) {
        float4 loaded[STAGE_UNROLL];
        #pragma unroll
        for (u32 u = 0; u < STAGE_UNROLL; ++u) {
            const u32 block = first + u * warps * 4 + lane / 8, at = block * 32 + (lane % 8) * 4;
            loaded[u] = block < blocks ? *(const float4*)(x + at) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        #pragma unroll
        for (u32 u = 0; u < STAGE_UNROLL; ++u) {
            const u32 block = first + u * warps * 4 + lane / 8, at = block * 32 + (lane % 8) * 4;
            float scale, sum;
            const u32 packed = quantize_four(loaded[u], &scale, &sum);
            if (block < blocks) {
                *(u32*)(values + at) = packed;
                if (lane % 8 == 0) {
                    scales[block] = scale;
                    sums[block] = sum;
                }
            }
        }
    }
    __syncthreads();
    return Staged{values, scales, sums};
}

__device__ __forceinline__ int dot16(uint4 weights, int4 x, int sum) {
    sum = __dp4a((int)weights.x, x.x, sum);
    sum = __dp4a((int)weights.y, x.y, sum);
    sum = __dp4a((int)weights.z, x.z, sum);
    return __dp4a((int)weights.w, x.w, sum);
}
__device__ __forceinline__ uint4 low_nibbles(uint4 q) {
    return make_uint4(q.x & 0x0f0f0f0fu, q.y & 0x0f0f0f0fu, q.z & 0x0f0f0f0fu, q.w & 0x0f0f0f0fu);
}
__device__ __forceinline__ uint4 high_nibbles(uint4 q) {
    return make_uint4((q.x >> 4) & 0x0f0f0f0fu, (q.y >> 4) & 0x0f0f0f0fu, (q.z >> 4) & 0x0f0f0f0fu,
                      (q.w >> 4) & 0x0f0f0f0fu);
}
// Bit 4 of each byte of the four values of word `i` of a 32-value block
// whose fifth bits are `high` (bit e for value e), `first` the first value.
__device__ __forceinline__ u32 fifth_bits(u32 high, u32 first) {
    const u32 h = high >> first;
    return ((h << 4) & 0x10u) | ((h << 11) & 0x1000u) | ((h << 18) & 0x100000u) | ((h << 25) & 0x10000000u);
}
__device__ __forceinline__ uint4 with_fifth_bits(uint4 q, u32 high, u32 first) {
    return make_uint4(q.x | fifth_bits(high, first), q.y | fifth_bits(high, first + 4),
                      q.z | fifth_bits(high, first + 8), q.w | fifth_bits(high, first + 12));
}
__device__ __forceinline__ u32 nibble(const u8* qs, u32 e) {
    return e < 16 ? qs[e] & 0xfu : qs[e - 16] >> 4;
}
