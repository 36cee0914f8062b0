#!/usr/bin/env bash
# Packs what a GPU machine without a Rust toolchain needs to test and measure
# the CUDA backend: builds here the test binaries, `kscope` and the examples,
# and copies them into .gpu/ at the project root with a runner. Copy the folder
# .gpu into the root of a checkout of the same commit on the GPU machine and run
#   bash .gpu/run.sh                           # every test binary, GPU tests required (KSCOPE_REQUIRE_GPU=1)
#   bash .gpu/run.sh kscope info               # or one packed binary with its arguments
#   bash .gpu/run.sh 02_graph_launch_lead      # (examples are packed beside kscope)
#   bash tools/gpu/decode_run.sh               # a figure script (docs/PERF.md lists each and its runs)
#
# Usage, from the project root:  bash tools/gpu/bundle.sh [cargo test args]
# Default cargo args: --workspace --release --all-features
# .gpu/ is in .gitignore, so it never gets committed.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--workspace --release --all-features)
out=.gpu
rm -rf "$out" && mkdir -p "$out/tests" "$out/bin"

log=$(mktemp)
trap 'echo "bundle failed; the build said:" >&2; tail -30 "$log" >&2' ERR
# test binaries
cargo test "${args[@]}" --no-run --message-format=json 2>"$log" \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        print(m["executable"])
' | sort -u > "$out/tests.txt"
while read -r exe; do cp "$exe" "$out/tests/"; done < "$out/tests.txt"

# binaries and examples (built with the same feature arguments, minus test-only ones)
build_args=()
for a in "${args[@]}"; do case "$a" in --no-run|--lib|--bins|--tests|--doc) ;; *) build_args+=("$a");; esac; done
cargo build "${build_args[@]}" --bins --examples --message-format=json 2>"$log" \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and not m.get("profile", {}).get("test"):
        print(m["executable"])
' | sort -u | while read -r exe; do cp "$exe" "$out/bin/"; done

# The injection library of kscope profile, which its tests look for beside kscope
# (`--bins` above does not build a library).
profile=()
for a in "${args[@]}"; do [ "$a" = "--release" ] && profile=(--release); done
cargo build "${profile[@]}" -p kernelscope-inject --lib --message-format=json 2>"$log" \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and "cdylib" in m.get("target", {}).get("kind", []):
        for name in m.get("filenames", []):
            if name.endswith(".so"):
                print(name)
' | while read -r library; do cp "$library" "$out/bin/"; done

cat > "$out/run.sh" <<RUN
#!/usr/bin/env bash
# Runs packed test binaries (default) or one packed binary. Tests that read files
# through paths fixed at build time find them because the build root is linked here.
set -u
here=\$(cd "\$(dirname "\$0")" && pwd)
proj=\$(dirname "\$here")
build_root="$root"
if [ ! -e "\$build_root" ]; then mkdir -p "\$(dirname "\$build_root")" && ln -s "\$proj" "\$build_root"; fi
export KSCOPE_REQUIRE_GPU=\${KSCOPE_REQUIRE_GPU:-1}
export PATH="\$here/bin:\$PATH"
# NVLink multicast (NVLS) stays off: on shared hosts it can take the GPUs out of service.
export NCCL_NVLS_ENABLE=0
# NCCL is loaded at run time: where the system has none on the loader path,
# use the one a Python install of PyTorch brings (the nvidia-nccl package).
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2'; then
  nccl_lib=\$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null || true)
  if [ -n "\$nccl_lib" ] && [ -e "\$nccl_lib/libnccl.so.2" ]; then export LD_LIBRARY_PATH="\$nccl_lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"; fi
fi
cd "\$build_root"
if [ \$# -gt 0 ]; then exec "\$@"; fi
fail=0
for t in "\$here"/tests/*; do
  echo "=== \$(basename "\$t")"
  "\$t" --test-threads=1 || fail=1
done
exit \$fail
RUN
chmod +x "$out/run.sh"
trap - ERR
# symbols are not needed to run; stripping keeps the folder small enough to copy around
if command -v strip >/dev/null 2>&1; then strip --strip-unneeded "$out"/tests/* "$out"/bin/* 2>/dev/null || true; fi
size_mb=$(du -sm "$out" | cut -f1)
[ "$size_mb" -le 60 ] || echo "warning: $out is ${size_mb} MiB; pass fewer cargo targets (e.g. -p kernelscope --test NAME) to pack less" >&2
echo "packed $(ls "$out/tests" | wc -l) test binaries and $(ls "$out/bin" | wc -l) binaries and examples into $out ($(du -sh "$out" | cut -f1))"
