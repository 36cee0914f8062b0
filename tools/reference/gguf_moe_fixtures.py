"""GGUF files of mixture-of-experts models written by gguf-py, and the
logits transformers computes on the very weights each file holds, for
kscope's parity test (crates/model/tests/gguf_moe.rs).

transformers builds a small Qwen3-MoE (norm_topk_prob true: llama.cpp's
qwen3moe graph always renormalises the chosen weights, and so does kscope
reading GGUF) and a small Mixtral (seeded random weights); gguf-py writes
each as llama.cpp's converter does: `qwen3moe` with q_norm/k_norm, Mixtral
as `llama` with experts and its q/k rows permuted, the experts stacked
(`ffn_{gate,up,down}_exps`, the router `ffn_gate_inp`), vectors in F32, the
rest in F16 or Q8_0 (gguf-py's quantizer). The reference is the
transformers model with every weight replaced by what the file holds
(gguf-py's own dequantization of the written bytes), run in f32 over a
fixed token sequence: no GGUF loader of transformers is involved.

  python tools/reference/gguf_moe_fixtures.py --out DIR

Writes DIR/{qwen3moe,mixtral}-{f16,q8_0}.gguf and matching .logits.npy
([positions, vocab] f32); the tokens are in DIR/tokens.json of
gguf_transformers_fixtures.py (the same sequence). Needs torch,
transformers, gguf.
"""

import argparse
import os
import sys

import gguf
import numpy as np
import torch
from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_transformers_fixtures import TOKENS, permute  # noqa: E402

TYPES = {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0}
FILE_TYPES = {"f16": 1, "q8_0": 7}


def make_model(kind):
    torch.manual_seed(21 if kind == "qwen3moe" else 22)
    common = dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
    )
    if kind == "qwen3moe":
        config = Qwen3MoeConfig(
            head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0), use_sliding_window=False, **common,
        )
        model = Qwen3MoeForCausalLM(config)
    else:
        config = MixtralConfig(
            num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0), **common,
        )
        model = MixtralForCausalLM(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(1 + 0.1 * torch.randn_like(parameter))
            else:
                parameter.copy_(0.1 * torch.randn_like(parameter))
    return model.float().eval()


LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
}


def tensors(kind, model):
    """(GGUF name, array as written before quantizing, transformers name,
    how to put the file's values back): the stacked gate_up splits into
    ffn_gate_exps and ffn_up_exps."""
    config = model.config
    out = []
    for name, tensor in model.state_dict().items():
        data = tensor.detach().float().numpy()
        if name == "model.embed_tokens.weight":
            out.append(("token_embd.weight", data, name, None))
        elif name == "model.norm.weight":
            out.append(("output_norm.weight", data, name, None))
        elif name == "lm_head.weight":
            out.append(("output.weight", data, name, None))
        else:
            parts = name.split(".")
            layer, rest = parts[2], ".".join(parts[3:])
            if rest == "mlp.experts.gate_up_proj":
                rows = data.shape[1] // 2
                out.append((f"blk.{layer}.ffn_gate_exps.weight", data[:, :rows], name, ("first", rows)))
                out.append((f"blk.{layer}.ffn_up_exps.weight", data[:, rows:], name, ("second", rows)))
            elif rest == "mlp.experts.down_proj":
                out.append((f"blk.{layer}.ffn_down_exps.weight", data, name, None))
            else:
                heads = None
                if kind == "mixtral" and rest == "self_attn.q_proj.weight":
                    heads = config.num_attention_heads
                if kind == "mixtral" and rest == "self_attn.k_proj.weight":
                    heads = config.num_key_value_heads
                if heads:
                    data = permute(data, heads)
                out.append((f"blk.{layer}.{LAYER_NAMES[rest]}", data, name, ("permuted", heads) if heads else None))
    return out


def unpermute(weights, heads):
    """The inverse of `permute`."""
    return weights.reshape(heads, weights.shape[0] // heads // 2, 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


def write_gguf(kind, model, path, type_name):
    """Writes the file; returns the state dict of what it holds, dequantized."""
    config = model.config
    arch = "qwen3moe" if kind == "qwen3moe" else "llama"
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name(f"tiny {kind}")
    writer.add_file_type(FILE_TYPES[type_name])
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    if kind == "qwen3moe":
        writer.add_expert_count(config.num_experts)
        writer.add_expert_used_count(config.num_experts_per_tok)
        writer.add_expert_feed_forward_length(config.moe_intermediate_size)
    else:
        writer.add_expert_count(config.num_local_experts)
        writer.add_expert_used_count(config.num_experts_per_tok)
    tokens = [bytes([b]).decode("latin-1") for b in range(255)] + ["Ġt"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2" if kind == "qwen3moe" else "llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * len(tokens))
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    held = {}
    pieces = {}
    for gguf_name, data, name, back in tensors(kind, model):
        # Vectors and the router stay f32, as llama.cpp keeps them.
        if data.ndim == 1 or gguf_name.endswith("ffn_gate_inp.weight"):
            data = np.ascontiguousarray(data, dtype=np.float32)
            writer.add_tensor(gguf_name, data)
            values = data
        elif type_name == "f16":
            data = np.ascontiguousarray(data, dtype=np.float16)
            writer.add_tensor(gguf_name, data)
            values = data.astype(np.float32)
        else:
            quantized = gguf.quants.quantize(np.ascontiguousarray(data), TYPES[type_name])
            writer.add_tensor(gguf_name, quantized, raw_dtype=TYPES[type_name])
            values = gguf.quants.dequantize(quantized, TYPES[type_name]).reshape(data.shape)
        if back is None:
            held[name] = values
        elif back[0] == "permuted":
            held[name] = unpermute(values, back[1])
        else:
            pieces.setdefault(name, {})[back[0]] = values
    for name, halves in pieces.items():
        held[name] = np.concatenate([halves["first"], halves["second"]], axis=1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return held


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ids = torch.tensor([TOKENS])
    for kind in ("qwen3moe", "mixtral"):
        model = make_model(kind)
        with torch.no_grad():
            original = model(ids).logits[0].numpy()
        for type_name in TYPES:
            name = f"{kind}-{type_name}.gguf"
            held = write_gguf(kind, model, os.path.join(args.out, name), type_name)
            reference = make_model(kind)
            with torch.no_grad():
                for parameter_name, parameter in reference.named_parameters():
                    parameter.copy_(torch.from_numpy(held[parameter_name]).reshape(parameter.shape))
                logits = reference(ids).logits[0].float().numpy()
            np.save(os.path.join(args.out, f"{kind}-{type_name}.logits.npy"), logits)
            drift = np.abs(logits - original).max() / np.abs(original).max()
            print(f"{name}: the file's weights vs the checkpoint's: max relative logit difference {drift:.3e}")


if __name__ == "__main__":
    main()
