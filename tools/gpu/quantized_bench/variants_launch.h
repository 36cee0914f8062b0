// The variants of variants.cu, each added to its case as a Kernel of
// bench.cu: names say what differs from the kernels the case starts with
// (the project's: x quantized once by stage.cu, then the product).
static u32 variant_grid(u32 rows, u32 cap) { return std::min<u32>((rows + QUANT_WARPS - 1) / QUANT_WARPS, cap); }
static u32 quantize_blocks(u32 k) { return (k + 1023) / 1024; }
// Scratch for x quantized (the staged layout).
static u8* global_x() {
    static u8* scratch = nullptr;
    if (!scratch) cudaMalloc(&scratch, 1 << 20);
    return scratch;
}
using Product = void (*)(const u8*, const u8*, float*, u32, u32);
using Silu = void (*)(const u8*, const u8*, const u8*, float*, u32, u32);
struct Named { const char* name; Product kernel; u32 cap; };
struct NamedSilu { const char* name; Silu kernel; u32 cap; };
using Whole = void (*)(const u8*, const u8*, float*, u32, u32, u32);
using WholeSilu = void (*)(const u8*, const u8*, const u8*, float*, u32, u32, u32);
// Lanes a row for Q4_K a whole block a lane: the row's blocks, 8 to 32.
static u32 whole_lanes(u32 k) {
    const u32 blocks = k / 256;
    return blocks >= 32 ? 32 : blocks >= 16 ? 16 : 8;
}
static u32 whole_grid(u32 rows, u32 k, u32 cap) {
    const u32 per_block = QUANT_WARPS * (32 / whole_lanes(k));
    return std::min<u32>((rows + per_block - 1) / per_block, cap);
}

// q, k, v (and the LM head): rows of x normalised.
static void add_rows_variants(std::vector<Kernel>& kernels, bool q6, const u8* weight, size_t bytes, const float* x,
                              const float* norm, u32 k, u32 rows) {
    u8* xq = global_x();
    std::vector<Named> all;
    if (q6)
        all = {Named{"grid 264", matvecs_q6_k_q8_single, 264}, Named{"pipelined", rows_q6_k_pipelined, 528},
               Named{"pipelined grid 264", rows_q6_k_pipelined, 264}};
    else
        all = {Named{"grid 264", matvecs_q4_k_q8_single, 264}, Named{"grid 396", matvecs_q4_k_q8_single, 396},
               Named{"pipelined", rows_q4_k_pipelined, 528}, Named{"pairs", rows_q4_k_pairs, 528},
               Named{"pairs grid 396", rows_q4_k_pairs, 396}, Named{"pairs pipelined", rows_q4_k_pairs_pipelined, 528}};
    if (!q6)
        for (u32 cap : {528u, 264u, 1056u})
            kernels.push_back({std::string("whole grid ") + std::to_string(cap), [=](int copy, cudaStream_t s, float* out) {
                norm_quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, norm, xq, k, 1e-5f);
                rows_q4_k_whole<<<whole_grid(rows, k, cap), QUANT_THREADS, 0, s>>>(weight + copy * bytes, xq, out, rows, k, whole_lanes(k));
            }});
    if (!q6)
        for (u32 cap : {528u, 264u})
            kernels.push_back({std::string("whole transposed grid ") + std::to_string(cap), [=](int copy, cudaStream_t s, float* out) {
                norm_quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, norm, xq, k, 1e-5f);
                rows_q4_k_whole_transposed<<<whole_grid(rows, k, cap), QUANT_THREADS, 0, s>>>(transposed_of[weight] + copy * bytes, xq, out, rows, k, whole_lanes(k));
            }});
    for (Named v : all)
        kernels.push_back({v.name, [=](int copy, cudaStream_t s, float* out) {
            norm_quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, norm, xq, k, 1e-5f);
            v.kernel<<<variant_grid(rows, v.cap), QUANT_THREADS, 0, s>>>(weight + copy * bytes, xq, out, rows, k);
        }});
}

static void add_silu_variants(std::vector<Kernel>& kernels, const u8* gate, const u8* up, size_t bytes, const float* x,
                              const float* norm, u32 f, u32 h) {
    u8* xq = global_x();
    for (NamedSilu v : {NamedSilu{"grid 264", matvec_silu_q4_k_q8, 264}, NamedSilu{"grid 396", matvec_silu_q4_k_q8, 396},
                        NamedSilu{"units of 16 bytes", silu_q4_k_units, 528},
                        NamedSilu{"units of 16 bytes grid 264", silu_q4_k_units, 264}})
        kernels.push_back({v.name, [=](int copy, cudaStream_t s, float* out) {
            norm_quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, norm, xq, h, 1e-5f);
            v.kernel<<<variant_grid(f, v.cap), QUANT_THREADS, 0, s>>>(xq, gate + copy * bytes, up + copy * bytes, out, f, h);
        }});
    for (u32 cap : {528u, 264u, 132u})
        kernels.push_back({std::string("whole grid ") + std::to_string(cap), [=](int copy, cudaStream_t s, float* out) {
            norm_quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, norm, xq, h, 1e-5f);
            silu_q4_k_whole<<<whole_grid(f, h, cap), QUANT_THREADS, 0, s>>>(xq, gate + copy * bytes, up + copy * bytes, out, f, h, whole_lanes(h));
        }});
    for (u32 cap : {528u, 264u, 132u})
        kernels.push_back({std::string("whole transposed grid ") + std::to_string(cap), [=](int copy, cudaStream_t s, float* out) {
            norm_quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, norm, xq, h, 1e-5f);
            silu_q4_k_whole_transposed<<<whole_grid(f, h, cap), QUANT_THREADS, 0, s>>>(xq, transposed_of[gate] + copy * bytes, transposed_of[up] + copy * bytes, out, f, h, whole_lanes(h));
        }});
    kernels.push_back({"norm_quantize alone", [=](int, cudaStream_t s, float*) {
        norm_quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, norm, xq, h, 1e-5f);
    }});
}

static void add_matvec_add_variants(std::vector<Kernel>& kernels, const char* format, const u8* weight, size_t bytes,
                                    const float* x, u32 n, u32 k) {
    u8* xq = global_x();
    std::vector<Named> all;
    if (strcmp(format, "q6_k") == 0)
        all = {Named{"grid 264", matvec_add_q6_k_q8, 264}, Named{"grid 396", matvec_add_q6_k_q8, 396},
               Named{"pipelined", add_q6_k_pipelined, 528}, Named{"pipelined grid 264", add_q6_k_pipelined, 264}};
    else
        all = {Named{"grid 264", matvec_add_q4_k_q8, 264}, Named{"grid 396", matvec_add_q4_k_q8, 396},
               Named{"pipelined", add_q4_k_pipelined, 528}, Named{"pairs", add_q4_k_pairs, 528},
               Named{"pairs pipelined", add_q4_k_pairs_pipelined, 528}, Named{"pairs pipelined grid 264", add_q4_k_pairs_pipelined, 264}};
    for (Named v : all)
        kernels.push_back({v.name, [=](int copy, cudaStream_t s, float* out) {
            quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, xq, k);
            v.kernel<<<variant_grid(n, v.cap), QUANT_THREADS, 0, s>>>(weight + copy * bytes, xq, out, n, k);
        }});
    if (strcmp(format, "q4_k") == 0)
        for (u32 cap : {528u, 264u, 1056u})
            kernels.push_back({std::string("whole grid ") + std::to_string(cap), [=](int copy, cudaStream_t s, float* out) {
                quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, xq, k);
                add_q4_k_whole<<<whole_grid(n, k, cap), QUANT_THREADS, 0, s>>>(weight + copy * bytes, xq, out, n, k, whole_lanes(k));
            }});
    if (strcmp(format, "q4_k") == 0)
        for (u32 cap : {528u, 264u})
            kernels.push_back({std::string("whole transposed grid ") + std::to_string(cap), [=](int copy, cudaStream_t s, float* out) {
                quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, xq, k);
                add_q4_k_whole_transposed<<<whole_grid(n, k, cap), QUANT_THREADS, 0, s>>>(transposed_of[weight] + copy * bytes, xq, out, n, k, whole_lanes(k));
            }});
    kernels.push_back({"quantize alone", [=](int, cudaStream_t s, float*) { quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, xq, k); }});
}
