#!/usr/bin/env bash
# What each part of `kscope profile --graphs whole` costs a PyTorch decode that
# replays one CUDA graph per token (tools/reference/torch_graph_decode.py), beside
# Nsight Systems' default graph tracing: every variant in rotating turns through
# tools/gpu/profiler_overhead.py. Run on the GPU machine from the project root after
# unpacking .gpu (tools/gpu/bundle.sh). ROUNDS (default 2), TOKENS (default 256),
# VARIANTS (default every one).
#   bash tools/gpu/graph_overhead_parts.sh [extra --under NAME=PREFIX ...]
set -euo pipefail
python=${PYTHON:-/opt/torch/.venv/bin/python3}
rounds=${ROUNDS:-2}
tokens=${TOKENS:-256}
kscope="kscope profile --graphs whole --step forward"
source tools/gpu/nsys_under.sh
minimal="env KSCOPE_INJECT_OMIT=clock,copies,flusher"
# name=prefix, in the order they are measured; VARIANTS (names separated by
# spaces) picks some, default all.
declare -A prefixes=(
  [kscope-whole]="$kscope --"
  [kscope-whole-no-api]="$kscope --api-calls off --"
  [kscope-whole-minimal]="$minimal $kscope --api-calls off -- env -u NVTX_INJECTION64_PATH"
  # Graph launches' times only: no kernel, copy or API records.
  [kscope-graph-trace-only]="$minimal,kernels $kscope --api-calls off -- env -u NVTX_INJECTION64_PATH"
  # CUPTI attached and nothing recorded: what attaching alone costs.
  [kscope-attached-only]="$minimal,kernels kscope profile --graphs nodes --step forward --api-calls off -- env -u NVTX_INJECTION64_PATH"
  # The whole profile, and the graph trace alone, without a CUPTI subscriber
  # (no callback API at all: devices go undescribed).
  [kscope-whole-no-subscriber]="env KSCOPE_INJECT_OMIT=subscriber $kscope --"
  [kscope-graph-trace-no-subscriber]="$minimal,kernels,subscriber $kscope --api-calls off -- env -u NVTX_INJECTION64_PATH"
  # The library loaded and NVTX handled, CUPTI never attached.
  [kscope-no-cupti]="env KSCOPE_INJECT_OMIT=cupti $kscope --"
  # Graph launches timed by CUDA events around cudaGraphLaunch, CUPTI never attached.
  [kscope-events]="kscope profile --graphs events --step forward --"
)
order=(kscope-whole kscope-whole-no-api kscope-whole-minimal kscope-graph-trace-only kscope-attached-only
  kscope-whole-no-subscriber kscope-graph-trace-no-subscriber kscope-no-cupti kscope-events)
read -r -a chosen <<< "${VARIANTS:-${order[*]} nsys-graph}"
unders=()
for name in "${chosen[@]}"; do
  if [ "$name" = nsys-graph ]; then
    nsys=$(nsys_under graph_overhead_parts)
    [ -z "$nsys" ] || unders+=(--under "$nsys")
  elif [ -n "${prefixes[$name]:-}" ]; then
    unders+=(--under "$name=${prefixes[$name]}")
  else
    echo "graph_overhead_parts: no variant $name (known: ${order[*]} nsys-graph)" >&2
    exit 2
  fi
done
exec "$python" tools/gpu/profiler_overhead.py --rounds "$rounds" "${unders[@]}" "$@" \
  -- "$python" tools/reference/torch_graph_decode.py --compile --graph --tokens "$tokens" --repeat 2
