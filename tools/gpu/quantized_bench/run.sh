#!/usr/bin/env bash
# Builds and runs the quantized-kernel microbenchmark on the GPU machine:
#   bash tools/gpu/quantized_bench/run.sh [--once]     (ONLY=substring picks cases)
# The kernels are the project's own sources (prelude, quantized.cuh, formats.cuh, products.cuh and
# kernels.cu instantiated for Q4_K and Q6_K, as the runtime does) plus
# variants.cu; nvcc compiles them for sm_90 with the host harness.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
ops=$root/crates/kernelscope/src/ops
build=${BUILD:-/tmp/quantized_bench}
mkdir -p "$build"
{
  echo '#undef INFINITY'
  cat "$ops/prelude.cuh" "$ops/quantized/linear/quantized.cuh" "$ops/quantized/linear/formats.cuh" "$ops/quantized/linear/products.cuh" "$ops/quantized/linear/streamed.cuh"
  for f in q4_k:Q4_K q6_k:Q6_K; do
    sed "s/{format}/${f%%:*}/g; s/{Format}/${f##*:}/g" "$ops/quantized/linear/kernels.cu"
  done
  cat "$ops/quantized/linear/stage.cu" "$ops/quantized/linear/streamed_kernels.cu" "$here/variants.cu" "$here/dequant_variants.cu"
} > "$build/kernels.inc"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$nvcc" -O3 -std=c++17 -arch=sm_90 -I"$build" -I"$here" -o "$build/bench" "$here/bench.cu" -Xptxas -v 2>"$build/ptxas.log" || { cat "$build/ptxas.log"; exit 1; }
grep -A1 "Compiling entry" "$build/ptxas.log" | grep -o "Function properties for [a-z0-9_]*\|Used [0-9]* registers" | paste - - 2>/dev/null | head -40 || true
"$build/bench" "$@"
