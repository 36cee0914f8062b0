#!/usr/bin/env bash
# Bench, profiling cost and cross-check per preset on the GPU machine (the
# first GPU figures: docs/perf-history.md, 2026-11-22): run from the
# repository root there, with the bundle from `bash tools/gpu/bundle.sh`
# in .gpu/ (kscope built with --features cuda). Writes logs to $OUT.
#   bash tools/gpu/perf_run.sh [presets...]   (default: llama-3.2-1b llama-3-8b)
set -u
out=${OUT:-/tmp/perf}
mkdir -p "$out"
export PATH="$PWD/.gpu/bin:$PATH"
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(llama-3.2-1b llama-3-8b)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
for preset in "${presets[@]}"; do
  dir=/tmp/models/$preset
  timeout 300 kscope gen-model --preset "$preset" --out "$dir" --quiet --force
  echo "== $preset: kscope (graph)" | tee -a "$out/bench.md"
  timeout 300 kscope bench --model "$dir" --device cuda -p 128 -n 128 -r 3 --quiet 2>/dev/null | tee -a "$out/bench.md"
  echo "== $preset: kscope (eager)" | tee -a "$out/bench.md"
  timeout 300 kscope bench --model "$dir" --device cuda -p 0 -n 128 -r 3 --eager --bandwidth-mib 0 --quiet 2>/dev/null | tee -a "$out/bench.md"
  echo "== $preset: pytorch" | tee -a "$out/bench.md"
  timeout 300 python3 tools/reference/hf_bench.py --model "$dir" -p 128 -n 128 -r 3 --device cuda --dtype bfloat16 2>/dev/null | tee -a "$out/bench.md"
done
first=/tmp/models/${presets[0]}
for mode in "" --eager; do
  for level in off submission dispatch; do
    echo "== overhead ${presets[0]} profile=$level ${mode:-graph}" | tee -a "$out/overhead.md"
    timeout 300 kscope bench --model "$first" --device cuda -p 0 -n 128 -r 3 --profile "$level" $mode --bandwidth-mib 0 --quiet 2>&1 | grep -E "tg128|warning" | tee -a "$out/overhead.md"
  done
done
# The cross-check in graph mode: the default (tiny) model, then each preset.
timeout 120 kscope run --device cuda --profile --max-tokens 32 --quiet > "$out/run_profile_tiny.txt" 2>&1
for preset in "${presets[@]}"; do
  timeout 300 kscope run --model "/tmp/models/$preset" --device cuda --profile --max-tokens 32 --quiet \
    > "$out/run_profile_$preset.txt" 2>&1
done
grep -H -A1 "^cross-check" "$out"/run_profile_*.txt
# What a graph replay costs beyond its dispatches, with and without CUPTI.
if [ -x .gpu/bin/02_graph_launch_lead ]; then
  for level in dispatch submission; do
    KSCOPE_PROFILE=$level timeout 120 .gpu/bin/02_graph_launch_lead --replays 100 | tee -a "$out/graph_launch_lead.md"
  done
fi
