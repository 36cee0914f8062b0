#!/usr/bin/env bash
# The persistent feed-forward kernel (ops/quantized/feed_forward) on one
# GPU, from the checkout with .gpu/ (tools/gpu/bundle.sh): its GPU tests,
# then decode of Q4_K_M files kscope writes, the persistent kernel against
# the four kernels it replaces (the default; `--persistent-steps` asks for
# the persistent one) in turns, what profiling
# with its in-kernel stamps costs, and one profile that shows its steps.
#   STAGES="tests models bench cost profile" SHAPES="llama-3.2-1b" ROUNDS=2 bash tools/gpu/feed_forward_run.sh
# Logs under $OUT (default /tmp/feed_forward).
set -u
OUT=${OUT:-/tmp/feed_forward}
STAGES=${STAGES:-"tests models bench cost profile"}
SHAPES=${SHAPES:-"llama-3.2-1b"}
ROUNDS=${ROUNDS:-2}
# before: .gpu/bin/kscope-before (another build, packed beside), where present.
VARIANTS=${VARIANTS:-"persistent split"}
TESTS=${TESTS:-"feed_forward_kernel streamed_kernels quantized_kernels"}
MODELS=${MODELS:-/tmp/models}
mkdir -p "$OUT" "$MODELS"
kscope() { bash .gpu/run.sh kscope "$@"; }
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }

if has tests; then
  for test in $TESTS; do
    binary=$(ls "$PWD"/.gpu/tests/"$test"-* | head -n 1)
    KSCOPE_REQUIRE_GPU=1 bash .gpu/run.sh "$binary" --test-threads=1 > "$OUT/test_$test.log" 2>&1
    echo "test $test: rc=$? $(grep -h 'test result' "$OUT/test_$test.log" | tail -1)"
  done
fi
for shape in $SHAPES; do
  file="$MODELS/$shape-Q4_K_M.gguf"
  if has models && [ ! -f "$file" ]; then
    kscope gen-model --preset "$shape" --out "$file" --quant q4_k_m > "$OUT/gen_$shape.log" 2>&1 || echo "gen-model $shape failed"
  fi
  if has bench; then
    for round in $(seq "$ROUNDS"); do
      for variant in $VARIANTS; do
        extra=(); [ "$variant" = persistent ] && extra=(--persistent-steps)
        binary=kscope; [ "$variant" = before ] && binary=kscope-before
        bash .gpu/run.sh "$binary" bench --model "$file" --device cuda -p 0 -n 128 -r 3 --bandwidth-mib 1024 "${extra[@]}" \
          > "$OUT/bench_${shape}_${variant}_$round.log" 2>&1
        echo "$shape round $round $variant: $(grep -E 'tg128' "$OUT/bench_${shape}_${variant}_$round.log" | tail -1)"
      done
    done
  fi
  if has cost; then
    # What looking inside costs: each path bare and under `--profile
    # dispatch` in turns, so the stamps' share is persistent profiled over
    # persistent bare beside the four kernels' same ratio (CUPTI alone).
    for round in $(seq "$ROUNDS"); do
      for variant in split split-profiled persistent persistent-profiled; do
        extra=()
        case "$variant" in persistent*) extra+=(--persistent-steps) ;; esac
        case "$variant" in *-profiled) extra+=(--profile dispatch) ;; esac
        kscope bench --model "$file" --device cuda -p 0 -n 128 -r 3 "${extra[@]}" > "$OUT/cost_${shape}_${variant}_$round.log" 2>&1
        echo "$shape cost round $round $variant: $(grep -E 'tg128' "$OUT/cost_${shape}_${variant}_$round.log" | tail -1)"
      done
    done
  fi
  if has profile; then
    for variant in persistent split; do
      extra=(); [ "$variant" = persistent ] && extra=(--persistent-steps)
      kscope run --model "$file" --device cuda --profile --max-tokens 32 "${extra[@]}" \
        --profile-json "$OUT/profile_${shape}_$variant.json" > "$OUT/profile_${shape}_$variant.txt" 2>&1
      echo "$shape profile $variant: rc=$?"
    done
  fi
done
