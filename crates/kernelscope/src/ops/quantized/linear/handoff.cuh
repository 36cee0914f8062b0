// The handoff of a fused product's output to the next product: the last
// block of the grid to finish quantizes the whole output (after RMSNorm
// where the next product reads it normalised) into the `Staged` layout in
// global memory, where quantize_q8 or norm_quantize_q8 (stage.cu) would
// have done it in a kernel of their own (2.1-2.6 µs each, twice or three
// times a layer, H200). Blocks count their arrivals in a u32 the last one
// sets back to 0; the other blocks' outputs are read from L2 after a fence.
// The sum of squares and the quantization are norm_quantize_q8's and
// quantize_q8's, so the staged bytes are theirs bit for bit.

// The threads of a block of the stage kernels: the sum of squares is
// theirs, so the products' blocks (256 or 512 threads) sum in their order.
#define STAGE_THREADS 256
// Loads of x a thread issues before using any (the quantize kernels' x is
// at most a few float4 a thread; one at a time, each waited on L2).
#define STAGE_BATCH 4

// The sum of x's squares over the block (every thread gets it): the first
// STAGE_THREADS threads take float4 i = t, t + 256, ... in that order, the
// rest add nothing, whatever the block's size. `load` reads a float4.
template <typename Load>
__device__ __forceinline__ float sum_of_squares(const float* x, u32 k, Load load) {
    float squares = 0.0f;
    if (threadIdx.x < STAGE_THREADS)
        for (u32 first = 4 * threadIdx.x; first < k; first += STAGE_BATCH * 4 * STAGE_THREADS) {
            float4 loaded[STAGE_BATCH];
            #pragma unroll
            for (u32 b = 0; b < STAGE_BATCH; ++b) {
                const u32 i = first + b * 4 * STAGE_THREADS;
                loaded[b] = i < k ? load(x + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            #pragma unroll
            for (u32 b = 0; b < STAGE_BATCH; ++b)
                if (first + b * 4 * STAGE_THREADS < k) {
                    const float4 v = loaded[b];
                    squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
                }
        }
    return block_sum(squares);
}

__device__ __forceinline__ float4 load_from_l2(const float* p) { return __ldcg((const float4*)p); }

// Whether this block is the grid's last to get here (every thread of every
// block calls it once, after its last write of the output): true in every
// thread of that block, whose reads then see every block's writes.
__device__ __forceinline__ bool arrived_last(u32* arrivals) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(arrivals, 1u) == gridDim.x - 1;
    __syncthreads();
    if (last) __threadfence();
    return last;
}

// The output `x` (k values) quantized into `out` as `Staged`, after
// `rmsnorm(x) * norm_weight` where norm_weight is not null: by the last
// block to arrive, which then sets `arrivals` back to 0 for the next
// launch. Every thread of every block calls it, after its writes of x; a
// block normalising has at least STAGE_THREADS threads.
__device__ __forceinline__ void hand_off(const float* x, const float* norm_weight, u8* out, u32* arrivals, u32 k,
                                         float eps) {
    if (!arrived_last(arrivals)) return;
    const float norm = norm_weight ? rsqrtf(sum_of_squares(x, k, load_from_l2) / k + eps) : 1.0f;
    float* scales = (float*)(out + k);
    // The same trips for every thread: quantize_four shuffles over whole warps.
    for (u32 base = 0; base < k; base += STAGE_BATCH * 4 * blockDim.x) {
        const u32 first = base + 4 * threadIdx.x;
        float4 loaded[STAGE_BATCH], weights[STAGE_BATCH];
        #pragma unroll
        for (u32 b = 0; b < STAGE_BATCH; ++b) {
            const u32 at = first + b * 4 * blockDim.x;
            const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            loaded[b] = at < k ? load_from_l2(x + at) : zero;
            weights[b] = at < k && norm_weight ? *(const float4*)(norm_weight + at) : zero;
        }
        #pragma unroll
        for (u32 b = 0; b < STAGE_BATCH; ++b) {
            const u32 at = first + b * 4 * blockDim.x, block = at / 32;
            float4 v = loaded[b];
            if (norm_weight) {
                const float4 w = weights[b];
                v = make_float4(v.x * norm * w.x, v.y * norm * w.y, v.z * norm * w.z, v.w * norm * w.w);
            }
            float scale, sum;
            const u32 packed = quantize_four(v, &scale, &sum);
            if (at < k) {
                *(u32*)(out + at) = packed;
                if (at % 32 == 0) {
                    scales[block] = scale;
                    scales[k / 32 + block] = sum;
                }
            }
        }
    }
    if (threadIdx.x == 0) *arrivals = 0;
}
