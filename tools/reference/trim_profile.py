#!/usr/bin/env python3
"""Trims a kscope profile (JSON) to a few decode tokens, for a test fixture:
the tokens FIRST .. FIRST+COUNT-1 (counting decode tokens from 0), renumbered
from 0 with their submissions and dispatches; with --unannotated, the layers
and roles kscope found are taken off again (each dispatch's scope emptied,
its roles, bytes and flops dropped), so a test sees the profile as the
program's records gave it.

    python3 tools/reference/trim_profile.py lcpp.json fixture.json --first 8 --count 2 --unannotated
"""

import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("target")
    parser.add_argument("--first", type=int, default=4, help="first decode token kept (from 0)")
    parser.add_argument("--count", type=int, default=2, help="decode tokens kept")
    parser.add_argument("--unannotated", action="store_true", help="drop found scopes, roles, bytes and flops")
    args = parser.parse_args()
    with open(args.source) as file:
        profile = json.load(file)
    decode = [token for token in profile["tokens"] if token.get("phase") == "decode"]
    kept = decode[args.first : args.first + args.count]
    if len(kept) < args.count:
        sys.exit(f"{args.source}: {len(decode)} decode tokens, {args.first + args.count} wanted")
    number = {token["index"]: new for new, token in enumerate(kept)}
    for token in kept:
        token["index"] = number[token["index"]]
    profile["tokens"] = kept
    profile["submissions"] = [s for s in profile["submissions"] if s.get("token") in number]
    for submission in profile["submissions"]:
        submission["token"] = number[submission["token"]]
    profile["dispatches"] = [d for d in profile["dispatches"] if d.get("token") in number]
    for dispatch in profile["dispatches"]:
        dispatch["token"] = number[dispatch["token"]]
        if args.unannotated:
            dispatch["scope"] = ""
            dispatch.pop("roles", None)
            dispatch.pop("measured_bytes", None)
            dispatch["bytes"] = dispatch["bytes_written"] = dispatch["flops"] = 0
    if args.unannotated:
        conditions = profile["conditions"]
        for key in ("anatomy", "model", "weight_format", "model_shape", "bytes_measured"):
            conditions.pop(key, None)
    profile["warnings"] = []
    with open(args.target, "w") as file:
        json.dump(profile, file, separators=(",", ":"))
    print(f"{args.target}: {len(kept)} tokens, {len(profile['dispatches'])} dispatches")


if __name__ == "__main__":
    main()
