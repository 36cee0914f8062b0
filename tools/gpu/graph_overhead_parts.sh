#!/usr/bin/env bash
# What each part of `kscope profile --graphs whole` costs a PyTorch decode that
# replays one CUDA graph per token (tools/reference/torch_graph_decode.py), beside
# Nsight Systems' default graph tracing: every variant in rotating turns through
# tools/gpu/profiler_overhead.py. Run on the GPU machine from the project root after
# unpacking .gpu (tools/gpu/bundle.sh). ROUNDS (default 2), TOKENS (default 256).
#   bash tools/gpu/graph_overhead_parts.sh [extra --under NAME=PREFIX ...]
set -euo pipefail
python=${PYTHON:-/opt/torch/.venv/bin/python3}
rounds=${ROUNDS:-2}
tokens=${TOKENS:-256}
kscope="kscope profile --graphs whole --step forward"
nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1 || true)
minimal="env KSCOPE_INJECT_OMIT=clock,copies,flusher"
unders=(
  --under "kscope-whole=$kscope --"
  --under "kscope-whole-no-api=$kscope --api-calls off --"
  --under "kscope-whole-minimal=$minimal $kscope --api-calls off -- env -u NVTX_INJECTION64_PATH"
  # Graph launches' times only: no kernel, copy or API records.
  --under "kscope-graph-trace-only=$minimal,kernels $kscope --api-calls off -- env -u NVTX_INJECTION64_PATH"
  # CUPTI attached and nothing recorded: what attaching alone costs.
  --under "kscope-attached-only=$minimal,kernels kscope profile --graphs nodes --step forward --api-calls off -- env -u NVTX_INJECTION64_PATH"
)
if [ -n "$nsys_bin" ]; then
  unders+=(--under "nsys-graph=$nsys_bin profile -t cuda,nvtx -s none --cpuctxsw=none -o /tmp/nsys%p --force-overwrite true")
else
  echo "graph_overhead_parts: no nsys found; Nsight Systems not measured" >&2
fi
exec "$python" tools/gpu/profiler_overhead.py --rounds "$rounds" "${unders[@]}" "$@" \
  -- "$python" tools/reference/torch_graph_decode.py --compile --graph --tokens "$tokens" --repeat 2
