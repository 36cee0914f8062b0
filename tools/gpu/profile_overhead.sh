#!/usr/bin/env bash
# What `kscope profile` costs a program: runs CMD bare and under `kscope
# profile` alternately, ROUNDS times each, and prints each run's rate (the
# last "N tok/s" or "N t/s" figure CMD prints) and the medians. Alternating
# cancels a GPU's drift over a session; the median shrugs off one slow run.
#   bash tools/gpu/profile_overhead.sh 4 [kscope profile flags] -- python3 tools/reference/hf_generate_nvtx.py --tokens 128
set -uo pipefail
rounds=${1:?usage: profile_overhead.sh ROUNDS [kscope profile flags] -- CMD ARGS...}
shift
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
[ "${1:-}" = "--" ] || { echo "profile_overhead.sh: no -- CMD given" >&2; exit 2; }
shift
rate() { grep -oE '[0-9]+(\.[0-9]+)? (tok/s|t/s)' | tail -1 | cut -d' ' -f1; }
bare=(); profiled=()
for round in $(seq 1 "$rounds"); do
  b=$("$@" 2>&1 | rate)
  p=$(kscope profile "${flags[@]}" -- "$@" 2>&1 | grep -v '^decode:' | rate)
  echo "round $round: bare ${b:-?} , under kscope profile ${p:-?}"
  bare+=("${b:-0}"); profiled+=("${p:-0}")
done
python3 - "${bare[*]}" "${profiled[*]}" <<'PY'
import statistics, sys
bare = [float(x) for x in sys.argv[1].split()]
profiled = [float(x) for x in sys.argv[2].split()]
b, p = statistics.median(bare), statistics.median(profiled)
print(f"median: bare {b:.2f}, under kscope profile {p:.2f}: {100 * (1 - p / b):+.1f}% slower")
PY
