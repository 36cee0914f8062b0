#!/usr/bin/env bash
# kscope's CPU path beside llama.cpp's CPU build on this machine: builds llama.cpp
# (native: AVX-512 BF16 and VNNI where the CPU has them) once from
# ../shared/llamacpp/llama.cpp-src.tar.xz into a cache outside the repository,
# writes the same synthetic checkpoint as GGUF files (`kscope gen-model --quant`),
# and runs llama-bench and `kscope bench --device cpu` alternately on each, printing
# a table of both and their ratio (kscope / llama.cpp) per round.
#
#   bash tools/cpu/llamacpp_side_by_side.sh            # build if needed, models, bench
#   ROUNDS=3 FORMATS=BF16 bash tools/cpu/llamacpp_side_by_side.sh bench
#
# It is tools/gpu/llamacpp_side_by_side.sh with DEVICE=cpu and these defaults, each
# overridable from the environment:
#   KSCOPE        target/release/kscope (built first with `cargo build --release -p kscope`)
#   LLAMACPP_SRC  ../shared/llamacpp/llama.cpp-src.tar.xz
#   LLAMACPP_DIR  ~/.cache/kscope/llamacpp-cpu (the build: bin/, lib/)
#   LLAMACPP_BUILD ~/.cache/kscope/llamacpp-build-cpu
#   WORK          ~/.cache/kscope/sbs-models (the GGUF files)
#   OUT           /tmp/kscope-cpu-sbs (the log)
#   SHAPES llama-3.2-1b; FORMATS "BF16 Q8_0 Q4_K_M"; PP 64; TG 32; REPS 3; ROUNDS 2;
#   LLAMA_BENCH_ARGS, KSCOPE_BENCH_ARGS: extra arguments; both use every core by default
#   (llama-bench's default is the core count; kscope's pool is one thread a core).
# Building llama.cpp takes 3-6 minutes on two cores; later runs reuse it.
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
root=$(git rev-parse --show-toplevel)
cd "$root"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/kscope
export DEVICE=cpu
export KSCOPE=${KSCOPE:-$root/target/release/kscope}
export LLAMACPP_SRC=${LLAMACPP_SRC:-$(cd "$root/.." && pwd)/shared/llamacpp/llama.cpp-src.tar.xz}
export LLAMACPP_DIR=${LLAMACPP_DIR:-$cache/llamacpp-cpu}
export LLAMACPP_BUILD=${LLAMACPP_BUILD:-$cache/llamacpp-build-cpu}
# No packed build to unpack on the machine that builds it.
export LLAMACPP_CUDA_CACHE=${LLAMACPP_CUDA_CACHE:-$cache/none.tar.xz}
export WORK=${WORK:-$cache/sbs-models}
export OUT=${OUT:-/tmp/kscope-cpu-sbs}
export SHAPES=${SHAPES:-llama-3.2-1b}
export FORMATS=${FORMATS:-BF16 Q8_0 Q4_K_M}
export PP=${PP:-64} TG=${TG:-32} REPS=${REPS:-3} ROUNDS=${ROUNDS:-2}
[ -x "${KSCOPE%% *}" ] || { echo "no kscope at $KSCOPE: cargo build --release -p kscope first" >&2; exit 2; }
command -v cmake >/dev/null && command -v ninja >/dev/null ||
  { echo "building llama.cpp needs cmake and ninja (pip install cmake ninja)" >&2; exit 2; }
grep -m1 'model name' /proc/cpuinfo || true
exec bash "$root/tools/gpu/llamacpp_side_by_side.sh" "$@"
