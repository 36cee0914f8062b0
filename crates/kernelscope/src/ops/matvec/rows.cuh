// The mat-vec core every mat-vec kernel shares (plain, residual-adding,
// RMSNorm-fused, SiLU·mul-fused): whole rows per warp, MATVEC_WARPS warps per
// block walking the rows grid-stride (the warps of a small matrix share its
// rows). Weights are read 16 bytes per lane with MATVEC_UNROLL loads in
// flight and bypass L1 (each weight byte is read once
// per token, so caching it would only evict x). Rows whose length is not a
// multiple of 16 bytes, or that are not 16-byte aligned, take a scalar loop.
#define MATVEC_THREADS 256
#define MATVEC_WARPS (MATVEC_THREADS / 32)
#define MATVEC_UNROLL 8

__device__ __forceinline__ uint4 load_streaming(const void* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// 16 bytes of weights times the matching x, summed in f32.
__device__ __forceinline__ float dot_packed(uint4 packed, const float* x, bf16) {
    const float4 a = *(const float4*)x, b = *(const float4*)(x + 4);
    float sum = __uint_as_float(packed.x << 16) * a.x;
    sum += __uint_as_float(packed.x & 0xffff0000u) * a.y;
    sum += __uint_as_float(packed.y << 16) * a.z;
    sum += __uint_as_float(packed.y & 0xffff0000u) * a.w;
    sum += __uint_as_float(packed.z << 16) * b.x;
    sum += __uint_as_float(packed.z & 0xffff0000u) * b.y;
    sum += __uint_as_float(packed.w << 16) * b.z;
    sum += __uint_as_float(packed.w & 0xffff0000u) * b.w;
    return sum;
}
__device__ __forceinline__ float dot_packed(uint4 packed, const float* x, f16) {
    const float4 a = *(const float4*)x, b = *(const float4*)(x + 4);
    const u32 words[4] = {packed.x, packed.y, packed.z, packed.w};
    const float values[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    float sum = 0.0f;
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
        f16 low = {(unsigned short)(words[j] & 0xffffu)}, high = {(unsigned short)(words[j] >> 16)};
        sum += to_f32(low) * values[2 * j] + to_f32(high) * values[2 * j + 1];
    }
    return sum;
}
__device__ __forceinline__ float dot_packed(uint4 packed, const float* x, float) {
    const float4 a = *(const float4*)x;
    return __uint_as_float(packed.x) * a.x + __uint_as_float(packed.y) * a.y + __uint_as_float(packed.z) * a.z +
           __uint_as_float(packed.w) * a.w;
}

// Whether rows of `k` elements of W starting at `weight` can be read 16 bytes
// at a time against an x at `x`: the same for every thread (uniform).
template <typename W>
__device__ __forceinline__ bool packed_rows(const W* weight, const float* x, u32 k) {
    return k % (16 / sizeof(W)) == 0 && (size_t)weight % 16 == 0 && (size_t)x % 16 == 0;
}

// sums[r] = rows[r][0..k) · x[0..k) for ROWS rows sharing x, over slice
// `slice` of `slices` of k (the warps sharing a row split it), reduced over
// the warp so every lane holds them. Every lane of the warp must call it (it
// shuffles), with the same `packed`.
template <typename W, int ROWS, int UNROLL = MATVEC_UNROLL>
__device__ __forceinline__ void dot_rows(const W* const rows[ROWS], const float* x, u32 k, bool packed, u32 slice,
                                         u32 slices, float sums[ROWS]) {
    const u32 lane = threadIdx.x & 31;
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) sums[r] = 0.0f;
    if (packed) {
        constexpr u32 elements = 16 / sizeof(W);
        const u32 chunks = k / elements;
        const u32 begin = (u32)((unsigned long long)chunks * slice / slices);
        const u32 end = (u32)((unsigned long long)chunks * (slice + 1) / slices);
        for (u32 base = begin; base < end; base += 32 * UNROLL) {
            uint4 loaded[ROWS][UNROLL];
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const u32 chunk = base + u * 32 + lane;
                #pragma unroll
                for (int r = 0; r < ROWS; ++r)
                    loaded[r][u] = chunk < end ? load_streaming(rows[r] + (size_t)chunk * elements)
                                               : make_uint4(0, 0, 0, 0);
            }
            #pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const u32 chunk = base + u * 32 + lane;
                if (chunk < end) {
                    #pragma unroll
                    for (int r = 0; r < ROWS; ++r) sums[r] += dot_packed(loaded[r][u], x + chunk * elements, W());
                }
            }
        }
    } else {
        for (u32 i = slice * 32 + lane; i < k; i += 32 * slices) {
            const float value = x[i];
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) sums[r] += to_f32(rows[r][i]) * value;
        }
    }
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) sums[r] = warp_sum(sums[r]);
}

// This warp's index in the block, broadcast from lane 0 so the compiler can
// prove the row loops below warp-uniform (otherwise it wraps every shuffle
// in a collective loop, doubling the instructions).
__device__ __forceinline__ u32 uniform_warp() { return __shfl_sync(0xffffffffu, threadIdx.x >> 5, 0); }

// Warps sharing one row, by the number of rows n (`matvec::warps_per_row`
// in Rust sizes the grid by the same rule). One: splitting the k of small
// matrices over 2-8 warps (with 8 loads in flight per lane) measured slower
// on an H200 (llama-3.2-1b 914 against 1,002 tok/s), so the split is kept
// for tuning but not taken.
__device__ __forceinline__ u32 warps_per_row(u32) { return 1; }

// The row loop of every mat-vec kernel: for each row, `pointers(row, rows)`
// names its ROWS weight rows, the warps sharing it compute their dots, and
// `store(row, sums)` runs once (lane 0 of the row's first warp). Blocks walk
// groups of rows grid-stride, so any grid covers every row. Every thread of
// the block must call it.
template <typename W, int ROWS, int UNROLL = MATVEC_UNROLL, typename Pointers, typename Store>
__device__ __forceinline__ void matvec_rows(u32 n, u32 k, const float* x, bool packed, Pointers pointers,
                                            Store store) {
    __shared__ float partial[MATVEC_WARPS][ROWS];
    const u32 warp = uniform_warp(), lane = threadIdx.x & 31;
    const u32 per_row = warps_per_row(n), rows_per_block = MATVEC_WARPS / per_row;
    const u32 slice = warp % per_row;
    const u32 groups = (n + rows_per_block - 1) / rows_per_block;
    for (u32 group = blockIdx.x; group < groups; group += gridDim.x) {
        const u32 row = group * rows_per_block + warp / per_row;
        float sums[ROWS];
        if (row < n) {
            const W* rows[ROWS];
            pointers(row, rows);
            dot_rows<W, ROWS, UNROLL>(rows, x, k, packed, slice, per_row, sums);
        } else {
            #pragma unroll
            for (int r = 0; r < ROWS; ++r) sums[r] = 0.0f;
        }
        if (per_row == 1) {
            if (row < n && lane == 0) store(row, sums);
        } else {
            if (lane == 0) {
                #pragma unroll
                for (int r = 0; r < ROWS; ++r) partial[warp][r] = sums[r];
            }
            __syncthreads();
            if (slice == 0 && row < n && lane == 0) {
                float total[ROWS];
                #pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    total[r] = 0.0f;
                    for (u32 s = 0; s < per_row; ++s) total[r] += partial[warp + s][r];
                }
                store(row, total);
            }
            __syncthreads();
        }
    }
}

// Stages rmsnorm(x) * norm_weight (x f32 [k]) in the block's shared memory
// `staged` [k], computed as the RMSNorm op computes it: the sum of squares in
// f32, then x * scale * weight. Every thread of the block must call it; the
// staged vector is complete when it returns.
template <typename W>
__device__ void stage_normed(const float* x, const W* norm_weight, float eps, u32 k, float* staged) {
    const bool vector = k % 4 == 0 && (size_t)x % 16 == 0 && (size_t)norm_weight % (4 * sizeof(W)) == 0;
    float squares = 0.0f;
    if (vector) {
        for (u32 i = 4 * threadIdx.x; i < k; i += 4 * blockDim.x) {
            const float4 v = *(const float4*)(x + i);
            squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            *(float4*)(staged + i) = v;
        }
    } else {
        for (u32 i = threadIdx.x; i < k; i += blockDim.x) {
            const float v = x[i];
            squares += v * v;
            staged[i] = v;
        }
    }
    const float scale = rsqrtf(block_sum(squares) / k + eps);
    // Each thread rescales the elements it staged itself, so only the end
    // needs a barrier.
    if (vector) {
        for (u32 i = 4 * threadIdx.x; i < k; i += 4 * blockDim.x) {
            float4 v = *(float4*)(staged + i);
            float w[4];
            load4(norm_weight + i, w);
            v.x = v.x * scale * w[0];
            v.y = v.y * scale * w[1];
            v.z = v.z * scale * w[2];
            v.w = v.w * scale * w[3];
            *(float4*)(staged + i) = v;
        }
    } else {
        for (u32 i = threadIdx.x; i < k; i += blockDim.x) staged[i] = staged[i] * scale * to_f32(norm_weight[i]);
    }
    __syncthreads();
}
