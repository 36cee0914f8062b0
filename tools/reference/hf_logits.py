#!/usr/bin/env python3
"""Reference logits from PyTorch + Hugging Face transformers, to check kernelscope.

Runs a Llama-family checkpoint (LlamaForCausalLM, Qwen2ForCausalLM,
MistralForCausalLM) the way the kernelscope engine does and writes the logits
in the layout of the engine's `--logits-out`:

  * the prompt (n token ids) is fed one token at a time, at positions
    0..n-1, with a KV cache;
  * then M tokens are generated greedily: g0 = argmax(row n-1), and
    g0..g(M-2) are fed back in turn (the last generated token is never fed);
  * one logits row per fed token, n + M - 1 rows in all (n rows when M = 0),
    saved with numpy.save as a C-order little-endian float32 array of shape
    [rows, vocab].

With --dtype float32 (the default) bf16/f16 weights are upcast exactly to
float32 on load, which is what the engine computes in; that is the setting
to compare against.

Example:

    python3 tools/reference/hf_logits.py --model DIR --token-ids 1,2,3,4,5 \\
        --max-new-tokens 8 --out NAME.logits.npy --tokens-out NAME.tokens.json

Needs: pip install torch transformers safetensors numpy
"""

import argparse
import json
import os
import sys

try:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    IMPORT_ERROR = None
except ImportError as err:
    IMPORT_ERROR = err

INSTALL_HINT = "needs torch and transformers: pip install torch transformers safetensors"


def fail(message):
    """Print a one-line error to stderr and exit with status 2."""
    print(f"hf_logits.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args():
    parser = argparse.ArgumentParser(
        description="Write reference logits (one row per fed token) for a "
        "Hugging Face Llama-family checkpoint, mirroring the kernelscope engine."
    )
    parser.add_argument("--model", required=True, help="Hugging Face model directory")
    parser.add_argument(
        "--token-ids", required=True, help="prompt token ids, comma separated (e.g. 1,2,3)"
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=8, help="tokens to generate greedily (default 8)"
    )
    parser.add_argument("--out", required=True, help="output .npy file, float32 [rows, vocab]")
    parser.add_argument(
        "--tokens-out", help='optional JSON file: {"prompt": [...], "generated": [...]}'
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        default="float32",
        help="dtype the model is loaded and run in (default float32)",
    )
    return parser.parse_args()


def parse_token_ids(text):
    """Turn "1,2,3" into [1, 2, 3]; fail on anything else."""
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        fail(f"--token-ids must be comma-separated integers, got {text!r}")
    if not ids:
        fail("--token-ids is empty")
    if any(token < 0 for token in ids):
        fail(f"--token-ids has a negative id: {ids}")
    return ids


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


def check_token_ids(token_ids, vocab_size):
    too_large = [token for token in token_ids if token >= vocab_size]
    if too_large:
        fail(f"token id(s) {too_large} >= vocab size {vocab_size}")


def check_device(device):
    if device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda, but torch.cuda.is_available() is False")


def load_model(model_dir, dtype_name, device):
    """Load the checkpoint in the requested dtype with eager attention."""
    model = AutoModelForCausalLM.from_pretrained(
        model_dir,
        torch_dtype=getattr(torch, dtype_name),
        attn_implementation="eager",
    )
    model.to(device)
    model.eval()
    return model


def forward_one(model, token_id, position, past_key_values, device):
    """Feed one token at one position; return (float32 CPU logits row, new cache)."""
    input_ids = torch.tensor([[token_id]], dtype=torch.long, device=device)
    position_ids = torch.tensor([[position]], dtype=torch.long, device=device)
    output = model(
        input_ids=input_ids,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=True,
    )
    row = output.logits[0, -1].float().cpu()
    return row, output.past_key_values


def run_greedy(model, prompt, max_new_tokens, device):
    """Feed the prompt token by token, then generate greedily.

    Returns (logits [rows, vocab] float32 tensor, generated token ids).
    """
    rows = []
    past_key_values = None
    for position, token in enumerate(prompt):
        row, past_key_values = forward_one(model, token, position, past_key_values, device)
        rows.append(row)

    generated = []
    position = len(prompt)
    while len(generated) < max_new_tokens:
        # torch.argmax returns the first index of the maximum on ties.
        next_token = int(torch.argmax(rows[-1]))
        generated.append(next_token)
        if len(generated) == max_new_tokens:
            break  # the last generated token is never fed
        row, past_key_values = forward_one(model, next_token, position, past_key_values, device)
        rows.append(row)
        position += 1

    return torch.stack(rows), generated


def save_logits(path, logits):
    """Write logits as a 2-D C-order little-endian float32 .npy."""
    array = np.ascontiguousarray(logits.float().cpu().numpy(), dtype="<f4")
    if array.ndim != 2:
        fail(f"internal: logits have shape {array.shape}, expected [rows, vocab]")
    make_parent_dir(path)
    np.save(path, array)


def save_tokens(path, prompt, generated):
    make_parent_dir(path)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"prompt": prompt, "generated": generated}, f)
        f.write("\n")


def make_parent_dir(path):
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)


def main():
    args = parse_args()
    prompt = parse_token_ids(args.token_ids)
    if args.max_new_tokens < 0:
        fail("--max-new-tokens must be >= 0")
    vocab_size = read_vocab_size(args.model)
    if IMPORT_ERROR is not None:
        fail(f"{INSTALL_HINT} ({IMPORT_ERROR})")
    check_token_ids(prompt, vocab_size)
    check_device(args.device)

    # Keep float32 matmuls in full float32 on CUDA (no TF32).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    model = load_model(args.model, args.dtype, args.device)
    with torch.no_grad():
        logits, generated = run_greedy(model, prompt, args.max_new_tokens, args.device)

    save_logits(args.out, logits)
    if args.tokens_out:
        save_tokens(args.tokens_out, prompt, generated)

    rows, vocab = logits.shape
    print(f"hf_logits: rows={rows} vocab={vocab} generated={generated} -> {args.out}")


if __name__ == "__main__":
    main()
