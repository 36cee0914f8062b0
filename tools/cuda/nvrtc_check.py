#!/usr/bin/env python3
"""Compiles CUDA kernel sources with NVRTC on a machine without a GPU, as the
runtime does on the device (sm_90, C++17, no fast math), so a kernel's
compile errors show up before device time is spent.

    pip install nvidia-cuda-nvrtc==13.0.88   # the CUDA the runtime's cudarc is built for
    python3 tools/cuda/nvrtc_check.py [--arch sm_90] [--append TEXT] FILE...

The files are concatenated in order (prelude first, as the runtime prepends
it); --append adds a line after them (a format's instantiation, say).
Prints the PTX's size, or the compile log and exits non-zero. With --sass
DIR it also assembles the PTX with ptxas (pip install nvidia-cuda-nvcc-cu12),
printing each kernel's registers and spills, and, where nvdisasm is on the
PATH (the nvidia-cuda-nvdisasm wheel), writes DIR/check.sass: the
instruction counts of a kernel's loop are the cheapest measure of a
change before device time is spent."""
import argparse
import ctypes
import glob
import os
import shutil
import subprocess
import sys


def load_nvrtc():
    # CUDA 12's wheel installs nvidia/cuda_nvrtc/lib, CUDA 13's nvidia/cu13/lib.
    import nvidia

    for root in getattr(nvidia, "__path__", []):
        for lib in ("cu13", "cuda_nvrtc"):
            folder = os.path.join(root, lib, "lib")
            for path in sorted(glob.glob(os.path.join(folder, "libnvrtc.so*"))):
                # Loaded first, so NVRTC finds its builtins without LD_LIBRARY_PATH.
                for builtins in glob.glob(os.path.join(folder, "libnvrtc-builtins.so*")):
                    ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
                return ctypes.CDLL(path)
    sys.exit("libnvrtc not found: pip install nvidia-cuda-nvrtc==13.0.88 (or nvidia-cuda-nvrtc-cu12)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--append", action="append", default=[])
    parser.add_argument("--ptx", help="write the PTX here")
    parser.add_argument("--sass", help="assemble into this folder: registers per kernel, and SASS")
    args = parser.parse_args()
    source = "\n".join(open(path).read() for path in args.files) + "\n" + "\n".join(args.append) + "\n"
    nvrtc = load_nvrtc()
    program = ctypes.c_void_p()
    status = nvrtc.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"check.cu", 0, None, None)
    if status != 0:
        sys.exit(f"nvrtcCreateProgram failed: {status}")
    options = [f"--gpu-architecture={args.arch}".encode(), b"--std=c++17"]
    array = (ctypes.c_char_p * len(options))(*options)
    status = nvrtc.nvrtcCompileProgram(program, len(options), array)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(program, log)
    if log.value.strip():
        print(log.value.decode(errors="replace"))
    if status != 0:
        sys.exit(f"compile failed ({status})")
    nvrtc.nvrtcGetPTXSize(program, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetPTX(program, ptx)
    if args.ptx:
        open(args.ptx, "w").write(ptx.value.decode())
    print(f"ok: {size.value} bytes of PTX")
    if args.sass:
        assemble(ptx.value.decode(), args.arch, args.sass)


def assemble(ptx, arch, folder):
    import nvidia.cuda_nvcc as package

    ptxas = os.path.join(list(package.__path__)[0], "bin", "ptxas")
    os.makedirs(folder, exist_ok=True)
    ptx_path, cubin = os.path.join(folder, "check.ptx"), os.path.join(folder, "check.cubin")
    open(ptx_path, "w").write(ptx)
    result = subprocess.run([ptxas, f"-arch={arch}", "-O3", "-v", ptx_path, "-o", cubin], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(result.stderr)
    kernel = None
    for line in result.stderr.splitlines():
        if "Compiling entry function" in line:
            kernel = line.split("'")[1]
        elif "Used" in line and kernel:
            print(f"{kernel}: {line.split('info    : ')[-1]}")
        elif "spill" in line and kernel and not line.strip().endswith("0 bytes spill loads"):
            print(f"{kernel}: {line.split('info    : ')[-1]}")
    disassembler = shutil.which("nvdisasm")
    if disassembler:
        sass = subprocess.run([disassembler, cubin], capture_output=True, text=True).stdout
        open(os.path.join(folder, "check.sass"), "w").write(sass)
        print(f"SASS: {os.path.join(folder, 'check.sass')}")


if __name__ == "__main__":
    main()
