#!/usr/bin/env bash
# The first GPU checks of `kscope profile --graphs events` (graph launches timed
# by CUDA events around cudaGraphLaunch, CUPTI never attached), in one call:
#   1. its GPU test (profile_program: nvtx_steps on the shared CUDA runtime);
#   2. whether PyTorch's graph replays are seen, and whether the events' times
#      agree with CUPTI's graph trace on the same decode (--graphs whole), step by step;
#   3. what it costs the graph-replaying compiled decode beside --graphs whole and
#      Nsight Systems (graph_overhead_parts.sh).
# Run on the GPU machine from the project root after unpacking the full bundle
# (tools/gpu/bundle.sh). Writes to $OUT (default /tmp/graph-events-check). Each
# step has a time limit, so a hang in one still leaves the others' logs.
#   bash tools/gpu/graph_events_check.sh
set -uo pipefail
out=${OUT:-/tmp/graph-events-check}
mkdir -p "$out"
python=${PYTHON:-/opt/torch/.venv/bin/python3}
export PATH="$PWD/.gpu/bin:/usr/local/cuda/bin:$PATH"

echo "== 1. the GPU test"
timeout 150 bash .gpu/run.sh .gpu/tests/profile_program-* graph_launches_timed_by_events > "$out/test.log" 2>&1
echo "rc $?"; grep -E "test result|panicked" "$out/test.log"

echo "== 2. a PyTorch decode, CUPTI's graph trace against the events"
decode=(tools/reference/torch_graph_decode.py --graph --tokens 256 --repeat 1)
for how in whole events; do
  timeout 150 kscope profile --graphs "$how" --step forward --profile-json "$out/torch-$how.json" -- \
    "$python" "${decode[@]}" > "$out/torch-$how.log" 2>&1
  echo "--graphs $how: rc $?"; grep -E "^(mode|timing|steps)|tok/s|error" "$out/torch-$how.log" | cut -c1-200
done
"$python" tools/gpu/graph_times_compare.py "$out/torch-whole.json" "$out/torch-events.json"

[ "${OVERHEAD:-1}" = 0 ] && exit 0  # OVERHEAD=0: steps 1 and 2 only
echo "== 3. what each costs the compiled decode"
VARIANTS="kscope-whole kscope-events nsys-graph" ROUNDS=${ROUNDS:-2} TOKENS=${TOKENS:-2048} \
  bash tools/gpu/graph_overhead_parts.sh --json "$out/overhead.json" > "$out/overhead.log" 2>&1
echo "rc $?"; grep -E "median|slower" "$out/overhead.log"
