#!/usr/bin/env python3
"""Time PyTorch + Hugging Face transformers on a checkpoint, like llama-bench.

Gives a baseline to put side by side with `kscope bench`. Two tests, each
run once as an uncounted warm-up and then -r times:

  * ppP (prompt processing): one forward of a P-token prompt with
    use_cache=True; rate = P / seconds.
  * tgN (text generation): from a 1-token prompt (its forward is not timed),
    N greedy decode steps with the KV cache (past_key_values), one token per
    step; only the N steps are timed; rate = N / seconds.

With -d D (depth, as llama-bench's -d), D random tokens are prefilled once
into a KV cache (not timed, in chunks of 2048); each pp and tg repetition
then starts from that cache, which is cropped back to D positions after it.
Prompt forwards compute the last position's logits only (`logits_to_keep`,
where transformers has it), as a server and `kscope bench` do.

The prompt is P random token ids in [0, vocab), drawn from --seed, so runs
are repeatable. On CUDA the clocks are read after torch.cuda.synchronize().
The report gives mean ± sample standard deviation of the rate over the -r
repetitions, as a Markdown table (default) or JSON. A test whose size is 0
(-p 0 or -n 0) is skipped, as llama-bench does.

Example:

    python3 tools/reference/hf_bench.py --model DIR -p 128 -n 128 -r 5
    python3 tools/reference/hf_bench.py --model DIR -p 0 -n 64 -d 32768 -r 3

Needs: pip install torch transformers safetensors numpy
"""

import argparse
import inspect
import json
import os
import platform
import statistics
import sys
import time

# Inductor's static CUDA launcher crashed (SIGSEGV) replaying the compiled
# decode step on an H200 (torch 2.11, transformers 5.17); Triton's own
# launcher is used instead. Set before torch is imported.
os.environ.setdefault("TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER", "0")

try:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    IMPORT_ERROR = None
except ImportError as err:
    IMPORT_ERROR = err

INSTALL_HINT = "needs torch and transformers: pip install torch transformers safetensors"


def fail(message):
    """Print a one-line error to stderr and exit with status 2."""
    print(f"hf_bench.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def log(message):
    """Progress goes to stderr so that stdout holds only the report."""
    print(message, file=sys.stderr, flush=True)


def parse_args():
    parser = argparse.ArgumentParser(
        description="Time prompt processing and greedy text generation with "
        "PyTorch + transformers, in the manner of llama-bench."
    )
    parser.add_argument("--model", required=True, help="Hugging Face model directory")
    parser.add_argument(
        "--gguf",
        metavar="NAME",
        help="a GGUF file in the --model directory, loaded with from_pretrained(gguf_file=NAME): "
        "transformers dequantizes its blocks to --dtype at load (needs the gguf package)",
    )
    parser.add_argument(
        "--random-weights",
        action="store_true",
        help="build the model from --model's config.json alone (`kscope gen-model --config-only`) "
        "with seeded random weights made on the device: a model too large to write to disk twice "
        "(qwen3-30b-a3b, mixtral-8x7b) is timed on its shape; the routing of an MoE model then "
        "follows these weights, not kscope's",
    )
    parser.add_argument(
        "--kscope-seed",
        type=int,
        metavar="SEED",
        help="with --random-weights: give every parameter the value kscope's synthetic preset of "
        "seed SEED has (its generator, ported here, run on the device), so both engines run the "
        "same weights and, for an MoE model, the same routing",
    )
    parser.add_argument(
        "--save-checkpoint",
        metavar="DIR",
        help="with --random-weights: also write the model built (safetensors, save_pretrained) to "
        "DIR before timing it, so `kscope bench --model DIR` runs the same weights; with "
        "PyTorch's own normal weights an MoE model's rows spread over many experts",
    )
    parser.add_argument("-p", type=int, default=128, help="prompt tokens (default 128)")
    parser.add_argument("-n", type=int, default=128, help="generated tokens (default 128)")
    parser.add_argument("-r", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument(
        "-d", type=int, default=0, help="depth: positions in the KV cache before each test (default 0)"
    )
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], help="default: cuda if available, else cpu"
    )
    parser.add_argument(
        "--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16"
    )
    parser.add_argument(
        "--attn",
        choices=["sdpa", "eager"],
        default="sdpa",
        help="transformers attention implementation (default sdpa)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="decode through generate() with a static KV cache and the forward compiled "
        "with torch.compile(mode='reduce-overhead'), transformers' fastest batch-1 decode "
        "(tg only, at depth 0; rate = N / (time of N+1 tokens - time of 1 token))",
    )
    parser.add_argument("--output", choices=["md", "json"], default="md")
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompt (default 0)")
    return parser.parse_args()


def check_sizes(args):
    if args.p < 0 or args.n < 0 or args.d < 0:
        fail("-p, -n and -d must be >= 0")
    if args.p == 0 and args.n == 0:
        fail("nothing to run: -p and -n are both 0")
    if args.r < 1:
        fail("-r must be >= 1")
    if args.compile and (args.p > 0 or args.d > 0):
        fail("--compile measures decode only: use -p 0 and -d 0")


def read_vocab_size(model_dir):
    """Read vocab_size from DIR/config.json; fail if the file is missing."""
    config_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(config_path):
        fail(f"{model_dir} has no config.json (not a Hugging Face model directory)")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    vocab_size = config.get("vocab_size")
    if not isinstance(vocab_size, int):
        fail(f"{config_path} has no integer vocab_size")
    return vocab_size


def pick_device(requested):
    if requested is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        fail("--device cuda, but torch.cuda.is_available() is False")
    return requested


def device_name(device):
    if device == "cuda":
        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine()


def random_model(model_dir, dtype_name, attn, device, seed, kscope_seed=None):
    """The model of model_dir/config.json with seeded normal weights (std
    0.02, norms 1), or kscope's synthetic weights of `kscope_seed`, made
    directly on the device in dtype_name."""
    config = transformers.AutoConfig.from_pretrained(model_dir)
    config._attn_implementation = attn
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype_name))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if kscope_seed is not None:
                fill_kscope(name, parameter, kscope_seed)
            elif name.endswith("norm.weight"):
                parameter.fill_(1.0)
            else:
                parameter.normal_(0.0, 0.02)
    model.eval()
    return model


# kscope's synthetic weights (crates/model/src/synthetic.rs): element i of
# tensor NAME is uniform on [low, high) from SplitMix64's i-th output for
# seed ^ fnv1a64(NAME), its top 24 bits as the unit float. int64 arithmetic
# wraps as u64's does; right shifts are made logical by masking.
MASK64 = (1 << 64) - 1


def signed(value):
    value &= MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def fnv1a64(data):
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & MASK64
    return value


def shift_right(z, bits):
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def kscope_values(name, shape, seed, start, count, device):
    """Elements start..start+count of kscope's tensor `name` of `shape` (f32)."""
    if name.endswith("norm.weight"):
        low, high = 0.9, 1.1
    elif name.endswith(".bias"):
        low, high = -0.1, 0.1
    elif name == "model.embed_tokens.weight":
        low, high = -1.0, 1.0
    else:
        bound = float(torch.tensor(3.0 / shape[-1], dtype=torch.float32).sqrt())
        low, high = -bound, bound
    tensor_seed = (seed ^ fnv1a64(name.encode())) & MASK64
    index = torch.arange(start + 1, start + count + 1, dtype=torch.int64, device=device)
    z = index * signed(0x9E3779B97F4A7C15) + signed(tensor_seed)
    z = (z ^ shift_right(z, 30)) * signed(0xBF58476D1CE4E5B9)
    z = (z ^ shift_right(z, 27)) * signed(0x94D049BB133111EB)
    z = z ^ shift_right(z, 31)
    unit = shift_right(z, 40).to(torch.float32) / float(1 << 24)
    low32, high32 = torch.tensor(low, dtype=torch.float32), torch.tensor(high, dtype=torch.float32)
    return low32 + (high32 - low32) * unit


def fill_kscope(name, parameter, seed, chunk=1 << 26):
    """Writes kscope's synthetic values into `parameter` (transformers' name
    and layout; stacked experts' gate_up_proj is kscope's gate and up tensors
    interleaved per expert)."""
    device = parameter.device
    flat = parameter.view(-1)
    if name.endswith("mlp.experts.gate_up_proj"):
        experts, rows2, hidden = parameter.shape
        rows = rows2 // 2
        prefix = name[: -len("gate_up_proj")]
        shape = [experts, rows, hidden]
        matrix = rows * hidden
        for expert in range(experts):
            for half, part in enumerate(("gate_proj", "up_proj")):
                values = kscope_values(prefix + part, shape, seed, expert * matrix, matrix, device)
                at = (2 * expert + half) * matrix
                flat[at : at + matrix].copy_(values.to(parameter.dtype))
        return
    kscope_name = name
    total = parameter.numel()
    for start in range(0, total, chunk):
        count = min(chunk, total - start)
        values = kscope_values(kscope_name, list(parameter.shape), seed, start, count, device)
        flat[start : start + count].copy_(values.to(parameter.dtype))


def load_model(model_dir, dtype_name, attn, device, gguf=None):
    extra = {"gguf_file": gguf} if gguf else {}
    model = AutoModelForCausalLM.from_pretrained(
        model_dir,
        dtype=getattr(torch, dtype_name),
        attn_implementation=attn,
        **extra,
    )
    model.to(device)
    model.eval()
    return model


def make_prompt(vocab_size, length, seed, device):
    """Deterministic random token ids in [0, vocab_size), shape [1, length]."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (1, length), generator=generator, dtype=torch.long)
    return ids.to(device)


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def last_logits_only(model):
    """Keyword arguments that make a forward compute the last position's logits only."""
    parameters = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in parameters:
            return {name: 1}
    return {}


def fill_depth(model, vocab_size, depth, seed, device):
    """A KV cache holding `depth` random positions (None for depth 0)."""
    if depth == 0:
        return None
    ids = make_prompt(vocab_size, depth, seed + 1, device)
    cache = None
    for start in range(0, depth, 2048):
        output = model(
            input_ids=ids[:, start : start + 2048],
            past_key_values=cache,
            use_cache=True,
            **last_logits_only(model),
        )
        cache = output.past_key_values
    synchronize(device)
    return cache


def rewind(cache, depth):
    """Crops the cache back to `depth` positions after a repetition."""
    if cache is not None:
        cache.crop(depth)


def time_prompt_processing(model, prompt_ids, cache, depth, device):
    """Seconds for one forward of the whole prompt after `depth` cached positions."""
    synchronize(device)
    start = time.perf_counter()
    model(input_ids=prompt_ids, past_key_values=cache, use_cache=True, **last_logits_only(model))
    synchronize(device)
    elapsed = time.perf_counter() - start
    rewind(cache, depth)
    return elapsed


def greedy_next(output):
    """The argmax token of the last position, shape [1, 1], left on the device."""
    return output.logits[:, -1].argmax(dim=-1, keepdim=True)


def time_text_generation(model, first_token, n_gen, cache, depth, device):
    """Seconds for n_gen greedy decode steps after an untimed 1-token step at `depth`."""
    output = model(input_ids=first_token, past_key_values=cache, use_cache=True)
    past_key_values = output.past_key_values
    next_token = greedy_next(output)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(n_gen):
        output = model(input_ids=next_token, past_key_values=past_key_values, use_cache=True)
        past_key_values = output.past_key_values
        next_token = greedy_next(output)
    synchronize(device)
    elapsed = time.perf_counter() - start
    rewind(cache, depth)
    return elapsed


def compile_forward(model, first_token, device):
    """transformers' own recipe for its fastest batch-1 decode: the forward
    compiled with mode='reduce-overhead' (CUDA graphs) and a static KV cache
    that `generate` allocates once and reuses."""
    model.generation_config.cache_implementation = "static"
    # One eager generate first: the static cache fills its tensors lazily, and
    # tensors made inside a CUDA graph cannot be written in place afterwards.
    time_generate(model, first_token, 2, device)
    compiled = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)

    def forward(*args, **kwargs):
        # Each call is a new step: outputs of the previous replay are dead.
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(*args, **kwargs)

    model.forward = forward


def time_generate(model, first_token, new_tokens, device):
    """Seconds for one greedy `generate` of exactly `new_tokens` tokens."""
    synchronize(device)
    start = time.perf_counter()
    model.generate(
        first_token,
        attention_mask=torch.ones_like(first_token),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
    )
    synchronize(device)
    return time.perf_counter() - start


def time_compiled_generation(model, first_token, n_gen, device):
    """Seconds for n_gen compiled decode steps: a generate of n_gen + 1
    tokens less one of 1 token (which holds the prompt's forward, the cache
    set-up and the first token), so only decode steps remain."""
    return time_generate(model, first_token, n_gen + 1, device) - time_generate(model, first_token, 1, device)


def measure_rates(time_once, tokens, reps):
    """One uncounted warm-up, then `reps` timed runs; returns tokens/s per run."""
    time_once()
    return [tokens / time_once() for _ in range(reps)]


def summarize(rates):
    mean = statistics.mean(rates)
    stddev = statistics.stdev(rates) if len(rates) > 1 else 0.0
    return mean, stddev


def run_tests(model, args, vocab_size, device):
    """Returns a list of (test name, n_prompt, n_gen, rates)."""
    prompt_len = max(args.p, 1)
    prompt_ids = make_prompt(vocab_size, prompt_len, args.seed, device)
    if args.d > 0:
        log(f"hf_bench: filling {args.d} positions of context (-d)")
    cache = fill_depth(model, vocab_size, args.d, args.seed, device)
    at_depth = f" @ d{args.d}" if args.d > 0 else ""
    results = []
    if args.p > 0:
        log(f"hf_bench: pp{args.p}{at_depth} ({args.r} reps + warm-up)")
        rates = measure_rates(
            lambda: time_prompt_processing(model, prompt_ids, cache, args.d, device), args.p, args.r
        )
        results.append((f"pp{args.p}{at_depth}", args.p, 0, rates))
    if args.n > 0:
        log(f"hf_bench: tg{args.n}{at_depth} ({args.r} reps + warm-up)")
        first_token = prompt_ids[:, :1]
        if args.compile:
            log("hf_bench: compiling the forward (static cache, reduce-overhead)")
            compile_forward(model, first_token, device)
            # Extra warm-ups: torch.compile records its CUDA graphs after a few calls.
            for _ in range(2):
                time_compiled_generation(model, first_token, args.n, device)
            rates = measure_rates(
                lambda: time_compiled_generation(model, first_token, args.n, device),
                args.n,
                args.r,
            )
        else:
            rates = measure_rates(
                lambda: time_text_generation(model, first_token, args.n, cache, args.d, device),
                args.n,
                args.r,
            )
        results.append((f"tg{args.n}{at_depth}", 0, args.n, rates))
    return results


def build_records(results, args, device):
    """One JSON-ready dict per test."""
    common = {
        "model": args.gguf or os.path.basename(os.path.normpath(args.model)),
        "backend": f"pytorch-{device}",
        "device_name": device_name(device),
        "dtype": args.dtype,
    }
    records = []
    for test, n_prompt, n_gen, rates in results:
        mean, stddev = summarize(rates)
        record = dict(common)
        record.update(
            {
                "test": test,
                "n_prompt": n_prompt,
                "n_gen": n_gen,
                "n_depth": args.d,
                "reps": args.r,
                "mean_tps": mean,
                "stddev_tps": stddev,
                "attn_implementation": args.attn,
                "compiled": args.compile,
                "torch_version": torch.__version__,
                "transformers_version": transformers.__version__,
            }
        )
        records.append(record)
    return records


def format_markdown(records):
    lines = [
        "| model | backend | dtype | test | t/s |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for r in records:
        rate = f"{r['mean_tps']:.2f} ± {r['stddev_tps']:.2f}"
        lines.append(f"| {r['model']} | {r['backend']} | {r['dtype']} | {r['test']} | {rate} |")
    first = records[0]
    lines.append("")
    lines.append(
        f"device: {first['device_name']}, attention: {first['attn_implementation']}, "
        f"compiled: {first['compiled']}, "
        f"torch {first['torch_version']}, transformers {first['transformers_version']}"
    )
    return "\n".join(lines)


def main():
    args = parse_args()
    check_sizes(args)
    if args.gguf:
        if not os.path.isfile(os.path.join(args.model, args.gguf)):
            fail(f"{os.path.join(args.model, args.gguf)}: no such GGUF file")
    else:
        vocab_size = read_vocab_size(args.model)
    if IMPORT_ERROR is not None:
        fail(f"{INSTALL_HINT} ({IMPORT_ERROR})")
    device = pick_device(args.device)

    what = f"{args.model}/{args.gguf}" if args.gguf else args.model
    log(f"hf_bench: loading {what} ({args.dtype}, {args.attn}) on {device}")
    if args.kscope_seed is not None and not args.random_weights:
        fail("--kscope-seed fills --random-weights: give both")
    if args.random_weights:
        if args.gguf:
            fail("--random-weights builds from config.json alone: it takes no --gguf")
        model = random_model(args.model, args.dtype, args.attn, device, args.seed, args.kscope_seed)
        if args.save_checkpoint:
            log(f"hf_bench: writing the weights to {args.save_checkpoint}")
            model.save_pretrained(args.save_checkpoint)
    else:
        if args.save_checkpoint:
            fail("--save-checkpoint writes a --random-weights model: give both")
        model = load_model(args.model, args.dtype, args.attn, device, args.gguf)
    if args.gguf:
        # The file's metadata is the config.
        vocab_size = model.config.vocab_size
    with torch.no_grad():
        results = run_tests(model, args, vocab_size, device)

    records = build_records(results, args, device)
    if args.output == "json":
        print(json.dumps(records, indent=2))
    else:
        print(format_markdown(records))


if __name__ == "__main__":
    main()
