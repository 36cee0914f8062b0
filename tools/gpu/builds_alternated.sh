#!/usr/bin/env bash
# Several kscope builds alternated on the same GGUF files in one machine, so
# that a change's figures and its bases' share the machine's state (clocks,
# heat); then each build's profile of the first file and `kscope compare` of
# every build against the first. Run on the GPU machine from the repository
# root, with the builds packed in .gpu/bin (bash tools/gpu/bundle.sh packs
# the build under test as `kscope`; copy the others there, stripped, under
# names of their own):
#   BUILDS="kscope-before kscope" bash tools/gpu/builds_alternated.sh FILE...
# Each round runs, for each file, each build's
#   kscope bench --model FILE --device cuda -p 512 -n 128 -r 3
# Environment (defaults in brackets):
#   BUILDS   binaries in .gpu/bin, the base first  ["kscope-before kscope"]
#   ROUNDS   rounds                                 [2]
#   PROFILE  1: then `kscope run --model FILE --device cuda --profile --max-tokens 32
#            --profile-json` of each build on the first file and the compares  [1]
#   OUT      $OUT/builds_alternated.md, compare_<base>_<build>.txt  [/tmp/builds_alternated]
set -u
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ] || [ $# -eq 0 ]; then
  sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
  [ $# -eq 0 ] && exit 2 || exit 0
fi
out=${OUT:-/tmp/builds_alternated}
mkdir -p "$out"
read -r -a builds <<<"${BUILDS:-kscope-before kscope}"
rounds=${ROUNDS:-2}
for build in "${builds[@]}"; do
  [ -x ".gpu/bin/$build" ] || { echo "no .gpu/bin/$build (BUILDS names binaries packed there)" >&2; exit 2; }
done
for file in "$@"; do
  [ -f "$file" ] || { echo "no model file $file" >&2; exit 2; }
done
log=$out/builds_alternated.md
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$log"
for round in $(seq "$rounds"); do
  for file in "$@"; do
    for build in "${builds[@]}"; do
      echo "== round $round $(basename "$file") $build" | tee -a "$log"
      timeout 150 bash .gpu/run.sh "$build" bench --model "$file" --device cuda -p 512 -n 128 -r 3 2>&1 \
        | grep -E "\| (pp|tg)[0-9]+ |error|roofline:" | tee -a "$log"
    done
  done
done
[ "${PROFILE:-1}" = 1 ] || exit 0
for build in "${builds[@]}"; do
  timeout 120 bash .gpu/run.sh "$build" run --model "$1" --device cuda --profile --max-tokens 32 \
    --profile-json "$out/profile-$build.json" > "$out/profile-$build.log" 2>&1
done
base=${builds[0]}
for build in "${builds[@]:1}"; do
  bash .gpu/run.sh kscope compare "$out/profile-$base.json" "$out/profile-$build.json" > "$out/compare_${base}_$build.txt" 2>&1
done
