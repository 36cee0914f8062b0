#!/usr/bin/env python3
"""A PyTorch decode that replays one CUDA graph per token, to profile from outside.

transformers' own graph-replaying decode (`torch.compile(mode="reduce-overhead")`
with a static cache) crashed with SIGSEGV on torch 2.11 + transformers 5.17,
bare as well as profiled, so this script builds the same thing by hand, as
gpt-fast does: a Llama of a preset's shape with random bf16 weights, a static
KV cache, one decode step that reads its token and position from device
tensors and writes the next ones back, optionally `torch.compile`d (Inductor's
kernels), captured once into a `torch.cuda.CUDAGraph` and replayed per token.
Each token is a "forward" NVTX range around the replay and is read back to the
host, as a server streaming tokens would. Prints the decode rate, so the same
command run bare, under `kscope profile` and under Nsight Systems gives each
profiler's overhead on a launch-light program.

    kscope profile --step forward -- \
        python tools/reference/torch_graph_decode.py --compile --graph --tokens 256

Without --graph (and on a CPU) the step runs eagerly with a "layers.N" range
around each decoder layer, which is how the script is checked without a GPU.
"""

import argparse
import sys
import time

PRESETS = {
    # hidden, layers, heads, kv heads, intermediate, vocabulary
    "llama-3.2-1b": (2048, 16, 32, 8, 8192, 128256),
    "tiny": (256, 2, 4, 2, 512, 1024),
}


class Decoder:
    """Weights, a static KV cache and the device tensors one step reads and writes."""

    def __init__(self, torch, preset, context, device, layer_ranges):
        hidden, layers, heads, kv_heads, intermediate, vocabulary = PRESETS[preset]
        self.torch = torch
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.layer_ranges = layer_ranges
        dtype = torch.bfloat16
        generator = torch.Generator(device="cpu").manual_seed(0)

        def weight(*shape):
            # Scaled so activations stay finite through every layer.
            values = torch.randn(*shape, generator=generator) / shape[0] ** 0.5
            return values.to(device=device, dtype=dtype)

        qkv_width = (heads + 2 * kv_heads) * self.head_dim
        self.embedding = weight(vocabulary, hidden)
        self.layers = [
            {
                "attention_norm": torch.ones(hidden, device=device, dtype=dtype),
                "qkv": weight(hidden, qkv_width),
                "output": weight(heads * self.head_dim, hidden),
                "ffn_norm": torch.ones(hidden, device=device, dtype=dtype),
                "gate_up": weight(hidden, 2 * intermediate),
                "down": weight(intermediate, hidden),
            }
            for _ in range(layers)
        ]
        self.final_norm = torch.ones(hidden, device=device, dtype=dtype)
        cache_shape = (layers, 1, kv_heads, context, self.head_dim)
        self.keys = torch.zeros(cache_shape, device=device, dtype=dtype)
        self.values = torch.zeros(cache_shape, device=device, dtype=dtype)
        half = self.head_dim // 2
        frequencies = 1.0 / (500000.0 ** (torch.arange(half, dtype=torch.float32) / half))
        angles = torch.outer(torch.arange(context, dtype=torch.float32), frequencies)
        self.cos = angles.cos().to(device=device, dtype=dtype)
        self.sin = angles.sin().to(device=device, dtype=dtype)
        self.slots = torch.arange(context, device=device)
        # What the step reads and writes in place, so a captured graph replays it.
        self.token = torch.randint(0, vocabulary, (1,), generator=generator).to(device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)

    def rotate(self, x, cos, sin):
        first, second = x[..., : self.head_dim // 2], x[..., self.head_dim // 2 :]
        return self.torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)

    def norm(self, x, weight):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * self.torch.rsqrt(variance + 1e-5)).to(x.dtype) * weight

    def step(self):
        """One token: reads self.token and self.position, advances both on the device."""
        torch = self.torch
        functional = torch.nn.functional
        nvtx = torch.cuda.nvtx
        x = self.embedding[self.token]
        cos, sin = self.cos[self.position], self.sin[self.position]
        visible = (self.slots <= self.position).view(1, 1, 1, -1)
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for index, layer in enumerate(self.layers):
            if self.layer_ranges:
                nvtx.range_push(f"layers.{index}")
            qkv = self.norm(x, layer["attention_norm"]) @ layer["qkv"]
            q = qkv[:, :q_width].view(1, self.heads, 1, self.head_dim)
            k = qkv[:, q_width : q_width + kv_width].view(1, self.kv_heads, 1, self.head_dim)
            v = qkv[:, q_width + kv_width :].view(1, self.kv_heads, 1, self.head_dim)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            self.keys[index].index_copy_(2, self.position, k)
            self.values[index].index_copy_(2, self.position, v)
            attention = functional.scaled_dot_product_attention(
                q, self.keys[index], self.values[index], attn_mask=visible, enable_gqa=True
            )
            x = x + attention.reshape(1, q_width) @ layer["output"]
            gate, up = (self.norm(x, layer["ffn_norm"]) @ layer["gate_up"]).chunk(2, dim=-1)
            x = x + (functional.silu(gate) * up) @ layer["down"]
            if self.layer_ranges:
                nvtx.range_pop()
        logits = self.norm(x, self.final_norm) @ self.embedding.t()
        self.token.copy_(logits.argmax(dim=-1))
        self.position.add_(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="llama-3.2-1b")
    parser.add_argument("--tokens", type=int, default=128, help="tokens to decode (default 128)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the step (Inductor's kernels)")
    parser.add_argument("--graph", action="store_true", help="capture the step into one CUDA graph, replayed per token")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (eager only, to check the script)")
    parser.add_argument("--no-nvtx", action="store_true", help="open no NVTX ranges")
    parser.add_argument("--repeat", type=int, default=2, help="decodes; the last is timed (default 2)")
    args = parser.parse_args()
    if args.tokens < 1 or args.repeat < 1:
        sys.exit("torch_graph_decode: --tokens and --repeat must be at least 1")
    try:
        import torch
    except ImportError as error:
        sys.exit(f"torch_graph_decode: needs torch ({error})")
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit("torch_graph_decode: no CUDA device (pass --device cpu to check the script eagerly)")
    if args.graph and not cuda:
        sys.exit("torch_graph_decode: --graph needs --device cuda")
    nvtx_on = cuda and not args.no_nvtx
    # Ranges inside a compiled or captured step would not be replayed: there the
    # only range is the step's, opened around the replay.
    layer_ranges = nvtx_on and not (args.compile or args.graph)
    decoder = Decoder(torch, args.preset, args.tokens + 8, args.device, layer_ranges)
    step = torch.compile(decoder.step, fullgraph=True) if args.compile else decoder.step
    with torch.no_grad():
        if args.graph:
            # Warm up (and compile) on a side stream, as capture requires.
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            run = graph.replay
        else:
            step()
            run = step
        rate = 0.0
        tokens = []
        for _ in range(args.repeat):
            decoder.position.zero_()
            if cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            tokens = []
            for _ in range(args.tokens):
                if nvtx_on:
                    torch.cuda.nvtx.range_push("forward")
                run()
                if nvtx_on:
                    torch.cuda.nvtx.range_pop()
                tokens.append(int(decoder.token))
            elapsed = time.perf_counter() - start
            rate = args.tokens / elapsed
    mode = "+".join(name for name, on in (("compiled", args.compile), ("graph", args.graph)) if on) or "eager"
    print(
        f"torch_graph_decode {args.preset} {mode} on {args.device}: {args.tokens} tokens, "
        f"{rate:.2f} tok/s (last of {args.repeat})"
    )


if __name__ == "__main__":
    main()
