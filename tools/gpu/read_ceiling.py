"""Other ways of reading GPU memory, to check kscope's read probe against
(issue: ceilings the hardware sets): torch's sum (bytes read), torch's copy
(bytes read + written), a hand-written CUDA streaming read (compiled by
torch's cpp_extension with nvcc), and a Triton streaming-read kernel where
Triton is installed. Best of N timed runs (CUDA events) over one buffer.
With --kscope PATH it then runs `PATH info --json` with probes of the same
size and checks that kscope's read ceiling is at least 0.99 × the best of
the others that read only (exit 1 if not).
Usage: python3 tools/gpu/read_ceiling.py [MiB] [repetitions] [--kscope PATH]"""
import json
import subprocess
import sys

import torch

arguments = [argument for argument in sys.argv[1:] if not argument.startswith("--")]
kscope = sys.argv[sys.argv.index("--kscope") + 1] if "--kscope" in sys.argv else None
if kscope in arguments:
    arguments.remove(kscope)
mib = int(arguments[0]) if len(arguments) > 0 else 1024
repetitions = int(arguments[1]) if len(arguments) > 1 else 20
reads = {}
n = (mib << 20) // 4
x = torch.randint(0, 2**31 - 1, (n,), dtype=torch.int32, device="cuda")
y = torch.empty_like(x)


def best_ms(run):
    run()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repetitions):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def report(name, bytes_moved, ms, read_only=False):
    gbps = bytes_moved / ms / 1e6
    print(f"{name}: {gbps:.1f} GB/s ({bytes_moved >> 20} MiB in {ms:.3f} ms)")
    if read_only:
        reads[name] = gbps


report("torch sum (read)", 4 * n, best_ms(lambda: x.sum()), read_only=True)
report("torch copy (read + write)", 8 * n, best_ms(lambda: y.copy_(x)))
try:
    import triton
    import triton.language as tl

    @triton.jit
    def read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offsets = pid * BLOCK + tl.arange(0, BLOCK)
        values = tl.load(x_ptr + offsets, mask=offsets < n, other=0, eviction_policy="evict_first")
        tl.atomic_xor(out_ptr, tl.xor_sum(values, axis=0))

    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    for block in (4096, 8192, 16384):
        grid = (triton.cdiv(n, block),)
        ms = best_ms(lambda: read_kernel[grid](x, out, n, BLOCK=block))
        report(f"triton streaming read, BLOCK={block}", 4 * n, ms, read_only=True)
except Exception as error:  # noqa: BLE001: report why Triton did not run
    print(f"triton: not run ({type(error).__name__}: {error})")

# A hand-written CUDA read: grid-stride 16-byte read-only loads, XOR fold,
# one atomic per warp, at a few grid sizes.
CUDA_SOURCE = r"""
#include <torch/extension.h>
__global__ void read_words(const int4* __restrict__ x, long long vectors, int* out) {
    int fold = 0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < vectors; i += stride) {
        int4 v = __ldg(x + i);
        fold ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    for (int offset = 16; offset > 0; offset /= 2) fold ^= __shfl_xor_sync(0xffffffffu, fold, offset);
    if ((threadIdx.x & 31) == 0 && fold != 0) atomicXor(out, fold);
}
void read_all(torch::Tensor x, torch::Tensor out, int64_t blocks) {
    read_words<<<blocks, 512>>>((const int4*)x.data_ptr(), x.numel() / 4, (int*)out.data_ptr());
}
"""
try:
    from torch.utils.cpp_extension import load_inline

    module = load_inline(
        name="read_reference",
        cpp_sources="void read_all(torch::Tensor x, torch::Tensor out, int64_t blocks);",
        cuda_sources=CUDA_SOURCE,
        functions=["read_all"],
        extra_cuda_cflags=["-O3"],
    )
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for waves in (1, 2, 4, 8):
        ms = best_ms(lambda: module.read_all(x, out, sms * 4 * waves))
        report(f"hand-written CUDA read, {waves * 4} blocks of 512 per SM", 4 * n, ms, read_only=True)
except Exception as error:  # noqa: BLE001: report why the reference did not build
    print(f"hand-written CUDA read: not run ({type(error).__name__}: {error})")
props = torch.cuda.get_device_properties(0)
print(f"device: {props.name}, torch {torch.__version__}")

if kscope:
    info = json.loads(
        subprocess.run(
            [kscope, "info", "--json", "--bandwidth-mib", str(mib), "--no-compute"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    gpu = next(device for device in info["devices"] if device.get("backend") == "cuda")
    ceiling = gpu["ceilings"]["read"]["value"]
    best_name, best = max(reads.items(), key=lambda item: item[1])
    verdict = "ok" if ceiling >= 0.99 * best else "BELOW"
    print(f"kscope read ceiling: {ceiling:.1f} GB/s ({gpu['ceilings']['read']['method']})")
    print(f"best other read: {best:.1f} GB/s ({best_name}); kscope / best = {ceiling / best:.3f}: {verdict}")
    for name in ("write", "copy", "physical_bandwidth"):
        if name in gpu["ceilings"]:
            entry = gpu["ceilings"][name]
            print(f"kscope {name}: {entry['value']:.1f} GB/s ({entry['method']})")
    sys.exit(0 if verdict == "ok" else 1)
