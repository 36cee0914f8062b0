// Experimental variants of the quantized decode kernels, measured against
// the kernels in crates/kernelscope by bench.cu on the same inputs. What
// each measured on an H200 is in docs/PERF.md ("Quantized kernels, one at a
// time"). Variants are built from the project's own formats and row loops
// where those serve (Q4_K_Pairs, quantized_rows, quantized_rows_pipelined),
// so only what differs is written here; the ones that lost are kept to be
// measured again after changes. (Gate/up with the pipelined loop, 145
// registers and 40.1 µs against the kept 26.78, is not kept.)

// ---- products over x quantized in global memory (stage.cu) -------------
template <typename F, bool PIPELINED, typename Pointers, typename Store>
__device__ __forceinline__ void variant_rows(u32 n, u32 blocks, const Staged& x, Pointers pointers, Store store) {
    if (PIPELINED)
        quantized_rows_pipelined<F>(n, blocks, x, pointers, store);
    else
        quantized_rows<F, 1, 1>(n, blocks, x, pointers, store);
}
template <typename F, bool PIPELINED>
__device__ void global_add(const u8* weight, const u8* xq, float* out, u32 n, u32 k) {
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const auto pointers = [&](u32 row, const u8** rows) { rows[0] = weight + row * row_bytes; };
    prefetch_first_rows<1, 1>(n, row_bytes, pointers);
    variant_rows<F, PIPELINED>(n, blocks, staged_at(xq, k), pointers, [&](u32 row, const float* sums) { out[row] += sums[0]; });
}
template <typename F, bool PIPELINED>
__device__ void global_rows(const u8* weight, const u8* xq, float* out, u32 n, u32 k) {
    const u32 blocks = k / F::BLOCK;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const auto pointers = [&](u32 row, const u8** rows) { rows[0] = weight + row * row_bytes; };
    prefetch_first_rows<1, 1>(n, row_bytes, pointers);
    variant_rows<F, PIPELINED>(n, blocks, staged_at(xq, k), pointers, [&](u32 row, const float* sums) { out[row] = sums[0]; });
}
#define VARIANTS(NAME, F, PIPELINED) \
    extern "C" __global__ void __launch_bounds__(QUANT_THREADS) add_##NAME(const u8* w, const u8* xq, float* out, u32 n, u32 k) { global_add<F, PIPELINED>(w, xq, out, n, k); } \
    extern "C" __global__ void __launch_bounds__(QUANT_THREADS) rows_##NAME(const u8* w, const u8* xq, float* out, u32 n, u32 k) { global_rows<F, PIPELINED>(w, xq, out, n, k); }
VARIANTS(q4_k_pipelined, Q4_K, true)
VARIANTS(q4_k_pairs, Q4_K_Pairs, false)
VARIANTS(q4_k_pairs_pipelined, Q4_K_Pairs, true)
VARIANTS(q6_k_pipelined, Q6_K, true)
// Gate/up reading Q4_K in units of 16 bytes, as before Q4_K_Pairs.
template <> struct GateUpUnits<struct Q4_K_Units> { using type = Q4_K; };
extern "C" __global__ void __launch_bounds__(QUANT_THREADS) silu_q4_k_units(const u8* xq, const u8* gate, const u8* up, float* out, u32 n, u32 k) {
    quantized_matvec_silu<Q4_K_Units>(xq, gate, up, out, n, k);
}
// matvecs over one matrix, in the Product signature of variants_launch.h.
extern "C" __global__ void __launch_bounds__(QUANT_THREADS) matvecs_q4_k_q8_single(const u8* w, const u8* xq, float* out, u32 n, u32 k) { quantized_matvecs<Q4_K>(xq, w, w, w, out, n, 0, 0, k); }
extern "C" __global__ void __launch_bounds__(QUANT_THREADS) matvecs_q6_k_q8_single(const u8* w, const u8* xq, float* out, u32 n, u32 k) { quantized_matvecs<Q6_K>(xq, w, w, w, out, n, 0, 0, k); }

// ---- Q4_K a whole block a lane, several rows a warp -----------------------
// Every field of a block read once by one lane (128 bytes of values in 8
// cached loads, the 12 scale bytes and d/dmin), the 8 sub-blocks' scales and
// minimums decoded together, high nibbles multiplied in place with an
// unsigned-by-signed dp4a (16 times the value: no shifts), one conversion
// per sub-block. Rows of few blocks share a warp: LANES lanes a row.
__device__ __forceinline__ int dp4a_unsigned_signed(u32 a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
template <bool TRANSPOSED>
struct Q4_K_Whole {
    static constexpr u32 BLOCK = 256, BYTES = 144, UNITS = 1, UNROLL = 1;
    struct Unit { uint4 qs[8]; u32 s0, s1, s2, dm; };
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        Unit u;
        #pragma unroll
        for (int i = 0; i < 8; ++i)
            u.qs[i] = TRANSPOSED ? stream16(row + (i * blocks + unit) * 16) : __ldg((const uint4*)(row + unit * 128 + 16 * i));
        const u8* scales = row + blocks * 128 + unit * 12;
        u.s0 = field32(scales);
        u.s1 = field32(scales + 4);
        u.s2 = field32(scales + 8);
        u.dm = field32(row + blocks * 140 + unit * 4);
        return u;
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        // ggml's get_scale_min_k4 for all eight sub-blocks: bytes j of
        // scale_low/min_low are sub-blocks 0..3, of scale_high/min_high 4..7.
        const u32 scale_low = u.s0 & 0x3f3f3f3fu, min_low = u.s1 & 0x3f3f3f3fu;
        const u32 scale_high = (u.s2 & 0x0f0f0f0fu) | ((u.s0 >> 2) & 0x30303030u);
        const u32 min_high = ((u.s2 >> 4) & 0x0f0f0f0fu) | ((u.s1 >> 2) & 0x30303030u);
        const u32 first = unit * 8;
        const float4 xs_low = __ldg((const float4*)(x.scales + first)), xs_high = __ldg((const float4*)(x.scales + first + 4));
        const float4 sum_low = __ldg((const float4*)(x.sums + first)), sum_high = __ldg((const float4*)(x.sums + first + 4));
        const float xs[8] = {xs_low.x, xs_low.y, xs_low.z, xs_low.w, xs_high.x, xs_high.y, xs_high.z, xs_high.w};
        const float sums[8] = {sum_low.x, sum_low.y, sum_low.z, sum_low.w, sum_high.x, sum_high.y, sum_high.z, sum_high.w};
        float scaled = 0.0f, minimum = 0.0f;
        #pragma unroll
        for (int pair = 0; pair < 4; ++pair) {
            const u32 block = first + 2 * pair;
            const int4 x0 = staged16(x, block * 32), x1 = staged16(x, block * 32 + 16);
            const int4 x2 = staged16(x, block * 32 + 32), x3 = staged16(x, block * 32 + 48);
            const uint4 a = u.qs[2 * pair], b = u.qs[2 * pair + 1];
            int low = 0, high = 0;
            low = __dp4a((int)(a.x & 0x0f0f0f0fu), x0.x, low); low = __dp4a((int)(a.y & 0x0f0f0f0fu), x0.y, low);
            low = __dp4a((int)(a.z & 0x0f0f0f0fu), x0.z, low); low = __dp4a((int)(a.w & 0x0f0f0f0fu), x0.w, low);
            low = __dp4a((int)(b.x & 0x0f0f0f0fu), x1.x, low); low = __dp4a((int)(b.y & 0x0f0f0f0fu), x1.y, low);
            low = __dp4a((int)(b.z & 0x0f0f0f0fu), x1.z, low); low = __dp4a((int)(b.w & 0x0f0f0f0fu), x1.w, low);
            high = dp4a_unsigned_signed(a.x & 0xf0f0f0f0u, x2.x, high); high = dp4a_unsigned_signed(a.y & 0xf0f0f0f0u, x2.y, high);
            high = dp4a_unsigned_signed(a.z & 0xf0f0f0f0u, x2.z, high); high = dp4a_unsigned_signed(a.w & 0xf0f0f0f0u, x2.w, high);
            high = dp4a_unsigned_signed(b.x & 0xf0f0f0f0u, x3.x, high); high = dp4a_unsigned_signed(b.y & 0xf0f0f0f0u, x3.y, high);
            high = dp4a_unsigned_signed(b.z & 0xf0f0f0f0u, x3.z, high); high = dp4a_unsigned_signed(b.w & 0xf0f0f0f0u, x3.w, high);
            const u32 scales = pair < 2 ? scale_low : scale_high, mins = pair < 2 ? min_low : min_high;
            const u32 shift = 16 * (pair % 2);
            const int scale0 = (scales >> shift) & 0xff, scale1 = (scales >> (shift + 8)) & 0xff;
            const int min0 = (mins >> shift) & 0xff, min1 = (mins >> (shift + 8)) & 0xff;
            scaled += xs[2 * pair] * (float)(scale0 * low) + xs[2 * pair + 1] * (float)(scale1 * (high >> 4));
            minimum += (float)min0 * sums[2 * pair] + (float)min1 * sums[2 * pair + 1];
        }
        return half_to_float(u.dm) * scaled - half_to_float(u.dm >> 16) * minimum;
    }
};

template <typename F, int ROWS, int LANES, typename Pointers, typename Store>
__device__ __forceinline__ void rows_lanes(u32 n, u32 blocks, const Staged& x, Pointers pointers, Store store) {
    constexpr u32 GROUPS = 32 / LANES;
    const u32 lane = threadIdx.x & 31, group = lane / LANES, member = lane % LANES;
    const u32 units = blocks * F::UNITS, stride = gridDim.x * QUANT_WARPS * GROUPS;
    for (u32 first = (blockIdx.x * QUANT_WARPS + quant_uniform_warp()) * GROUPS; first < n; first += stride) {
        const u32 row = first + group;
        const bool live = row < n;
        const u8* rows[ROWS];
        if (live) pointers(row, rows);
        float sums[ROWS];
        #pragma unroll
        for (int r = 0; r < ROWS; ++r) sums[r] = 0.0f;
        for (u32 base = 0; base < units; base += LANES * F::UNROLL) {
            typename F::Unit loaded[ROWS][F::UNROLL];
            #pragma unroll
            for (u32 u = 0; u < F::UNROLL; ++u) {
                const u32 unit = base + u * LANES + member;
                if (live && unit < units)
                    #pragma unroll
                    for (int r = 0; r < ROWS; ++r) loaded[r][u] = F::load(rows[r], blocks, unit);
            }
            #pragma unroll
            for (u32 u = 0; u < F::UNROLL; ++u) {
                const u32 unit = base + u * LANES + member;
                if (live && unit < units)
                    #pragma unroll
                    for (int r = 0; r < ROWS; ++r) sums[r] += F::dot(loaded[r][u], unit, x);
            }
        }
        #pragma unroll
        for (int r = 0; r < ROWS; ++r)
            for (int offset = LANES / 2; offset > 0; offset >>= 1) sums[r] += __shfl_xor_sync(0xffffffffu, sums[r], offset);
        if (live && member == 0) store(row, sums);
    }
}
template <typename F, int ROWS, typename Pointers, typename Store>
__device__ __forceinline__ void rows_by_lanes(u32 lanes, u32 n, u32 blocks, const Staged& x, Pointers pointers, Store store) {
    if (lanes == 8) rows_lanes<F, ROWS, 8>(n, blocks, x, pointers, store);
    else if (lanes == 16) rows_lanes<F, ROWS, 16>(n, blocks, x, pointers, store);
    else rows_lanes<F, ROWS, 32>(n, blocks, x, pointers, store);
}
#define WHOLE_KERNELS(SUFFIX, TRANSPOSED) \
extern "C" __global__ void __launch_bounds__(QUANT_THREADS) add_q4_k_whole##SUFFIX(const u8* weight, const u8* xq, float* out, u32 n, u32 k, u32 lanes) { \
    const u32 blocks = k / 256; \
    const size_t row_bytes = planar_row_bytes<Q4_K>(blocks); \
    const auto pointers = [&](u32 row, const u8** rows) { rows[0] = weight + row * row_bytes; }; \
    rows_by_lanes<Q4_K_Whole<TRANSPOSED>, 1>(lanes, n, blocks, staged_at(xq, k), pointers, [&](u32 row, const float* sums) { out[row] += sums[0]; }); \
} \
extern "C" __global__ void __launch_bounds__(QUANT_THREADS) rows_q4_k_whole##SUFFIX(const u8* weight, const u8* xq, float* out, u32 n, u32 k, u32 lanes) { \
    const u32 blocks = k / 256; \
    const size_t row_bytes = planar_row_bytes<Q4_K>(blocks); \
    const auto pointers = [&](u32 row, const u8** rows) { rows[0] = weight + row * row_bytes; }; \
    rows_by_lanes<Q4_K_Whole<TRANSPOSED>, 1>(lanes, n, blocks, staged_at(xq, k), pointers, [&](u32 row, const float* sums) { out[row] = sums[0]; }); \
} \
extern "C" __global__ void __launch_bounds__(QUANT_THREADS) silu_q4_k_whole##SUFFIX(const u8* xq, const u8* gate, const u8* up, float* out, u32 n, u32 k, u32 lanes) { \
    const u32 blocks = k / 256; \
    const size_t row_bytes = planar_row_bytes<Q4_K>(blocks); \
    const auto pointers = [&](u32 row, const u8** rows) { rows[0] = gate + row * row_bytes; rows[1] = up + row * row_bytes; }; \
    rows_by_lanes<Q4_K_Whole<TRANSPOSED>, 2>(lanes, n, blocks, staged_at(xq, k), pointers, \
        [&](u32 row, const float* sums) { out[row] = sums[0] / (1.0f + expf(-sums[0])) * sums[1]; }); \
}
WHOLE_KERNELS(, false)
WHOLE_KERNELS(_transposed, true)

// ---- the streamed loop with no products: what its copies alone reach -----
// A `multiply` reading a word of each row from shared memory, so
// streamed_rows does its copies and waits and almost nothing else.
struct TouchRows {
    __device__ __forceinline__ void prepare() {}
    __device__ __forceinline__ void operator()(const u8* const* rows, float* sums) const {
        sums[0] = (float)(*(const u32*)rows[0] & 0xffu);
        sums[1] = (float)(*(const u32*)rows[1] & 0xffu);
    }
};
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_touch_q4_k(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k, u32 stages) {
    const u32 row_bytes = (u32)planar_row_bytes<Q4_K>(k / 256);
    streamed_rows<2>(
        n, row_bytes, stages,
        [&](u32 row, const u8** rows) {
            rows[0] = gate + (size_t)row * row_bytes;
            rows[1] = up + (size_t)row * row_bytes;
        },
        TouchRows{}, [&](u32 row, const float* sums) { out[row] = sums[0] + sums[1]; });
}

// ---- the streamed products, x read from L1 for every unit --------------
// `multiply` of streamed_rows for any format: the lanes walk a row's units
// with the format's own `load<FromShared>` and `dot`, x read from global
// memory (L1) for every unit.
template <typename F, int MATRICES>
struct UnitsFromSlot {
    u32 blocks;
    Staged x;
    __device__ __forceinline__ void prepare() {}
    __device__ __forceinline__ void operator()(const u8* const* rows, float* sums) const {
        const u32 lane = threadIdx.x & 31, units = blocks * F::UNITS;
        #pragma unroll
        for (int m = 0; m < MATRICES; ++m) sums[m] = 0.0f;
        #pragma unroll 2
        for (u32 unit = lane; unit < units; unit += 32) {
            #pragma unroll
            for (int m = 0; m < MATRICES; ++m) sums[m] += F::dot(F::template load<FromShared>(rows[m], blocks, unit), unit, x);
        }
        #pragma unroll
        for (int m = 0; m < MATRICES; ++m) sums[m] = warp_sum(sums[m]);
    }
};

// out[n] += W · x into the residual stream (o_proj, down_proj).
template <typename F>
__device__ void streamed_matvec_add(const u8* weight, const u8* x, float* out, u32 n, u32 k, u32 stages) {
    const u32 blocks = k / F::BLOCK, row_bytes = (u32)planar_row_bytes<F>(blocks);
    streamed_rows<1>(
        n, row_bytes, stages, [&](u32 row, const u8** rows) { rows[0] = weight + (size_t)row * row_bytes; },
        UnitsFromSlot<F, 1>{blocks, staged_at(x, k)},
        [&](u32 row, const float* sums) { out[row] += sums[0]; });
}

// out = [A; B; C] · x (q, k and v; the LM head alone).
template <typename F>
__device__ void streamed_matvecs(const u8* x, const u8* weight_a, const u8* weight_b, const u8* weight_c, float* out,
                                 u32 rows_a, u32 rows_b, u32 rows_c, u32 k, u32 stages) {
    const u32 blocks = k / F::BLOCK, row_bytes = (u32)planar_row_bytes<F>(blocks);
    streamed_rows<1>(
        rows_a + rows_b + rows_c, row_bytes, stages,
        [&](u32 row, const u8** rows) {
            rows[0] = row < rows_a            ? weight_a + (size_t)row * row_bytes
                      : row < rows_a + rows_b ? weight_b + (size_t)(row - rows_a) * row_bytes
                                              : weight_c + (size_t)(row - rows_a - rows_b) * row_bytes;
        },
        UnitsFromSlot<F, 1>{blocks, staged_at(x, k)}, [&](u32 row, const float* sums) { out[row] = sums[0]; });
}

// out[i] = silu(gate[i] · x) * (up[i] · x); F read in its GateUpUnits.
template <typename Format>
__device__ void streamed_matvec_silu(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k,
                                     u32 stages) {
    using F = typename GateUpUnits<Format>::type;
    const u32 blocks = k / F::BLOCK, row_bytes = (u32)planar_row_bytes<F>(blocks);
    streamed_rows<2>(
        n, row_bytes, stages,
        [&](u32 row, const u8** rows) {
            rows[0] = gate + (size_t)row * row_bytes;
            rows[1] = up + (size_t)row * row_bytes;
        },
        UnitsFromSlot<F, 2>{blocks, staged_at(x, k)},
        [&](u32 row, const float* sums) { out[row] = sums[0] / (1.0f + expf(-sums[0])) * sums[1]; });
}

#define STREAMED_FROM_L1(format, Format)                                                                           \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS)                                                   \
        stream_add_##format##_q8(const u8* weight, const u8* x, float* out, u32 n, u32 k, u32 stages) {            \
        streamed_matvec_add<Format>(weight, x, out, n, k, stages);                                                 \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS)                                                   \
        stream_matvecs_##format##_q8(const u8* x, const u8* a, const u8* b, const u8* c, float* out, u32 ra,       \
                                     u32 rb, u32 rc, u32 k, u32 stages) {                                          \
        streamed_matvecs<Format>(x, a, b, c, out, ra, rb, rc, k, stages);                                          \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS)                                                   \
        stream_silu_##format##_q8(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k, u32 stages) { \
        streamed_matvec_silu<Format>(x, gate, up, out, n, k, stages);                                              \
    }
STREAMED_FROM_L1(q4_k, Q4_K)
STREAMED_FROM_L1(q6_k, Q6_K)

// ---- the streamed products with x held in registers (Q4KPairsHeldX) ----
#define HELD_AT(U)                                                                                                 \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS) stream_rows_q4_k_held##U(                        \
        const u8* x, const u8* a, const u8*, const u8*, float* out, u32 n, u32, u32, u32 k, u32 stages) {           \
        const u32 blocks = k / 256, row_bytes = (u32)planar_row_bytes<Q4_K>(blocks);                               \
        streamed_rows<1>(                                                                                          \
            n, row_bytes, stages, [&](u32 row, const u8** rows) { rows[0] = a + (size_t)row * row_bytes; },         \
            Q4KPairsHeldX<U, 1>{blocks, staged_at(x, k)}, [&](u32 row, const float* sums) { out[row] = sums[0]; });  \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS)                                                   \
        stream_add_q4_k_held##U(const u8* w, const u8* x, float* out, u32 n, u32 k, u32 stages) {                  \
        const u32 blocks = k / 256, row_bytes = (u32)planar_row_bytes<Q4_K>(blocks);                               \
        streamed_rows<1>(                                                                                          \
            n, row_bytes, stages, [&](u32 row, const u8** rows) { rows[0] = w + (size_t)row * row_bytes; },         \
            Q4KPairsHeldX<U, 1>{blocks, staged_at(x, k)}, [&](u32 row, const float* sums) { out[row] += sums[0]; }); \
    }
HELD_AT(1)
HELD_AT(2)
HELD_AT(4)
// Rows of 2,048 values, which the project leaves to the register loop.
extern "C" __global__ void __launch_bounds__(STREAM_THREADS)
    stream_silu_q4_k_held1(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k, u32 stages) {
    streamed_silu_held_x<1>(x, gate, up, out, n, k, stages);
}

// (The down projections split over two warps, x held, are the project's: streamed_kernels.cu.)
