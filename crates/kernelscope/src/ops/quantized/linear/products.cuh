// The row loops and kernel bodies every quantized format's kernels share
// (after quantized.cuh and formats.cuh; kernels.cu instantiates them per
// format): which rows each warp reads, how many of their units are in
// flight, and where the sums go.

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
// `finish(row, sum)` runs on every lane of the warp with the row's sum
// (so it may meet other warps at a barrier); quantized_rows_pipelined's
// `store(row, sums)` on lane 0 alone.
template <typename F, typename Pointers, typename Finish>
__device__ __forceinline__ void quantized_rows_pipelined_each(u32 n, u32 blocks, const Staged& x,
                                                              Pointers pointers, Finish finish) {
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
            finish(row, warp_sum(sum));
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
template <typename F, typename Pointers, typename Store>
__device__ __forceinline__ void quantized_rows_pipelined(u32 n, u32 blocks, const Staged& x, Pointers pointers,
                                                         Store store) {
    const u32 lane = threadIdx.x & 31;
    quantized_rows_pipelined_each<F>(n, blocks, x, pointers, [&](u32 row, float sum) {
        if (lane == 0) store(row, &sum);
    });
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

// quantized_matvecs over rows of [q; k; v] with RoPE and the KV-cache
// append in its stores, for one decode position (positions[first]): the
// rows of A, B and C are those of [q; k; v] from row `first_row` on (0,
// q's rows, or q's and k's: whole matrices). Warps take the rotated rows
// (q's and k's) in pairs and store them as the prelude's RotatingStores
// says: neighbouring warps take rows i and i + half of one head, meet at a
// barrier of their own (64 threads), and each stores its rotated value,
// the query's into `query`, the key's into the key cache at the position;
// value rows go to the value cache. The
// sums are quantized_matvecs', the rotation rope_append's (the prelude's),
// so fused and unfused agree bit for bit. A position beyond the cache
// stores no key or value (the host checks positions before they get here).
template <typename F, typename C>
__device__ void quantized_matvecs_rope(const u8* x, const u8* weight_a, const u8* weight_b, const u8* weight_c,
                                       u32 rows_a, u32 rows_b, u32 rows_c, u32 k, u32 first_row, float* query,
                                       C* key_cache, C* value_cache, const float* inverse_frequencies,
                                       const u32* positions, u32 first, u32 max_positions, u32 query_heads,
                                       u32 kv_heads, u32 head_dim, float attention_scaling) {
    __shared__ float exchanged[2][QUANT_WARPS];
    const u32 blocks = k / F::BLOCK, n = rows_a + rows_b + rows_c;
    const u32 query_rows = query_heads * head_dim, kv_dim = kv_heads * head_dim;
    const u32 rotated_end = query_rows + kv_dim;
    const u32 rotated = first_row < rotated_end ? min(rotated_end - first_row, n) : 0;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const u32 position = positions[first];
    RotatingStores<C, QUANT_WARPS> stores{query,    key_cache,  value_cache, inverse_frequencies,
                                          attention_scaling, position, head_dim, head_dim / 2, query_rows,
                                          kv_dim,   rotated,    position < max_positions, exchanged, 0};
    const u32 warp = quant_uniform_warp(), lane = threadIdx.x & 31;
    const auto pointers = [&](u32 slot, const u8** rows) {
        const u32 row = stores.row_of(slot);
        rows[0] = row < rows_a            ? weight_a + row * row_bytes
                  : row < rows_a + rows_b ? weight_b + (row - rows_a) * row_bytes
                                          : weight_c + (row - rows_a - rows_b) * row_bytes;
    };
    prefetch_first_rows<1, MATVEC_GROUP>(n, row_bytes, pointers);
    quantized_rows_pipelined_each<F>(n, blocks, staged_at(x, k), pointers, [&](u32 slot, float sum) {
        stores.store(slot, first_row + stores.row_of(slot), sum, warp, lane);
    });
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
        [&](u32 row, const float* sums) { out[row] = silu(sums[0]) * sums[1]; });
}

// out[n, k] = W dequantized to bf16 (rounded to nearest even): the weight
// of a prefill chunk's tensor-core GEMM, written to scratch and read once.
// A thread a unit (its blocks' fields read once), a warp 32 consecutive
// units of the flattened matrix, whose values are one contiguous stretch
// of `out` (rows are whole units). Each lane writes its runs into the
// warp's tile in shared memory, then the warp stores the tile in whole
// 16-byte lanes: stored straight from registers, a unit's runs sit 16
// values from its neighbours', every 32-byte sector was half written by
// each instruction and the kernel ran at 46 % of the read ceiling against
// 86 % staged (llama-3-8b's gate, H200). An element a thread, each
// re-reading its block's scales, had run at about 260 GB/s. Formats with
// units of 64 values (Q6_K) hold two groups in flight a warp; 128 threads
// a block (DEQUANTIZE_THREADS), a warp for every group.
#define DEQUANTIZE_THREADS 128
template <typename F>
__device__ void quantized_dequantize_bf16(const u8* weight, bf16* out, u32 n, u32 k) {
    constexpr u32 VALUES = F::BLOCK / F::UNITS, UNROLL = VALUES >= 64 ? 2 : 1;
    constexpr u32 WARP_VECTORS = 32 * VALUES * 2 / 16, WARPS = DEQUANTIZE_THREADS / 32;
    __shared__ uint4 tiles_of_block[WARPS * UNROLL * WARP_VECTORS];
    const u32 warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint4* tiles = tiles_of_block + warp * UNROLL * WARP_VECTORS;
    const u32 blocks = k / F::BLOCK, units = blocks * F::UNITS, total = n * units;
    const size_t row_bytes = planar_row_bytes<F>(blocks);
    const u32 warps = gridDim.x * WARPS;
    for (u32 group = blockIdx.x * WARPS + warp; group * 32 < total; group += UNROLL * warps) {
        typename F::Unit loaded[UNROLL];
        #pragma unroll
        for (u32 u = 0; u < UNROLL; ++u) {
            const u32 i = (group + u * warps) * 32 + lane;
            if (i < total) {
                const u32 row = i / units;
                loaded[u] = F::load(weight + row * row_bytes, blocks, i - row * units);
            }
        }
        #pragma unroll
        for (u32 u = 0; u < UNROLL; ++u) {
            const u32 first_unit = (group + u * warps) * 32, i = first_unit + lane;
            if (i < total) {
                bf16* tile = (bf16*)(tiles + u * WARP_VECTORS);
                // The tile starts at the first unit's block (32 divides
                // into whole blocks' units of every format).
                const u32 row = i / units, within = i - row * units, first_row = first_unit / units;
                const u32 block_offset = (row - first_row) * k + (within / F::UNITS) * F::BLOCK -
                                         (first_unit - first_row * units) / F::UNITS * F::BLOCK;
                #pragma unroll
                for (u32 r = 0; r < F::RUNS; ++r) {
                    float values[16];
                    const u32 first = F::run(loaded[u], within, r, values) % F::BLOCK;
                    u32 packed[8];
                    #pragma unroll
                    for (u32 e = 0; e < 8; ++e)
                        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed[e]) : "f"(values[2 * e + 1]), "f"(values[2 * e]));
                    uint4* destination = (uint4*)(tile + block_offset + first);
                    destination[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
                    destination[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
                }
            }
        }
        __syncwarp();
        #pragma unroll
        for (u32 u = 0; u < UNROLL; ++u) {
            const u32 first_unit = (group + u * warps) * 32;
            if (first_unit >= total) break;
            const u32 vectors = min(32u, total - first_unit) * (VALUES * 2 / 16);
            uint4* destination = (uint4*)(out + (size_t)first_unit * VALUES);
            for (u32 v = lane; v < vectors; v += 32) destination[v] = tiles[u * WARP_VECTORS + v];
        }
        __syncwarp();
    }
}
