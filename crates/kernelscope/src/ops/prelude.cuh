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

// Programmatic dependent launch (sm_90 and later): in a CUDA graph a kernel
// may be launched while the kernel before it is still running, so that its
// launch and block start-up hide under that kernel's tail. Every kernel's
// first statement is this call (the launcher asks for the early launch only
// for kernels whose source begins so): it returns once the previous kernel
// has finished and its writes are visible. The next kernel is launched as
// this one's blocks exit (no explicit launch_dependents): triggered here at
// the start instead, the next kernel's blocks were resident and waiting for
// this kernel's whole run, and early launch made decode slower (llama-3-8b
// 170.5 tok/s against 174.9 launched normally on an H100); triggered at
// exit it makes it faster (176.0; llama-3.2-1b 851.6 against 833.0).
// On older GPUs, and for kernels launched normally, it returns at once.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// The first statement of a kernel that reads weights before it waits for
// the previous kernel itself (the streamed products: their first bulk
// copies go out before `wait_for_previous_kernel`). Weights are written
// once, before any graph runs, so reading them early is as safe as
// waiting first; the launcher launches such a kernel early too
// (runtime/early_launch.rs). It does nothing: it says what the kernel does.
__device__ __forceinline__ void reads_weights_before_waiting() {}

// Lets the next kernel launch now, not when this kernel's blocks exit:
// called at the start of the kernels before the streamed products (whose
// kernels open with `reads_weights_before_waiting`), so that their blocks
// take the multiprocessors this kernel's blocks leave and their copies run
// while this kernel does; by the streamed gate/up and down themselves,
// whose next kernel lets the next streamed product launch in turn
// (`let_next_kernel_launch_then_wait`); and by the attention split and
// combine, whose readers' blocks then start while they run. The next
// kernel still waits for this one to finish
// before it reads anything this one writes, and it launches only once
// every block of this one has called this or exited, so no block of this
// kernel waits behind the next one's.
__device__ __forceinline__ void let_next_kernel_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The opening of the small kernels between two streamed products
// (quantize_q8 between gate/up and down, the attention norm between down
// and q/k/v): the next kernel may launch before this one has waited, so
// its blocks take each multiprocessor as the streamed product before this
// leaves it, and its copies run during that product's tail and this
// kernel's whole run. Nothing is read or written before the wait, so it is
// as safe an opening as the wait alone (runtime/early_launch.rs).
__device__ __forceinline__ void let_next_kernel_launch_then_wait() {
    let_next_kernel_launch();
    wait_for_previous_kernel();
}

// silu(g) = g · sigmoid(g), as the SiLU·mul op computes it: every kernel
// that fuses SiLU·mul writes `silu(g) * u`, so fused and unfused agree bit
// for bit.
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

// RoPE's cosine and sine at `position` for one pair's inverse frequency,
// both scaled by `scaling`, and the pair (x0, x1) rotated by them: every
// kernel that rotates a pair calls these, so fused and unfused agree bit
// for bit.
__device__ __forceinline__ void rope_cos_sin(u32 position, float inverse_frequency, float scaling, float* c,
                                             float* s) {
    const float angle = (float)position * inverse_frequency;
    sincosf(angle, s, c);
    *s *= scaling;
    *c *= scaling;
}
// Rounded explicitly: left to the compiler, a product and a difference
// fuse into an FMA in one kernel and not in another, and the bits differ
// (the rotating q/k/v products against rope_append, 1-4 ulp on an H200).
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, float c, float s) {
    return make_float2(__fmaf_rn(x0, c, -__fmul_rn(x1, s)), __fmaf_rn(x1, c, __fmul_rn(x0, s)));
}

// Waits for the other warp of `warp`'s pair (warps 2p and 2p + 1 of a block
// of WARPS warps) at named barrier 1 + p. The barrier is named by a
// constant: one named by a register makes ptxas reserve all 16 for the
// block, and the barriers a block reserves can limit the blocks an SM holds.
// Both warps must call it as often, all lanes of each together.
template <u32 WARPS>
__device__ __forceinline__ void warp_pair_barrier(u32 warp) {
    static_assert(WARPS % 2 == 0 && WARPS <= 16, "pairs of warps, at most 8 pairs");
    switch (warp / 2) {
    case 0: asm volatile("bar.sync 1, 64;" ::: "memory"); break;
    case 1: if (WARPS > 2) asm volatile("bar.sync 2, 64;" ::: "memory"); break;
    case 2: if (WARPS > 4) asm volatile("bar.sync 3, 64;" ::: "memory"); break;
    case 3: if (WARPS > 6) asm volatile("bar.sync 4, 64;" ::: "memory"); break;
    case 4: if (WARPS > 8) asm volatile("bar.sync 5, 64;" ::: "memory"); break;
    case 5: if (WARPS > 10) asm volatile("bar.sync 6, 64;" ::: "memory"); break;
    case 6: if (WARPS > 12) asm volatile("bar.sync 7, 64;" ::: "memory"); break;
    default: if (WARPS > 14) asm volatile("bar.sync 8, 64;" ::: "memory"); break;
    }
}

// The stores of q/k/v products that rotate their own outputs (RoPE and the
// KV append in their stores, one decode position): slots are the rows a
// product's row loop hands out, from the product's first row of [q; k; v];
// the first `rotated_slots` (q's and k's rows from there) come in pairs,
// slots 2p and 2p + 1 standing for rows i and i + half of one head, taken by
// neighbouring warps 2j and 2j + 1, which swap their sums in `exchanged` at
// their pair's barrier; each stores its rotated value, the query's into
// `query`, the key's into the key cache at `position`. Value rows are stored
// as they are. Nothing goes to the caches when the position is beyond them
// (`cached` false). WARPS, the block's warps, must be even.
template <typename C, u32 WARPS>
struct RotatingStores {
    float* query;
    C* key_cache;
    C* value_cache;
    const float* inverse_frequencies;
    float scaling;
    u32 position, head_dim, half, query_rows, kv_dim, rotated_slots;
    bool cached;
    // Each warp's sum for its partner, in two rounds' halves: a warp writes
    // a half again only after both have passed the barrier between.
    float (*exchanged)[WARPS];
    u32 round;

    // The row of [q; k; v] (from the product's first) `slot` stands for.
    __device__ __forceinline__ u32 row_of(u32 slot) const {
        if (slot >= rotated_slots) return slot;
        const u32 pair = slot >> 1, head = pair / half;
        return head * head_dim + (pair - head * half) + (slot & 1) * half;
    }
    // Stores `sum`, the product of `slot`'s row `row` of [q; k; v]; every
    // lane of the warp calls it, and both warps of a rotated pair.
    __device__ __forceinline__ void store(u32 slot, u32 row, float sum, u32 warp, u32 lane) {
        if (slot < rotated_slots) {
            if (lane == 0) exchanged[round][warp] = sum;
            warp_pair_barrier<WARPS>(warp);
            if (lane == 0) {
                const float other = exchanged[round][warp ^ 1];
                const bool second = slot & 1;
                float c, s;
                rope_cos_sin(position, inverse_frequencies[(slot >> 1) % half], scaling, &c, &s);
                const float2 pair = rope_rotate(second ? other : sum, second ? sum : other, c, s);
                const float value = second ? pair.y : pair.x;
                if (row < query_rows)
                    query[row] = value;
                else if (cached)
                    from_f32(value, &key_cache[(size_t)position * kv_dim + (row - query_rows)]);
            }
            round ^= 1;
        } else if (lane == 0 && cached) {
            from_f32(sum, &value_cache[(size_t)position * kv_dim + (row - query_rows - kv_dim)]);
        }
    }
};

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

// Reduces each thread's (best value, index) candidate over the block
// (blockDim.x a multiple of 32, at most 1024) and returns the winner to every
// thread: the larger value, the smaller index on ties. "No candidate" is
// (-INFINITY, 0xffffffff), which any real candidate beats.
__device__ void block_argmax_merge(float* best_value, u32* best_index) {
    __shared__ float best_values[32];
    __shared__ u32 best_indices[32];
    float best = *best_value;
    u32 index = *best_index;
    for (int round = 0; round < 2; ++round) {
        for (int offset = 16; offset > 0; offset >>= 1) {
            float other = __shfl_xor_sync(0xffffffffu, best, offset);
            u32 other_index = __shfl_xor_sync(0xffffffffu, index, offset);
            if (other > best || (other == best && other_index < index)) { best = other; index = other_index; }
        }
        if (round == 1) break;
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0) { best_values[warp] = best; best_indices[warp] = index; }
        __syncthreads();
        int warps = blockDim.x >> 5;
        best = lane < warps ? best_values[lane] : -INFINITY;
        index = lane < warps ? best_indices[lane] : 0xffffffffu;
        __syncthreads();
    }
    // After the second round every warp holds the block's answer.
    *best_value = best;
    *best_index = index;
}

// The first index of the largest non-NaN value of values[0..n) (0xffffffff
// when there is none), and that value through `best_value`, for every thread
// of the block. Ties go to the smaller index, as torch.argmax.
__device__ u32 block_argmax_or_none(const float* values, u32 n, float* best_value) {
    float best = -INFINITY;
    u32 best_index = 0xffffffffu;
    for (u32 i = threadIdx.x; i < n; i += blockDim.x) {
        float v = values[i];
        if (v > best || (best_index == 0xffffffffu && !isnan(v))) { best = v; best_index = i; }
    }
    block_argmax_merge(&best, &best_index);
    *best_value = best;
    return best_index;
}

// As block_argmax_or_none, but 0 when there is no non-NaN value.
__device__ u32 block_argmax(const float* values, u32 n, float* best_value) {
    u32 index = block_argmax_or_none(values, n, best_value);
    return index == 0xffffffffu ? 0 : index;
}

// Four consecutive elements widened to f32 (16-byte aligned for f32,
// 8-byte aligned for the 16-bit types).
__device__ __forceinline__ void load4(const float* p, float v[4]) {
    float4 q = *(const float4*)p;
    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
}
__device__ __forceinline__ void load4(const bf16* p, float v[4]) {
    uint2 q = *(const uint2*)p;
    v[0] = __uint_as_float(q.x << 16); v[1] = __uint_as_float(q.x & 0xffff0000u);
    v[2] = __uint_as_float(q.y << 16); v[3] = __uint_as_float(q.y & 0xffff0000u);
}
__device__ __forceinline__ void load4(const f16* p, float v[4]) {
    uint2 q = *(const uint2*)p;
    f16 h[4] = {{(unsigned short)(q.x & 0xffffu)}, {(unsigned short)(q.x >> 16)},
                {(unsigned short)(q.y & 0xffffu)}, {(unsigned short)(q.y >> 16)}};
    for (int j = 0; j < 4; ++j) v[j] = to_f32(h[j]);
}
