#!/usr/bin/env bash
# The first GPU checks of `kscope profile --graphs events` (graph launches timed
# by CUDA events around cudaGraphLaunch, CUPTI never attached), in one call:
#   1. its GPU test (profile_program: nvtx_steps on the shared CUDA runtime);
#   2. whether PyTorch's graph replays are seen, and whether the events' times
#      agree with CUPTI's graph trace on the same decode (--graphs whole), step by step;
#   3. what it costs the graph-replaying compiled decode beside --graphs whole and
#      Nsight Systems (graph_overhead_parts.sh).
# Run on the GPU machine from the project root after unpacking the full bundle
# (tools/gpu/bundle.sh). Writes to $OUT (default /tmp/graph-events-check).
#   bash tools/gpu/graph_events_check.sh
set -uo pipefail
out=${OUT:-/tmp/graph-events-check}
mkdir -p "$out"
python=${PYTHON:-/opt/torch/.venv/bin/python3}
export PATH="$PWD/.gpu/bin:/usr/local/cuda/bin:$PATH"

echo "== 1. the GPU test"
bash .gpu/run.sh .gpu/tests/profile_program-* graph_launches_timed_by_events > "$out/test.log" 2>&1
echo "rc $?"; grep -E "test result|panicked" "$out/test.log"

echo "== 2. a PyTorch decode, CUPTI's graph trace against the events"
decode=(tools/reference/torch_graph_decode.py --graph --tokens 256 --repeat 1)
for how in whole events; do
  kscope profile --graphs "$how" --step forward --profile-json "$out/torch-$how.json" -- \
    "$python" "${decode[@]}" > "$out/torch-$how.log" 2>&1
  echo "--graphs $how: rc $?"; grep -E "^(mode|timing|steps)|tok/s|error" "$out/torch-$how.log" | cut -c1-200
done
"$python" - "$out/torch-whole.json" "$out/torch-events.json" <<'PY'
import json, statistics, sys
def graph_times(path):
    try:
        profile = json.load(open(path))
    except (OSError, ValueError) as error:
        return f"unreadable ({error})"
    return [d["end_ns"] - d["start_ns"] for d in profile["dispatches"] if d["kernel"].startswith("whole CUDA graph")]
whole, events = graph_times(sys.argv[1]), graph_times(sys.argv[2])
if isinstance(whole, str) or isinstance(events, str) or not whole or not events:
    print("no comparison:", "whole", whole if isinstance(whole, str) else len(whole), "events", events if isinstance(events, str) else len(events))
else:
    w, e = statistics.median(whole), statistics.median(events)
    print(f"graph launches: whole {len(whole)}, events {len(events)}; median µs: whole {w/1e3:.1f}, events {e/1e3:.1f} ({100*(e/w-1):+.1f} %)")
PY

echo "== 3. what each costs the compiled decode"
VARIANTS="kscope-whole kscope-events nsys-graph" ROUNDS=${ROUNDS:-2} TOKENS=${TOKENS:-2048} \
  bash tools/gpu/graph_overhead_parts.sh --json "$out/overhead.json" > "$out/overhead.log" 2>&1
echo "rc $?"; grep -E "median|slower" "$out/overhead.log"
