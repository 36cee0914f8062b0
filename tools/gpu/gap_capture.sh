#!/usr/bin/env bash
# The gap account's runs (issue 50): llama.cpp, kscope and PyTorch profiled on the
# same model shapes in one machine lease, the profiles packed for `kscope compare`.
#
# Run on the GPU machine from the project root, with .gpu/ (tools/gpu/bundle.sh, kscope
# built with --features cuda) and .gpu-pack/ (llama.cpp's source or packed build) carried:
#   bash tools/gpu/gap_capture.sh STAGE...
# Stages, in the order given:
#   setup     llama.cpp (llamacpp_side_by_side.sh's build stage: unpacked from
#             .gpu-pack/llamacpp-cuda.tar.xz, else built and packed into $OUT), then for
#             each shape a BF16 GGUF by `kscope gen-model` and its Q4_K_M by llama.cpp's own
#             `llama-quantize` (the files users have), in $WORK.
#   llama     for each shape and format: `kscope profile -- llama-bench -p 0 -n $TG -r 1`,
#             the record files kept.
#   kscope    for each shape and format: `kscope run --profile-json` (kscope's own profile,
#             roles and layers from its engine) and the same run under `kscope profile`
#             (kscope seen from outside, as any program: what layer and role finding must
#             recover).
#   torch     tools/reference/torch_graph_decode.py on the first shape, eager and
#             --compile --graph, under `kscope profile --step forward`.
#   dram      llama-bench on the first shape's Q4_K_M under --dram-bytes-interval 20
#             (measured bytes beside the model's), then what PM sampling costs its tg rate:
#             bare, under kscope profile without DRAM sampling, and with it (the default),
#             in turns.
#   moe       a mixture of experts ($MOE, kscope's own Q4_K_M file by `kscope gen-model
#             --quant q4_k_m`: one file of its size fits the disk, its BF16 source does
#             not), then the llama and kscope stages on it (router and experts rows).
#   pack      every profile and record folder into $OUT/gap-profiles.tar.xz.
# Environment: SHAPES ["llama-3.2-1b llama-3-8b"], FORMATS ["Q4_K_M BF16"], TG [32],
#   OUT [/tmp/gap], WORK [$HOME/sbs-models], ROUNDS (dram) [3], MOE [qwen3-30b-a3b].
set -uo pipefail
root=$PWD
out=${OUT:-/tmp/gap}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${WORK:-$HOME/sbs-models}
mkdir -p "$work"
work=$(cd "$work" && pwd)
keep=$HOME/gap-profiles
mkdir -p "$keep"
read -r -a shapes <<<"${SHAPES:-llama-3.2-1b llama-3-8b}"
read -r -a formats <<<"${FORMATS:-Q4_K_M BF16}"
tg=${TG:-32}
python=${PYTHON:-/opt/torch/.venv/bin/python3}
export PATH="$root/.gpu/bin:/usr/local/cuda/bin:$PATH"
lib=$HOME/llamacpp-cuda/lib:/usr/local/cuda/lib64
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
kscope=(bash "$root/.gpu/run.sh" kscope)
llama_bench=$HOME/llamacpp-cuda/bin/llama-bench
llama_quantize=$HOME/llamacpp-cuda/bin/llama-quantize
tokens=1,2,3,4,5,6,7,8

step() { echo "== $(date -u +%T) $*"; }
file_of() { echo "$work/$1-$2.gguf"; }

for stage in "$@"; do
  case "$stage" in
  setup)
    step "llama.cpp"
    OUT=$out WORK=$work SHAPES="${shapes[*]}" FORMATS=BF16 bash tools/gpu/llamacpp_side_by_side.sh build models \
      > "$out/setup.log" 2>&1 || { echo "setup failed:"; tail -30 "$out/setup.log"; exit 1; }
    grep -E "built in|already there|from |model:|packed" "$out/setup.log"
    [ -x "$llama_quantize" ] || { echo "no llama-quantize in the llama.cpp build"; exit 1; }
    for shape in "${shapes[@]}"; do
      for format in "${formats[@]}"; do
        [ "$format" = BF16 ] && continue
        f=$(file_of "$shape" "$format")
        [ -s "$f" ] && { echo "$f already there"; continue; }
        t0=$SECONDS
        "$llama_quantize" "$(file_of "$shape" BF16)" "$f" "$format" 16 > "$out/quantize-$shape-$format.log" 2>&1 \
          || { echo "llama-quantize $shape $format failed"; tail -5 "$out/quantize-$shape-$format.log"; exit 1; }
        echo "llama-quantize $shape $format: $((SECONDS - t0)) s, $(du -h "$f" | cut -f1)"
      done
    done
    ;;
  llama)
    for shape in "${shapes[@]}"; do
      for format in "${formats[@]}"; do
        name=$shape-$format
        step "llama.cpp $name"
        rm -rf "$keep/records-lcpp-$name"
        timeout 200 "${kscope[@]}" profile --profile-json "$keep/lcpp-$name.json" --keep-records "$keep/records-lcpp-$name" \
          -- "$llama_bench" -m "$(file_of "$shape" "$format")" -ngl 99 -fa 1 -p 0 -n "$tg" -r 1 \
          > "$keep/lcpp-$name.log" 2>&1
        echo "rc $?"; grep -E "^\| |steps|error|warning" "$keep/lcpp-$name.log" | cut -c1-160 | head -8
      done
    done
    ;;
  kscope)
    for shape in "${shapes[@]}"; do
      for format in "${formats[@]}"; do
        name=$shape-$format
        f=$(file_of "$shape" "$format")
        step "kscope $name"
        timeout 200 "${kscope[@]}" run --model "$f" --device cuda --token-ids "$tokens" --max-tokens "$tg" \
          --profile-json "$keep/ks-$name.json" --force > "$keep/ks-$name.log" 2>&1
        echo "rc $?"; grep -E "decode|error" "$keep/ks-$name.log" | head -3
        rm -rf "$keep/records-ksx-$name"
        timeout 200 "${kscope[@]}" profile --profile-json "$keep/ksx-$name.json" --keep-records "$keep/records-ksx-$name" \
          -- "$root/.gpu/bin/kscope" run --model "$f" --device cuda --token-ids "$tokens" --max-tokens "$tg" \
          > "$keep/ksx-$name.log" 2>&1
        echo "rc $?"; grep -E "steps|error" "$keep/ksx-$name.log" | head -3
      done
    done
    ;;
  torch)
    for variant in eager graph; do
      args=(--preset "${shapes[0]}" --tokens "$tg")
      [ "$variant" = graph ] && args+=(--compile --graph)
      step "torch $variant"
      rm -rf "$keep/records-torch-$variant"
      timeout 300 "${kscope[@]}" profile --step forward --profile-json "$keep/torch-$variant.json" \
        --keep-records "$keep/records-torch-$variant" \
        -- "$python" tools/reference/torch_graph_decode.py "${args[@]}" > "$keep/torch-$variant.log" 2>&1
      echo "rc $?"; grep -E "tok/s|steps|error" "$keep/torch-$variant.log" | head -4
    done
    ;;
  dram)
    f=$(file_of "${shapes[0]}" Q4_K_M)
    step "llama.cpp ${shapes[0]} Q4_K_M, DRAM bytes sampled"
    timeout 200 "${kscope[@]}" profile --dram-bytes-interval 20 --profile-json "$keep/lcpp-dram.json" \
      -- "$llama_bench" -m "$f" -ngl 99 -fa 1 -p 0 -n "$tg" -r 1 > "$keep/lcpp-dram.log" 2>&1
    echo "rc $?"; grep -E "steps|error|warning" "$keep/lcpp-dram.log" | cut -c1-200 | head -5
    step "what PM sampling costs llama-bench"
    "$python" tools/gpu/profiler_overhead.py --rounds "${ROUNDS:-3}" --timeout 150 \
      --rate "tg[0-9]+ +\| +([0-9.]+) " --json "$keep/dram-overhead.json" \
      --under "kscope-no-dram=${root}/.gpu/bin/kscope profile --dram-bytes-interval 0 --" \
      --under "kscope=${root}/.gpu/bin/kscope profile --" \
      -- "$llama_bench" -m "$f" -ngl 99 -fa 1 -p 0 -n 128 -r 3 > "$keep/dram-overhead.log" 2>&1
    echo "rc $?"; grep -E "median|slower|no rate" "$keep/dram-overhead.log"
    ;;
  moe)
    moe=${MOE:-qwen3-30b-a3b}
    f=$(file_of "$moe" Q4_K_M)
    if [ -s "$f" ]; then
      echo "$f already there"
    else
      step "kscope gen-model $moe Q4_K_M"
      t0=$SECONDS
      "${kscope[@]}" gen-model --preset "$moe" --out "$f.part.gguf" --quant q4_k_m --quiet > "$out/gen-$moe.log" 2>&1 \
        && mv "$f.part.gguf" "$f" || { echo "gen-model $moe failed"; tail -5 "$out/gen-$moe.log"; exit 1; }
      echo "gen-model $moe Q4_K_M: $((SECONDS - t0)) s, $(du -h "$f" | cut -f1)"
    fi
    OUT=$out WORK=$work SHAPES=$moe FORMATS=Q4_K_M bash "$0" llama kscope || exit 1
    ;;
  pack)
    tar -C "$keep" -cf - . | xz -T0 -6 > "$out/gap-profiles.tar.xz"
    ls -la "$out"
    ;;
  *) echo "unknown stage $stage (setup llama kscope torch dram moe pack)"; exit 2 ;;
  esac
done
