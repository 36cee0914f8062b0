#!/usr/bin/env bash
# What `kscope profile` costs llama.cpp's llama-bench (a decode that replays one
# CUDA graph per token), beside Nsight Systems, in one call:
#   1. llama.cpp's CUDA build and a Q4_K_M GGUF of llama-3.2-1b's shape
#      (llamacpp_side_by_side.sh's build and models stages; a packed build in
#      .gpu-pack/ is unpacked instead of building, and a fresh build is packed into $OUT);
#   2. one profile under --graphs whole and one under --graphs events, their graph
#      launches' times side by side (graph_times_compare.py);
#   3. llama-bench's tg rate bare and under --graphs nodes (the default), whole,
#      events and Nsight Systems, in rotating turns (profiler_overhead.py).
# Run on the GPU machine from the project root after unpacking .gpu
# (tools/gpu/bundle.sh), with ../shared/llamacpp/llama.cpp-src.tar.xz copied to
# .gpu-pack/ and carried. ROUNDS (default 3), TG (tokens, default 128); writes to
# $OUT (default /tmp/llama-bench-overhead).
#   bash tools/gpu/llama_bench_overhead.sh
set -uo pipefail
out=${OUT:-/tmp/llama-bench-overhead}
mkdir -p "$out"
python=${PYTHON:-/opt/torch/.venv/bin/python3}
export PATH="$PWD/.gpu/bin:/usr/local/cuda/bin:$PATH"
tg=${TG:-128}

echo "== 1. llama.cpp and the model"
OUT=$out SHAPES=llama-3.2-1b FORMATS=Q4_K_M bash tools/gpu/llamacpp_side_by_side.sh build models \
  > "$out/setup.log" 2>&1 || { echo "setup failed:"; tail -20 "$out/setup.log"; exit 1; }
grep -E "built in|already there|from |model:" "$out/setup.log"
export LD_LIBRARY_PATH=$HOME/llamacpp-cuda/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bench=("$HOME/llamacpp-cuda/bin/llama-bench" -m "$HOME/sbs-models/llama-3.2-1b-Q4_K_M.gguf"
  -ngl 99 -fa 1 -p 0 -n "$tg" -r 3)

echo "== 2. one profile each under --graphs whole and events"
for how in whole events; do
  timeout 150 kscope profile --graphs "$how" --profile-json "$out/llama-$how.json" -- "${bench[@]}" \
    > "$out/llama-$how.log" 2>&1
  echo "--graphs $how: rc $?"; grep -E "^(mode|timing|steps)|error|warning" "$out/llama-$how.log" | cut -c1-200
done
"$python" tools/gpu/graph_times_compare.py "$out/llama-whole.json" "$out/llama-events.json"

echo "== 3. what each costs llama-bench's tg$tg"
source tools/gpu/nsys_under.sh
nsys=$(nsys_under llama_bench_overhead)
"$python" tools/gpu/profiler_overhead.py --rounds "${ROUNDS:-3}" --timeout 150 \
  --rate "tg[0-9]+ +\| +([0-9.]+) " --json "$out/overhead.json" \
  --under "kscope-nodes=kscope profile --graphs nodes --" \
  --under "kscope-whole=kscope profile --graphs whole --" \
  --under "kscope-events=kscope profile --graphs events --" \
  ${nsys:+--under "$nsys"} \
  -- "${bench[@]}" > "$out/overhead.log" 2>&1
echo "rc $?"; grep -E "median|slower|no rate" "$out/overhead.log"
