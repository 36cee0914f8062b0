#!/usr/bin/env bash
# compute-sanitizer over every test binary of crates/kernelscope (where each
# CUDA kernel is tested against its CPU reference): memcheck on each binary,
# racecheck on those whose kernels use shared memory (all of them, unless
# TOOLS says otherwise). Runs on the GPU machine after tools/gpu/bundle.sh,
# from the project root:
#   OUT=/tmp/out TOOLS="memcheck racecheck" BUDGET_S=560 bash tools/gpu/sanitize_kernels.sh [name ...]
# Each binary runs its tests one at a time (--test-threads=1) with
# KSCOPE_REQUIRE_GPU=1, so a test that skips fails. A binary that outlives its
# share of the budget is stopped and reported as such; binaries not reached
# are listed, never counted as clean. The summary is $OUT/sanitize_summary.txt.
# FILTER (a test-name substring, as cargo test takes it) runs only the matching
# tests of each binary, for a kernel just written.
set -u
out=${OUT:-/tmp/sanitize}
tools=${TOOLS:-memcheck racecheck}
budget=${BUDGET_S:-560}
per_binary=${PER_BINARY_S:-240}
mkdir -p "$out"
summary="$out/sanitize_summary.txt"
: > "$summary"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for path in crates/kernelscope/tests/*.rs crates/kernelscope/tests/*/main.rs; do
    name=$(basename "$path" .rs)
    [ "$name" = main ] && name=$(basename "$(dirname "$path")")
    case "$name" in
      module_structure|import_loops|nvrtc_compile) continue ;; # no kernels run
    esac
    names+=("$name")
  done
fi
start=$(date +%s)
for tool in $tools; do
  for name in "${names[@]}"; do
    binary=$(ls .gpu/tests/"$name"-* 2>/dev/null | head -1)
    if [ -z "$binary" ]; then
      echo "$tool $name: NOT BUNDLED" | tee -a "$summary"
      continue
    fi
    left=$((budget - ($(date +%s) - start)))
    if [ "$left" -lt 20 ]; then
      echo "$tool $name: NOT RUN (budget spent)" | tee -a "$summary"
      continue
    fi
    limit=$((left < per_binary ? left : per_binary))
    log="$out/${tool}_${name}.log"
    KSCOPE_REQUIRE_GPU=1 timeout "$limit" bash .gpu/run.sh compute-sanitizer --tool "$tool" \
      --error-exitcode 99 "$binary" ${FILTER:+"$FILTER"} --test-threads=1 > "$log" 2>&1
    status=$?
    result=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
    tests=$(grep -E "^test result" "$log" | tail -1)
    case $status in
      0) verdict=clean ;;
      255) if grep -q "terminated before first instrumented API call" "$log"; then
             verdict="no CUDA work (its tests run on the CPU only)"
           else
             verdict="FAILED (exit 255)"
           fi ;;
      99) verdict=ERRORS ;;
      124|137) verdict="STOPPED after ${limit}s" ;;
      *) verdict="FAILED (exit $status)" ;;
    esac
    echo "$tool $name: $verdict; $result; $tests" | tee -a "$summary"
  done
done
