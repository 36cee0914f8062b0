// A dense layer's whole feed-forward half in one persistent launch, after
// quantized.cuh, formats.cuh, products.cuh, streamed.cuh and
// persistent.cuh: x += down(silu(gate · n) * (up · n)), n = rmsnorm(x) *
// norm_weight, where decode otherwise launches four kernels (norm and
// quantize, gate/up, quantize, down), each paying its start, its first
// loads' latency and its tail. Steps, each stamped (persistent.cuh):
//   1. every block normalises and quantizes x into its own shared memory
//      (x is a few thousand values: redundant work beats a barrier);
//   2. gate/up rows, h = silu(gate · n) * (up · n) to global memory;
//   -- grid barrier: all of h is written --
//   3. h quantized to 8-bit blocks across the grid, once;
//   -- grid barrier --
//   4. down rows, x += W · h.
// The down weights depend on nothing, so the streamed variant issues its
// ring's first copies at the very start and they land during steps 1-3;
// the loop variant asks L2 for its first rows before the first barrier.
// Every step's arithmetic is that of the kernels it replaces
// (norm_quantize_q8, matvec_silu_<format>_q8, quantize_q8,
// matvec_add_<format>_q8 or stream_add_<format>_split2_held<N>), so the
// results are theirs bit for bit.
// `{Gate}`/`{gate}` and `{Down}`/`{down}` are put in by the host.

#define FEED_FORWARD_STEPS 4

// rmsnorm(x) * norm_weight quantized into shared memory as `Staged`, as
// norm_quantize_q8 quantizes it into global memory (the same sums in the
// same order, the same blocks of eight lanes). Every thread calls it.
// The first HELD_PASSES passes' x and norm weights are loaded at once and
// kept in registers for the quantization, so a block waits on L2 once for
// rows of up to 4,096 values (two dependent rounds had made this step 4 µs
// of llama-3.2-1b's launch on an H200).
#define HELD_PASSES 4
__device__ Staged stage_normed(const float* x, const float* norm_weight, u32 k, float eps, u8* storage) {
    const u32 pass = 4 * blockDim.x;
    float4 held[HELD_PASSES], held_weight[HELD_PASSES];
    #pragma unroll
    for (u32 p = 0; p < HELD_PASSES; ++p) {
        const u32 at = p * pass + 4 * threadIdx.x;
        held[p] = held_weight[p] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (at < k) {
            held[p] = *(const float4*)(x + at);
            held_weight[p] = *(const float4*)(norm_weight + at);
        }
    }
    // The squares in norm_quantize_q8's order: pass by pass.
    float squares = 0.0f;
    #pragma unroll
    for (u32 p = 0; p < HELD_PASSES; ++p) {
        const float4 v = held[p];
        if (p * pass + 4 * threadIdx.x < k) squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    for (u32 i = HELD_PASSES * pass + 4 * threadIdx.x; i < k; i += pass) {
        const float4 v = *(const float4*)(x + i);
        squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    const float norm = rsqrtf(block_sum(squares) / k + eps);
    signed char* values = (signed char*)storage;
    float* scales = (float*)(storage + k);
    float* sums = scales + k / 32;
    // Every thread calls it for every pass (quantize_four shuffles).
    const auto quantize_pass = [&](u32 base, float4 value, float4 weight) {
        const u32 at = base + 4 * threadIdx.x, block = at / 32;
        const bool live = at < k;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (live)
            v = make_float4(value.x * norm * weight.x, value.y * norm * weight.y, value.z * norm * weight.z,
                            value.w * norm * weight.w);
        float scale, sum;
        const u32 packed = quantize_four(v, &scale, &sum);
        if (live) {
            *(u32*)(values + at) = packed;
            if (threadIdx.x % 8 == 0) {
                scales[block] = scale;
                sums[block] = sum;
            }
        }
    };
    #pragma unroll
    for (u32 p = 0; p < HELD_PASSES; ++p)
        if (p * pass < k) quantize_pass(p * pass, held[p], held_weight[p]);
    for (u32 base = HELD_PASSES * pass; base < k; base += pass) {
        const u32 at = base + 4 * threadIdx.x;
        const bool live = at < k;
        quantize_pass(base, live ? *(const float4*)(x + at) : make_float4(0.0f, 0.0f, 0.0f, 0.0f),
                      live ? *(const float4*)(norm_weight + at) : make_float4(0.0f, 0.0f, 0.0f, 0.0f));
    }
    __syncthreads();
    return Staged{values, scales, sums};
}

// h (f32 [n], written by other blocks before a grid barrier: read from L2)
// quantized to `Staged` in global memory at `out`, as quantize_q8 does,
// four values a thread of the whole grid.
__device__ __forceinline__ void quantize_across_grid(const float* h, u32 n, u8* out) {
    const u32 thread = blockIdx.x * blockDim.x + threadIdx.x, threads = gridDim.x * blockDim.x;
    float* scales = (float*)(out + n);
    for (u32 base = 0; base < n; base += 4 * threads) {
        const u32 at = base + 4 * thread, block = at / 32;
        const bool live = at < n;
        const float4 v = live ? __ldcg((const float4*)(h + at)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float scale, sum;
        const u32 packed = quantize_four(v, &scale, &sum);
        if (live) {
            *(u32*)(out + at) = packed;
            if (thread % 8 == 0) {
                scales[block] = scale;
                scales[n / 32 + block] = sum;
            }
        }
    }
}

// Shared memory before the down ring: x staged, rounded to 128 bytes
// (`staged_space` in feed_forward/mod.rs).
__device__ __forceinline__ u32 feed_forward_staged_space(u32 k) { return (staged_bytes(k) + 127) / 128 * 128; }

// The kernel body. HELD > 0: down streamed, each row over two warps
// holding HELD units of x a lane (SplitRows of streamed.cuh, DownUnits the
// units it reads); HELD == 0: down by the register loop.
template <typename Gate, typename Down, typename DownUnits, int HELD>
__device__ __forceinline__ void feed_forward(float* x, const float* norm_weight, const u8* gate, const u8* up,
                                             const u8* down, float* h, u8* hq, unsigned int* arrivals,
                                             unsigned long long* launches, unsigned long long* stamps, u32 k, u32 n, float eps, u32 stages,
                                             u32 stamping) {
    extern __shared__ float4 quant_storage[];
    u8* storage = (u8*)quant_storage;
    using G = typename GateUpUnits<Gate>::type;
    const u32 gate_blocks = k / G::BLOCK;
    const size_t gate_row_bytes = planar_row_bytes<G>(gate_blocks);
    const auto gate_rows = [&](u32 row, const u8** rows) {
        rows[0] = gate + row * gate_row_bytes;
        rows[1] = up + row * gate_row_bytes;
    };
    const u32 down_blocks = n / Down::BLOCK;
    const size_t down_row_bytes = planar_row_bytes<Down>(down_blocks);
    const auto down_rows = [&](u32 row, const u8** rows) { rows[0] = down + row * down_row_bytes; };
    // Weights first: they depend on no kernel before this one.
    prefetch_first_rows<2, 1>(n, gate_row_bytes, gate_rows);
    SplitRows<DownUnits, (HELD > 0 ? HELD : 1), 2> split;
    if constexpr (HELD > 0) split.begin(down, k, n, stages, storage + feed_forward_staged_space(k));
    wait_for_previous_kernel();
    // Null when this launch stamps nothing: every stamp call checks it.
    unsigned long long* const stamp_slots = stamping != 0 ? stamps : nullptr;
    PhaseStamps<FEED_FORWARD_STEPS> stamp;
    stamp.open(launches, stamp_slots);
    stamp.mark(stamp_slots, 0);
    const Staged staged = stage_normed(x, norm_weight, k, eps, storage);
    stamp.mark(stamp_slots, 1);
    quantized_rows<G, 2, 1>(n, gate_blocks, staged, gate_rows, [&](u32 row, const float* sums) {
        h[row] = silu(sums[0]) * sums[1];
    });
    if constexpr (HELD == 0) prefetch_first_rows<1, 1>(k, down_row_bytes, down_rows);
    stamp.mark(stamp_slots, 2);
    grid_barrier(arrivals);
    quantize_across_grid(h, n, hq);
    stamp.mark(stamp_slots, 3);
    grid_barrier(arrivals + 1);
    if constexpr (HELD > 0) {
        split.finish(hq, x);
    } else {
        quantized_rows<Down, 1, 1>(k, down_blocks, staged_at(hq, n), down_rows,
                                   [&](u32 row, const float* sums) { x[row] += sums[0]; });
    }
    stamp.close(launches, stamp_slots);
}

// Three blocks a multiprocessor is what the host sizes the grid by where
// the down ring fits: gate/up's register loop ran fastest at three
// (gate_up_blocks in linear/fused.rs).
extern "C" __global__ void __launch_bounds__(QUANT_THREADS, 3)
    feed_forward_{gate}_{down}(float* x, const float* norm_weight, const u8* gate, const u8* up, const u8* down,
                               float* h, u8* hq, unsigned int* arrivals, unsigned long long* launches,
                               unsigned long long* stamps, u32 k, u32 n,
                               float eps, u32 stages, u32 stamping) {
    wait_for_previous_kernel();
    feed_forward<{Gate}, {Down}, {Down}, 0>(x, norm_weight, gate, up, down, h, hq, arrivals, launches, stamps, k, n, eps,
                                            stages, stamping);
}
