#!/usr/bin/env bash
# llama.cpp beside kscope on the same GGUF files, in one machine: llama-bench and
# `kscope bench` run one after the other on each file kscope wrote, and a markdown
# table compares their decode (tg) and prompt (pp) tokens/s.
#
# Run on the GPU machine from the repository root, with .gpu/ from
# `bash tools/gpu/bundle.sh` (kscope built with --features cuda) and .gpu-pack/
# carried along:
#   bash tools/gpu/llamacpp_side_by_side.sh [stages...]
# Stages (default: all three, in this order):
#   build   get llama.cpp: $LLAMACPP_DIR when it already holds bin/llama-bench, else
#           unpack $LLAMACPP_CUDA_CACHE (or its split parts CACHE.00, CACHE.01, ...), else
#           build .gpu-pack/llama.cpp-src.tar.xz (a copy of ../shared/llamacpp/
#           llama.cpp-src.tar.xz; ~5 min on 16 cores) with the flags of
#           ../shared/llamacpp/README.md. A fresh build is packed into
#           $OUT/llamacpp-cuda.tar.xz when OUT is set (the CUDA build only) (split into .00, .01, ... parts
#           of $PACK_SPLIT_MIB [15] MiB when larger: files back from a machine are 16 MiB at most):
#           copy it (joined: `cat PARTS > F`) to .gpu-pack/llamacpp-cuda.tar.xz and the
#           next machine unpacks it instead of building.
#   models  `kscope gen-model --preset SHAPE --out SHAPE-FORMAT.gguf --quant FORMAT`
#           into $WORK for each shape and format; files already there are reused.
#   bench   for each file: llama-bench -m F -ngl 99 -fa 1 -p PP -n TG -r REPS -o md,
#           then kscope bench --model F --device cuda -p PP -n TG -r REPS, then the table.
# The machine is given back ~30 s after a call and one call runs 10 minutes at most:
# split the stages over calls chained at once (build and models live in $HOME).
#
# Environment (defaults in brackets):
#   SHAPES   kscope presets             ["llama-3.2-1b llama-3-8b"]
#   FORMATS  GGUF file types            ["Q4_K_M Q8_0 Q6_K"] (also BF16, F16, Q4_0, Q5_K_M)
#   PP TG REPS                          [512 128 3] (PP=0 or TG=0 skips that test)
#   ROUNDS   llama-bench then kscope bench, this many times over for each file [1]:
#            a shared machine drifts, so alternating runs keeps their ratio honest
#   DEVICE   cuda or cpu                [cuda] (cpu: llama.cpp built without CUDA into
#            ~/llamacpp-cpu, llama-bench -ngl 0, kscope --device cpu; for testing)
#   OUT      logs: $OUT/side_by_side.log  [/tmp/sbs]; the build's pack only when OUT is set
#   WORK     GGUF files                 [$HOME/sbs-models]
#   LLAMACPP_DIR        unpacked llama.cpp: bin/ and lib/   [$HOME/llamacpp-cuda]
#   LLAMACPP_CUDA_CACHE packed build to unpack  [.gpu-pack/llamacpp-cuda.tar.xz]
#                       (DEVICE=cpu: llamacpp-cpu in each of these names)
#   LLAMACPP_SRC        source to build from    [.gpu-pack/llama.cpp-src.tar.xz]
#   LLAMACPP_BUILD      build folder            [$HOME/llamacpp-build]
#   KSCOPE   the kscope binary to run   [bash .gpu/run.sh kscope]
#   KSCOPE_BEFORE  a base build to alternate with KSCOPE (e.g. "bash .gpu/run.sh kscope-before"):
#            each round then runs llama-bench, the base, the build; the table gains the base's
#            columns and build / base [unset: no base]
#   BENCH_TIMEOUT       seconds per bench run   [400]
#   LLAMA_BENCH_ARGS, KSCOPE_BENCH_ARGS  extra arguments of each bench (split on spaces)
# The build packs bin/llama-bench, bin/llama-perplexity (for `--kl-divergence`) and
# bin/llama-quantize (the gap account's files)
# with the shared libraries they load (lib/: ggml, llama, common); CUDA's own
# (cudart, cublas) come from the machine's toolkit and are found through
# LD_LIBRARY_PATH. A bench that fails shows "failed (see log)" in its cell.
set -euo pipefail

if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(build models bench)
for s in "${stages[@]}"; do
  case "$s" in build|models|bench) ;; *) echo "unknown stage '$s' (build, models, bench; --help)" >&2; exit 2;; esac
done
want() { [[ " ${stages[*]} " == *" $1 "* ]]; }

root=$PWD
device=${DEVICE:-cuda}
case "$device" in
  cuda) flavor=cuda; ngl=99;;
  cpu) flavor=cpu; ngl=0;;
  *) echo "DEVICE must be cuda or cpu, not '$device'" >&2; exit 2;;
esac
read -r -a shapes <<<"${SHAPES:-llama-3.2-1b llama-3-8b}"
read -r -a formats <<<"${FORMATS:-Q4_K_M Q8_0 Q6_K}"
pp=${PP:-512}
tg=${TG:-128}
reps=${REPS:-3}
rounds=${ROUNDS:-1}
bench_timeout=${BENCH_TIMEOUT:-400}
read -r -a llama_extra <<<"${LLAMA_BENCH_ARGS:-}"
read -r -a kscope_extra <<<"${KSCOPE_BENCH_ARGS:-}"
if [ -n "${KSCOPE:-}" ]; then read -r -a kscope <<<"$KSCOPE"; else kscope=(bash "$root/.gpu/run.sh" kscope); fi
kscope_before=()
[ -z "${KSCOPE_BEFORE:-}" ] || read -r -a kscope_before <<<"$KSCOPE_BEFORE"
llama_dir=${LLAMACPP_DIR:-$HOME/llamacpp-$flavor}
cache=${LLAMACPP_CUDA_CACHE:-.gpu-pack/llamacpp-$flavor.tar.xz}
src_tar=${LLAMACPP_SRC:-.gpu-pack/llama.cpp-src.tar.xz}
build_dir=${LLAMACPP_BUILD:-$HOME/llamacpp-build-$flavor}
[ "$flavor" = cpu ] || build_dir=${LLAMACPP_BUILD:-$HOME/llamacpp-build}
out=${OUT:-/tmp/sbs}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${WORK:-$HOME/sbs-models}
mkdir -p "$work"
# kscope's runner works from the build root: every path it gets must be absolute.
work=$(cd "$work" && pwd)
log=$out/side_by_side.log

say() { echo "$*" | tee -a "$log"; }
die() { say "error: $*"; exit 1; }

# CUDA's runtime and cuBLAS, for a llama.cpp built on another machine of the same toolkit.
if [ "$flavor" = cuda ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
lib_path=$llama_dir/lib
if [ "$flavor" = cuda ]; then
  cuda_home=""
  if command -v nvcc >/dev/null 2>&1; then cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"); fi
  for d in "$cuda_home/lib64" "$cuda_home/targets/x86_64-linux/lib" /usr/local/cuda/lib64; do
    if [ -d "$d" ] && [[ ":$lib_path:" != *":$d:"* ]]; then lib_path=$lib_path:$d; fi
  done
fi
export LD_LIBRARY_PATH=$lib_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
llama_bench=$llama_dir/bin/llama-bench

# Whether bin/llama-bench there starts: every library it needs is found.
llama_ok() {
  [ -x "$llama_bench" ] || return 1
  if ldd "$llama_bench" 2>/dev/null | grep -q 'not found'; then
    say "llama.cpp in $llama_dir misses libraries:"
    ldd "$llama_bench" | grep 'not found' | tee -a "$log"
    return 1
  fi
}

unpack_cache() {
  local parts=()
  if [ -f "$cache" ]; then
    parts=("$cache")
  else
    shopt -s nullglob
    parts=("$cache".[0-9][0-9])
    shopt -u nullglob
  fi
  [ ${#parts[@]} -gt 0 ] || return 1
  say "unpacking ${parts[*]} into $llama_dir"
  rm -rf "$llama_dir" && mkdir -p "$llama_dir"
  cat "${parts[@]}" | xz -dc | tar -x -C "$llama_dir"
}

build_llamacpp() {
  [ -f "$src_tar" ] || die "no llama.cpp build in $llama_dir, no packed build at $cache and no source at $src_tar:
  copy ../shared/llamacpp/llama.cpp-src.tar.xz (beside the project checkout on the dev machine) to .gpu-pack/ there and carry .gpu-pack"
  local blog=$out/llamacpp-build.log src=$build_dir/llama.cpp
  say "building llama.cpp ($flavor) from $src_tar in $build_dir (output: $blog)"
  if [ ! -f "$src/CMakeLists.txt" ]; then
    rm -rf "$build_dir" && mkdir -p "$build_dir"
    tar -xJf "$src_tar" -C "$build_dir"
  fi
  # The trimmed source keeps these folders empty or not at all; CMake wants them.
  mkdir -p "$src/tests" "$src/examples" "$src/pocs" "$src/models"
  local flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_TOOLS=ON
    # Shared libraries: llama-bench and llama-perplexity share one libggml-cuda, the
    # largest part by far, so the pack stays small.
    -DBUILD_SHARED_LIBS=ON)
  if [ "$flavor" = cpu ]; then
    # The CPU build is the baseline kscope's CPU kernels are held to: built for this
    # machine's processor (AVX-512 BF16, VNNI where it has them), as its users build it.
    flags+=(-DGGML_NATIVE=ON)
  else
    # Generic x86-64 (AVX2) host code, so the pack also runs on the next machine's processor.
    flags+=(-DGGML_NATIVE=OFF)
  fi
  if [ "$flavor" = cuda ]; then
    command -v nvcc >/dev/null 2>&1 || die "nvcc not found (PATH, /usr/local/cuda/bin)"
    flags+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF)
  fi
  local t0=$SECONDS
  if ! { cmake -S "$src" -B "$src/build" "${flags[@]}" &&
         cmake --build "$src/build" -j"$(nproc)" --target llama-bench llama-perplexity llama-quantize; } >"$blog" 2>&1; then
    tail -40 "$blog" | tee -a "$log"
    die "llama.cpp build failed (whole output: $blog)"
  fi
  say "built in $((SECONDS - t0)) s"
  rm -rf "$llama_dir" && mkdir -p "$llama_dir/bin" "$llama_dir/lib"
  cp "$src/build/bin/llama-bench" "$src/build/bin/llama-perplexity" "$src/build/bin/llama-quantize" "$llama_dir/bin/"
  # cp -P keeps the soname links (libllama.so.0 -> libllama.so.0.0.N)
  find "$src/build/bin" -maxdepth 1 -name 'lib*.so*' -exec cp -P {} "$llama_dir/lib/" \;
  if command -v strip >/dev/null 2>&1; then
    strip --strip-unneeded "$llama_dir"/bin/* "$llama_dir"/lib/* 2>/dev/null || true
  fi
  if [ -n "${OUT:-}" ] && [ "$flavor" = cuda ]; then
    local pack=$out/llamacpp-$flavor.tar.xz limit=$((${PACK_SPLIT_MIB:-15} * 1024 * 1024))
    tar -C "$llama_dir" -cf - bin lib | xz -T0 -9 >"$pack"
    if [ "$(stat -c %s "$pack")" -gt "$limit" ]; then
      split -b "$limit" -d -a 2 "$pack" "$pack."
      rm "$pack"
      say "packed the build into $(cd "$out" && echo llamacpp-"$flavor".tar.xz.[0-9][0-9]) in \$OUT:" \
        "join them (cat llamacpp-$flavor.tar.xz.?? > .gpu-pack/llamacpp-$flavor.tar.xz) or copy the parts to .gpu-pack/"
    else
      say "packed the build into \$OUT/llamacpp-$flavor.tar.xz ($(du -h "$pack" | cut -f1)): copy it to .gpu-pack/"
    fi
  fi
}

: >>"$log"
say "== llamacpp_side_by_side $(date -u '+%F %T') UTC: stages ${stages[*]}, device $device"
if [ "$flavor" = cuda ] && command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$log" || true
fi

if want build; then
  if llama_ok; then
    say "llama.cpp: $llama_dir (already there)"
  elif unpack_cache && llama_ok; then
    say "llama.cpp: $llama_dir (from $cache)"
  else
    build_llamacpp
    llama_ok || die "the fresh build in $llama_dir does not start"
  fi
fi

model_file() { echo "$work/$1-$2.gguf"; }

if want models; then
  for shape in "${shapes[@]}"; do
    for format in "${formats[@]}"; do
      f=$(model_file "$shape" "$format")
      if [ -s "$f" ]; then say "model: $f (already there)"; continue; fi
      tmp=${f%.gguf}.partial.gguf
      t0=$SECONDS
      quant=$(echo "$format" | tr '[:upper:]' '[:lower:]')
      if "${kscope[@]}" gen-model --preset "$shape" --out "$tmp" --quant "$quant" --quiet >>"$log" 2>&1; then
        mv "$tmp" "$f"
        say "model: $f ($((SECONDS - t0)) s)"
      else
        rm -f "$tmp"
        say "model: gen-model --preset $shape --quant $quant failed (see above)"
      fi
    done
  done
fi

if want bench; then
  llama_ok || die "no llama.cpp in $llama_dir: run the build stage first"
  raw=$(mktemp -d)
  results=$raw/results.tsv
  : >"$results"
  # Each bench: stdout (its table) to a file of its own for the parser, both streams to the log.
  run_bench() { # name command...
    local name=$1 rc=0
    shift
    say "== $name: $*"
    timeout "$bench_timeout" "$@" >"$raw/$name.out" 2>"$raw/$name.err" || rc=$?
    cat "$raw/$name.out" >>"$log"
    { echo "-- stderr:"; grep -v '^$' "$raw/$name.err" || true; echo "-- exit status $rc"; } >>"$log"
    grep '^|' "$raw/$name.out" || true
    [ "$rc" = 0 ] || say "$name: exit status $rc$([ "$rc" = 124 ] && echo " (timed out after $bench_timeout s)")"
    return "$rc"
  }
  for shape in "${shapes[@]}"; do
    for format in "${formats[@]}"; do
      f=$(model_file "$shape" "$format")
      if [ ! -s "$f" ]; then
        say "== $shape $format: no model $f (models stage)"
        printf '%s\t%s\t%s\t-\t-\t-\t-\t-\t-\n' "$shape" "$format" 0 >>"$results"
        continue
      fi
      size=$(stat -c %s "$f")
      for round in $(seq 1 "$rounds"); do
        lrc=0
        run_bench "llama-$shape-$format-$round" "$llama_bench" -m "$f" -ngl "$ngl" -fa 1 -p "$pp" -n "$tg" -r "$reps" \
          -o md "${llama_extra[@]}" || lrc=$?
        krc=0
        run_bench "kscope-$shape-$format-$round" "${kscope[@]}" bench --model "$f" --device "$device" -p "$pp" -n "$tg" \
          -r "$reps" --quiet "${kscope_extra[@]}" || krc=$?
        brc=-
        if [ ${#kscope_before[@]} -gt 0 ]; then
          brc=0
          run_bench "before-$shape-$format-$round" "${kscope_before[@]}" bench --model "$f" --device "$device" -p "$pp" \
            -n "$tg" -r "$reps" --quiet "${kscope_extra[@]}" || brc=$?
        fi
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$shape $round" "$format" "$size" "$lrc" \
          "$raw/llama-$shape-$format-$round.out" "$krc" "$raw/kscope-$shape-$format-$round.out" \
          "$brc" "$raw/before-$shape-$format-$round.out" >>"$results"
      done
    done
  done
  python3 - "$results" "$pp" "$tg" "$device" <<'PY' | tee -a "$log"
import sys

results, pp, tg, device = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]


def rates(path):
    """{test: mean t/s} from the markdown table of llama-bench or kscope bench."""
    out, cols = {}, None
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return out
    for line in lines:
        line = line.strip()
        if not line.startswith("|"):
            cols = None
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "test" in cells and "t/s" in cells:
            cols = (cells.index("test"), cells.index("t/s"))
            continue
        if cols is None or len(cells) <= max(cols) or set(cells[0]) <= set("-: "):
            continue
        try:
            out[cells[cols[0]]] = float(cells[cols[1]].split("±")[0].replace(",", ""))
        except ValueError:
            pass
    return out


def num(x):
    return f"{x:,.0f}" if x >= 1000 else f"{x:.1f}"


def cell(rc, got, test, n):
    if n == 0:
        return "–", None
    if rc == "-":
        return "no model", None
    if test in got:
        return num(got[test]), got[test]
    return "failed (see log)", None


def ratio(a, b):
    return f"{b / a:.2f}x" if a and b else "–"


print()
print(f"llama.cpp (llama-bench -fa 1) beside kscope bench, device {device}, tokens/s; ratio = kscope / llama.cpp")
print()
rows = [row.rstrip("\n").split("\t") for row in open(results, encoding="utf-8")]
with_base = any(row[7] != "-" for row in rows)
base_head = f" base tg{tg} | build / base | base pp{pp} | build / base |" if with_base else ""
print(f"| shape | round | format | file GB | llama.cpp tg{tg} | kscope tg{tg} | ratio | llama.cpp pp{pp} | kscope pp{pp} | ratio |{base_head}")
print("|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|---|" if with_base else ""))
for shape_round, fmt, size, lrc, lout, krc, kout, brc, bout in rows:
    shape, _, round_number = shape_round.partition(" ")
    lgot = rates(lout) if lrc != "-" else {}
    kgot = rates(kout) if krc != "-" else {}
    ltg, ltgv = cell(lrc, lgot, f"tg{tg}", tg)
    ktg, ktgv = cell(krc, kgot, f"tg{tg}", tg)
    lpp, lppv = cell(lrc, lgot, f"pp{pp}", pp)
    kpp, kppv = cell(krc, kgot, f"pp{pp}", pp)
    gb = f"{int(size) / 1e9:.2f}" if int(size) else "–"
    base = ""
    if with_base:
        bgot = rates(bout) if brc != "-" else {}
        btg, btgv = cell(brc, bgot, f"tg{tg}", tg)
        bpp, bppv = cell(brc, bgot, f"pp{pp}", pp)
        base = f" {btg} | {ratio(btgv, ktgv)} | {bpp} | {ratio(bppv, kppv)} |"
    print(f"| {shape} | {round_number or 1} | {fmt} | {gb} | {ltg} | {ktg} | {ratio(ltgv, ktgv)} | {lpp} | {kpp} | {ratio(lppv, kppv)} |{base}")
PY
  rm -rf "$raw"
  say "log: $log"
fi
