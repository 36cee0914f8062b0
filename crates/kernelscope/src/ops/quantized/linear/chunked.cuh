// The products whose blocks own 32 consecutive output rows at a time (one
// 8-bit block of their output) and quantize them where they are made, in
// the `Staged` layout, for the product after them: no block waits for
// another, and the quantize kernel between the two goes. After
// products.cuh (which the Rust side includes first).
//
// Gate/up stages h for the down projection; o_proj stages the residual
// stream for the next RMSNorm's readers before it is normalised: 8-bit
// quantization is scale-invariant (each block's values over its largest
// magnitude), so r · norm_weight quantizes, within a rounding, to what
// rmsnorm(r) · norm_weight does, its scales times the RMS. The RMS needs
// all of r, which no block has, so o_proj writes each chunk's sum of
// squares instead, and the reader multiplies its finished sums by 1 / RMS,
// summed from those in one fixed order (`inverse_rms`).

// The sums of one row of each of ROWS matrices (`rows`) over x, UNROLL
// units of each in flight, reduced over the warp (every lane has them).
template <typename F, int ROWS>
__device__ __forceinline__ void chunk_row_sums(const u8* const* rows, u32 blocks, const Staged& x, float* sums) {
    const u32 lane = threadIdx.x & 31, units = blocks * F::UNITS;
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) sums[r] = 0.0f;
    for (u32 base = 0; base < units; base += 32 * F::UNROLL) {
        typename F::Unit loaded[ROWS][F::UNROLL];
        #pragma unroll
        for (u32 u = 0; u < F::UNROLL; ++u) {
            const u32 unit = base + u * 32 + lane;
            if (unit < units) {
                #pragma unroll
                for (int r = 0; r < ROWS; ++r) loaded[r][u] = F::load(rows[r], blocks, unit);
            }
        }
        #pragma unroll
        for (u32 u = 0; u < F::UNROLL; ++u) {
            const u32 unit = base + u * 32 + lane;
            if (unit < units) {
                #pragma unroll
                for (int r = 0; r < ROWS; ++r) sums[r] += F::dot(loaded[r][u], unit, x);
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < ROWS; ++r) sums[r] = warp_sum(sums[r]);
}

// Quantizes the chunk of 32 values at `chunk` (shared memory), lane l's
// four times `weight` (the norm weight of values 4l .. 4l + 3, loaded
// early by the caller; ones where nothing weights them), into `staged` as
// block `index` of the `Staged` layout of n values; where `squares` is
// not null, also stores the sum of the chunk's squares (of the values,
// not the weighted ones) at squares[index]. Warp 0 alone calls it.
__device__ __forceinline__ void stage_chunk(const float* chunk, float4 weight, u8* staged, u32 n, u32 index,
                                            float* squares) {
    const u32 lane = threadIdx.x & 31;
    const float4 v = lane < 8 ? *(const float4*)(chunk + 4 * lane) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 weighted = make_float4(v.x * weight.x, v.y * weight.y, v.z * weight.z, v.w * weight.w);
    float scale, sum;
    const u32 packed = quantize_four(weighted, &scale, &sum);
    if (lane < 8) *(u32*)(staged + 32 * index + 4 * lane) = packed;
    float* scales = (float*)(staged + n);
    if (lane == 0) {
        scales[index] = scale;
        scales[n / 32 + index] = sum;
    }
    if (squares != nullptr) {
        float square = v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        for (int offset = 4; offset > 0; offset >>= 1) square += __shfl_xor_sync(0xffffffffu, square, offset);
        if (lane == 0) squares[index] = square;
    }
}

// 1 / RMS of the k values whose blocks' sums of squares `squares` holds
// (stage_chunk's), the lanes summing them in one fixed order: the same
// value in every warp of every block, run after run. Every lane calls it.
__device__ __forceinline__ float inverse_rms(const float* squares, u32 k, float eps) {
    float sum = 0.0f;
    for (u32 i = threadIdx.x & 31; i < k / 32; i += 32) sum += squares[i];
    return rsqrtf(warp_sum(sum) / k + eps);
}

// quantized_matvec_silu whose output is also quantized where it is made,
// for the down projection (the `Staged` layout at `staged`, what
// quantize_q8 would write of `out`, bit for bit): each block owns 32
// consecutive rows at a time, its CHUNK_WARPS warps taking rows w, w +
// CHUNK_WARPS, ... of them; the outputs meet in shared memory and warp 0
// quantizes them. n is a multiple of 32. Twelve warps a chunk keep about as
// many warps streaming as the grid-stride kernel's 396 blocks of eight
// (llama-3.2-1b's 8,192 rows: 256 blocks of twelve).
// Where `squares` is not null, x is o_proj's unnormalised staging (see the
// top of this file): gate's and up's sums are multiplied by x's 1 / RMS
// before SiLU. Null, they are as they were (times 1, exactly). The engine
// leaves this kernel its own norm (`gate_up_reads_pending_norm`): on
// llama-3.2-1b the norm staging cost o_proj and this kernel more than the
// norm kernel it saved (H200, docs/PERF.md).
#define CHUNK_WARPS 12
template <typename Format>
__device__ void quantized_matvec_silu_staged(const u8* x, const u8* gate, const u8* up, float* out, u8* staged,
                                             u32 n, u32 k, const float* squares, float eps) {
    using F = typename GateUpUnits<Format>::type;
    __shared__ __align__(16) float chunk[32];
    const u32 blocks = k / F::BLOCK, lane = threadIdx.x & 31;
    const u32 warp = quant_uniform_warp();
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const Staged xs = staged_at(x, k);
    const float norm = squares != nullptr ? inverse_rms(squares, k, eps) : 1.0f;
    for (u32 first = blockIdx.x * 32; first < n; first += gridDim.x * 32) {
        for (u32 row = first + warp; row < first + 32; row += CHUNK_WARPS) {
            const u8* rows[2] = {gate + row * row_bytes, up + row * row_bytes};
            float sums[2];
            chunk_row_sums<F, 2>(rows, blocks, xs, sums);
            if (lane == 0) {
                const float h = silu(sums[0] * norm) * (sums[1] * norm);
                out[row] = h;
                chunk[row - first] = h;
            }
        }
        __syncthreads();
        if (warp == 0) stage_chunk(chunk, make_float4(1.0f, 1.0f, 1.0f, 1.0f), staged, n, first / 32, nullptr);
        // Warp 0 has read the chunk before the next one's rows overwrite it.
        __syncthreads();
    }
}

// The tail of o_proj's chunk (here and streamed.cuh's): lanes 0 and 1 of
// each warp add their row's sum (`sums[lane]`, rows `mine`) to the
// residual `previous` and leave the new value in `chunk` (shared memory,
// the chunk of rows from `first`); then warp 0 stages the chunk
// (stage_chunk). Every thread of the block calls it.
__device__ __forceinline__ void add_and_stage_chunk(float previous, const float* sums, float* out, float* chunk,
                                                    u32 mine, u32 first, float4 weight_of_lane, u8* staged, u32 n,
                                                    float* squares) {
    const u32 lane = threadIdx.x & 31;
    if (lane < 2) {
        const float r = previous + (lane == 0 ? sums[0] : sums[1]);
        out[mine] = r;
        chunk[mine - first] = r;
    }
    __syncthreads();
    if (quant_uniform_warp() == 0) stage_chunk(chunk, weight_of_lane, staged, n, first / 32, squares);
}

// out[n] += W · x (o_proj into the residual stream) with the new out,
// times the next RMSNorm's `norm_weight`, staged at `staged` and each
// chunk's sum of squares at `squares` for the norm's readers (the top of
// this file). A block owns 32 rows at a time, its NORM_STAGE_WARPS warps
// two rows each in flight (rows w and w + 16 of the chunk). n is a
// multiple of 32.
#define NORM_STAGE_WARPS 16
static_assert(2 * NORM_STAGE_WARPS == 32, "o_proj's warps take a chunk's rows two each");
template <typename F>
__device__ void quantized_matvec_add_norm_staged(const u8* weight, const u8* x, float* out, u32 n, u32 k,
                                                 const float* norm_weight, u8* staged, float* squares) {
    __shared__ __align__(16) float chunk[32];
    const u32 blocks = k / F::BLOCK, lane = threadIdx.x & 31;
    const u32 warp = quant_uniform_warp();
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const Staged xs = staged_at(x, k);
    for (u32 first = blockIdx.x * 32; first < n; first += gridDim.x * 32) {
        const u32 row = first + warp, mine = row + lane * NORM_STAGE_WARPS;
        // What the tail reads, loaded with the weights (read after them, the
        // residual and the norm weight were two L2 round trips in its tail).
        const float previous = lane < 2 ? out[mine] : 0.0f;
        const float4 weight_of_lane = warp == 0 && lane < 8 ? *(const float4*)(norm_weight + first + 4 * lane)
                                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const u8* rows[2] = {weight + row * row_bytes, weight + (row + NORM_STAGE_WARPS) * row_bytes};
        float sums[2];
        chunk_row_sums<F, 2>(rows, blocks, xs, sums);
        add_and_stage_chunk(previous, sums, out, chunk, mine, first, weight_of_lane, staged, n, squares);
        // Warp 0 has read the chunk before the next one's rows overwrite it.
        __syncthreads();
    }
}
