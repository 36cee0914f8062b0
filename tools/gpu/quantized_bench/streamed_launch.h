// The streamed products (crates/kernelscope/src/ops/quantized/linear/
// streamed.cuh) added to bench.cu's cases at several numbers of rows a warp
// multiplies at once (R) and shapes: threads a block and the shared memory
// a block's slots may take. Names say which.
struct StreamShape { u32 threads, budget, most_stages; };
static const StreamShape stream_shapes[] = {{256, 64 << 10, 8}, {512, 110 << 10, 8}, {256, 40 << 10, 8}, {128, 40 << 10, 8}};
struct StreamPlan { u32 blocks, threads, stages, shared; };
static int stream_sms() {
    static int sms = 0;
    if (!sms) cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    return sms;
}
// The plan for `groups` steps of `slot_bytes` each.
static StreamPlan stream_plan(u32 groups, size_t slot_bytes, StreamShape shape) {
    const u32 warps = shape.threads / 32;
    const u32 stages = std::max<u32>(2, std::min<u32>(shape.most_stages, shape.budget / (warps * slot_bytes)));
    const u32 shared = (warps * stages * 8 + 127) / 128 * 128 + warps * stages * (u32)slot_bytes;
    const u32 per_sm = std::max<u32>(1, std::min<u32>((227u << 10) / (shared + 1024), 2048 / shape.threads));
    const u32 most_warps = stream_sms() * per_sm * warps;
    const u32 per_warp = (groups + most_warps - 1) / most_warps, warps_needed = (groups + per_warp - 1) / per_warp;
    return StreamPlan{(warps_needed + warps - 1) / warps, shape.threads, stages, shared};
}
static bool stream_fits(StreamPlan plan) { return plan.shared <= (227u << 10); }
static std::string stream_name(u32 rows, StreamShape shape, StreamPlan plan) {
    return "streamed R" + std::to_string(rows) + " " + std::to_string(shape.threads) + "t " +
           std::to_string(shape.budget >> 10) + "K: " + std::to_string(plan.blocks) + "x" + std::to_string(plan.stages);
}
template <typename Function>
static void allow_shared(Function function) {
    CHECK(cudaFuncSetAttribute(function, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 << 10));
}
using StreamRows = void (*)(const u8*, const u8*, const u8*, const u8*, float*, u32, u32, u32, u32, u32);
using StreamAdd = void (*)(const u8*, const u8*, float*, u32, u32, u32);
using StreamSilu = void (*)(const u8*, const u8*, const u8*, float*, u32, u32, u32);
// The project's streamed kernels (x read from L1 for every unit), then x
// held in registers for rows of up to 2,048 * units a lane (Q4_K only).
struct Streamed { std::string name; u32 most_k; StreamRows rows4, rows6; StreamAdd add4, add6; StreamSilu silu; };
static const Streamed streamed_kinds[] = {
    {"x from L1", 1u << 30, stream_matvecs_q4_k_q8, stream_matvecs_q6_k_q8, stream_add_q4_k_q8, stream_add_q6_k_q8, stream_silu_q4_k_q8},
    {"x held 1", 2048, stream_rows_q4_k_held1, nullptr, stream_add_q4_k_held1, nullptr, stream_silu_q4_k_held1},
    {"x held 2", 4096, stream_rows_q4_k_held2, nullptr, stream_add_q4_k_held2, nullptr, stream_silu_q4_k_held2},
    {"x held 4", 8192, stream_rows_q4_k_held4, nullptr, stream_add_q4_k_held4, nullptr, stream_silu_q4_k_held4},
};
// The smallest held-x kind that covers k, and the L1 kind.
static std::vector<Streamed> kinds_for(u32 k) {
    std::vector<Streamed> kinds{streamed_kinds[0]};
    for (int i = 1; i < 4; ++i)
        if (k <= streamed_kinds[i].most_k) {
            kinds.push_back(streamed_kinds[i]);
            break;
        }
    return kinds;
}

static void add_streamed_rows(std::vector<Kernel>& kernels, bool q6, const u8* weight, size_t bytes, size_t row_bytes,
                              const float* x, const float* norm, u32 k, u32 rows) {
    u8* xq = global_x();
    for (const Streamed& kind : kinds_for(k)) {
        const StreamRows kernel = q6 ? kind.rows6 : kind.rows4;
        if (!kernel) continue;
        allow_shared(kernel);
        for (StreamShape shape : stream_shapes) {
            const StreamPlan plan = stream_plan(rows, row_bytes, shape);
            if (!stream_fits(plan)) continue;
            kernels.push_back({kind.name + ", " + stream_name(1, shape, plan), [=](int copy, cudaStream_t s, float* out) {
                const u8* a = weight + copy * bytes;
                norm_quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, norm, xq, k, 1e-5f);
                kernel<<<plan.blocks, plan.threads, plan.shared, s>>>(xq, a, a, a, out, rows, 0, 0, k, plan.stages);
            }});
        }
    }
}
// Rows split over two warps (streamed_add_split): groups of two warps, each
// group a ring of rows; `threads` a block.
static void add_split_add(std::vector<Kernel>& kernels, bool q6, const u8* weight, size_t bytes, size_t row_bytes,
                          const float* x, u32 n, u32 k) {
    u8* xq = global_x();
    const u32 units = k / 256 * 4;
    const StreamAdd kernel = units <= 128 ? (q6 ? stream_add_q6_k_split2_held2 : stream_add_q4_k_split2_held2)
                             : units <= 256 ? (q6 ? stream_add_q6_k_split2_held4 : stream_add_q4_k_split2_held4)
                                            : nullptr;
    if (!kernel) return;
    allow_shared(kernel);
    for (u32 threads : {128u, 256u, 512u}) {
        for (u32 budget : {40u << 10, 100u << 10}) {
            const u32 groups = threads / 64;
            const u32 stages = std::max<u32>(2, std::min<u32>(8, budget / (groups * row_bytes)));
            const u32 shared = (groups * stages * 8 + 127) / 128 * 128 + (groups * 2 * 8 + 127) / 128 * 128 +
                               groups * stages * (u32)row_bytes;
            if (shared > (227u << 10)) continue;
            const u32 per_sm = std::max<u32>(1, std::min<u32>((227u << 10) / (shared + 1024), 2048 / threads));
            const u32 most = stream_sms() * per_sm * groups, per_group = (n + most - 1) / most;
            const u32 needed = (n + per_group - 1) / per_group, blocks = (needed + groups - 1) / groups;
            kernels.push_back({"split 2, x held, " + std::to_string(threads) + "t " + std::to_string(budget >> 10) + "K: " +
                                   std::to_string(blocks) + "x" + std::to_string(stages) + " (" + std::to_string(shared >> 10) + "K)",
                               [=](int copy, cudaStream_t s, float* out) {
                                   quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, xq, k);
                                   kernel<<<blocks, threads, shared, s>>>(weight + copy * bytes, xq, out, n, k, stages);
                               }});
        }
    }
}
static void add_streamed_add(std::vector<Kernel>& kernels, bool q6, const u8* weight, size_t bytes, size_t row_bytes,
                             const float* x, u32 n, u32 k) {
    u8* xq = global_x();
    if (k > 4096) add_split_add(kernels, q6, weight, bytes, row_bytes, x, n, k);
    for (const Streamed& kind : kinds_for(k)) {
        const StreamAdd kernel = q6 ? kind.add6 : kind.add4;
        if (!kernel) continue;
        allow_shared(kernel);
        for (StreamShape shape : stream_shapes) {
            const StreamPlan plan = stream_plan(n, row_bytes, shape);
            if (!stream_fits(plan)) continue;
            kernels.push_back({kind.name + ", " + stream_name(1, shape, plan), [=](int copy, cudaStream_t s, float* out) {
                quantize_q8<<<quantize_blocks(k), 256, 0, s>>>(x, xq, k);
                kernel<<<plan.blocks, plan.threads, plan.shared, s>>>(weight + copy * bytes, xq, out, n, k, plan.stages);
            }});
        }
    }
}
static void add_streamed_silu(std::vector<Kernel>& kernels, const u8* gate, const u8* up, size_t bytes, size_t row_bytes,
                              const float* x, const float* norm, u32 f, u32 h) {
    u8* xq = global_x();
    allow_shared(stream_touch_q4_k);
    {
        const StreamPlan plan = stream_plan(f, 2 * row_bytes, stream_shapes[0]);
        kernels.push_back({"copies only, " + stream_name(1, stream_shapes[0], plan), [=](int copy, cudaStream_t s, float* out) {
            stream_touch_q4_k<<<plan.blocks, plan.threads, plan.shared, s>>>(xq, gate + copy * bytes, up + copy * bytes, out, f, h, plan.stages);
        }});
    }
    for (const Streamed& kind : kinds_for(h)) {
        allow_shared(kind.silu);
        for (StreamShape shape : stream_shapes) {
            const StreamPlan plan = stream_plan(f, 2 * row_bytes, shape);
            if (!stream_fits(plan)) continue;
            const StreamSilu kernel = kind.silu;
            kernels.push_back({kind.name + ", " + stream_name(1, shape, plan), [=](int copy, cudaStream_t s, float* out) {
                norm_quantize_q8<<<quantize_blocks(h), 256, 0, s>>>(x, norm, xq, h, 1e-5f);
                kernel<<<plan.blocks, plan.threads, plan.shared, s>>>(xq, gate + copy * bytes, up + copy * bytes, out, f, h, plan.stages);
            }});
        }
    }
}
