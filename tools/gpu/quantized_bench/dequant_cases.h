// The dequantization cases of bench.cu: prefill's dequantize_<format>_bf16
// (kernels.cu) and the variants of dequant_variants.cu over llama-3-8b's
// and llama-3.2-1b's matrices, timed as the decode kernels are (one graph,
// weight copies beyond L2), rated by the bytes read and written together;
// each variant's output compared bit for bit with the project kernel's.
using Dequantize = void (*)(const u8*, bf16*, u32, u32);
struct NamedDequantize {
    const char* name; Dequantize kernel; u32 units_a_thread; u32 most_blocks;
    u32 threads = 256; u32 shared = 0;  // shared: bytes a warp
};

static void run_dequant_cases(double read_rate, const char* only) {
    struct DequantCase { const char* name; const char* format; u32 n, k; };
    for (DequantCase c : {DequantCase{"8b gate dequant q4_k", "q4_k", 14336, 4096}, DequantCase{"8b down dequant q6_k", "q6_k", 4096, 14336},
                          DequantCase{"8b q dequant q4_k", "q4_k", 4096, 4096}, DequantCase{"1b gate dequant q4_k", "q4_k", 8192, 2048}}) {
        if (only && std::string(c.name).find(only) == std::string::npos) continue;
        const bool q6 = strcmp(c.format, "q6_k") == 0;
        const size_t read = (size_t)c.n * (c.k / 256) * (q6 ? 210 : 144), written = (size_t)c.n * c.k * 2;
        const int copies = (int)std::max<size_t>(2, (256u << 20) / read + 1);
        Matrix w = random_matrix(c.format, c.n, c.k, copies);
        bf16* out;
        CHECK(cudaMalloc(&out, written));
        // Q4_K units hold 32 values, Q6_K's 64.
        const u32 unit_values = q6 ? 64 : 32;
        std::vector<NamedDequantize> all;
        if (q6)
            all = {{"dequantize_q6_k_bf16 (project)", dequantize_q6_k_bf16, 2, 1u << 30, 128},
                   {"idx32", dequant_q6_k_idx32, 4, 4096},
                   {"idx32 cvt", dequant_q6_k_idx32_cvt, 4, 4096},
                   {"idx32 cvt cs", dequant_q6_k_idx32_cvt_cs, 4, 4096},
                   {"idx32 cs", dequant_q6_k_idx32_cs, 4, 4096},
                   {"idx32 cvt u2", dequant_q6_k_idx32_cvt_u2, 2, 4096},
                   {"idx32 cvt u8", dequant_q6_k_idx32_cvt_u8, 8, 4096},
                   {"idx32 cvt u1", dequant_q6_k_idx32_cvt_u1, 1, 1u << 30},
                   {"idx32 cvt u2 full grid", dequant_q6_k_idx32_cvt_u2, 2, 1u << 30},
                   {"write only", dequant_write_only, 2, 4096}};
        else
            all = {{"dequantize_q4_k_bf16 (project)", dequantize_q4_k_bf16, 1, 1u << 30, 128},
                   {"idx32", dequant_q4_k_idx32, 4, 4096},
                   {"idx32 cvt", dequant_q4_k_idx32_cvt, 4, 4096},
                   {"idx32 cvt cs", dequant_q4_k_idx32_cvt_cs, 4, 4096},
                   {"idx32 cs", dequant_q4_k_idx32_cs, 4, 4096},
                   {"idx32 cvt u2", dequant_q4_k_idx32_cvt_u2, 2, 4096},
                   {"idx32 cvt u8", dequant_q4_k_idx32_cvt_u8, 8, 4096},
                   {"idx32 cvt u1", dequant_q4_k_idx32_cvt_u1, 1, 1u << 30},
                   {"idx32 cvt full grid", dequant_q4_k_idx32_cvt, 4, 1u << 30},
                   {"write only", dequant_write_only, 4, 4096}};
        std::vector<uint16_t> reference;
        for (const NamedDequantize& v : all) {
            const size_t threads = ((size_t)c.n * c.k / unit_values + v.units_a_thread - 1) / v.units_a_thread;
            const u32 grid = (u32)std::min<size_t>((threads + v.threads - 1) / v.threads, v.most_blocks);
            const u32 shared = v.shared * (v.threads / 32);
            CHECK(cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, std::max<u32>(shared, 1)));
            CHECK(cudaMemset(out, 0xff, written));
            v.kernel<<<grid, v.threads, shared>>>(w.device, out, c.n, c.k);
            CHECK(cudaDeviceSynchronize());
            std::vector<uint16_t> result((size_t)c.n * c.k);
            CHECK(cudaMemcpy(result.data(), out, written, cudaMemcpyDeviceToHost));
            if (reference.empty()) reference = result;
            size_t differ = 0;
            for (size_t i = 0; i < result.size(); ++i) differ += result[i] != reference[i];
            const double us = time_launches([&](int copy, cudaStream_t s) { v.kernel<<<grid, v.threads, shared, s>>>(w.device + copy * w.bytes, out, c.n, c.k); },
                                            copies, std::max(copies, 50));
            const double rate = (read + written) / us / 1e3;
            printf("%-30s %-34s %10.2f %9.0f %6.1f%% %10zu\n", c.name, v.name, us, rate, 100.0 * rate / read_rate, differ);
        }
        CHECK(cudaFree(out));
        CHECK(cudaFree(w.device));
    }
}
