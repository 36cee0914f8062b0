#!/usr/bin/env bash
# The ceilings on the GPU machine (issue: ceilings the hardware sets): kscope's
# read, write and copy probes at two sizes, the physical limit, every other way
# of reading memory there (torch, Triton, a hand-written CUDA read) against
# kscope's read ceiling, the 8B decode roofline under it and the profile that
# places each kernel against its floor, and compute-sanitizer over the probes.
# Run from the repository root there, with the bundle of tools/gpu/bundle.sh
# in .gpu/. Logs go to $OUT.
#   bash tools/gpu/ceiling_run.sh [sections...]
# Sections (default: all): info compare decode sanitize
set -u
out=${OUT:-/tmp/ceilings}
mkdir -p "$out"
export PATH="$PWD/.gpu/bin:$PATH"
sections=("$@")
[ ${#sections[@]} -gt 0 ] || sections=(info compare decode sanitize)
want() { [[ " ${sections[*]} " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
if want info; then
  for mib in 256 1024; do
    echo "== kscope info --bandwidth-mib $mib" | tee -a "$out/info.txt"
    timeout 300 kscope info --bandwidth-mib "$mib" 2>&1 | tee -a "$out/info.txt"
  done
  timeout 300 kscope info --bandwidth-mib 1024 --json >"$out/info.json" 2>>"$out/stderr.txt"
  timeout 300 kscope calibrate --device cuda --json >"$out/calibrate.json" 2>>"$out/stderr.txt"
fi
if want compare; then
  timeout 400 python3 tools/gpu/read_ceiling.py 1024 20 --kscope "$PWD/.gpu/bin/kscope" 2>&1 | tee "$out/read_ceiling.txt"
fi
if want decode; then
  for preset in llama-3-8b llama-3.2-1b; do
    echo "== $preset tg128" | tee -a "$out/bench.md"
    timeout 400 kscope bench --preset "$preset" --device cuda -p 0 -n 128 -r 3 --quiet 2>>"$out/stderr.txt" |
      tee -a "$out/bench.md"
    timeout 400 kscope run --preset "$preset" --device cuda --profile --max-tokens 32 \
      --profile-json "$out/$preset.json" --html "$out/$preset.html" >"$out/run-$preset.txt" 2>&1
  done
fi
if want sanitize; then
  ops=$(ls .gpu/tests/ops-* | head -1)
  ceilings=$(ls .gpu/tests/ceilings-* | head -1)
  for tool in memcheck racecheck; do
    echo "== $tool: the read and write probes" | tee -a "$out/sanitizer.txt"
    KSCOPE_REQUIRE_GPU=1 timeout 300 compute-sanitizer --tool "$tool" "$ops" stream_ 2>&1 | tail -5 |
      tee -a "$out/sanitizer.txt"
  done
  echo "== the ceilings tests" | tee -a "$out/tests.txt"
  KSCOPE_REQUIRE_GPU=1 timeout 300 "$ceilings" 2>&1 | tail -15 | tee -a "$out/tests.txt"
fi
