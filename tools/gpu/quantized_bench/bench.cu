// A microbenchmark of the quantized decode kernels at llama-3-8b's and
// llama-3.2-1b's shapes, on random blocks, without a model: each kernel is
// captured many times into one CUDA graph over enough copies of its weights
// that none stays in L2, as decode reads them, and its time per launch is
// the graph's over the launches. Variants of a kernel (variants.cuh) run on
// the same inputs and their outputs are checked against the kernel's.
// Built and run on the GPU machine by run.sh (nvcc, sm_90).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>
#include <cuda_runtime.h>

#include "kernels.inc"

#include <map>
// Each Q4_K matrix's copy with every row's values transposed (chunk-major:
// the i-th 16 bytes of every block together), by the plain copy's address.
static std::map<const u8*, const u8*> transposed_of;

struct Kernel {
    std::string name;
    // Launches into `out` on weight copy `copy`.
    std::function<void(int, cudaStream_t, float*)> launch;
};
#include "variants_launch.h"

#define CHECK(call)                                                                        \
    do {                                                                                   \
        cudaError_t status = (call);                                                       \
        if (status != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static std::mt19937 generator(7);

// Random rows of `blocks` blocks of a format in planes, the scales' halves
// set to small finite values (the rest of every block random bytes).
struct Matrix {
    u8* device = nullptr;
    size_t row_bytes = 0, bytes = 0;
    u32 rows = 0, k = 0;
};
static uint16_t half_bits(float value) {
    // Values here are normal and small: round-to-zero conversion is enough.
    uint32_t bits;
    memcpy(&bits, &value, 4);
    const int exponent = (int)((bits >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(((bits >> 16) & 0x8000) | (exponent << 10) | ((bits >> 13) & 0x3ff));
}
static Matrix random_matrix(const char* format, u32 rows, u32 k, int copies) {
    Matrix m;
    m.rows = rows;
    m.k = k;
    const bool q6 = strcmp(format, "q6_k") == 0;
    const u32 blocks = k / 256, block_bytes = q6 ? 210 : 144;
    m.row_bytes = ((size_t)blocks * block_bytes + 15) / 16 * 16;
    m.bytes = m.row_bytes * rows;
    std::vector<u8> host(m.bytes);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.001f, 0.01f);
    for (auto& b : host) b = (u8)byte(generator);
    for (u32 r = 0; r < rows; ++r) {
        u8* row = host.data() + r * m.row_bytes;
        for (u32 b = 0; b < blocks; ++b) {
            if (q6) {
                const uint16_t d = half_bits(scale(generator));
                memcpy(row + blocks * 208 + b * 2, &d, 2);
            } else {
                const uint16_t d = half_bits(scale(generator)), dmin = half_bits(scale(generator));
                memcpy(row + blocks * 140 + b * 4, &d, 2);
                memcpy(row + blocks * 140 + b * 4 + 2, &dmin, 2);
            }
        }
    }
    CHECK(cudaMalloc(&m.device, m.bytes * copies));
    for (int c = 0; c < copies; ++c) CHECK(cudaMemcpy(m.device + c * m.bytes, host.data(), m.bytes, cudaMemcpyHostToDevice));
    if (!q6) {
        std::vector<u8> transposed = host;
        for (u32 r = 0; r < rows; ++r)
            for (u32 b = 0; b < blocks; ++b)
                for (u32 i = 0; i < 8; ++i)
                    memcpy(transposed.data() + r * m.row_bytes + (i * blocks + b) * 16, host.data() + r * m.row_bytes + b * 128 + i * 16, 16);
        u8* device;
        CHECK(cudaMalloc(&device, m.bytes * copies));
        for (int c = 0; c < copies; ++c) CHECK(cudaMemcpy(device + c * m.bytes, transposed.data(), m.bytes, cudaMemcpyHostToDevice));
        transposed_of[m.device] = device;
    }
    return m;
}
static float* random_floats(size_t n, float low, float high) {
    std::vector<float> host(n);
    std::uniform_real_distribution<float> value(low, high);
    for (auto& v : host) v = value(generator);
    float* device;
    CHECK(cudaMalloc(&device, n * 4));
    CHECK(cudaMemcpy(device, host.data(), n * 4, cudaMemcpyHostToDevice));
    return device;
}
static std::vector<float> fetch(const float* device, size_t n) {
    std::vector<float> host(n);
    CHECK(cudaMemcpy(host.data(), device, n * 4, cudaMemcpyDeviceToHost));
    return host;
}

// Microseconds per launch of `launch(copy, stream)` over `launches`
// launches in one graph, the best of five replays.
static double time_launches(const std::function<void(int, cudaStream_t)>& launch, int copies, int launches) {
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < launches; ++i) launch(i % copies, stream);
    CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaGraphLaunch(exec, stream));
    double best = 1e30;
    for (int replay = 0; replay < 5; ++replay) {
        CHECK(cudaEventRecord(start, stream));
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(stop, stream));
        CHECK(cudaEventSynchronize(stop));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        best = std::min(best, 1000.0 * ms / launches);
    }
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(stream));
    return best;
}

// The device's read rate: a kernel summing 1 GiB with 16-byte loads.
__global__ void read_probe(const uint4* data, size_t n, unsigned* sink) {
    unsigned acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint4 v = __ldcs(data + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *sink = acc;
}

#include "dequant_cases.h"
#include "streamed_launch.h"

struct Case {
    std::string name;
    size_t bytes;  // weights per launch
    int copies;
    size_t outputs;
    std::vector<Kernel> kernels;
};

int main(int argc, char** argv) {
    const bool single = argc > 1 && strcmp(argv[1], "--once") == 0;  // one launch each, for ncu
    const char* only = getenv("ONLY");
    cudaDeviceProp properties;
    CHECK(cudaGetDeviceProperties(&properties, 0));
    printf("device: %s, %d SMs\n", properties.name, properties.multiProcessorCount);
    unsigned* sink;
    CHECK(cudaMalloc(&sink, 4));

    double read_rate = 0;
    if (!single) {
        const size_t probe_bytes = (size_t)1 << 30;
        uint4* data;
        CHECK(cudaMalloc(&data, probe_bytes));
        CHECK(cudaMemset(data, 1, probe_bytes));
        const double us = time_launches(
            [&](int, cudaStream_t s) { read_probe<<<properties.multiProcessorCount * 8, 512, 0, s>>>(data, probe_bytes / 16, sink); },
            1, 10);
        read_rate = probe_bytes / us / 1e3;
        printf("read ceiling (1 GiB, 16-byte streaming loads): %.0f GB/s\n", read_rate);
        CHECK(cudaFree(data));
    }

    std::vector<Case> cases;
    const u32 threads = QUANT_THREADS;
    auto grid_of = [](u32 rows, u32 cap) { return std::min<u32>((rows + QUANT_WARPS - 1) / QUANT_WARPS, cap); };
    struct Shape { const char* model; u32 hidden, kv, intermediate, vocabulary; };
    for (Shape shape : {Shape{"8b", 4096, 1024, 14336, 128256}, Shape{"1b", 2048, 512, 8192, 128256}}) {
        const u32 h = shape.hidden, kv = shape.kv, f = shape.intermediate;
        const int floor_bytes = 256 << 20;
        auto copies_for = [&](size_t bytes) { return (int)std::max<size_t>(2, floor_bytes / bytes + 1); };
        float* x = random_floats(std::max(h, f), -1.0f, 1.0f);
        float* norm = random_floats(h, 0.5f, 1.5f);
        // q, k, v: one Q4_K kernel over q and k and v rows.
        {
            const int copies = copies_for((size_t)(h + 2 * kv) * (h / 256) * 144);
            Matrix w = random_matrix("q4_k", h + 2 * kv, h, copies);
            Case c{std::string(shape.model) + " norm+qkv q4_k", w.bytes, copies, h + 2 * kv, {}};
            const u32 rows = h + 2 * kv;
            u8* xq = global_x();
            c.kernels.push_back({"norm_quantize + matvecs_q4_k_q8", [=](int copy, cudaStream_t s, float* out) {
                const u8* a = w.device + copy * w.bytes;
                norm_quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, norm, xq, h, 1e-5f);
                matvecs_q4_k_q8<<<grid_of(rows, 528), threads, 0, s>>>(xq, a, a + h * w.row_bytes, a + (h + kv) * w.row_bytes, out, h, kv, kv, h);
            }});
            add_rows_variants(c.kernels, false, w.device, w.bytes, x, norm, h, rows);
            add_streamed_rows(c.kernels, false, w.device, w.bytes, w.row_bytes, x, norm, h, rows);
            cases.push_back(c);
        }
        // o_proj: Q4_K mat-vec adding into the residual.
        for (const char* format : {"q4_k"}) {
            const int copies = copies_for((size_t)h * (h / 256) * 144);
            Matrix w = random_matrix(format, h, h, copies);
            Case c{std::string(shape.model) + " o_proj+add " + format, w.bytes, copies, h, {}};
            u8* xq = global_x();
            c.kernels.push_back({"quantize + matvec_add_q4_k_q8", [=](int copy, cudaStream_t s, float* out) {
                quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, xq, h);
                matvec_add_q4_k_q8<<<grid_of(h, 528), threads, 0, s>>>(w.device + copy * w.bytes, xq, out, h, h);
            }});
            add_matvec_add_variants(c.kernels, "q4_k", w.device, w.bytes, x, h, h);
            add_streamed_add(c.kernels, false, w.device, w.bytes, w.row_bytes, x, h, h);
            cases.push_back(c);
        }
        // gate/up + SiLU.
        {
            const size_t one = (size_t)f * (h / 256) * 144;
            const int copies = copies_for(2 * one);
            Matrix gate = random_matrix("q4_k", f, h, copies), up = random_matrix("q4_k", f, h, copies);
            Case c{std::string(shape.model) + " norm+gate/up+silu q4_k", 2 * gate.bytes, copies, f, {}};
            u8* xq = global_x();
            c.kernels.push_back({"norm_quantize + matvec_silu_q4_k_q8", [=](int copy, cudaStream_t s, float* out) {
                norm_quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, norm, xq, h, 1e-5f);
                matvec_silu_q4_k_q8<<<grid_of(f, 528), threads, 0, s>>>(xq, gate.device + copy * gate.bytes, up.device + copy * up.bytes, out, f, h);
            }});
            add_silu_variants(c.kernels, gate.device, up.device, gate.bytes, x, norm, f, h);
            add_streamed_silu(c.kernels, gate.device, up.device, gate.bytes, gate.row_bytes, x, norm, f, h);
            cases.push_back(c);
        }
        // down_proj in both formats Q4_K_M uses.
        for (const char* format : {"q4_k", "q6_k"}) {
            const bool q6 = strcmp(format, "q6_k") == 0;
            const size_t bytes = (size_t)h * (f / 256) * (q6 ? 210 : 144);
            const int copies = copies_for(bytes);
            Matrix w = random_matrix(format, h, f, copies);
            Case c{std::string(shape.model) + " down+add " + format, w.bytes, copies, h, {}};
            u8* xq = global_x();
            const Product product = q6 ? matvec_add_q6_k_q8 : matvec_add_q4_k_q8;
            c.kernels.push_back({std::string("quantize + matvec_add_") + format + "_q8", [=](int copy, cudaStream_t s, float* out) {
                quantize_q8<<<quantize_blocks(f), 256, 0, s>>>(x, xq, f);
                product<<<grid_of(h, 528), threads, 0, s>>>(w.device + copy * w.bytes, xq, out, h, f);
            }});
            add_matvec_add_variants(c.kernels, format, w.device, w.bytes, x, h, f);
            add_streamed_add(c.kernels, q6, w.device, w.bytes, w.row_bytes, x, h, f);
            cases.push_back(c);
        }
        // LM head: Q6_K over the vocabulary.
        {
            Matrix w = random_matrix("q6_k", shape.vocabulary, h, 2);
            Case c{std::string(shape.model) + " norm+lm_head q6_k", w.bytes, 2, shape.vocabulary, {}};
            const u32 v = shape.vocabulary;
            u8* xq = global_x();
            c.kernels.push_back({"norm_quantize + matvecs_q6_k_q8", [=](int copy, cudaStream_t s, float* out) {
                const u8* a = w.device + copy * w.bytes;
                norm_quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, norm, xq, h, 1e-5f);
                matvecs_q6_k_q8<<<grid_of(v, 528), threads, 0, s>>>(xq, a, a, a, out, v, 0, 0, h);
            }});
            add_rows_variants(c.kernels, true, w.device, w.bytes, x, norm, h, v);
            add_streamed_rows(c.kernels, true, w.device, w.bytes, w.row_bytes, x, norm, h, v);
            cases.push_back(c);
        }
    }

    printf("%-30s %-34s %10s %9s %7s %10s\n", "case", "kernel", "us/launch", "GB/s", "%read", "max diff");
    if (!single) run_dequant_cases(read_rate, only);
    for (Case& c : cases) {
        if (only && c.name.find(only) == std::string::npos) continue;
        float* out;
        CHECK(cudaMalloc(&out, c.outputs * 4));
        std::vector<float> reference;
        for (Kernel& kernel : c.kernels) {
            // Outputs on copy 0 from a fixed start (the add kernels accumulate).
            CHECK(cudaMemset(out, 0, c.outputs * 4));
            kernel.launch(0, 0, out);
            CHECK(cudaDeviceSynchronize());
            std::vector<float> result = fetch(out, c.outputs);
            double worst = 0, largest = 0;
            if (reference.empty()) reference = result;
            for (size_t i = 0; i < result.size(); ++i) {
                largest = std::max(largest, (double)fabsf(reference[i]));
                worst = std::max(worst, (double)fabsf(result[i] - reference[i]));
            }
            if (single) {
                printf("%-30s %-34s once\n", c.name.c_str(), kernel.name.c_str());
                continue;
            }
            const int launches = std::max(c.copies, 200);
            const double us = time_launches([&](int copy, cudaStream_t s) { kernel.launch(copy, s, out); }, c.copies, launches);
            const double rate = c.bytes / us / 1e3;
            printf("%-30s %-34s %10.2f %9.0f %6.1f%% %10.2e\n", c.name.c_str(), kernel.name.c_str(), us, rate,
                   100.0 * rate / read_rate, worst / std::max(largest, 1e-30));
        }
        CHECK(cudaFree(out));
    }
    return 0;
}
