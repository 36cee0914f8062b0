#!/usr/bin/env python3
"""Checkpoints written by Hugging Face transformers itself, and their logits.

For each fixture below this script builds a tiny model with transformers'
own config class, gives every parameter seeded random values (norm weights
and biases too, so nothing is all ones or zeros), and writes it twice:

  * NAME/new: `save_pretrained` as this transformers writes it (5.x:
    `rope_parameters`, `dtype`, sharded with model.safetensors.index.json);
  * NAME/old: the same tensors in one model.safetensors, with config.json in
    the layout transformers 4.x wrote (top-level `rope_theta`, `rope_scaling`,
    `torch_dtype`).

Mixture-of-experts fixtures (Qwen3-MoE, Mixtral) add two more:

  * NAME/stacked: the tensors as transformers 5 holds them in memory (each
    layer's experts stacked in `mlp.experts.gate_up_proj` and `down_proj`,
    the router as `mlp.gate.weight`), written with safetensors directly;
  * NAME/f32: the model before it was rounded to bf16, in float32, with its
    own logits in NAME.f32.logits.npy;

and NAME.routing.json: for every row the reference ran, each sparse
layer's chosen experts as transformers' top-k gave them (the hooks on the
routers), in transformers' order.

Both directories are loaded back with `from_pretrained` (float32, eager
attention) and run the way kernelscope runs a model (see hf_logits.py); the
two must give identical logits, which are saved as NAME.logits.npy with the
prompt and greedy tokens in NAME.tokens.json. manifest.json records the
versions of torch and transformers.

Example (on a machine with torch and transformers):

    python3 tools/reference/make_fixtures.py --out crates/model/tests/fixtures/hf
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Qwen2Config,
    Qwen3Config,
    Qwen3MoeConfig,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_logits import run_greedy  # noqa: E402

SMALL = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
)

# name: (config class, extra config fields, rope parameters, seed)
FIXTURES = {
    # Llama 3 scaling whose thresholds fall inside this head size's
    # wavelengths, so all three bands of the rule are exercised.
    "llama3": (
        LlamaConfig,
        dict(head_dim=16, tie_word_embeddings=False),
        dict(
            rope_type="llama3",
            rope_theta=500000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        ),
        11,
    ),
    # Qwen2: q/k/v biases, theta 1e6, untied.
    "qwen2": (
        Qwen2Config,
        dict(tie_word_embeddings=False, use_sliding_window=False),
        dict(rope_type="default", rope_theta=1000000.0),
        12,
    ),
    # Mistral without a sliding window, tied embeddings.
    "mistral": (
        MistralConfig,
        dict(tie_word_embeddings=True, sliding_window=None),
        dict(rope_type="default", rope_theta=1000000.0),
        13,
    ),
    # An explicit head_dim wider than hidden_size / heads, linear scaling.
    "llama-head-dim-linear": (
        LlamaConfig,
        dict(head_dim=16, tie_word_embeddings=True),
        dict(rope_type="linear", rope_theta=250000.0, factor=4.0),
        14,
    ),
    # attention_bias: biases on q/k/v and o.
    "llama-attention-bias": (
        LlamaConfig,
        dict(attention_bias=True, tie_word_embeddings=False),
        dict(rope_type="default", rope_theta=10000.0),
        15,
    ),
    # Qwen3: each head of q and k RMS-normalised before RoPE (q_norm,
    # k_norm), a head wider than hidden / heads, no biases, untied.
    "qwen3": (
        Qwen3Config,
        dict(head_dim=16, tie_word_embeddings=False, attention_bias=False, use_sliding_window=False),
        dict(rope_type="default", rope_theta=1000000.0),
        17,
    ),
    # Qwen3-MoE: 4 of 16 experts of 24 rows, weights not renormalised
    # (norm_topk_prob false, transformers' default), the middle layer dense.
    "qwen3-moe": (
        Qwen3MoeConfig,
        dict(
            head_dim=16,
            num_hidden_layers=3,
            tie_word_embeddings=False,
            attention_bias=False,
            use_sliding_window=False,
            num_experts=16,
            num_experts_per_tok=4,
            moe_intermediate_size=24,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[1],
        ),
        dict(rope_type="default", rope_theta=1000000.0),
        18,
    ),
    # Mixtral: 2 of 8 experts of intermediate_size rows in every layer.
    "mixtral": (
        MixtralConfig,
        dict(tie_word_embeddings=False, sliding_window=None, num_local_experts=8, num_experts_per_tok=2),
        dict(rope_type="default", rope_theta=1000000.0),
        19,
    ),
    # YaRN (attention factor and frequency ramp).
    "llama-yarn": (
        LlamaConfig,
        dict(head_dim=16, tie_word_embeddings=False),
        dict(
            rope_type="yarn",
            rope_theta=10000.0,
            factor=4.0,
            original_max_position_embeddings=64,
            beta_fast=32.0,
            beta_slow=1.0,
        ),
        16,
    ),
}


def randomize(model, seed):
    """Seeded values for every parameter: nothing left at 0 or 1."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            shape = parameter.shape
            if name.endswith("norm.weight"):
                values = 0.8 + 0.4 * torch.rand(shape, generator=generator)
            elif name.endswith(".bias"):
                values = 0.4 * torch.rand(shape, generator=generator) - 0.2
            elif "embed_tokens" in name:
                values = torch.randn(shape, generator=generator)
            else:
                bound = (3.0 / shape[-1]) ** 0.5
                values = bound * (2.0 * torch.rand(shape, generator=generator) - 1.0)
            parameter.copy_(values)


def old_layout(config):
    """The transformers 4.x spelling of a 5.x config dict."""
    config = dict(config)
    rope = config.pop("rope_parameters", None)
    if rope is not None:
        rope = dict(rope)
        config["rope_theta"] = rope.pop("rope_theta")
        kind = rope.pop("rope_type", "default")
        if kind != "default":
            # 4.x wrote `type` in older files and `rope_type` in newer ones:
            # the linear fixture keeps the older key.
            key = "type" if kind == "linear" else "rope_type"
            config["rope_scaling"] = {key: kind, **rope}
        else:
            config["rope_scaling"] = None
    if "dtype" in config:
        config["torch_dtype"] = config.pop("dtype")
    config.pop("layer_types", None)
    config["transformers_version"] = "4.46.0"
    return config


def reference(directory, prompt, max_new_tokens, routing=None):
    model = AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    hooks = []
    if routing is not None:
        # Each router returns (logits, weights, indices); one list of k ids
        # per sparse layer per row, rows in the order the reference runs them.
        for index, layer in enumerate(model.model.layers):
            router = getattr(layer.mlp, "gate", None)
            if router is None or not hasattr(router, "top_k"):
                continue

            def record(module, inputs, output, index=index):
                routing.setdefault(index, []).extend(output[2].reshape(-1, module.top_k).tolist())

            hooks.append(router.register_forward_hook(record))
    with torch.no_grad():
        result = run_greedy(model, prompt, max_new_tokens, "cpu")
    for hook in hooks:
        hook.remove()
    return result


def is_sparse(model):
    return any(hasattr(getattr(layer.mlp, "gate", None), "top_k") for layer in model.model.layers)


def write_stacked(model, config_directory, out):
    """The model's state dict as transformers 5 holds it, stacked experts and all."""
    os.makedirs(out)
    state = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(os.path.join(config_directory, "config.json"), os.path.join(out, "config.json"))


def make(out, name, config_class, extra, rope, seed):
    config = config_class(**{**SMALL, **extra}, rope_parameters=rope)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed)
    sparse = is_sparse(model)
    f32 = os.path.join(out, name, "f32")
    shutil.rmtree(f32, ignore_errors=True)
    if sparse:
        model.save_pretrained(f32, max_shard_size="100MB")
    model = model.to(torch.bfloat16)
    new = os.path.join(out, name, "new")
    old = os.path.join(out, name, "old")
    stacked = os.path.join(out, name, "stacked")
    for directory in (new, old, stacked):
        shutil.rmtree(directory, ignore_errors=True)
    model.save_pretrained(new, max_shard_size="40KB")
    model.save_pretrained(old, max_shard_size="100MB")
    if sparse:
        write_stacked(model, new, stacked)
    for extra_file in ("generation_config.json",):
        for directory in (new, old, f32):
            path = os.path.join(directory, extra_file)
            if os.path.exists(path):
                os.remove(path)
    with open(os.path.join(old, "config.json"), encoding="utf-8") as f:
        written = json.load(f)
    with open(os.path.join(old, "config.json"), "w", encoding="utf-8") as f:
        json.dump(old_layout(written), f, indent=2, sort_keys=True)
        f.write("\n")

    generator = torch.Generator().manual_seed(seed)
    prompt = torch.randint(3, SMALL["vocab_size"], (6,), generator=generator).tolist()
    routing = {} if sparse else None
    logits_new, generated_new = reference(new, prompt, 10, routing)
    logits_old, generated_old = reference(old, prompt, 10)
    if not torch.equal(logits_new, logits_old) or generated_new != generated_old:
        raise SystemExit(f"{name}: the two layouts load differently in transformers")
    if sparse:
        logits_stacked, generated_stacked = reference(stacked, prompt, 10)
        if not torch.equal(logits_new, logits_stacked) or generated_new != generated_stacked:
            raise SystemExit(f"{name}: the stacked layout loads differently in transformers")
        logits_f32, generated_f32 = reference(f32, prompt, 10)
        np.save(
            os.path.join(out, f"{name}.f32.logits.npy"),
            np.ascontiguousarray(logits_f32.numpy(), dtype="<f4"),
        )
        with open(os.path.join(out, f"{name}.f32.tokens.json"), "w", encoding="utf-8") as f:
            json.dump({"prompt": prompt, "generated": generated_f32}, f)
            f.write("\n")
        with open(os.path.join(out, f"{name}.routing.json"), "w", encoding="utf-8") as f:
            json.dump({"layers": {str(layer): ids for layer, ids in sorted(routing.items())}}, f)
            f.write("\n")
    np.save(
        os.path.join(out, f"{name}.logits.npy"),
        np.ascontiguousarray(logits_new.numpy(), dtype="<f4"),
    )
    with open(os.path.join(out, f"{name}.tokens.json"), "w", encoding="utf-8") as f:
        json.dump({"prompt": prompt, "generated": generated_new}, f)
        f.write("\n")
    shards = sorted(os.listdir(new))
    print(f"{name}: {len(logits_new)} rows, generated {generated_new}, new layout files {shards}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--only", help="comma-separated fixture names (default: all)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    names = args.only.split(",") if args.only else list(FIXTURES)
    for name in names:
        make(args.out, name, *FIXTURES[name])
    # With --only, the fixtures already listed stay listed (their files are
    # untouched) with the versions that made them; the new ones get this run's.
    manifest_path = os.path.join(args.out, "manifest.json")
    earlier = {}
    if args.only and os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            earlier = json.load(f)
    listed = earlier.get("fixtures", [])
    versions = earlier.get("versions") or {
        name: {"torch": earlier.get("torch"), "transformers": earlier.get("transformers")} for name in listed
    }
    for name in names:
        versions[name] = {"torch": torch.__version__, "transformers": transformers.__version__}
    manifest = {
        "fixtures": listed + [name for name in names if name not in listed],
        "versions": versions,
        "command": "python3 tools/reference/make_fixtures.py --out crates/model/tests/fixtures/hf",
    }
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
