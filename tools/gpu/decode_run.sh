#!/usr/bin/env bash
# Decode on the GPU machine (fused and unfused, early and serial launch,
# roofline), profiling overhead, cross-check and `kscope calibrate` (run B of
# docs/PERF.md), kscope and PyTorch in one run: run from the repository root
# there, with the bundle from `bash tools/gpu/bundle.sh` in .gpu/. Logs go to
# $OUT. The torch section's `hf_bench.py --compile` crashes on torch 2.11 with
# transformers 5.17 (docs/PERF.md, "PyTorch"); its exit status is logged.
#   bash tools/gpu/decode_run.sh [sections...]
# Sections (default: all): models bench torch overhead profile calibrate
set -u
out=${OUT:-/tmp/perf}
mkdir -p "$out"
export PATH="$PWD/.gpu/bin:$PATH"
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(models bench torch overhead profile calibrate)
want() { [[ " ${sections[*]} " == *" $1 "* ]]; }
presets=(llama-3.2-1b llama-3-8b)
bench() { timeout 400 kscope bench --device cuda --quiet "$@" 2>>"$out/stderr.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if want models; then
  for preset in "${presets[@]}"; do
    [ -f "/tmp/models/$preset/model.safetensors" ] ||
      timeout 400 kscope gen-model --preset "$preset" --out "/tmp/models/$preset" --quiet --force
  done
fi
if want bench; then
  for preset in "${presets[@]}"; do
    echo "== $preset tg128: kscope fused, fused --serial-launch, unfused, unfused --serial-launch (graph)" |
      tee -a "$out/bench.md"
    bench --model "/tmp/models/$preset" -p 0 -n 128 -r 5 | tee -a "$out/bench.md"
    for flags in "--serial-launch" "--unfused" "--unfused --serial-launch"; do
      # shellcheck disable=SC2086
      bench --model "/tmp/models/$preset" -p 0 -n 128 -r 5 $flags --bandwidth-mib 0 --compute-size 0 |
        tee -a "$out/bench.md"
    done
  done
fi
if want torch; then
  for preset in "${presets[@]}"; do
    echo "== $preset tg128: pytorch compiled (static cache, reduce-overhead)" | tee -a "$out/bench.md"
    timeout 500 python3 -X faulthandler tools/reference/hf_bench.py --model "/tmp/models/$preset" --device cuda \
      --dtype bfloat16 -p 0 -n 128 -r 5 --compile 2>>"$out/torch_stderr.txt" | tee -a "$out/bench.md"
    echo "hf_bench exit status: ${PIPESTATUS[0]}" | tee -a "$out/bench.md"
  done
fi
if want overhead; then
  for preset in "${presets[@]}"; do
    for level in off dispatch off dispatch; do
      echo "== overhead $preset profile=$level (graph)" | tee -a "$out/overhead.md"
      bench --model "/tmp/models/$preset" -p 0 -n 128 -r 5 --profile "$level" --bandwidth-mib 0 --compute-size 0 |
        grep -E "tg128|warning" | tee -a "$out/overhead.md"
    done
  done
fi
if want profile; then
  timeout 120 kscope run --device cuda --profile --max-tokens 32 --quiet > "$out/run_profile_tiny.txt" 2>&1
  timeout 120 kscope run --device cuda --profile --max-tokens 32 --quiet --serial-launch \
    > "$out/run_profile_tiny.serial.txt" 2>&1
  for preset in "${presets[@]}"; do
    for fusion in fused unfused; do
      flag=""
      [ "$fusion" = unfused ] && flag=--unfused
      timeout 300 kscope run --model "/tmp/models/$preset" --device cuda --profile --max-tokens 32 --quiet $flag \
        --profile-json "$out/$preset.$fusion.json" --force > "$out/run_profile_$preset.$fusion.txt" 2>&1
    done
    timeout 60 kscope compare "$out/$preset.unfused.json" "$out/$preset.fused.json" > "$out/compare_$preset.txt" 2>&1
  done
  grep -H -A1 "^cross-check" "$out"/run_profile_*.txt
fi
if want calibrate; then
  timeout 300 kscope calibrate --device cuda | tee "$out/calibrate.md"
fi
