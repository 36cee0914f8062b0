// Decode-time products over block-quantized weights (GGUF's Q4_0 ... Q6_K)
// on CUDA, reading the blocks in place: no dequantized copy of a matrix
// ever exists. Rows are laid out in planes (`quant::planes`): each field of
// every block of a row stored together (all the 4-bit values, then all the
// scales), so the values of a block are read with 16-byte loads whatever the
// block's size, and the row is padded to 16 bytes.
//
// Activations: each block of threads first quantizes x (after RMSNorm, in
// the fused kernels) to 8-bit blocks of 32 in shared memory, with each
// block's scale and scaled sum, as llama.cpp's q8_1 does; the weight blocks
// are then multiplied with dp4a (four 8-bit products per instruction) and
// scaled once per block. Dequantizing 4-bit weights to f32 and multiplying
// in floats costs about four times the instructions per byte, which at
// Hopper's bandwidth makes the kernel compute-bound; the 8-bit activation
// error (at most half a step of 1/127 of each block's largest value) is
// what llama.cpp runs with.
//
// Each format is a struct: UNITS work units per block, one unit the values
// one lane multiplies at a time (loaded first, all of an unrolled batch in
// flight, then multiplied), and the per-element dequantization the
// embedding and prefill kernels use. A format's kernels are instantiated
// from kernels.cu, its `{format}` and `{Format}` replaced by the format's
// name and struct (`q4_k`, `Q4_K`).
typedef unsigned char u8;

#define QUANT_THREADS 256
#define QUANT_WARPS (QUANT_THREADS / 32)
// Rows a warp reads at once in the one-matrix kernels (`GROUP` below; gate
// and up already read two): quantized_linear::ROWS_PER_WARP in Rust, which
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

// Quantizes the four values `v` of a lane to 8 bits within their block of
// 32 (eight neighbouring lanes, aligned, hold one block): returns the four
// as packed bytes, and sets the block's scale (largest / 127) and its scale
// times the sum of its quantized values. Every lane of the warp calls it.
__device__ __forceinline__ u32 quantize_four(float4 v, float* scale, float* scaled_sum) {
    float largest = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    for (int offset = 4; offset > 0; offset >>= 1)
        largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
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

// ---- 32-element formats: one unit is one block ----------------------------

// Q4_0 planes: qs (16), d (2). Value = d * (q - 8).
struct Q4_0 {
    static constexpr u32 BLOCK = 32, BYTES = 18, UNITS = 1, UNROLL = 4;
    struct Unit { uint4 qs; u32 d; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{stream16(row + unit * 16), field16(row + blocks * 16 + unit * 2)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(low_nibbles(u.qs), staged16(x, unit * 32), 0);
        sum = dot16(high_nibbles(u.qs), staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.d) * (x.scales[unit] * (float)sum - 8.0f * x.sums[unit]);
    }
    __device__ static float value(const u8* row, u32 blocks, u32 e) {
        const u32 b = e / 32;
        return half_to_float(field16(row + blocks * 16 + b * 2)) * ((float)nibble(row + b * 16, e % 32) - 8.0f);
    }
};

// Q4_1 planes: qs (16), d and m (4). Value = d * q + m.
struct Q4_1 {
    static constexpr u32 BLOCK = 32, BYTES = 20, UNITS = 1, UNROLL = 4;
    struct Unit { uint4 qs; u32 dm; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{stream16(row + unit * 16), field32(row + blocks * 16 + unit * 4)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(low_nibbles(u.qs), staged16(x, unit * 32), 0);
        sum = dot16(high_nibbles(u.qs), staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.dm) * x.scales[unit] * (float)sum + half_to_float(u.dm >> 16) * x.sums[unit];
    }
    __device__ static float value(const u8* row, u32 blocks, u32 e) {
        const u32 b = e / 32, dm = field32(row + blocks * 16 + b * 4);
        return half_to_float(dm) * (float)nibble(row + b * 16, e % 32) + half_to_float(dm >> 16);
    }
};

// Q5_0 planes: qs (16), qh (4), d (2). Value = d * ((q | h << 4) - 16).
struct Q5_0 {
    static constexpr u32 BLOCK = 32, BYTES = 22, UNITS = 1, UNROLL = 4;
    struct Unit { uint4 qs; u32 qh, d; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{stream16(row + unit * 16), field32(row + blocks * 16 + unit * 4),
                    field16(row + blocks * 20 + unit * 2)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(with_fifth_bits(low_nibbles(u.qs), u.qh, 0), staged16(x, unit * 32), 0);
        sum = dot16(with_fifth_bits(high_nibbles(u.qs), u.qh, 16), staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.d) * (x.scales[unit] * (float)sum - 16.0f * x.sums[unit]);
    }
    __device__ static float value(const u8* row, u32 blocks, u32 e) {
        const u32 b = e / 32, high = (field32(row + blocks * 16 + b * 4) >> (e % 32)) & 1u;
        const float q = (float)(nibble(row + b * 16, e % 32) | (high << 4));
        return half_to_float(field16(row + blocks * 20 + b * 2)) * (q - 16.0f);
    }
};

// Q5_1 planes: qs (16), qh (4), d and m (4). Value = d * (q | h << 4) + m.
struct Q5_1 {
    static constexpr u32 BLOCK = 32, BYTES = 24, UNITS = 1, UNROLL = 4;
    struct Unit { uint4 qs; u32 qh, dm; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{stream16(row + unit * 16), field32(row + blocks * 16 + unit * 4),
                    field32(row + blocks * 20 + unit * 4)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(with_fifth_bits(low_nibbles(u.qs), u.qh, 0), staged16(x, unit * 32), 0);
        sum = dot16(with_fifth_bits(high_nibbles(u.qs), u.qh, 16), staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.dm) * x.scales[unit] * (float)sum + half_to_float(u.dm >> 16) * x.sums[unit];
    }
    __device__ static float value(const u8* row, u32 blocks, u32 e) {
        const u32 b = e / 32, high = (field32(row + blocks * 16 + b * 4) >> (e % 32)) & 1u;
        const u32 dm = field32(row + blocks * 20 + b * 4);
        return half_to_float(dm) * (float)(nibble(row + b * 16, e % 32) | (high << 4)) + half_to_float(dm >> 16);
    }
};

// Q8_0 planes: qs (32), d (2). Value = d * q.
struct Q8_0 {
    static constexpr u32 BLOCK = 32, BYTES = 34, UNITS = 1, UNROLL = 4;
    struct Unit { uint4 low, high; u32 d; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{stream16(row + unit * 32), stream16(row + unit * 32 + 16), field16(row + blocks * 32 + unit * 2)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(u.low, staged16(x, unit * 32), 0);
        sum = dot16(u.high, staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.d) * x.scales[unit] * (float)sum;
    }
    __device__ static float value(const u8* row, u32 blocks, u32 e) {
        const u32 b = e / 32;
        return half_to_float(field16(row + blocks * 32 + b * 2)) * (float)(signed char)row[b * 32 + e % 32];
    }
};

// ---- 256-element K-quants --------------------------------------------------

// The 6-bit scales and minimums of sub-blocks 2j and 2j + 1 of a Q4_K/Q5_K
// block (ggml's get_scale_min_k4, two at a time as llama.cpp's CUDA does):
// byte 0 of each result for sub-block 2j, byte 1 for 2j + 1.
__device__ __forceinline__ void k4_scales(const u8* scales, u32 j, u32* scale_pair, u32* min_pair) {
    const u32 first = field16(scales + 2 * j), second = field16(scales + 2 * j + 4);
    if (j < 2) {
        *scale_pair = first & 0x3f3fu;
        *min_pair = second & 0x3f3fu;
    } else {
        const u32 earlier = field16(scales + 2 * j - 4);
        *scale_pair = (second & 0x0f0fu) | ((earlier & 0xc0c0u) >> 2);
        *min_pair = ((second >> 4) & 0x0f0fu) | ((first & 0xc0c0u) >> 2);
    }
}

// A Q4_K/Q5_K unit's share of the row's sum: its two sub-blocks' integer
// dots (`low` with x block `low_block`, `high` with the next) times d, their
// 6-bit scales and x's scales, less dmin times their minimums times x's
// block sums, once per pair (by the unit of half h = 0).
__device__ __forceinline__ float k4_unit_sum(u32 dm, u32 scale_pair, u32 min_pair, int low, int high, u32 h,
                                             u32 low_block, const Staged& x) {
    float sum = half_to_float(dm) * ((float)(scale_pair & 0xffu) * x.scales[low_block] * (float)low +
                                     (float)(scale_pair >> 8) * x.scales[low_block + 1] * (float)high);
    if (h == 0)
        sum -= half_to_float(dm >> 16) *
               ((float)(min_pair & 0xffu) * x.sums[low_block] + (float)(min_pair >> 8) * x.sums[low_block + 1]);
    return sum;
}

// One Q4_K/Q5_K value q of the pair's sub-block `upper` (0: the first):
// d * scale * q - dmin * min.
__device__ __forceinline__ float k4_value(u32 dm, u32 scale_pair, u32 min_pair, u32 upper, u32 q) {
    const u32 shift = 8 * upper;
    return half_to_float(dm) * (float)((scale_pair >> shift) & 0xffu) * (float)q -
           half_to_float(dm >> 16) * (float)((min_pair >> shift) & 0xffu);
}

// Q4_K planes: qs (128), scales (12), d and dmin (4). Unit v of a block is
// pair j = v / 2 of sub-blocks (2j, 2j + 1), half h = v % 2 of their 32
// bytes: 16 low nibbles of sub-block 2j and 16 high nibbles of 2j + 1.
// Value = d * scale * q - dmin * min.
struct Q4_K {
    static constexpr u32 BLOCK = 256, BYTES = 144, UNITS = 8, UNROLL = 4;
    struct Unit { uint4 qs; u32 dm, scale_pair, min_pair; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        const u32 block = unit / 8, j = (unit % 8) / 2;
        Unit u;
        u.qs = stream16(row + unit * 16);
        u.dm = field32(row + blocks * 140 + block * 4);
        k4_scales(row + blocks * 128 + block * 12, j, &u.scale_pair, &u.min_pair);
        return u;
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        const u32 v = unit % 8, h = v % 2, low_block = (unit / 8) * 8 + (v / 2) * 2;
        const int low = dot16(low_nibbles(u.qs), staged16(x, low_block * 32 + h * 16), 0);
        const int high = dot16(high_nibbles(u.qs), staged16(x, (low_block + 1) * 32 + h * 16), 0);
        return k4_unit_sum(u.dm, u.scale_pair, u.min_pair, low, high, h, low_block, x);
    }
    __device__ static float value(const u8* row, u32 blocks, u32 e) {
        const u32 block = e / 256, within = e % 256, j = within / 64, l = within % 32, upper = (within % 64) / 32;
        u32 scale_pair, min_pair;
        k4_scales(row + blocks * 128 + block * 12, j, &scale_pair, &min_pair);
        const u8 byte = row[block * 128 + j * 32 + l];
        const u32 q = upper ? byte >> 4 : byte & 0xfu;
        const u32 dm = field32(row + blocks * 140 + block * 4);
        return k4_value(dm, scale_pair, min_pair, upper, q);
    }
};

// Q4_K read a pair of sub-blocks (32 bytes of values) a lane: the scales
// decoded, the minimums applied and the dots converted once per 64 values
// rather than per 32, the 6-bit scales multiplied into the integer dots.
// Fewer instructions per byte and fewer registers (80 against 106) for
// gate/up, which reads two matrices at once: llama-3-8b's 28.6 -> 26.8 µs
// with 3 blocks per SM (H200). Cached loads: the two halves of a lane's 32
// bytes are two 16-byte loads of the same lines.
struct Q4_K_Pairs {
    static constexpr u32 BLOCK = 256, BYTES = 144, UNITS = 4, UNROLL = 2;
    struct Unit { uint4 low_half, high_half; u32 dm, scale_pair, min_pair; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        Unit u;
        u.low_half = __ldg((const uint4*)(row + unit * 32));
        u.high_half = __ldg((const uint4*)(row + unit * 32 + 16));
        u.dm = field32(row + blocks * 140 + (unit / 4) * 4);
        k4_scales(row + blocks * 128 + (unit / 4) * 12, unit % 4, &u.scale_pair, &u.min_pair);
        return u;
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        const u32 low_block = (unit / 4) * 8 + (unit % 4) * 2;
        int low = dot16(low_nibbles(u.low_half), staged16(x, low_block * 32), 0);
        low = dot16(low_nibbles(u.high_half), staged16(x, low_block * 32 + 16), low);
        int high = dot16(high_nibbles(u.low_half), staged16(x, low_block * 32 + 32), 0);
        high = dot16(high_nibbles(u.high_half), staged16(x, low_block * 32 + 48), high);
        const float scaled = x.scales[low_block] * (float)((int)(u.scale_pair & 0xffu) * low) +
                             x.scales[low_block + 1] * (float)((int)(u.scale_pair >> 8) * high);
        const float minimum =
            (float)(u.min_pair & 0xffu) * x.sums[low_block] + (float)(u.min_pair >> 8) * x.sums[low_block + 1];
        return half_to_float(u.dm) * scaled - half_to_float(u.dm >> 16) * minimum;
    }
};
// The units gate/up read a format in: Q4_K's pairs, every other format its own.
template <typename F> struct GateUpUnits { using type = F; };
template <> struct GateUpUnits<struct Q4_K> { using type = Q4_K_Pairs; };

// Q5_K planes: qs (128), qh (32), scales (12), d and dmin (4). Units as
// Q4_K's; the fifth bit of value l of pair j is bit 2j (low) or 2j + 1
// (high) of qh[l].
struct Q5_K {
    static constexpr u32 BLOCK = 256, BYTES = 176, UNITS = 8, UNROLL = 4;
    struct Unit { uint4 qs, qh; u32 dm, scale_pair, min_pair; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        const u32 block = unit / 8, v = unit % 8;
        Unit u;
        u.qs = stream16(row + unit * 16);
        u.qh = stream16(row + blocks * 128 + block * 32 + (v % 2) * 16);
        u.dm = field32(row + blocks * 172 + block * 4);
        k4_scales(row + blocks * 160 + block * 12, v / 2, &u.scale_pair, &u.min_pair);
        return u;
    }
    __device__ static uint4 fifth(uint4 qh, u32 bit) {
        return make_uint4(((qh.x >> bit) & 0x01010101u) << 4, ((qh.y >> bit) & 0x01010101u) << 4,
                          ((qh.z >> bit) & 0x01010101u) << 4, ((qh.w >> bit) & 0x01010101u) << 4);
    }
    __device__ static uint4 merge(uint4 a, uint4 b) { return make_uint4(a.x | b.x, a.y | b.y, a.z | b.z, a.w | b.w); }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        const u32 v = unit % 8, h = v % 2, j = v / 2, low_block = (unit / 8) * 8 + j * 2;
        const int low = dot16(merge(low_nibbles(u.qs), fifth(u.qh, 2 * j)), staged16(x, low_block * 32 + h * 16), 0);
        const int high =
            dot16(merge(high_nibbles(u.qs), fifth(u.qh, 2 * j + 1)), staged16(x, (low_block + 1) * 32 + h * 16), 0);
        return k4_unit_sum(u.dm, u.scale_pair, u.min_pair, low, high, h, low_block, x);
    }
    __device__ static float value(const u8* row, u32 blocks, u32 e) {
        const u32 block = e / 256, within = e % 256, j = within / 64, l = within % 32, upper = (within % 64) / 32;
        u32 scale_pair, min_pair;
        k4_scales(row + blocks * 160 + block * 12, j, &scale_pair, &min_pair);
        const u8 byte = row[block * 128 + j * 32 + l];
        const u32 high = (row[blocks * 128 + block * 32 + l] >> (2 * j + upper)) & 1u;
        const u32 q = (upper ? byte >> 4 : byte & 0xfu) | (high << 4);
        const u32 dm = field32(row + blocks * 172 + block * 4);
        return k4_value(dm, scale_pair, min_pair, upper, q);
    }
};

// Q6_K planes: ql (128), qh (64), scales (16, signed), d (2). Unit v of a
// block is half n = v / 2 (128 values) and l in 16c .. 16c + 16 (c = v % 2):
// 64 values, l + 32t for t = 0..3, sub-block scale 8n + c + 2t.
// Value = d * scale * (q - 32).
struct Q6_K {
    static constexpr u32 BLOCK = 256, BYTES = 210, UNITS = 4, UNROLL = 2;
    struct Unit { uint4 low, high, qh; u32 scales_low, scales_high, d; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        const u32 block = unit / 4, v = unit % 4, n = v / 2, c = v % 2;
        const u8* ql = row + block * 128 + n * 64 + c * 16;
        const u8* scales = row + blocks * 192 + block * 16 + n * 8;
        return Unit{stream16(ql), stream16(ql + 32), stream16(row + blocks * 128 + block * 64 + n * 32 + c * 16),
                    field32(scales), field32(scales + 4), field16(row + blocks * 208 + block * 2)};
    }
    // The four 6-bit values of each byte quarter t, centred (q - 32).
    __device__ static u32 centred(u32 ql, u32 qh, u32 t) {
        const u32 low = (t & 2) ? (ql >> 4) & 0x0f0f0f0fu : ql & 0x0f0f0f0fu;
        const u32 high = ((qh >> (2 * t)) & 0x03030303u) << 4;
        return __vsubss4(low | high, 0x20202020u);
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        const u32 v = unit % 4, n = v / 2, c = v % 2, first_block = (unit / 4) * 8 + n * 4;
        float sum = 0.0f;
        #pragma unroll
        for (u32 t = 0; t < 4; ++t) {
            // t = 0: ql low nibbles, 1: ql[+32] low, 2: ql high, 3: ql[+32] high.
            const uint4 ql = (t & 1) ? u.high : u.low;
            const uint4 q = make_uint4(centred(ql.x, u.qh.x, t), centred(ql.y, u.qh.y, t), centred(ql.z, u.qh.z, t),
                                       centred(ql.w, u.qh.w, t));
            const int dot = dot16(q, staged16(x, (first_block + t) * 32 + c * 16), 0);
            const u32 scales = (t & 2) ? u.scales_high : u.scales_low;
            const float scale = (float)(signed char)((scales >> (8 * (c + 2 * (t & 1)))) & 0xffu);
            sum += scale * x.scales[first_block + t] * (float)dot;
        }
        return half_to_float(u.d) * sum;
    }
    __device__ static float value(const u8* row, u32 blocks, u32 e) {
        const u32 block = e / 256, within = e % 256, n = within / 128, l = within % 32, t = (within % 128) / 32;
        const u8 byte = row[block * 128 + n * 64 + (t & 1) * 32 + l];
        const u32 low = (t & 2) ? byte >> 4 : byte & 0xfu;
        const u32 high = (row[blocks * 128 + block * 64 + n * 32 + l] >> (2 * t)) & 3u;
        const int q = (int)(low | (high << 4)) - 32;
        const float scale = (float)(signed char)row[blocks * 192 + block * 16 + n * 8 + l / 16 + 2 * t];
        return half_to_float(field16(row + blocks * 208 + block * 2)) * scale * (float)q;
    }
};

// Bytes of a row of `blocks` blocks in planes, padded to 16
// (`quant::planes::planar_row_bytes`).
template <typename F>
__device__ __forceinline__ size_t planar_row_bytes(u32 blocks) {
    return ((size_t)blocks * F::BYTES + 15) / 16 * 16;
}

__device__ __forceinline__ u32 quant_uniform_warp() { return __shfl_sync(0xffffffffu, threadIdx.x >> 5, 0); }

// Asks L2 for the first GROUP weight rows this warp will read (of each of
// ROWS matrices), up to PREFETCH_LINES lines of 128 bytes a lane. Issued before
// x is staged: the weights do not depend on x, so DRAM streams them while
// the block quantizes x (which took as long as reading a small matrix).
#define PREFETCH_LINES 4
template <int ROWS, int GROUP, typename Pointers>
__device__ __forceinline__ void prefetch_first_rows(u32 n, size_t row_bytes, Pointers pointers) {
    const u32 first = blockIdx.x * QUANT_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    const u32 stride = gridDim.x * QUANT_WARPS;
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        const u32 row = first + g * stride;
        if (row >= n) return;
        const u8* rows[ROWS];
        pointers(row, rows);
        #pragma unroll
        for (int r = 0; r < ROWS; ++r)
            #pragma unroll
            for (u32 line = 0; line < PREFETCH_LINES; ++line) {
                const size_t at = ((size_t)line * 32 + lane) * 128;
                if (at < row_bytes) asm volatile("prefetch.global.L2 [%0];" ::"l"(rows[r] + at));
            }
    }
}

// The row loop of every quantized mat-vec: warps take GROUP rows at a time
// grid-stride (row, row + stride, ...), each of ROWS matrices (gate and up
// read together) named by `pointers(row, rows)`; the lanes walk the rows'
// units with UNROLL units of every row in flight, and lane 0 runs
// `store(row, sums)` for each (GROUP rows in flight per warp, for tuning).
template <typename F, int ROWS, int GROUP, typename Pointers, typename Store>
__device__ __forceinline__ void quantized_rows(u32 n, u32 blocks, const Staged& x, Pointers pointers, Store store) {
    const u32 warp = quant_uniform_warp(), lane = threadIdx.x & 31;
    const u32 units = blocks * F::UNITS, stride = gridDim.x * QUANT_WARPS;
    for (u32 row = blockIdx.x * QUANT_WARPS + warp; row < n; row += stride * GROUP) {
        const u8* rows[GROUP][ROWS];
        bool live[GROUP];
        float sums[GROUP][ROWS];
        #pragma unroll
        for (int g = 0; g < GROUP; ++g) {
            live[g] = row + g * stride < n;
            if (live[g]) pointers(row + g * stride, rows[g]);
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) sums[g][r] = 0.0f;
        }
        for (u32 base = 0; base < units; base += 32 * F::UNROLL) {
            typename F::Unit loaded[GROUP][ROWS][F::UNROLL];
            #pragma unroll
            for (u32 u = 0; u < F::UNROLL; ++u) {
                const u32 unit = base + u * 32 + lane;
                #pragma unroll
                for (int g = 0; g < GROUP; ++g)
                    if (unit < units && live[g]) {
                        #pragma unroll
                        for (int r = 0; r < ROWS; ++r) loaded[g][r][u] = F::load(rows[g][r], blocks, unit);
                    }
            }
            #pragma unroll
            for (u32 u = 0; u < F::UNROLL; ++u) {
                const u32 unit = base + u * 32 + lane;
                #pragma unroll
                for (int g = 0; g < GROUP; ++g)
                    if (unit < units && live[g]) {
                        #pragma unroll
                        for (int r = 0; r < ROWS; ++r) sums[g][r] += F::dot(loaded[g][r][u], unit, x);
                    }
            }
        }
        #pragma unroll
        for (int g = 0; g < GROUP; ++g) {
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) sums[g][r] = warp_sum(sums[g][r]);
            if (lane == 0 && live[g]) store(row + g * stride, sums[g]);
        }
    }
}

// The row loop with the next chunk's loads (this row's next units, or the
// warp's next row) issued before this chunk's products, so a warp always has
// weights in flight: one matrix of short rows, where quantized_rows waits
// out a load's latency per row (llama-3-8b's q/k/v 11.0 -> 9.7 µs, its
// Q6_K LM head 143.5 -> 131.2 µs, llama-3.2-1b's 89.5 -> 73.5 µs, H200).
// Two matrices at once (gate/up) hold too many registers so.
template <typename F, typename Pointers, typename Store>
__device__ __forceinline__ void quantized_rows_pipelined(u32 n, u32 blocks, const Staged& x, Pointers pointers,
                                                         Store store) {
    const u32 lane = threadIdx.x & 31;
    const u32 units = blocks * F::UNITS, stride = gridDim.x * QUANT_WARPS, chunk = 32 * F::UNROLL;
    u32 row = blockIdx.x * QUANT_WARPS + quant_uniform_warp(), base = 0;
    if (row >= n) return;
    const u8* weights;
    pointers(row, &weights);
    typename F::Unit current[F::UNROLL], next[F::UNROLL];
    #pragma unroll
    for (u32 u = 0; u < F::UNROLL; ++u)
        if (u * 32 + lane < units) current[u] = F::load(weights, blocks, u * 32 + lane);
    float sum = 0.0f;
    while (true) {
        u32 next_row = row, next_base = base + chunk;
        if (next_base >= units) {
            next_row = row + stride;
            next_base = 0;
        }
        const bool more = next_row < n;
        const u8* next_weights = weights;
        if (more) {
            pointers(next_row, &next_weights);
            #pragma unroll
            for (u32 u = 0; u < F::UNROLL; ++u) {
                const u32 unit = next_base + u * 32 + lane;
                if (unit < units) next[u] = F::load(next_weights, blocks, unit);
            }
        }
        #pragma unroll
        for (u32 u = 0; u < F::UNROLL; ++u) {
            const u32 unit = base + u * 32 + lane;
            if (unit < units) sum += F::dot(current[u], unit, x);
        }
        if (next_base == 0) {
            sum = warp_sum(sum);
            if (lane == 0) store(row, &sum);
            sum = 0.0f;
        }
        if (!more) break;
        #pragma unroll
        for (u32 u = 0; u < F::UNROLL; ++u) current[u] = next[u];
        row = next_row;
        base = next_base;
        weights = next_weights;
    }
}

// out[r, :] = W · x[r, :] for each of `x_rows` rows, x staged by each block
// in its shared memory: the unfused mat-vec (one row) and prefill chunks
// too short for the GEMM (their rows share each block's weight reads
// through L2).
template <typename F>
__device__ void quantized_matvec(const u8* weight, const float* x, float* out, u32 n, u32 k, u32 x_rows) {
    extern __shared__ float4 quant_storage[];
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const auto pointers = [&](u32 row, const u8** rows) { rows[0] = weight + row * row_bytes; };
    if (blockIdx.y < x_rows) prefetch_first_rows<1, MATVEC_GROUP>(n, row_bytes, pointers);
    for (u32 r = blockIdx.y; r < x_rows; r += gridDim.y) {
        const Staged staged = stage_activations(x + (size_t)r * k, k, (u8*)quant_storage);
        float* row_out = out + (size_t)r * n;
        quantized_rows<F, 1, MATVEC_GROUP>(n, blocks, staged, pointers,
                                           [&](u32 row, const float* sums) { row_out[row] = sums[0]; });
        // The next row's staging overwrites what this row's warps read.
        __syncthreads();
    }
}

// Decode's fused products read x already quantized, once for all blocks,
// by quantize_q8 or norm_quantize_q8 (stage.cu) into global memory in the
// `Staged` layout: every block staging x itself cost more than the weights'
// reads on small matrices and long rows (llama-3-8b's down_proj, 14,336
// values per block: 31 µs against 17 µs quantized once, H200).

// out[n] += W · x: o_proj and down_proj adding into the residual stream
// (each row written by one lane).
template <typename F>
__device__ void quantized_matvec_add(const u8* weight, const u8* x, float* out, u32 n, u32 k) {
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const auto pointers = [&](u32 row, const u8** rows) { rows[0] = weight + row * row_bytes; };
    prefetch_first_rows<1, MATVEC_GROUP>(n, row_bytes, pointers);
    quantized_rows<F, 1, MATVEC_GROUP>(n, blocks, staged_at(x, k), pointers,
                                       [&](u32 row, const float* sums) { out[row] += sums[0]; });
}

// out = [A; B; C] · x, the rows of up to three matrices of one format in
// order (q, k and v; the LM head alone), x the normalised input.
template <typename F>
__device__ void quantized_matvecs(const u8* x, const u8* weight_a, const u8* weight_b, const u8* weight_c,
                                  float* out, u32 rows_a, u32 rows_b, u32 rows_c, u32 k) {
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const auto pointers = [&](u32 row, const u8** rows) {
        rows[0] = row < rows_a            ? weight_a + row * row_bytes
                  : row < rows_a + rows_b ? weight_b + (row - rows_a) * row_bytes
                                          : weight_c + (row - rows_a - rows_b) * row_bytes;
    };
    prefetch_first_rows<1, MATVEC_GROUP>(rows_a + rows_b + rows_c, row_bytes, pointers);
    quantized_rows_pipelined<F>(rows_a + rows_b + rows_c, blocks, staged_at(x, k), pointers,
                                [&](u32 row, const float* sums) { out[row] = sums[0]; });
}

// out[i] = silu(gate[i] · x) * (up[i] · x), x the normalised input; F read
// in its GateUpUnits.
template <typename Format>
__device__ void quantized_matvec_silu(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k) {
    using F = typename GateUpUnits<Format>::type;
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const auto pointers = [&](u32 row, const u8** rows) {
        rows[0] = gate + row * row_bytes;
        rows[1] = up + row * row_bytes;
    };
    prefetch_first_rows<2, 1>(n, row_bytes, pointers);
    quantized_rows<F, 2, 1>(
        n, blocks, staged_at(x, k), pointers,
        // The same expression as the SiLU·mul op, so fused and unfused agree.
        [&](u32 row, const float* sums) { out[row] = sums[0] / (1.0f + expf(-sums[0])) * sums[1]; });
}

// out[r, :] = the table's row for id tokens[first + r], dequantized (the
// embedding lookup). The table holds the `table_rows` ids from
// `table_first` (all, or one rank's share): an id outside them writes zeros
// (another rank holds its row and the ranks' rows are summed); an id past
// the vocabulary writes NaN (the host checks ids before they get here).
template <typename F>
__device__ void quantized_embedding(const u8* table, const u32* tokens, float* out, u32 first, u32 rows,
                                    u32 vocabulary, u32 k, u32 table_first, u32 table_rows) {
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    for (u32 r = blockIdx.y; r < rows; r += gridDim.y) {
        const u32 id = tokens[first + r];
        const bool held = id >= table_first && id - table_first < table_rows;
        for (u32 e = blockIdx.x * blockDim.x + threadIdx.x; e < k; e += gridDim.x * blockDim.x)
            out[(size_t)r * k + e] = id >= vocabulary ? __int_as_float(0x7fc00000)
                                     : held ? F::value(table + (id - table_first) * row_bytes, blocks, e)
                                            : 0.0f;
    }
}

// out[n, k] = W dequantized to bf16 (rounded to nearest even): the weight
// of a prefill chunk's tensor-core GEMM, written to scratch and read once.
template <typename F>
__device__ void quantized_dequantize_bf16(const u8* weight, bf16* out, u32 n, u32 k) {
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks), total = (size_t)n * k;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const u32 row = (u32)(i / k), e = (u32)(i % k);
        from_f32(F::value(weight + row * row_bytes, blocks, e), &out[i]);
    }
}
