// The block formats of GGUF's quantized weights as the CUDA kernels read
// them (after quantized.cuh, before products.cuh): each a struct of UNITS
// work units per block, one unit the values one lane multiplies at a time
// (`load` then `dot` against x staged as 8-bit blocks), and the
// per-element dequantization (`value`) of the embedding and prefill
// kernels. Rows are in planes (`quant::planes`): each field of every block
// of a row stored together.
// Byte i (0 .. 15) of a 16-byte load (i known at compile time in unrolled loops).
__device__ __forceinline__ u32 byte_of(uint4 q, u32 i) {
    const u32 word = i < 4 ? q.x : i < 8 ? q.y : i < 12 ? q.z : q.w;
    return (word >> (8 * (i % 4))) & 0xffu;
}

// ---- 32-element formats: one unit is one block ----------------------------

// Q4_0 planes: qs (16), d (2). Value = d * (q - 8).
struct Q4_0 {
    static constexpr u32 BLOCK = 32, BYTES = 18, UNITS = 1, UNROLL = 4;
    struct Unit { uint4 qs; u32 d; };
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{From::stream16(row + unit * 16), From::field16(row + blocks * 16 + unit * 2)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(low_nibbles(u.qs), staged16(x, unit * 32), 0);
        sum = dot16(high_nibbles(u.qs), staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.d) * (x.scales[unit] * (float)sum - 8.0f * x.sums[unit]);
    }
    // Dequantization a unit at a time (the prefill GEMM's weight): RUNS runs
    // of 16 values each, run r's values and where the first sits in the row.
    static constexpr u32 RUNS = 2;
    __device__ static u32 run(const Unit& u, u32 unit, u32 r, float v[16]) {
        const float d = half_to_float(u.d);
        #pragma unroll
        for (u32 i = 0; i < 16; ++i) v[i] = d * ((float)(r ? byte_of(u.qs, i) >> 4 : byte_of(u.qs, i) & 0xfu) - 8.0f);
        return unit * 32 + 16 * r;
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
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{From::stream16(row + unit * 16), From::field32(row + blocks * 16 + unit * 4)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(low_nibbles(u.qs), staged16(x, unit * 32), 0);
        sum = dot16(high_nibbles(u.qs), staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.dm) * x.scales[unit] * (float)sum + half_to_float(u.dm >> 16) * x.sums[unit];
    }
    static constexpr u32 RUNS = 2;
    __device__ static u32 run(const Unit& u, u32 unit, u32 r, float v[16]) {
        const float d = half_to_float(u.dm), m = half_to_float(u.dm >> 16);
        #pragma unroll
        for (u32 i = 0; i < 16; ++i) v[i] = d * (float)(r ? byte_of(u.qs, i) >> 4 : byte_of(u.qs, i) & 0xfu) + m;
        return unit * 32 + 16 * r;
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
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{From::stream16(row + unit * 16), From::field32(row + blocks * 16 + unit * 4),
                    From::field16(row + blocks * 20 + unit * 2)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(with_fifth_bits(low_nibbles(u.qs), u.qh, 0), staged16(x, unit * 32), 0);
        sum = dot16(with_fifth_bits(high_nibbles(u.qs), u.qh, 16), staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.d) * (x.scales[unit] * (float)sum - 16.0f * x.sums[unit]);
    }
    static constexpr u32 RUNS = 2;
    __device__ static u32 run(const Unit& u, u32 unit, u32 r, float v[16]) {
        const float d = half_to_float(u.d);
        #pragma unroll
        for (u32 i = 0; i < 16; ++i) {
            const u32 q = (r ? byte_of(u.qs, i) >> 4 : byte_of(u.qs, i) & 0xfu) | (((u.qh >> (16 * r + i)) & 1u) << 4);
            v[i] = d * ((float)q - 16.0f);
        }
        return unit * 32 + 16 * r;
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
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{From::stream16(row + unit * 16), From::field32(row + blocks * 16 + unit * 4),
                    From::field32(row + blocks * 20 + unit * 4)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(with_fifth_bits(low_nibbles(u.qs), u.qh, 0), staged16(x, unit * 32), 0);
        sum = dot16(with_fifth_bits(high_nibbles(u.qs), u.qh, 16), staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.dm) * x.scales[unit] * (float)sum + half_to_float(u.dm >> 16) * x.sums[unit];
    }
    static constexpr u32 RUNS = 2;
    __device__ static u32 run(const Unit& u, u32 unit, u32 r, float v[16]) {
        const float d = half_to_float(u.dm), m = half_to_float(u.dm >> 16);
        #pragma unroll
        for (u32 i = 0; i < 16; ++i) {
            const u32 q = (r ? byte_of(u.qs, i) >> 4 : byte_of(u.qs, i) & 0xfu) | (((u.qh >> (16 * r + i)) & 1u) << 4);
            v[i] = d * (float)q + m;
        }
        return unit * 32 + 16 * r;
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
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        return Unit{From::stream16(row + unit * 32), From::stream16(row + unit * 32 + 16), From::field16(row + blocks * 32 + unit * 2)};
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        int sum = dot16(u.low, staged16(x, unit * 32), 0);
        sum = dot16(u.high, staged16(x, unit * 32 + 16), sum);
        return half_to_float(u.d) * x.scales[unit] * (float)sum;
    }
    static constexpr u32 RUNS = 2;
    __device__ static u32 run(const Unit& u, u32 unit, u32 r, float v[16]) {
        const float d = half_to_float(u.d);
        #pragma unroll
        for (u32 i = 0; i < 16; ++i) v[i] = d * (float)(signed char)byte_of(r ? u.high : u.low, i);
        return unit * 32 + 16 * r;
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
template <typename From = FromGlobal>
__device__ __forceinline__ void k4_scales(const u8* scales, u32 j, u32* scale_pair, u32* min_pair) {
    const u32 first = From::field16(scales + 2 * j), second = From::field16(scales + 2 * j + 4);
    if (j < 2) {
        *scale_pair = first & 0x3f3fu;
        *min_pair = second & 0x3f3fu;
    } else {
        const u32 earlier = From::field16(scales + 2 * j - 4);
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
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        const u32 block = unit / 8, j = (unit % 8) / 2;
        Unit u;
        u.qs = From::stream16(row + unit * 16);
        u.dm = From::field32(row + blocks * 140 + block * 4);
        k4_scales<From>(row + blocks * 128 + block * 12, j, &u.scale_pair, &u.min_pair);
        return u;
    }
    __device__ static float dot(const Unit& u, u32 unit, const Staged& x) {
        const u32 v = unit % 8, h = v % 2, low_block = (unit / 8) * 8 + (v / 2) * 2;
        const int low = dot16(low_nibbles(u.qs), staged16(x, low_block * 32 + h * 16), 0);
        const int high = dot16(high_nibbles(u.qs), staged16(x, (low_block + 1) * 32 + h * 16), 0);
        return k4_unit_sum(u.dm, u.scale_pair, u.min_pair, low, high, h, low_block, x);
    }
    // Run 0: the 16 low nibbles (sub-block 2j), run 1: the high (2j + 1).
    static constexpr u32 RUNS = 2;
    __device__ static u32 run(const Unit& u, u32 unit, u32 r, float v[16]) {
        const u32 j = (unit % 8) / 2, h = unit % 2;
        #pragma unroll
        for (u32 i = 0; i < 16; ++i)
            v[i] = k4_value(u.dm, u.scale_pair, u.min_pair, r, r ? byte_of(u.qs, i) >> 4 : byte_of(u.qs, i) & 0xfu);
        return (unit / 8) * 256 + 64 * j + 32 * r + 16 * h;
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
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        Unit u;
        u.low_half = From::cached16(row + unit * 32);
        u.high_half = From::cached16(row + unit * 32 + 16);
        u.dm = From::field32(row + blocks * 140 + (unit / 4) * 4);
        k4_scales<From>(row + blocks * 128 + (unit / 4) * 12, unit % 4, &u.scale_pair, &u.min_pair);
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
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        const u32 block = unit / 8, v = unit % 8;
        Unit u;
        u.qs = From::stream16(row + unit * 16);
        u.qh = From::stream16(row + blocks * 128 + block * 32 + (v % 2) * 16);
        u.dm = From::field32(row + blocks * 172 + block * 4);
        k4_scales<From>(row + blocks * 160 + block * 12, v / 2, &u.scale_pair, &u.min_pair);
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
    static constexpr u32 RUNS = 2;
    __device__ static u32 run(const Unit& u, u32 unit, u32 r, float v[16]) {
        const u32 j = (unit % 8) / 2, h = unit % 2;
        #pragma unroll
        for (u32 i = 0; i < 16; ++i) {
            const u32 q = (r ? byte_of(u.qs, i) >> 4 : byte_of(u.qs, i) & 0xfu) | (((byte_of(u.qh, i) >> (2 * j + r)) & 1u) << 4);
            v[i] = k4_value(u.dm, u.scale_pair, u.min_pair, r, q);
        }
        return (unit / 8) * 256 + 64 * j + 32 * r + 16 * h;
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
    template <typename From = FromGlobal>
    __device__ static Unit load(const u8* row, u32 blocks, u32 unit) {
        const u32 block = unit / 4, v = unit % 4, n = v / 2, c = v % 2;
        const u8* ql = row + block * 128 + n * 64 + c * 16;
        const u8* scales = row + blocks * 192 + block * 16 + n * 8;
        return Unit{From::stream16(ql), From::stream16(ql + 32), From::stream16(row + blocks * 128 + block * 64 + n * 32 + c * 16),
                    From::field32(scales), From::field32(scales + 4), From::field16(row + blocks * 208 + block * 2)};
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
    // Run t: the values l + 32t of the unit's half n, l in 16c .. 16c + 16.
    static constexpr u32 RUNS = 4;
    __device__ static u32 run(const Unit& u, u32 unit, u32 t, float v[16]) {
        const u32 n = (unit % 4) / 2, c = unit % 2;
        const uint4 ql = (t & 1) ? u.high : u.low;
        const u32 scales = (t & 2) ? u.scales_high : u.scales_low;
        const float scale = half_to_float(u.d) * (float)(signed char)((scales >> (8 * (c + 2 * (t & 1)))) & 0xffu);
        #pragma unroll
        for (u32 i = 0; i < 16; ++i) {
            const u32 low = (t & 2) ? byte_of(ql, i) >> 4 : byte_of(ql, i) & 0xfu;
            const int q = (int)(low | (((byte_of(u.qh, i) >> (2 * t)) & 3u) << 4)) - 32;
            v[i] = scale * (float)q;
        }
        return (unit / 4) * 256 + 128 * n + 32 * t + 16 * c;
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
