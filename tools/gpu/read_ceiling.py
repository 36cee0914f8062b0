"""Other ways of reading GPU memory, to check kscope's read probe against
(issue: ceilings the hardware sets): torch's sum (bytes read), torch's copy
(bytes read + written), and a Triton streaming-read kernel where Triton is
installed. Best of N timed runs (CUDA events) over one large buffer.
Usage: python3 tools/gpu/read_ceiling.py [MiB] [repetitions]"""
import sys

import torch

mib = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
repetitions = int(sys.argv[2]) if len(sys.argv) > 2 else 20
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


def report(name, bytes_moved, ms):
    print(f"{name}: {bytes_moved / ms / 1e6:.1f} GB/s ({bytes_moved >> 20} MiB in {ms:.3f} ms)")


report("torch sum (read)", 4 * n, best_ms(lambda: x.sum()))
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
        report(f"triton streaming read, BLOCK={block}", 4 * n, ms)
except Exception as error:  # noqa: BLE001: report why Triton did not run
    print(f"triton: not run ({type(error).__name__}: {error})")
props = torch.cuda.get_device_properties(0)
print(f"device: {props.name}, torch {torch.__version__}")
