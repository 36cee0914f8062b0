#!/usr/bin/env bash
# Tensor parallelism on a machine with two (or more) GPUs: the test suite
# with two GPUs required, compute-sanitizer on the kernels this work added
# or changed, and the decode figures of docs/PERF.md (llama-3-8b at --tp 1
# and 2, llama-3-70b at --tp 2, profiling overhead, a per-rank profile).
# Run from the repository root there, with the bundle from
# `bash tools/gpu/bundle.sh` in .gpu/. Logs go to $OUT.
#   bash tools/gpu/tp_run.sh [sections...]
# Sections (default: all): tests sanitize drift bench overhead profile torch
set -u
out=${OUT:-/tmp/perf}
mkdir -p "$out"
export PATH="$PWD/.gpu/bin:$PATH"
# NVLink multicast stays off (shared hosts); .gpu/run.sh also puts NCCL on the loader path.
export NCCL_NVLS_ENABLE=0
run() { bash .gpu/run.sh "$@"; }
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(tests sanitize drift bench overhead profile torch)
want() { [[ " ${sections[*]} " == *" $1 "* ]]; }
bench() { timeout 500 bash .gpu/run.sh kscope bench --device cuda --quiet "$@" 2>>"$out/stderr.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
nvidia-smi topo -m > "$out/topology.txt" 2>&1
if want tests; then
  KSCOPE_REQUIRE_GPU=2 run > "$out/tests.log" 2>&1
  echo "suite exit status: $?" | tee "$out/tests_summary.txt"
  grep -E "^=== |test result|FAILED|panicked|SKIPPED" "$out/tests.log" >> "$out/tests_summary.txt"
fi
if want sanitize; then
  for tool in memcheck racecheck; do
    for pair in "ops embedding" "synthetic_weights device_generation"; do
      set -- $pair
      binary=$(ls .gpu/tests/"$1"-* | head -1)
      KSCOPE_REQUIRE_GPU=1 timeout 300 bash .gpu/run.sh compute-sanitizer --tool "$tool" "$binary" "$2" \
        --test-threads=1 > "$out/sanitize_${tool}_$1.log" 2>&1
      echo "$tool $1 $2: exit $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize_${tool}_$1.log" | tail -1)" |
        tee -a "$out/sanitize_summary.txt"
    done
  done
fi
if want drift; then
  # The prefill profile's cross-check, three times: how close to its 5 % bound it runs here.
  for test in 1 2 3; do
    KSCOPE_REQUIRE_GPU=1 timeout 120 bash .gpu/run.sh "$(ls .gpu/tests/prefill-* | head -1)" batched_prefill_profile \
      --test-threads=1 2>&1 | grep -E "drift|test result" | tee -a "$out/prefill_drift.txt"
  done
fi
if want bench; then
  echo "== llama-3-8b tg128, --tp 1 then --tp 2 (graph)" | tee -a "$out/bench.md"
  bench --preset llama-3-8b -p 0 -n 128 -r 5 | tee -a "$out/bench.md"
  bench --preset llama-3-8b -p 0 -n 128 -r 5 --tp 2 | tee -a "$out/bench.md"
  echo "== llama-3-70b tg128 --tp 2 (graph)" | tee -a "$out/bench.md"
  bench --preset llama-3-70b -p 0 -n 128 -r 3 --tp 2 | tee -a "$out/bench.md"
  echo "== llama-3-70b pp512 --tp 2" | tee -a "$out/bench.md"
  bench --preset llama-3-70b -p 512 -n 0 -r 3 --tp 2 --bandwidth-mib 0 --compute-size 0 | tee -a "$out/bench.md"
fi
if want overhead; then
  for preset in llama-3-8b llama-3-70b; do
    for level in off dispatch off dispatch; do
      echo "== overhead $preset --tp 2 profile=$level (graph)" | tee -a "$out/overhead.md"
      bench --preset "$preset" --tp 2 -p 0 -n 128 -r 3 --profile "$level" --bandwidth-mib 0 --compute-size 0 |
        grep -E "tg128|warning" | tee -a "$out/overhead.md"
    done
  done
fi
if want profile; then
  timeout 300 bash .gpu/run.sh kscope run --preset llama-3-8b --device cuda --tp 2 --profile --max-tokens 32 \
    --quiet --profile-json "$out/llama-3-8b.tp2.json" --trace "$out/llama-3-8b.tp2.trace.json" --force \
    > "$out/run_profile_8b_tp2.txt" 2>&1
  timeout 400 bash .gpu/run.sh kscope run --preset llama-3-70b --device cuda --tp 2 --profile --max-tokens 16 \
    --quiet > "$out/run_profile_70b_tp2.txt" 2>&1
  echo "70b profile exit status: $?" >> "$out/run_profile_70b_tp2.txt"
  grep -H -A1 "^cross-check" "$out"/run_profile_*.txt
fi
if want torch; then
  # PyTorch needs a checkpoint on disk: llama-3-8b (16 GB); llama-3-70b's 141 GB do not fit the disk.
  [ -f /tmp/models/llama-3-8b/model.safetensors ] ||
    timeout 400 bash .gpu/run.sh kscope gen-model --preset llama-3-8b --out /tmp/models/llama-3-8b --quiet --force
  echo "== llama-3-8b tg128, kscope --tp 2 then PyTorch tp_plan=auto over 2 GPUs (torchrun)" | tee -a "$out/torch.md"
  bench --model /tmp/models/llama-3-8b -p 0 -n 128 -r 5 --tp 2 --bandwidth-mib 0 --compute-size 0 | tee -a "$out/torch.md"
  timeout 500 torchrun --nproc-per-node 2 tools/reference/hf_tp_bench.py --model /tmp/models/llama-3-8b -n 128 -r 5 \
    2>>"$out/torch_stderr.txt" | tee -a "$out/torch.md"
  echo "torchrun exit status: ${PIPESTATUS[0]}" | tee -a "$out/torch.md"
fi
