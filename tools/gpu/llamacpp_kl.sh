#!/usr/bin/env bash
# kscope's KL divergence beside llama.cpp's on one pair of GGUF files: SHAPE written by
# `kscope gen-model` in bf16 (the base) and in FORMAT, embeddings scaled by 0.1 (the presets'
# ±1 embeddings make logits so spread that one token takes all the probability and every
# KL divergence reads 0), then on the same token sequence, the first chunk of 512 scored from
# position 256 as llama-perplexity scores it:
#   kscope kl --model F --reference BASE --token-ids IDS --tokens 511 --first-scored 256
#   llama-perplexity -m BASE -f TEXT -c 512 --chunks 1 --kl-divergence-base B
#   llama-perplexity -m F    -f TEXT -c 512 --chunks 1 --kl-divergence-base B --kl-divergence
# TEXT is tools/gpu/kl_text.txt; IDS (tools/gpu/kl_text.ids) is `llama-tokenize -m BASE -f TEXT
# --ids` of it with the presets' byte-level vocabulary, so both read the same tokens.
#
# Run from the repository root with kscope packed in .gpu/ (bash tools/gpu/bundle.sh -p kscope
# --release --features kernelscope/cuda) and llama.cpp's build as llamacpp_side_by_side.sh finds
# it (run its build stage first, or set LLAMACPP_DIR to a folder with bin/llama-perplexity).
# Environment (defaults in brackets): SHAPE [llama-3.2-1b], FORMAT [q4_k_m], DEVICE [cuda]
# (cpu: llama-perplexity -t 2, a CPU build), WORK [$HOME/kl], OUT [/tmp/kl], KSCOPE [bash
# .gpu/run.sh kscope].
set -euo pipefail
SHAPE=${SHAPE:-llama-3.2-1b}
FORMAT=${FORMAT:-q4_k_m}
DEVICE=${DEVICE:-cuda}
WORK=${WORK:-$HOME/kl}
OUT=${OUT:-/tmp/kl}
KSCOPE=${KSCOPE:-bash .gpu/run.sh kscope}
LLAMACPP_DIR=${LLAMACPP_DIR:-$HOME/llamacpp-$DEVICE}
mkdir -p /work "$WORK" "$OUT"
[ -e /work/main ] || ln -sfn "$PWD" /work/main
if [ ! -x "$LLAMACPP_DIR/bin/llama-perplexity" ]; then
  cache=${LLAMACPP_CUDA_CACHE:-.gpu-pack/llamacpp-$DEVICE.tar.xz}
  [ -f "$cache" ] || { echo "no llama-perplexity in $LLAMACPP_DIR and no $cache: run llamacpp_side_by_side.sh build first" >&2; exit 2; }
  mkdir -p "$LLAMACPP_DIR" && tar -xJf "$cache" -C "$LLAMACPP_DIR"
fi
export LD_LIBRARY_PATH=$LLAMACPP_DIR/lib:${LD_LIBRARY_PATH:-}
base=$WORK/$SHAPE-bf16-e0.1.gguf
file=$WORK/$SHAPE-$FORMAT-e0.1.gguf
for pair in "bf16:$base" "$FORMAT:$file"; do
  [ -f "${pair#*:}" ] || $KSCOPE gen-model --preset "$SHAPE" --out "${pair#*:}" --quant "${pair%%:*}" --embedding-scale 0.1 --quiet
done
if [ "$DEVICE" = cpu ]; then offload=(-t 2); else offload=(-ngl 99); fi
{
  echo "=== kscope kl ($DEVICE): $SHAPE $FORMAT against bf16"
  $KSCOPE kl --model "$file" --reference "$base" --device "$DEVICE" --token-ids tools/gpu/kl_text.ids \
    --tokens 511 --first-scored 256
  echo "=== llama-perplexity --kl-divergence ($DEVICE)"
  "$LLAMACPP_DIR/bin/llama-perplexity" -m "$base" -f tools/gpu/kl_text.txt -c 512 --chunks 1 "${offload[@]}" \
    --kl-divergence-base "$WORK/base.kld" > "$OUT/perplexity-base.log" 2>&1
  "$LLAMACPP_DIR/bin/llama-perplexity" -m "$file" -f tools/gpu/kl_text.txt -c 512 --chunks 1 "${offload[@]}" \
    --kl-divergence-base "$WORK/base.kld" --kl-divergence > "$OUT/perplexity.log" 2>&1
  sed -n '/KL divergence statistics/,/Minimum KLD/p' "$OUT/perplexity.log"
  grep "Same top p" "$OUT/perplexity.log"
} 2>&1 | tee "$OUT/kl.log"
