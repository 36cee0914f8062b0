#!/usr/bin/env bash
# Runs the libFuzzer targets in fuzz/ (the parsers of untrusted input: the
# safetensors header and shard index, the GGUF header, config.json, the chat template path,
# the profile JSON that `kscope compare` reads) on the stable toolchain.
#
#   bash tools/fuzz/run.sh                      # every target, 10 s each
#   bash tools/fuzz/run.sh config_json -runs=1000000
#   bash tools/fuzz/run.sh all -max_total_time=3
#
# cargo-fuzz asks for nightly only for the -Z flags it passes (sanitizer
# and coverage instrumentation); RUSTC_BOOTSTRAP=1 lets the stable compiler
# accept them. Installs cargo-fuzz when it is missing. New inputs that
# reach new coverage are added to fuzz/corpus/TARGET; crashes land in
# fuzz/artifacts/TARGET with the command that replays them.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
export RUSTC_BOOTSTRAP=1
target=${1:-all}
shift || true
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(-max_total_time=10)
if [ "$target" = all ]; then
  mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
else
  targets=("$target")
fi
for name in "${targets[@]}"; do
  echo "=== fuzz $name ${args[*]}"
  mkdir -p "fuzz/corpus/$name"
  cargo fuzz run --fuzz-dir fuzz "$name" "fuzz/corpus/$name" -- "${args[@]}"
done
