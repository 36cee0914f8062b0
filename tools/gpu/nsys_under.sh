# Sourced by the overhead scripts: Nsight Systems as profiler_overhead.py's
# `--under nsys-graph=...` variant (CUDA and NVTX traced, graphs whole: its
# default), wherever this machine keeps nsys.
#   source tools/gpu/nsys_under.sh; nsys_under SCRIPT   # prints the --under value, or nothing (said on stderr)
nsys_under() {
  local bin
  bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
    /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1 || true)
  if [ -z "$bin" ]; then
    echo "$1: no nsys found; Nsight Systems not measured" >&2
    return 0
  fi
  echo "nsys-graph=$bin profile -t cuda,nvtx -s none --cpuctxsw=none -o /tmp/nsys%p --force-overwrite true"
}
