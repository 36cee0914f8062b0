#!/usr/bin/env bash
# Decode and prefill of one build beside another's, on one GPU in one run:
# the two kscope binaries alternate, so a change's figures and its base's
# share the machine's state (clocks, heat). Run from the repository root on
# the GPU machine with both binaries packed:
#   .gpu/bin/kscope         the build under test (bash tools/gpu/bundle.sh)
#   .gpu/bin/kscope-before  the base, built the same way from the base commit
#   bash tools/gpu/before_after.sh [rounds] [presets...]
# (default: 2 rounds of llama-3.2-1b and llama-3-8b). Writes $OUT/before_after.md.
set -u
out=${OUT:-/tmp/before_after}
mkdir -p "$out"
rounds=${1:-2}
shift || true
presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(llama-3.2-1b llama-3-8b)
log="$out/before_after.md"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log"
for preset in "${presets[@]}"; do
  for round in $(seq "$rounds"); do
    for build in kscope-before kscope; do
      echo "== $preset round $round: $build bench --preset $preset --device cuda -p 512 -n 128 -r 3 --compute-size 0" | tee -a "$log"
      timeout 300 ".gpu/bin/$build" bench --preset "$preset" --device cuda -p 512 -n 128 -r 3 --compute-size 0 --quiet 2>&1 \
        | grep -E "\| (pp|tg)[0-9]+ \||error|roofline:" | tee -a "$log"
    done
  done
done
