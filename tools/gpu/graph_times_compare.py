#!/usr/bin/env python3
"""Whether two profiles of one program time its graph launches alike: the
count and median length of the "whole CUDA graph" dispatches of each profile
JSON (kscope profile --graphs whole or events), and how far apart the medians
are. Used by graph_events_check.sh and llama_bench_overhead.sh.

    python3 tools/gpu/graph_times_compare.py whole.json events.json
"""

import json
import statistics
import sys


def graph_times(path):
    """Lengths (ns) of the profile's whole-graph dispatches, or why there are none."""
    try:
        with open(path) as file:
            profile = json.load(file)
    except (OSError, ValueError) as error:
        return f"unreadable ({error})"
    return [
        dispatch["end_ns"] - dispatch["start_ns"]
        for dispatch in profile["dispatches"]
        if dispatch["kernel"].startswith("whole CUDA graph")
    ]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: graph_times_compare.py FIRST.json SECOND.json")
    first_path, second_path = sys.argv[1:]
    first, second = graph_times(first_path), graph_times(second_path)
    if isinstance(first, str) or isinstance(second, str) or not first or not second:
        describe = lambda times: times if isinstance(times, str) else len(times)
        print(f"no comparison: {first_path} {describe(first)}, {second_path} {describe(second)}")
        return
    a, b = statistics.median(first), statistics.median(second)
    print(
        f"graph launches: {len(first)} and {len(second)}; "
        f"median µs: {a / 1e3:.1f} and {b / 1e3:.1f} ({100 * (b / a - 1):+.1f} %)"
    )


if __name__ == "__main__":
    main()
