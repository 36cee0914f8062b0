"""The two GGUF vocabularies kscope's tokenizer tests read, and llama.cpp's
token ids for a set of hard strings on each.

Writes, into crates/model/tests/fixtures/gguf_vocab/:
  bpe.gguf   a byte-level BPE vocabulary (`tokenizer.ggml.model` gpt2, pre
             `llama-bpe`), trained here with the `tokenizers` package on the
             corpus below, with Llama 3's special tokens;
  spm.gguf   a SentencePiece vocabulary (`llama`: scores, `<0xNN>` byte
             fallback, a user-defined token), trained with `sentencepiece`;
  strings.json  the hard strings and, per file, the ids llama.cpp gives them.

Each file is a whole (tiny, random) Llama so that llama.cpp loads it.
llama.cpp's ids come from tools/reference/llamacpp_reference.cpp:

  python tools/reference/gguf_vocab_fixtures.py --reference PATH/llamacpp_reference

Needs: gguf (llama.cpp's gguf-py), numpy, tokenizers, sentencepiece.
"""

import argparse
import json
import os
import subprocess
import tempfile

import gguf
import numpy as np
import sentencepiece as spm
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "model", "tests", "fixtures", "gguf_vocab")

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.",
    "Profiling a decoder layer shows where every microsecond of every token goes.",
    "for (int i = 0; i < 1024; i++) { sum += weights[i] * inputs[i]; }",
    "def forward(self, hidden_states):\n    return self.down(self.act(self.gate(x)) * self.up(x))",
    "In 2024, 3.14159 people read 1,234,567 numbers: 42, 007, 123456789.",
    "Ünïcödé täxt: café, naïve, jalapeño, Straße, Ångström, œuvre.",
    "日本語のテキストと中文文本，还有한국어 텍스트.",
    "Emoji 🙂🚀🔥 and symbols ∑∫√∞ ≤ ≥ ≠ → ← ↔ ©®™.",
    "    indented code\n\twith tabs\n\n\nand blank lines   and   runs   of   spaces.",
    "She said: \"I'll be there,\" but he'd already left; they're sure we've won.",
    "kernelscope measures bandwidth in GB/s and compute in GFLOP/s per kernel.",
    "Quantized weights: Q4_K_M, Q5_K_M, Q6_K, Q8_0 and Q4_0 blocks of 32 or 256 values.",
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"key\": [1, 2, 3]}",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G",
    "The mixture of experts routes each token to two of eight feed-forward networks.",
]

HARD_STRINGS = [
    "Hello world",
    " Hello world",
    "  leading spaces and trailing   ",
    "tabs\tand\nnewlines\n\n\nmany",
    "\n\n",
    "   ",
    "digits 1 12 123 1234 12345 3.14159 1,000,000",
    "Unicode: café naïve Straße Ångström",
    "日本語 中文 한국어",
    "emoji 🙂🚀🔥 and rare 🦜🪐 and zwj 👩‍💻",
    "mixed CASE and I'M sure we'LL see",
    "unseen bytes: \u00ff\u0100 \u2603 \U0001F9EC",
    "<|begin_of_text|>special<|eot_id|> tokens <|end_of_text|>",
    "<s>sentence</s> piece <think>thought</think>",
    "x",
    "",
]


def write_model(path, arch_tokens, add_tokenizer):
    """A one-layer Llama of random f32 weights around a vocabulary."""
    vocab_size = len(arch_tokens)
    hidden, heads, inter = 32, 2, 64
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(inter)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab_size)
    add_tokenizer(writer)
    rng = np.random.default_rng(7)

    def tensor(name, *shape):
        writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32) * 0.1)

    tensor("token_embd.weight", vocab_size, hidden)
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    tensor("output.weight", vocab_size, hidden)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(hidden, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        tensor(f"blk.0.{name}.weight", hidden, hidden)
    tensor("blk.0.ffn_gate.weight", inter, hidden)
    tensor("blk.0.ffn_up.weight", inter, hidden)
    tensor("blk.0.ffn_down.weight", hidden, inter)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def byte_level_vocabulary():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[], show_progress=False
    )
    tokenizer.train_from_iterator(CORPUS * 4, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    tokens = [None] * len(model["vocab"])
    for token, index in model["vocab"].items():
        tokens[index] = token
    merges = [" ".join(pair) if isinstance(pair, list) else pair for pair in model["merges"]]
    types = [gguf.TokenType.NORMAL] * len(tokens)
    tokens += specials
    types += [gguf.TokenType.CONTROL] * len(specials)
    begin, end, eot = (tokens.index(name) for name in specials)

    def add(writer):
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("llama-bpe")
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(begin)
        writer.add_eos_token_id(end)
        writer.add_eot_token_id(eot)
        writer.add_add_bos_token(True)

    return tokens, add


def sentencepiece_vocabulary(folder):
    corpus = os.path.join(folder, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as file:
        for line in CORPUS * 4:
            file.write(line.replace("\n", " ") + "\n")
    prefix = os.path.join(folder, "spm")
    spm.SentencePieceTrainer.train(
        input=corpus,
        model_prefix=prefix,
        model_type="bpe",
        vocab_size=600,
        byte_fallback=True,
        character_coverage=1.0,
        user_defined_symbols=["<think>", "</think>"],
        split_digits=True,
        minloglevel=2,
    )
    processor = spm.SentencePieceProcessor(model_file=prefix + ".model")
    tokens, scores, types = [], [], []
    for index in range(processor.vocab_size()):
        tokens.append(processor.id_to_piece(index))
        scores.append(processor.get_score(index))
        if processor.is_unknown(index):
            types.append(gguf.TokenType.UNKNOWN)
        elif processor.is_control(index):
            types.append(gguf.TokenType.CONTROL)
        elif processor.is_byte(index):
            types.append(gguf.TokenType.BYTE)
        elif processor.is_unused(index):
            types.append(gguf.TokenType.UNUSED)
        elif tokens[-1] in ("<think>", "</think>"):
            types.append(gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)

    def add(writer):
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores(scores)
        writer.add_token_types(types)
        writer.add_bos_token_id(processor.bos_id())
        writer.add_eos_token_id(processor.eos_id())
        writer.add_unk_token_id(processor.unk_id())
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)

    return tokens, add


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, help="the built llamacpp_reference program")
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    expected = {"strings": HARD_STRINGS, "ids": {}}
    with tempfile.TemporaryDirectory() as folder:
        strings = os.path.join(folder, "strings.hex")
        with open(strings, "w") as file:
            for text in HARD_STRINGS:
                file.write(text.encode("utf-8").hex() + "\n")
        for name, (tokens, add) in (("bpe.gguf", byte_level_vocabulary()), ("spm.gguf", sentencepiece_vocabulary(folder))):
            path = os.path.join(OUT, name)
            write_model(path, tokens, add)
            output = subprocess.run(
                [args.reference, "tokenize", path, strings], check=True, capture_output=True, text=True
            ).stdout
            lines = output.split("\n")[: len(HARD_STRINGS)]
            expected["ids"][name] = [[int(i) for i in line.split()] for line in lines]
    with open(os.path.join(OUT, "strings.json"), "w", encoding="utf-8") as file:
        json.dump(expected, file, ensure_ascii=False)
        file.write("\n")


if __name__ == "__main__":
    main()
