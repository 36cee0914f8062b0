#!/usr/bin/env python3
"""Decode rate of transformers' own tensor parallelism, beside `kscope bench --tp N`.

Run under torchrun, one process per GPU:

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 tools/reference/hf_tp_bench.py --model DIR -n 128 -r 5

Loads the checkpoint with `tp_plan="auto"` (transformers splits it over the
processes' GPUs with its model's plan), then times greedy decode from a
one-token prompt: N steps with the KV cache, each a forward of one token,
the clock read after torch.cuda.synchronize(); rate = N / seconds, mean and
sample standard deviation over -r repetitions after one warm-up. Rank 0
prints one Markdown row. Eager PyTorch: no CUDA graphs, no torch.compile.

Needs: torch with NCCL, transformers (5.x), safetensors.
"""

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

try:
    import torch
    import torch.distributed as dist
    import transformers
    from transformers import AutoModelForCausalLM
except ImportError as error:
    print(f"error: needs torch and transformers: {error}", file=sys.stderr)
    sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a Hugging Face model directory")
    parser.add_argument("-n", type=int, default=128, help="decode steps per repetition")
    parser.add_argument("-r", type=int, default=5, help="timed repetitions")
    args = parser.parse_args()
    if args.n < 1 or args.r < 1:
        print("error: -n and -r must be at least 1", file=sys.stderr)
        sys.exit(2)
    if "RANK" not in os.environ:
        print("error: run under torchrun (one process per GPU)", file=sys.stderr)
        sys.exit(2)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16, tp_plan="auto")
    model.eval()
    device = model.device
    rank, world = dist.get_rank(), dist.get_world_size()

    def decode_once():
        token = torch.tensor([[1]], device=device)
        with torch.no_grad():
            output = model(token, use_cache=True)
            cache = output.past_key_values
            token = output.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.n):
                output = model(token, past_key_values=cache, use_cache=True)
                cache = output.past_key_values
                token = output.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
        return args.n / (time.perf_counter() - start)

    decode_once()
    rates = [decode_once() for _ in range(args.r)]
    if rank == 0:
        spread = statistics.stdev(rates) if len(rates) > 1 else 0.0
        name = torch.cuda.get_device_name(device)
        print("| model | framework | devices | test | t/s |")
        print("| --- | --- | --- | --- | --- |")
        print(
            f"| {args.model} | torch {torch.__version__} + transformers {transformers.__version__} tp_plan=auto (eager) "
            f"| {world}x {name} | tg{args.n} | {statistics.mean(rates):.2f} ± {spread:.2f} |"
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
