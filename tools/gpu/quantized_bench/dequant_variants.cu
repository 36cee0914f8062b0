// Variants of prefill's dequantization to bf16 (products.cuh's
// quantized_dequantize_bf16, which stages each warp's units in shared
// memory), measured against it by bench.cu: the units and runs of the
// project's formats stored straight from registers, as the project did
// before (46 % of the read ceiling against 86 %, H200), with each knob
// apart: bf16 pairs packed by one cvt instead of software rounding, 32-bit
// unit indices instead of 64-bit division, streaming (evict-first) stores,
// and the number of units a thread holds in flight. None of them moved it.
template <bool CVT>
__device__ __forceinline__ u32 dequant_pack(float low, float high) {
    if (CVT) {
        u32 packed;
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(high), "f"(low));
        return packed;
    }
    bf16 a, b;
    from_f32(low, &a);
    from_f32(high, &b);
    return (u32)a.bits | ((u32)b.bits << 16);
}
template <typename F, bool CVT, bool STREAM>
__device__ __forceinline__ void dequant_variant_unit(const typename F::Unit& u, u32 unit, bf16* row_out) {
    #pragma unroll
    for (u32 r = 0; r < F::RUNS; ++r) {
        float values[16];
        const u32 first = F::run(u, unit, r, values);
        u32 packed[8];
        #pragma unroll
        for (u32 e = 0; e < 8; ++e) packed[e] = dequant_pack<CVT>(values[2 * e], values[2 * e + 1]);
        uint4* destination = (uint4*)(row_out + first);
        const uint4 a = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        const uint4 b = make_uint4(packed[4], packed[5], packed[6], packed[7]);
        if (STREAM) {
            __stcs(destination, a);
            __stcs(destination + 1, b);
        } else {
            destination[0] = a;
            destination[1] = b;
        }
    }
}
template <typename F, bool CVT, bool STREAM, u32 UNROLL>
__device__ void dequant_variant(const u8* weight, bf16* out, u32 n, u32 k) {
    const u32 blocks = k / F::BLOCK, units = blocks * F::UNITS;
    const u32 row_bytes = (u32)planar_row_bytes<F>(blocks), total = n * units;
    const u32 stride = gridDim.x * blockDim.x;
    for (u32 base = blockIdx.x * blockDim.x + threadIdx.x; base < total; base += UNROLL * stride) {
        typename F::Unit loaded[UNROLL];
        u32 rows[UNROLL], within[UNROLL];
        #pragma unroll
        for (u32 u = 0; u < UNROLL; ++u) {
            const u32 i = base + u * stride;
            rows[u] = i / units;
            within[u] = i - rows[u] * units;
            if (i < total) loaded[u] = F::load(weight + (size_t)rows[u] * row_bytes, blocks, within[u]);
        }
        #pragma unroll
        for (u32 u = 0; u < UNROLL; ++u)
            if (base + u * stride < total)
                dequant_variant_unit<F, CVT, STREAM>(loaded[u], within[u], out + (size_t)rows[u] * k);
    }
}
#define DEQUANT_VARIANT(NAME, F, CVT, STREAM, UNROLL) \
    extern "C" __global__ void dequant_##NAME(const u8* w, bf16* out, u32 n, u32 k) { dequant_variant<F, CVT, STREAM, UNROLL>(w, out, n, k); }
#define DEQUANT_VARIANTS(f, F)                            \
    DEQUANT_VARIANT(f##_idx32, F, false, false, 4)       \
    DEQUANT_VARIANT(f##_idx32_cvt, F, true, false, 4)    \
    DEQUANT_VARIANT(f##_idx32_cvt_cs, F, true, true, 4)  \
    DEQUANT_VARIANT(f##_idx32_cs, F, false, true, 4)     \
    DEQUANT_VARIANT(f##_idx32_cvt_u2, F, true, false, 2) \
    DEQUANT_VARIANT(f##_idx32_cvt_u8, F, true, false, 8) \
    DEQUANT_VARIANT(f##_idx32_cvt_u1, F, true, false, 1)
DEQUANT_VARIANTS(q4_k, Q4_K)
DEQUANT_VARIANTS(q6_k, Q6_K)

// The write alone: the output's bytes in coalesced 16-byte stores, no
// reads (the ceiling the dequantization's writes set).
extern "C" __global__ void dequant_write_only(const u8*, bf16* out, u32 n, u32 k) {
    const size_t vectors = (size_t)n * k / 8;
    for (size_t v = blockIdx.x * (size_t)blockDim.x + threadIdx.x; v < vectors; v += (size_t)gridDim.x * blockDim.x)
        ((uint4*)out)[v] = make_uint4((u32)v, 1, 2, 3);
}
