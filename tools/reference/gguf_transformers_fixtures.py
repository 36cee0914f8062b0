"""GGUF files written by gguf-py from checkpoints transformers made, and
transformers' own logits on them, for kscope's parity test
(crates/model/tests/gguf_transformers.rs).

transformers builds a small Llama and a small Qwen2 (seeded random weights,
saved as safetensors); gguf-py writes each as GGUF the way llama.cpp's
convert_hf_to_gguf.py does (llama's q/k rows permuted for llama.cpp's RoPE,
vectors in F32), in F16, Q8_0 and Q4_0 (gguf-py's own quantizers); then
transformers loads every file back with `from_pretrained(..., gguf_file=...)`
(which dequantizes and undoes the permutation) and computes the logits of
every position of a fixed token sequence in f32.

  python tools/reference/gguf_transformers_fixtures.py --out DIR

Writes DIR/{llama,qwen2}-{f16,q8_0,q4_0}.gguf, matching .logits.npy
([positions, vocab] f32) and tokens.json. Needs torch, transformers, gguf.
"""

import argparse
import json
import os
import tempfile

import gguf
import numpy as np
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

TOKENS = [1, 5, 9, 200, 33, 7, 100, 64, 250, 3]
TYPES = {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}
FILE_TYPES = {"f16": 1, "q8_0": 7, "q4_0": 2}


def make_model(kind, folder):
    torch.manual_seed(0 if kind == "llama" else 1)
    common = dict(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
    )
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(rope_theta=10000.0, **common))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(rope_theta=1000000.0, use_sliding_window=False, **common))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(1 + 0.1 * torch.randn_like(parameter))
            elif name.endswith("bias"):
                parameter.copy_(0.1 * torch.randn_like(parameter))
            else:
                parameter.copy_(0.1 * torch.randn_like(parameter))
    model = model.float().eval()
    model.save_pretrained(folder, safe_serialization=True)
    return model


def permute(weights, heads):
    """convert_hf_to_gguf.py's LlamaModel.permute."""
    return weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:]).swapaxes(1, 2).reshape(weights.shape)


NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(name):
    if name in NAMES:
        return NAMES[name]
    parts = name.split(".")
    return f"blk.{parts[2]}.{LAYER_NAMES['.'.join(parts[3:])]}"


def write_gguf(kind, model, path, type_name):
    config = model.config
    writer = gguf.GGUFWriter(path, kind)
    writer.add_name(f"tiny {kind}")
    writer.add_file_type(FILE_TYPES[type_name])
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"] if hasattr(config, "rope_parameters") and config.rope_parameters else config.rope_theta)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    tokens = [bytes([b]).decode("latin-1") for b in range(255)] + ["Ġt"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe" if kind == "llama" else "qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * len(tokens))
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    for name, tensor in model.state_dict().items():
        data = tensor.detach().float().numpy()
        if kind == "llama" and name.endswith(("q_proj.weight", "q_proj.bias")):
            data = permute(data, config.num_attention_heads)
        if kind == "llama" and name.endswith(("k_proj.weight", "k_proj.bias")):
            data = permute(data, config.num_key_value_heads)
        if data.ndim == 1:
            writer.add_tensor(gguf_name(name), data.astype(np.float32))
        elif type_name == "f16":
            writer.add_tensor(gguf_name(name), data.astype(np.float16))
        else:
            quantized = gguf.quants.quantize(data, TYPES[type_name])
            writer.add_tensor(gguf_name(name), quantized, raw_dtype=TYPES[type_name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    ids = torch.tensor([TOKENS])
    for kind in ("llama", "qwen2"):
        with tempfile.TemporaryDirectory() as folder:
            model = make_model(kind, folder)
            with torch.no_grad():
                original = model(ids).logits[0].numpy()
            for type_name in TYPES:
                name = f"{kind}-{type_name}.gguf"
                write_gguf(kind, model, os.path.join(args.out, name), type_name)
                loaded = AutoModelForCausalLM.from_pretrained(args.out, gguf_file=name, dtype=torch.float32).eval()
                with torch.no_grad():
                    logits = loaded(ids).logits[0].float().numpy()
                np.save(os.path.join(args.out, f"{kind}-{type_name}.logits.npy"), logits)
                drift = np.abs(logits - original).max() / np.abs(original).max()
                print(f"{name}: transformers on the GGUF vs on the checkpoint: max relative difference {drift:.3e}")
    with open(os.path.join(args.out, "tokens.json"), "w") as file:
        json.dump({"tokens": TOKENS}, file)
        file.write("\n")


if __name__ == "__main__":
    main()
