#!/usr/bin/env bash
# Produces the prefill and long-context figures of docs/PERF.md on the GPU
# machine, kscope and PyTorch in one run: run from the repository root there,
# with the bundle from `bash tools/gpu/bundle.sh` in .gpu/. Logs go to $OUT.
#   bash tools/gpu/prefill_run.sh [sections...]
# Sections (default: all): models peak small big chunks depth profile
set -u
out=${OUT:-/tmp/perf}
mkdir -p "$out"
export PATH="$PWD/.gpu/bin:$PATH"
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(models peak small big chunks depth profile)
want() { [[ " ${sections[*]} " == *" $1 "* ]]; }
small=/tmp/models/llama-3.2-1b
big=/tmp/models/llama-3-8b
long=/tmp/models/llama-3.1-8b
bench() { timeout 400 kscope bench --device cuda --quiet "$@" 2>>"$out/stderr.txt"; }
torch_bench() { timeout 400 python3 tools/reference/hf_bench.py --device cuda --dtype bfloat16 "$@" 2>>"$out/stderr.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if want models; then
  for preset in llama-3.2-1b llama-3-8b llama-3.1-8b; do
    [ -f "/tmp/models/$preset/model.safetensors" ] ||
      timeout 400 kscope gen-model --preset "$preset" --out "/tmp/models/$preset" --quiet --force
  done
fi
if want peak; then
  timeout 120 kscope info 2>&1 | tee "$out/info.txt"
fi
if want small; then
  echo "== llama-3.2-1b: kscope" | tee -a "$out/bench.md"
  bench --model "$small" -p 128 -n 0 -r 5 | tee -a "$out/bench.md"
  bench --model "$small" -p 2048 -n 0 -r 3 --bandwidth-mib 0 | tee -a "$out/bench.md"
  echo "== llama-3.2-1b: pytorch" | tee -a "$out/bench.md"
  torch_bench --model "$small" -p 128 -n 0 -r 5 | tee -a "$out/bench.md"
  torch_bench --model "$small" -p 2048 -n 0 -r 3 | tee -a "$out/bench.md"
fi
if want big; then
  echo "== llama-3-8b: kscope" | tee -a "$out/bench.md"
  bench --model "$big" -p 128 -n 0 -r 5 | tee -a "$out/bench.md"
  bench --model "$big" -p 2048 -n 0 -r 3 --bandwidth-mib 0 | tee -a "$out/bench.md"
  echo "== llama-3-8b: pytorch" | tee -a "$out/bench.md"
  torch_bench --model "$big" -p 128 -n 0 -r 5 | tee -a "$out/bench.md"
  torch_bench --model "$big" -p 2048 -n 0 -r 3 | tee -a "$out/bench.md"
fi
if want chunks; then
  for chunk in 1 128 256 512 1024 2048; do
    echo "== llama-3-8b pp2048 --prefill-chunk $chunk" | tee -a "$out/chunks.md"
    tokens=2048
    [ "$chunk" = 1 ] && tokens=128
    bench --model "$big" -p $tokens -n 0 -r 2 --bandwidth-mib 0 --prefill-chunk $chunk | grep "pp" | tee -a "$out/chunks.md"
  done
fi
if want depth; then
  # Llama 3.1's shapes: llama-3-8b's context (8192) stops short of 32768.
  for depth in 0 8192 32768; do
    echo "== llama-3.1-8b decode at depth $depth: kscope (bf16 KV)" | tee -a "$out/depth.md"
    bench --model "$long" -p 0 -n 64 -d $depth -r 3 --bandwidth-mib 0 | tee -a "$out/depth.md"
  done
  echo "== llama-3.1-8b decode at depth 32768: pytorch" | tee -a "$out/depth.md"
  torch_bench --model "$long" -p 0 -n 64 -d 32768 -r 3 | tee -a "$out/depth.md"
fi
if want profile; then
  ids=$(python3 -c "print(','.join(str((i * 7919) % 128000) for i in range(2048)))")
  timeout 400 kscope run --model "$big" --device cuda --profile --token-ids "$ids" --max-tokens 2 --quiet \
    --profile-json "$out/prefill_8b.json" --force > "$out/profile_prefill_8b.txt" 2>&1
  grep -A1 "^cross-check" "$out/profile_prefill_8b.txt"
fi
