#!/usr/bin/env python3
"""A transformers `generate` for `kscope profile` to profile from outside.

Builds a Llama of a preset's shape with random bf16 weights on the GPU (no
checkpoint needed), marks every forward pass with an NVTX range named
"forward" and every decoder layer with "layers.N" (as vLLM's layerwise
ranges do), and generates greedily. Prints the decode rate, so the same
command run bare, under `kscope profile` and under Nsight Systems gives
the profilers' overhead.

    kscope profile --step forward --html torch.html -- \
        python tools/reference/hf_generate_nvtx.py --tokens 64 [--compile]
"""

import argparse
import sys
import time

PRESETS = {
    # hidden, layers, heads, kv heads, intermediate, vocabulary
    "llama-3.2-1b": (2048, 16, 32, 8, 8192, 128256),
    "tiny": (256, 2, 4, 2, 512, 1024),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="llama-3.2-1b")
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens (default 32)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens to generate (default 64)")
    parser.add_argument(
        "--compile",
        nargs="?",
        const="default",
        choices=["default", "reduce-overhead"],
        help="torch.compile the forward pass in this mode (default: 'default'); "
        "reduce-overhead replays CUDA graphs and takes a static KV cache, as compiled decode is served "
        "(it crashed with SIGSEGV on torch 2.11 + transformers 5.17 on an H100, 2026-11-26)",
    )
    parser.add_argument("--no-nvtx", action="store_true", help="open no NVTX ranges")
    parser.add_argument("--repeat", type=int, default=2, help="generations; the last is timed (default 2)")
    args = parser.parse_args()
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as error:
        sys.exit(f"hf_generate_nvtx: needs torch and transformers ({error})")
    if not torch.cuda.is_available():
        sys.exit("hf_generate_nvtx: no CUDA device")
    hidden, layers, heads, kv_heads, intermediate, vocabulary = PRESETS[args.preset]
    config = LlamaConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        vocab_size=vocabulary,
        rope_theta=500000.0,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    nvtx = torch.cuda.nvtx
    if args.compile:
        # Layer ranges inside a compiled region would break its graph: the
        # step range goes around the compiled forward, from outside.
        compiled = torch.compile(model.forward, mode=args.compile, fullgraph=args.compile == "reduce-overhead")

        def forward(*inputs, **named):
            if args.no_nvtx:
                return compiled(*inputs, **named)
            nvtx.range_push("forward")
            try:
                return compiled(*inputs, **named)
            finally:
                nvtx.range_pop()

        model.forward = forward
    elif not args.no_nvtx:
        # Hooks return None: a value would replace the module's inputs or output.
        def push(name):
            def hook(*_):
                nvtx.range_push(name)

            return hook

        def pop(*_):
            nvtx.range_pop()

        model.register_forward_pre_hook(push("forward"))
        model.register_forward_hook(pop)
        for index, layer in enumerate(model.model.layers):
            layer.register_forward_pre_hook(push(f"layers.{index}"))
            layer.register_forward_hook(pop)
    cache = {}
    if args.compile == "reduce-overhead":
        # CUDA graphs need fixed shapes: the cache's too. transformers would
        # compile a static cache's forward itself; ours is compiled already.
        cache = {"cache_implementation": "static"}
        model.generation_config.disable_compile = True
    prompt = torch.randint(0, vocabulary, (1, args.prompt), device="cuda")
    rate = 0.0
    for _ in range(args.repeat):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            output = model.generate(
                prompt,
                max_new_tokens=args.tokens,
                min_new_tokens=args.tokens,
                do_sample=False,
                pad_token_id=0,
                **cache,
            )
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        rate = (output.shape[1] - args.prompt) / elapsed
    mode = f"compiled ({args.compile})" if args.compile else "eager"
    print(f"hf_generate_nvtx {args.preset} {mode}: {args.tokens} tokens, {rate:.2f} tok/s (last of {args.repeat})")


if __name__ == "__main__":
    main()
