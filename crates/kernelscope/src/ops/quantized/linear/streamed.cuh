// Decode's quantized products with the weights streamed into shared memory
// by bulk asynchronous copies (Hopper's `cp.async.bulk`, sm_90 and later),
// after products.cuh. Each warp (or pair of warps, for long rows) owns a
// ring of `stages` slots of one row (of each matrix it reads) and keeps
// every slot but the one it multiplies in flight: one lane issues one copy
// a row, an mbarrier counts its bytes in, and the lanes read the row from
// shared memory with the formats' own `load<FromShared>`. The loop in
// products.cuh holds a warp's loads in registers, four units a lane, so
// what is in flight is bounded by registers; here by shared memory. Each
// lane also holds its units of x in registers (HeldFormat): read from L1
// for every row, x had been twice the weights' bytes and most of the
// stalls. The loops issue their first copies before their own wait for
// the previous kernel (the weights depend on none), and their kernels open
// with `reads_weights_before_waiting` (prelude.cuh) to say so.
//
// The planar rows (`quant::planes`) are whole 16-byte multiples at 16-byte
// boundaries, which is what a bulk copy needs; a row's slot holds the row
// exactly as in global memory, so `load` finds its planes at the same
// offsets.

// The most threads a streamed product's block has.
#define STREAM_THREADS 512

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ u32 shared_address(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void slot_barrier_init(unsigned long long* barrier) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
}
// Makes the initialised barriers visible to the copy engine's proxy.
__device__ __forceinline__ void slot_barriers_published() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// Lane 0's arrival, announcing the bytes the slot's copies will bring.
__device__ __forceinline__ void slot_expect_bytes(unsigned long long* barrier, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_copy_to_slot(u8* slot, const u8* source, u32 bytes,
                                                  unsigned long long* barrier) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
            shared_address(slot)),
        "l"(source), "r"(bytes), "r"(shared_address(barrier))
        : "memory");
}
// Waits until the slot's use number `use` (0, 1, 2, ...) has arrived: the
// barrier's phase parity flips once a use.
__device__ __forceinline__ void slot_wait(unsigned long long* barrier, u32 use) {
    u32 done;
    do {
        asm volatile(
            "{ .reg .pred ready;\n"
            "mbarrier.try_wait.parity.shared::cta.b64 ready, [%1], %2;\n"
            "selp.u32 %0, 1, 0, ready; }"
            : "=r"(done)
            : "r"(shared_address(barrier)), "r"(use & 1u)
            : "memory");
    } while (!done);
}
#endif

// Shared memory the streaming loop takes for `warps` warps of `stages`
// slots of `slot_bytes`: the barriers (8 bytes each, rounded to 128), then
// the slots. `barrier_bytes` in streamed.rs is the same.
__device__ __forceinline__ u32 streamed_barrier_bytes(u32 warps, u32 stages) { return (warps * stages * 8 + 127) / 128 * 128; }

// The row loop of the streamed products: warp w of block b takes rows
// first = b * warps + w, first + stride, ... (stride the grid's warps);
// MATRICES matrices a row (gate and up), each row `row_bytes` long, named
// by `pointers(row, rows)`. For each row, `multiply(rows, sums)` (every
// lane; `rows` the row of each matrix in shared memory) leaves the row's
// products in lane 0's `sums`, and lane 0 runs `store(row, sums)`. Every
// warp of the block calls it with the same `stages`; x is only read after
// `wait_for_previous_kernel`, which this calls once the first copies are
// issued.
template <int MATRICES, typename Pointers, typename Multiply, typename Store>
__device__ __forceinline__ void streamed_rows(u32 n, u32 row_bytes, u32 stages, Pointers pointers, Multiply multiply,
                                              Store store) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 quant_storage[];
    u8* storage = (u8*)quant_storage;
    const u32 warps = blockDim.x / 32, warp = quant_uniform_warp(), lane = threadIdx.x & 31;
    const u32 slot_bytes = MATRICES * row_bytes;
    unsigned long long* barriers = (unsigned long long*)storage + warp * stages;
    u8* slots = storage + streamed_barrier_bytes(warps, stages) + (size_t)warp * stages * slot_bytes;
    const u32 first = blockIdx.x * warps + warp, stride = gridDim.x * warps;
    if (lane == 0) {
        for (u32 s = 0; s < stages; ++s) slot_barrier_init(&barriers[s]);
        slot_barriers_published();
    }
    __syncwarp();
    // Step i of this warp reads row first + i * stride into slot i % stages,
    // matrix m's row at m * row_bytes.
    const auto request = [&](u32 step) {
        const u32 row = first + step * stride;
        if (lane != 0 || row >= n) return;
        unsigned long long* barrier = &barriers[step % stages];
        u8* slot = slots + (size_t)(step % stages) * slot_bytes;
        const u8* rows[MATRICES];
        pointers(row, rows);
        slot_expect_bytes(barrier, slot_bytes);
        #pragma unroll
        for (int m = 0; m < MATRICES; ++m) bulk_copy_to_slot(slot + m * row_bytes, rows[m], row_bytes, barrier);
    };
    for (u32 s = 0; s < stages; ++s) request(s);
    wait_for_previous_kernel();
    multiply.prepare();
    for (u32 step = 0; first + step * stride < n; ++step) {
        const u32 s = step % stages;
        slot_wait(&barriers[s], step / stages);
        const u8* rows[MATRICES];
        #pragma unroll
        for (int m = 0; m < MATRICES; ++m) rows[m] = slots + (size_t)s * slot_bytes + m * row_bytes;
        float sums[MATRICES];
        multiply(rows, sums);
        if (lane == 0) store(first + step * stride, sums);
        // Every lane is done with the slot before lane 0 refills it.
        __syncwarp();
        request(step + stages);
    }
#else
    __trap();
#endif
}

// x for one unit of a format, held in registers, and the unit's product
// against it: the formats the streamed products hold x for.
template <typename F> struct HeldFormat;
template <> struct HeldFormat<Q4_K_Pairs> {
    struct Fragment { int4 values[4]; float2 scales, sums; };
    __device__ static __forceinline__ Fragment fragment(const Staged& x, u32 unit) {
        const u32 low_block = (unit / 4) * 8 + (unit % 4) * 2;
        Fragment f;
        #pragma unroll
        for (int part = 0; part < 4; ++part) f.values[part] = staged16(x, low_block * 32 + part * 16);
        f.scales = *(const float2*)(x.scales + low_block);
        f.sums = *(const float2*)(x.sums + low_block);
        return f;
    }
    __device__ static __forceinline__ float dot(const Q4_K_Pairs::Unit& u, const Fragment& h, u32) {
        int low = dot16(low_nibbles(u.low_half), h.values[0], 0);
        low = dot16(low_nibbles(u.high_half), h.values[1], low);
        int high = dot16(high_nibbles(u.low_half), h.values[2], 0);
        high = dot16(high_nibbles(u.high_half), h.values[3], high);
        const float scaled = h.scales.x * (float)((int)(u.scale_pair & 0xffu) * low) +
                             h.scales.y * (float)((int)(u.scale_pair >> 8) * high);
        const float minimum = (float)(u.min_pair & 0xffu) * h.sums.x + (float)(u.min_pair >> 8) * h.sums.y;
        return half_to_float(u.dm) * scaled - half_to_float(u.dm >> 16) * minimum;
    }
};
template <> struct HeldFormat<Q6_K> {
    struct Fragment { int4 values[4]; float scales[4]; };
    __device__ static __forceinline__ Fragment fragment(const Staged& x, u32 unit) {
        const u32 v = unit % 4, n = v / 2, c = v % 2, first_block = (unit / 4) * 8 + n * 4;
        Fragment f;
        #pragma unroll
        for (int t = 0; t < 4; ++t) {
            f.values[t] = staged16(x, (first_block + t) * 32 + c * 16);
            f.scales[t] = x.scales[first_block + t];
        }
        return f;
    }
    // Q6_K::dot with x's loads replaced by the fragment's.
    __device__ static __forceinline__ float dot(const Q6_K::Unit& u, const Fragment& h, u32 unit) {
        const u32 c = unit % 2;
        float sum = 0.0f;
        #pragma unroll
        for (u32 t = 0; t < 4; ++t) {
            const uint4 ql = (t & 1) ? u.high : u.low;
            const uint4 q = make_uint4(Q6_K::centred(ql.x, u.qh.x, t), Q6_K::centred(ql.y, u.qh.y, t),
                                       Q6_K::centred(ql.z, u.qh.z, t), Q6_K::centred(ql.w, u.qh.w, t));
            const int dot = dot16(q, h.values[t], 0);
            const u32 scales = (t & 2) ? u.scales_high : u.scales_low;
            const float scale = (float)(signed char)((scales >> (8 * (c + 2 * (t & 1)))) & 0xffu);
            sum += scale * h.scales[t] * (float)dot;
        }
        return half_to_float(u.d) * sum;
    }
};
// `multiply` of streamed_rows for Q4_K rows of up to UNITS_PER_LANE * 32
// pairs of sub-blocks (k up to UNITS_PER_LANE * 2,048): every row puts the
// same units on the same lane, so each lane loads its units of x into
// registers once (`prepare`, after the previous kernel) and a row's
// products read only weights. Read from global memory for every unit, x
// was 2 bytes of L1 traffic for each byte of weights and most of the
// warps' stalls. Where `squares` is not null, x is o_proj's unnormalised
// staging (chunked.cuh): `prepare` also takes x's 1 / RMS into `norm`,
// which the sums are multiplied by (1, exactly, where it is null).
template <int UNITS_PER_LANE, int MATRICES>
struct Q4KPairsHeldX {
    using Held = HeldFormat<Q4_K_Pairs>;
    u32 blocks;
    Staged x;
    const float* squares;
    float eps;
    float norm;
    Held::Fragment held[UNITS_PER_LANE];
    __device__ __forceinline__ void prepare() {
        const u32 lane = threadIdx.x & 31, units = blocks * Q4_K_Pairs::UNITS;
        #pragma unroll
        for (int i = 0; i < UNITS_PER_LANE; ++i)
            if (lane + 32 * i < units) held[i] = Held::fragment(x, lane + 32 * i);
        norm = squares != nullptr ? inverse_rms(squares, blocks * Q4_K::BLOCK, eps) : 1.0f;
    }
    __device__ __forceinline__ void operator()(const u8* const* rows, float* sums) const {
        const u32 lane = threadIdx.x & 31, units = blocks * Q4_K_Pairs::UNITS;
        #pragma unroll
        for (int m = 0; m < MATRICES; ++m) {
            float sum = 0.0f;
            #pragma unroll
            for (int i = 0; i < UNITS_PER_LANE; ++i) {
                const u32 unit = lane + 32 * i;
                if (unit < units) sum += Held::dot(Q4_K_Pairs::load<FromShared>(rows[m], blocks, unit), held[i], unit);
            }
            sums[m] = warp_sum(sum) * norm;
        }
    }
};

// out[i] = silu(gate[i] · x) * (up[i] · x) over Q4_K rows of up to
// UNITS_PER_LANE * 2,048 values, x held in registers (Q4KPairsHeldX).
// Where `squares` is not null, x is o_proj's unnormalised staging
// (chunked.cuh), normalised by Q4KPairsHeldX.
template <int UNITS_PER_LANE>
__device__ void streamed_silu_held_x(const u8* x, const u8* gate, const u8* up, float* out, u32 n, u32 k,
                                     u32 stages, const float* squares, float eps) {
    // The kernel after (quantize_q8 before a streamed down, which lets
    // down launch in turn) may launch now: its blocks wait, and down's
    // take each multiprocessor as this kernel's blocks leave it.
    let_next_kernel_launch();
    const u32 blocks = k / Q4_K::BLOCK, row_bytes = (u32)planar_row_bytes<Q4_K>(blocks);
    streamed_rows<2>(
        n, row_bytes, stages,
        [&](u32 row, const u8** rows) {
            rows[0] = gate + (size_t)row * row_bytes;
            rows[1] = up + (size_t)row * row_bytes;
        },
        Q4KPairsHeldX<UNITS_PER_LANE, 2>{blocks, staged_at(x, k), squares, eps},
        [&](u32 row, const float* sums) { out[row] = silu(sums[0]) * sums[1]; });
}

// q, k and v's products over Q4_K rows of up to UNITS_PER_LANE * 2,048
// values (x held, Q4KPairsHeldX), with RoPE and the KV append in their
// stores, as `quantized_matvecs_rope` (products.cuh) computes them: the
// matrices of [q; k; v] from row `first_row` on, a warp a pair of rows. A
// rotated pair is a head's rows i and i + half, so lane 0 rotates the two
// sums it holds (the register loop pairs two warps at a barrier instead);
// value rows go two at a time, stored as they are. Rows of a pair always
// lie in one matrix: matrices are whole heads.
template <int UNITS_PER_LANE, typename C>
__device__ void streamed_matvecs_rope_held_x(const u8* x, const u8* weight_a, const u8* weight_b,
                                             const u8* weight_c, u32 rows_a, u32 rows_b, u32 rows_c, u32 k,
                                             u32 first_row, float* query, C* key_cache, C* value_cache,
                                             const float* inverse_frequencies, const u32* positions, u32 first,
                                             u32 max_positions, u32 query_heads, u32 kv_heads, u32 head_dim,
                                             float attention_scaling, u32 stages) {
    const u32 blocks = k / Q4_K::BLOCK, row_bytes = (u32)planar_row_bytes<Q4_K>(blocks);
    const u32 n = rows_a + rows_b + rows_c, query_rows = query_heads * head_dim, kv_dim = kv_heads * head_dim;
    const u32 half = head_dim / 2, rotated_end = query_rows + kv_dim;
    const u32 rotated = first_row < rotated_end ? min(rotated_end - first_row, n) : 0;
    // The row (from the product's first) of row m of pair `pair`.
    const auto row_of = [&](u32 pair, u32 m) -> u32 {
        if (2 * pair >= rotated) return 2 * pair + m;
        const u32 head = pair / half;
        return head * head_dim + (pair - head * half) + m * half;
    };
    streamed_rows<2>(
        n / 2, row_bytes, stages,
        [&](u32 pair, const u8** rows) {
            #pragma unroll
            for (int m = 0; m < 2; ++m) {
                const u32 row = row_of(pair, m);
                rows[m] = row < rows_a            ? weight_a + (size_t)row * row_bytes
                          : row < rows_a + rows_b ? weight_b + (size_t)(row - rows_a) * row_bytes
                                                  : weight_c + (size_t)(row - rows_a - rows_b) * row_bytes;
            }
        },
        Q4KPairsHeldX<UNITS_PER_LANE, 2>{blocks, staged_at(x, k), nullptr, 0.0f},
        [&](u32 pair, const float* sums) {
            // Read after the wait: the position is the previous kernels' to set.
            const u32 position = positions[first];
            const bool cached = position < max_positions;
            const u32 row = first_row + row_of(pair, 0);
            // A rotated row of [q; k; v]: the query's, or the key's.
            const auto store_rotated = [&](u32 at, float value) {
                if (at < query_rows)
                    query[at] = value;
                else if (cached)
                    from_f32(value, &key_cache[(size_t)position * kv_dim + (at - query_rows)]);
            };
            if (2 * pair < rotated) {
                float c, s;
                rope_cos_sin(position, inverse_frequencies[pair % half], attention_scaling, &c, &s);
                const float2 turned = rope_rotate(sums[0], sums[1], c, s);
                store_rotated(row, turned.x);
                store_rotated(row + half, turned.y);
            } else if (cached) {
                C* values = value_cache + (size_t)position * kv_dim + (row - rotated_end);
                from_f32(sums[0], &values[0]);
                from_f32(sums[1], &values[1]);
            }
        });
}

// o_proj streamed (`quantized_matvec_add_norm_staged` of chunked.cuh with
// its weights brought in by bulk copies): a block owns the 32 output rows
// of one chunk, its NORM_STAGE_WARPS warps two rows each (rows w and w +
// 16), and every row's copy goes out as the block starts, before the wait
// (the whole matrix is in flight at once: llama-3-8b's 4,096 rows of 2,304
// bytes, 72 KiB a block). The attention combine lets it launch after the
// combine's own wait, so its copies run while the combine does (let launch
// before, its resident blocks slowed the attention split: docs/PERF.md run
// AZ). x (attention's output, staged by the combine) is held in registers
// (Q4KPairsHeldX);
// out[row] += W[row] · x, and the new out is staged times `norm_weight`
// for the next norm's readers with its chunk's sum of squares, as
// chunked.cuh does. Shared memory: the warps' barriers
// (128 bytes), the chunk's 32 sums (128), then the slots.
template <int UNITS_PER_LANE>
__device__ void streamed_add_norm_staged(const u8* weight, const u8* x, float* out, u32 n, u32 k,
                                         const float* norm_weight, u8* staged, float* squares) {
#if __CUDA_ARCH__ >= 900
    extern __shared__ float4 quant_storage[];
    u8* storage = (u8*)quant_storage;
    const u32 warp = quant_uniform_warp(), lane = threadIdx.x & 31;
    const u32 blocks = k / Q4_K::BLOCK, row_bytes = (u32)planar_row_bytes<Q4_K>(blocks);
    const u32 first = blockIdx.x * 32, row = first + warp;
    unsigned long long* barrier = (unsigned long long*)storage + warp;
    float* chunk = (float*)(storage + streamed_barrier_bytes(NORM_STAGE_WARPS, 1));
    u8* slot = storage + streamed_barrier_bytes(NORM_STAGE_WARPS, 1) + 32 * sizeof(float) + (size_t)warp * 2 * row_bytes;
    if (lane == 0) {
        slot_barrier_init(barrier);
        slot_barriers_published();
        slot_expect_bytes(barrier, 2 * row_bytes);
        bulk_copy_to_slot(slot, weight + (size_t)row * row_bytes, row_bytes, barrier);
        bulk_copy_to_slot(slot + row_bytes, weight + (size_t)(row + NORM_STAGE_WARPS) * row_bytes, row_bytes,
                          barrier);
    }
    // The norm weight is a weight: loaded before the wait too.
    const float4 weight_of_lane = warp == 0 && lane < 8 ? *(const float4*)(norm_weight + first + 4 * lane)
                                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    __syncwarp();
    wait_for_previous_kernel();
    // The streamed gate/up after may launch now and fill its rings while
    // this multiplies.
    let_next_kernel_launch();
    const u32 mine = row + lane * NORM_STAGE_WARPS;
    const float previous = lane < 2 ? out[mine] : 0.0f;
    Q4KPairsHeldX<UNITS_PER_LANE, 2> multiply{blocks, staged_at(x, k), nullptr, 0.0f};
    multiply.prepare();
    slot_wait(barrier, 0);
    const u8* rows[2] = {slot, slot + row_bytes};
    float sums[2];
    multiply(rows, sums);
    add_and_stage_chunk(previous, sums, out, chunk, mine, first, weight_of_lane, staged, n, squares);
#else
    __trap();
#endif
}

// ---- rows too long for one warp to hold x: a row split over SPLIT warps ----

// out[row] += W[row] · x for rows split over SPLIT warps: the block's warps
// in groups of SPLIT, each group a ring of `stages` rows in shared memory
// filled by bulk copies; warp p of a group holds x for its UNITS_PER_LANE *
// 32 units of the row (units p * UNITS_PER_LANE * 32 onwards) and leaves
// its share in shared memory, which the group's first warp adds after a
// barrier of the group's threads. For rows whose x would not fit in one
// warp's registers (llama-3-8b's down projection: 14,336 values, 7 units a
// lane). Two halves: `begin` issues the first copies (the weights depend
// on nothing), `finish` waits for x and multiplies; whatever makes x ready
// runs between them (the previous kernel; in the feed-forward kernel,
// gate/up and x's quantization, so the ring fills while they run).
template <typename F, int UNITS_PER_LANE, int SPLIT>
struct SplitRows {
    const u8* weight;
    u32 n, blocks, row_bytes, units, stages, group, part, lane, first, stride;
    unsigned long long* barriers;
    float* shares;
    u8* slots;
    bool leader;

    // The group's barrier (id 0 is __syncthreads').
    __device__ __forceinline__ void group_barrier() const {
        asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "r"(32 * SPLIT) : "memory");
    }
#if __CUDA_ARCH__ >= 900
    __device__ __forceinline__ void request(u32 step) const {
        const u32 row = first + step * stride;
        if (!leader || row >= n) return;
        unsigned long long* barrier = &barriers[step % stages];
        slot_expect_bytes(barrier, row_bytes);
        bulk_copy_to_slot(slots + (size_t)(step % stages) * row_bytes, weight + (size_t)row * row_bytes, row_bytes,
                          barrier);
    }
#endif
    // Lays the ring out at `storage` (every thread of the block calls it)
    // and issues its first `stages` copies.
    __device__ __forceinline__ void begin(const u8* weight_rows, u32 rows, u32 k, u32 ring_stages, u8* storage) {
#if __CUDA_ARCH__ >= 900
        weight = weight_rows;
        n = rows;
        blocks = k / F::BLOCK;
        row_bytes = (u32)planar_row_bytes<F>(blocks);
        units = blocks * F::UNITS;
        stages = ring_stages;
        const u32 warps = blockDim.x / 32, warp = quant_uniform_warp(), groups = warps / SPLIT;
        lane = threadIdx.x & 31;
        group = warp / SPLIT;
        part = warp % SPLIT;
        barriers = (unsigned long long*)storage + group * stages;
        shares = (float*)(storage + streamed_barrier_bytes(groups, stages)) + group * SPLIT * 2;
        slots = storage + streamed_barrier_bytes(groups, stages) + streamed_barrier_bytes(groups * SPLIT, 1) +
                (size_t)group * stages * row_bytes;
        first = blockIdx.x * groups + group;
        stride = gridDim.x * groups;
        leader = part == 0 && lane == 0;
        if (leader) {
            for (u32 s = 0; s < stages; ++s) slot_barrier_init(&barriers[s]);
            slot_barriers_published();
        }
        group_barrier();
        for (u32 s = 0; s < stages; ++s) request(s);
#else
        __trap();
#endif
    }
    // out[row] += W[row] · x for every row of this group, x quantized as
    // `Staged` at `xq` (`staged_bytes(k)` bytes), ready when this is called.
    __device__ __forceinline__ void finish(const u8* xq, float* out) const {
#if __CUDA_ARCH__ >= 900
        const Staged x = staged_at(xq, blocks * F::BLOCK);
        typename HeldFormat<F>::Fragment held[UNITS_PER_LANE];
        #pragma unroll
        for (int i = 0; i < UNITS_PER_LANE; ++i) {
            const u32 unit = (part * UNITS_PER_LANE + i) * 32 + lane;
            if (unit < units) held[i] = HeldFormat<F>::fragment(x, unit);
        }
        for (u32 step = 0; first + step * stride < n; ++step) {
            const u32 s = step % stages;
            slot_wait(&barriers[s], step / stages);
            const u8* row = slots + (size_t)s * row_bytes;
            float sum = 0.0f;
            #pragma unroll
            for (int i = 0; i < UNITS_PER_LANE; ++i) {
                const u32 unit = (part * UNITS_PER_LANE + i) * 32 + lane;
                if (unit < units) sum += HeldFormat<F>::dot(F::template load<FromShared>(row, blocks, unit), held[i], unit);
            }
            sum = warp_sum(sum);
            if (lane == 0) shares[part * 2 + (step & 1)] = sum;
            // Every warp of the group is done with the slot and has left its share.
            group_barrier();
            if (leader) {
                float total = 0.0f;
                #pragma unroll
                for (int p = 0; p < SPLIT; ++p) total += shares[p * 2 + (step & 1)];
                out[first + step * stride] += total;
            }
            request(step + stages);
        }
#else
        __trap();
#endif
    }
};

// The split rows as one kernel's body: the copies, the previous kernel's
// end, the products.
template <typename F, int UNITS_PER_LANE, int SPLIT>
__device__ void streamed_add_split(const u8* weight, const u8* xq, float* out, u32 n, u32 k, u32 stages) {
    extern __shared__ float4 quant_storage[];
    // The next layer's attention norm may launch now (it lets the streamed
    // q/k/v launch in turn), as gate/up lets quantize_q8.
    let_next_kernel_launch();
    SplitRows<F, UNITS_PER_LANE, SPLIT> rows;
    rows.begin(weight, n, k, stages, (u8*)quant_storage);
    wait_for_previous_kernel();
    rows.finish(xq, out);
}
