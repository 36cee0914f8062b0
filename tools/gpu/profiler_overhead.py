#!/usr/bin/env python3
"""What a profiler costs a program: runs CMD bare and under each profiler
given, in turn, ROUNDS times, and prints each run's rate (the last "N tok/s"
or "N t/s" figure CMD prints), the medians and each profiler's cost
against bare. Taking turns cancels a GPU's drift over a session; the median
shrugs off one slow run.

    python3 tools/gpu/profiler_overhead.py --rounds 3 \\
        --under "kscope=kscope profile --step forward --" \\
        --under "kscope-callbacks=kscope profile --api-calls callbacks --" \\
        --under "nsys=nsys profile -t cuda,nvtx -s none --cpuctxsw=none -o /tmp/n%p --force-overwrite true" \\
        -- python3 tools/reference/hf_generate_nvtx.py --tokens 128

Each --under is NAME=PREFIX: the words put before CMD. "bare" (no prefix)
always runs. --json FILE writes every rate.
"""

import argparse
import json
import re
import shlex
import statistics
import subprocess
import sys
import time

RATE = re.compile(r"([0-9]+(?:\.[0-9]+)?) (?:tok/s|t/s)")


def rate_of(output: str, rate=RATE):
    """The last rate the program printed, ignoring kscope's own decode line."""
    lines = [line for line in output.splitlines() if not line.startswith("decode:")]
    found = rate.findall("\n".join(lines))
    return float(found[-1]) if found else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--under", action="append", default=[], metavar="NAME=PREFIX")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument(
        "--rate",
        metavar="REGEX",
        help="where the rate is: a regular expression whose one group is the number "
        "(default: the last 'N tok/s' or 'N t/s'; llama-bench's table: 'tg[0-9]+ +\\| +([0-9.]+) ')",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds a run may take (default 600)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    try:
        rate_pattern = re.compile(args.rate) if args.rate else RATE
    except re.error as error:
        parser.error(f"--rate {args.rate!r}: {error}")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        sys.exit("profiler_overhead: no -- CMD given")
    variants = [("bare", [])]
    for under in args.under:
        name, equals, prefix = under.partition("=")
        if not equals or not name:
            sys.exit(f"profiler_overhead: --under {under!r} is not NAME=PREFIX")
        variants.append((name, shlex.split(prefix)))
    rates = {name: [] for name, _ in variants}
    for round_index in range(args.rounds):
        # Each round starts with the next variant, so none always runs first.
        order = variants[round_index % len(variants):] + variants[: round_index % len(variants)]
        for name, prefix in order:
            started = time.monotonic()
            try:
                done = subprocess.run(
                    prefix + command, capture_output=True, text=True, timeout=args.timeout
                )
                output = done.stdout + done.stderr
            except subprocess.TimeoutExpired as expired:
                output = f"timed out after {expired.timeout} s"
            rate = rate_of(output, rate_pattern)
            took = time.monotonic() - started
            print(f"round {round_index + 1} {name}: {rate if rate is not None else '?'} ({took:.0f} s)", flush=True)
            if rate is None:
                print("  no rate; its output ended:\n  " + "\n  ".join(output.splitlines()[-8:]), flush=True)
            else:
                rates[name].append(rate)
    bare = statistics.median(rates["bare"]) if rates["bare"] else None
    for name, _ in variants:
        if not rates[name]:
            print(f"{name}: no rate")
            continue
        median = statistics.median(rates[name])
        spread = f"{min(rates[name]):.2f}-{max(rates[name]):.2f}"
        cost = f", {100 * (1 - median / bare):+.1f}% slower than bare" if bare and name != "bare" else ""
        print(f"{name}: median {median:.2f} ({spread}, {len(rates[name])} runs){cost}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"command": command, "variants": dict(variants), "rates": rates}, file, indent=1)


if __name__ == "__main__":
    main()
