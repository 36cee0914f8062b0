#!/usr/bin/env python3
"""Reference fixtures for kernelscope's block-quantized formats.

kernelscope's `quant` module (crates/kernelscope/src/quant) claims to read
and write Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K exactly as
llama.cpp does. This script writes the evidence its tests compare against,
into crates/kernelscope/tests/fixtures/quant/:

  * quantize_input.f32: the first rows of a seeded sweep of random f32 rows
    (several scales, an outlier, narrow ranges, ties, signed zeros and zero
    sub-blocks, tiny values, heavy tails), shared by every format;
  * NAME.quantized.bin: those rows quantized by llama.cpp's own C reference
    quantizer (`quantize_row_NAME_ref` in ggml/src/ggml-quants.c);
  * manifest.json's "sweep": FNV-1a hashes of the first SWEEP_ROWS rows of
    the sweep and of their C bytes per format. The Rust tests regenerate the
    same rows (see `sweep_row` below), so thousands of rows are compared
    with llama.cpp while a few KB are stored. gguf-py's quantizer, where it
    has one, is compared with the C bytes over the whole sweep and the
    outcome is recorded;
  * NAME.blocks.bin: random blocks (random bytes, but every f16 scale field
    set to a finite, moderate value so nothing dequantizes to NaN or Inf);
  * NAME.dequantized.f32: those blocks dequantized by gguf-py
    (`gguf.quants.dequantize`), checked against the C `dequantize_row_NAME`.

All numbers are little-endian and C order. manifest.json records the shapes,
the seed and the versions of gguf-py and ggml that made the files.

The C side is built from a llama.cpp source tree: a small harness (embedded
below) is compiled together with ggml/src/ggml-quants.c using the flags
llama.cpp's own build gives ggml-base (-O3, gnu11, no -march), so that no
fused multiply-add changes a rounding. Needs a C compiler, numpy and gguf-py
(llama.cpp's gguf-py/ or `pip install gguf`).

Example (from the repository root):

    python3 tools/reference/quant_fixtures.py --llama-cpp /path/to/llama.cpp \\
        --out crates/kernelscope/tests/fixtures/quant

To see which block differs after the sweep's hash test fails, write the
whole sweep out and run the example that compares it block by block:

    python3 tools/reference/quant_fixtures.py --llama-cpp /path/to/llama.cpp \\
        --out /tmp/quant-sweep --rows 2600
    cargo run --release -p kernelscope --example quant_sweep_diff -- /tmp/quant-sweep
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType
except ImportError:
    print("needs numpy and gguf: pip install numpy gguf", file=sys.stderr)
    sys.exit(2)

# name: (elements per block, bytes per block, byte offsets of the f16 fields)
FORMATS = {
    "q4_0": (32, 18, [0]),
    "q4_1": (32, 20, [0, 2]),
    "q5_0": (32, 22, [0]),
    "q5_1": (32, 24, [0, 2]),
    "q8_0": (32, 34, [0]),
    "q4_k": (256, 144, [0, 2]),
    "q5_k": (256, 176, [0, 2]),
    "q6_k": (256, 210, [208]),
}

ROW_ELEMENTS = 256
# Random blocks per format for the dequantization fixtures.
DEQUANTIZE_BLOCKS = {32: 16, 256: 3}
BLOCKS_SEED = 20240611  # numpy seed of the random blocks

# The harness calls llama.cpp's functions by name; ggml-quants.c needs only
# these four symbols of the rest of ggml, none of them on the paths used here.
HARNESS_C = r"""
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-quants.h"

void ggml_abort(const char * file, int line, const char * fmt, ...) {
    fprintf(stderr, "ggml_abort at %s:%d\n", file, line);
    abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void) type; (void) ne; abort(); }
const char * ggml_type_name(enum ggml_type type) { (void) type; return "?"; }
size_t ggml_type_size(enum ggml_type type) { (void) type; abort(); }

typedef void (*quantize_fn)(const float *, void *, int64_t);
typedef void (*dequantize_fn)(const void *, float *, int64_t);

struct format {
    const char * name;
    int elements;
    int bytes;
    quantize_fn quantize;
    dequantize_fn dequantize;
};

#define FORMAT(name, lower, elements, block) \
    { lower, elements, (int) sizeof(block), \
      (quantize_fn) quantize_row_##name##_ref, (dequantize_fn) dequantize_row_##name }

static const struct format formats[] = {
    FORMAT(q4_0, "q4_0", QK4_0, block_q4_0),
    FORMAT(q4_1, "q4_1", QK4_1, block_q4_1),
    FORMAT(q5_0, "q5_0", QK5_0, block_q5_0),
    FORMAT(q5_1, "q5_1", QK5_1, block_q5_1),
    FORMAT(q8_0, "q8_0", QK8_0, block_q8_0),
    FORMAT(q4_K, "q4_k", QK_K, block_q4_K),
    FORMAT(q5_K, "q5_k", QK_K, block_q5_K),
    FORMAT(q6_K, "q6_k", QK_K, block_q6_K),
};

static unsigned char * read_all(size_t * size) {
    size_t capacity = 1 << 16, used = 0;
    unsigned char * data = malloc(capacity);
    size_t got;
    while ((got = fread(data + used, 1, capacity - used, stdin)) > 0) {
        used += got;
        if (used == capacity) {
            capacity *= 2;
            data = realloc(data, capacity);
        }
    }
    *size = used;
    return data;
}

/* usage: harness quantize|dequantize NAME < input > output */
int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s quantize|dequantize NAME\n", argv[0]);
        return 2;
    }
    const struct format * format = NULL;
    for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
        if (strcmp(formats[i].name, argv[2]) == 0) format = &formats[i];
    }
    if (!format) {
        fprintf(stderr, "unknown format %s\n", argv[2]);
        return 2;
    }
    size_t size;
    unsigned char * input = read_all(&size);
    if (strcmp(argv[1], "quantize") == 0) {
        size_t elements = size / sizeof(float);
        if (size % sizeof(float) || elements % format->elements) return 3;
        size_t out_size = elements / format->elements * format->bytes;
        void * out = malloc(out_size);
        format->quantize((const float *) input, out, (int64_t) elements);
        fwrite(out, 1, out_size, stdout);
    } else {
        if (size % format->bytes) return 3;
        size_t elements = size / format->bytes * format->elements;
        float * out = malloc(elements * sizeof(float));
        format->dequantize(input, out, (int64_t) elements);
        fwrite(out, sizeof(float), elements, stdout);
    }
    return 0;
}
"""


def build_harness(llama_cpp: Path, workdir: Path, compiler: str) -> Path:
    ggml = llama_cpp / "ggml"
    source = workdir / "harness.c"
    source.write_text(HARNESS_C)
    binary = workdir / "harness"
    # ggml-base's own flags in llama.cpp's CMake build (Release): no -march,
    # so the compiler cannot fuse a multiply and an add into one rounding.
    command = [
        compiler, "-O3", "-DNDEBUG", "-std=gnu11", "-D_GNU_SOURCE", "-D_XOPEN_SOURCE=600",
        "-I", str(ggml / "include"), "-I", str(ggml / "src"),
        str(source), str(ggml / "src" / "ggml-quants.c"), "-o", str(binary), "-lm",
    ]
    subprocess.run(command, check=True)
    return binary


def run_harness(harness: Path, mode: str, name: str, data: bytes) -> bytes:
    return subprocess.run([str(harness), mode, name], input=data, capture_output=True, check=True).stdout


# Quantization rows are made by a generator that kernelscope's tests repeat
# in Rust (tests/quant_formats.rs, `sweep_row`), so that many more rows can
# be checked than are stored: only the first ROW_KINDS rows are written out,
# and the C bytes of the first SWEEP_ROWS rows are kept as one FNV-1a hash
# per format. Every value comes from SplitMix64 (kernelscope::rng) through
# integer arithmetic and single IEEE operations, never a library function
# (log, cos, pow) whose last bit could differ between Python and Rust.
SWEEP_SEED = 0x5157_4545_5053_0001
SWEEP_ROWS = 2600
ROW_KINDS = 13
AUX = 4096  # draws 0..3072 make the 256 normals (12 each); auxiliary draws follow
GAMMA = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _bits(seed: int, indices: np.ndarray) -> np.ndarray:
    """Draws `indices` of SplitMix64's sequence for `seed` (SplitMix64::u64_at)."""
    with np.errstate(over="ignore"):
        return _mix(np.uint64(seed) + (indices.astype(np.uint64) + np.uint64(1)) * GAMMA)


def _top24(bits: np.ndarray) -> np.ndarray:
    return (bits >> np.uint64(40)).astype(np.int64)


def _unit(bits: np.ndarray) -> np.ndarray:
    return _top24(bits).astype(np.float64) / 2.0**24


def sweep_row(row: int) -> np.ndarray:
    """Row `row` of the sweep: kind `row % ROW_KINDS`, 256 f32 values."""
    n = ROW_ELEMENTS
    seed = (SWEEP_SEED + row) % 2**64
    i = np.arange(n)
    # Irwin-Hall: twelve uniforms less six is near-normal (unit variance,
    # bounded by ±6) and exact in f64.
    draws = _top24(_bits(seed, np.arange(12 * n))).reshape(n, 12)
    normal = (draws.sum(axis=1) - 6 * 2**24).astype(np.float64) / 2.0**24
    aux = _bits(seed, AUX + np.arange(64 + n))
    uniform = _unit(aux[64:])  # one per element
    sub = i // 32
    kind = row % ROW_KINDS
    if kind == 0:
        values = normal
    elif kind == 1:
        values = normal * 0.02  # typical weight magnitude
    elif kind == 2:
        values = normal * 300.0
    elif kind == 3:
        values = normal.copy()
        sign = 1.0 if int(aux[2]) & 1 == 0 else -1.0
        values[int(aux[0]) % n] = sign * (20.0 + 40.0 * _unit(aux[1:2])[0])  # one outlier
    elif kind == 4:
        values = 7.0 + uniform * 1e-3  # narrow range far from zero
    elif kind == 5:
        values = -2.5 - uniform * 1e-2
    elif kind == 6:
        # Multiples of 1/4 put many values exactly half-way between two
        # levels, where round-half-even (nearest_int) and roundf differ.
        values = ((_top24(aux[64:]) % 33) - 16).astype(np.float64) * 0.25
    elif kind == 7:
        # Sparse, with signed zeros, a whole zero sub-block of 32 (Q4_K,
        # Q5_K, and a 32-element block) and of 16 (Q6_K).
        zero = np.copysign(0.0, normal)
        values = np.where(uniform >= 0.7, normal, zero)
        start32 = 32 * (int(aux[0]) % 8)
        start16 = 16 * (int(aux[1]) % 16)
        values[start32:start32 + 32] = zero[start32:start32 + 32]
        values[start16:start16 + 16] = zero[start16:start16 + 16]
    elif kind == 8:
        values = normal * 1e-6  # scales that are subnormal in f16
    elif kind == 9:
        values = normal / (0.05 + uniform)  # heavy tails
    elif kind == 10:
        # A different magnitude (2^-10 .. 2^4) in every sub-block of 32: the
        # K formats' 6-bit sub-block scales then span their whole range.
        exponents = (aux[8:16] % np.uint64(14)).astype(np.int64) - 10
        magnitudes = np.ldexp(1.0 + _unit(aux[0:8]), exponents)
        values = normal * magnitudes[sub]
    elif kind == 11:
        values = np.abs(normal)  # every minimum positive
    else:
        # A different offset in every sub-block of 32: the minimums vary.
        offsets = (_unit(aux[0:8]) - 0.5) * 10.0
        values = offsets[sub] + normal * 0.1
    return values.astype(np.float32)


def sweep(rows: int) -> np.ndarray:
    return np.stack([sweep_row(row) for row in range(rows)])


def fnv1a64(data: bytes) -> int:
    """kernelscope::hash::fnv1a64."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value


def random_blocks(rng: np.random.Generator, name: str) -> bytes:
    elements, size, f16_offsets = FORMATS[name]
    count = DEQUANTIZE_BLOCKS[elements]
    blocks = rng.integers(0, 256, (count, size), dtype=np.uint8)
    for offset in f16_offsets:
        sign = rng.choice([-1.0, 1.0], count)
        magnitude = 10.0 ** rng.uniform(-4.0, 0.5, count)
        blocks[:, offset:offset + 2] = (sign * magnitude).astype(np.float16).view(np.uint8).reshape(count, 2)
    return blocks.tobytes()


def gguf_type(name: str) -> GGMLQuantizationType:
    return GGMLQuantizationType[name.upper()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-cpp", required=True, type=Path, help="llama.cpp source tree (has ggml/src/ggml-quants.c)")
    parser.add_argument("--out", required=True, type=Path, help="fixture directory to write")
    parser.add_argument("--cc", default=os.environ.get("CC", "cc"), help="C compiler (default $CC or cc)")
    parser.add_argument(
        "--rows", type=int, default=ROW_KINDS,
        help=f"sweep rows written out in full (default {ROW_KINDS}, one of each kind; more for a larger comparison)",
    )
    parser.add_argument(
        "--hashed-rows", type=int, default=SWEEP_ROWS,
        help=f"sweep rows whose C bytes are hashed into manifest.json (default {SWEEP_ROWS})",
    )
    args = parser.parse_args()

    rng = np.random.default_rng(BLOCKS_SEED)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = {
        "generator": "tools/reference/quant_fixtures.py",
        "blocks_seed": BLOCKS_SEED,
        "gguf_py_version": getattr(gguf, "__version__", None) or _package_version("gguf"),
        "numpy_version": np.__version__,
        "ggml_version": _ggml_version(args.llama_cpp),
        "quantize_input": {"file": "quantize_input.f32", "rows": args.rows, "elements_per_row": ROW_ELEMENTS},
        "sweep": {"seed": f"{SWEEP_SEED:#x}", "rows": args.hashed_rows, "input_fnv1a64": None, "quantized_fnv1a64": {}},
        "formats": {},
    }
    mismatches = []  # C and gguf-py disagree on what the fixture claims: fatal
    notes = []  # gguf-py's quantizer differs from C, whose bytes are kept
    with tempfile.TemporaryDirectory() as workdir:
        harness = build_harness(args.llama_cpp, Path(workdir), args.cc)
        hashed = sweep(args.hashed_rows).astype("<f4")
        manifest["sweep"]["input_fnv1a64"] = f"{fnv1a64(hashed.tobytes()):#018x}"
        values = sweep(args.rows).astype("<f4")
        (args.out / "quantize_input.f32").write_bytes(values.tobytes())

        for name, (elements, size, _) in FORMATS.items():
            entry = {"block_elements": elements, "block_bytes": size}
            c_bytes = run_harness(harness, "quantize", name, values.tobytes())
            assert len(c_bytes) == values.size // elements * size
            (args.out / f"{name}.quantized.bin").write_bytes(c_bytes)
            entry["quantized"] = {"file": f"{name}.quantized.bin", "source": "llama.cpp C quantize_row_*_ref"}
            hashed_bytes = run_harness(harness, "quantize", name, hashed.tobytes())
            manifest["sweep"]["quantized_fnv1a64"][name] = f"{fnv1a64(hashed_bytes):#018x}"
            try:
                # The whole hashed sweep, so that rare disagreements show.
                py_bytes = gguf.quants.quantize(hashed, gguf_type(name)).tobytes()
            except NotImplementedError:
                entry["gguf_py_quantize"] = "not implemented in gguf-py"
            else:
                differing = _differing_blocks(hashed_bytes, py_bytes, size)
                signed_zeros = [b for b in differing if _only_zero_signs_differ(hashed_bytes, py_bytes, name, b)]
                others = [b for b in differing if b not in signed_zeros]
                blocks_compared = len(hashed_bytes) // size
                if not differing:
                    entry["gguf_py_quantize"] = f"identical to C in all {blocks_compared} blocks"
                elif not others:
                    # Same values, another sign of zero: gguf-py's all-zero
                    # Q4_0/Q5_0 blocks take d's sign from their first element
                    # (C's d is always 0.0 / -8 = -0.0), and its np.min picks
                    # either zero where C keeps the first one it meets. C's
                    # bytes are the fixture.
                    entry["gguf_py_quantize"] = (
                        f"identical to C except the sign of a zero f16 field in "
                        f"{len(signed_zeros)} of {blocks_compared} blocks (first: {signed_zeros[:5]})"
                    )
                else:
                    entry["gguf_py_quantize"] = f"differs from C in {len(others)} of {blocks_compared} blocks"
                    entry["gguf_py_differing_blocks"] = others[:20]
                if differing:
                    notes.append(f"{name}: gguf-py {entry['gguf_py_quantize']}")

            blocks = random_blocks(rng, name)
            (args.out / f"{name}.blocks.bin").write_bytes(blocks)
            py_values = gguf.quants.dequantize(np.frombuffer(blocks, dtype=np.uint8), gguf_type(name))
            py_values = np.asarray(py_values, dtype="<f4").reshape(-1)
            assert np.all(np.isfinite(py_values))
            (args.out / f"{name}.dequantized.f32").write_bytes(py_values.tobytes())
            c_values = run_harness(harness, "dequantize", name, blocks)
            same = c_values == py_values.tobytes()
            entry["dequantized"] = {
                "blocks": len(blocks) // size,
                "file": f"{name}.dequantized.f32",
                "source": "gguf-py dequantize",
                "c_dequantize_identical": bool(same),
            }
            if not same:
                mismatches.append(f"{name}: C dequantize_row differs from gguf-py")
            manifest["formats"][name] = entry
            print(f"{name}: {entry['gguf_py_quantize']}; dequantize C == gguf-py: {same}")

    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for line in notes:
        print("note:", line, file=sys.stderr)
    for line in mismatches:
        print("MISMATCH", line, file=sys.stderr)
    return 1 if mismatches else 0


def _differing_blocks(a: bytes, b: bytes, size: int) -> list:
    if len(a) != len(b):
        return ["length"]
    return [i for i in range(len(a) // size) if a[i * size:(i + 1) * size] != b[i * size:(i + 1) * size]]


def _only_zero_signs_differ(a: bytes, b: bytes, name: str, block: int) -> bool:
    """Whether block `block` differs only in f16 fields that are +0.0 in one and -0.0 in the other."""
    _, size, offsets = FORMATS[name]
    first = np.frombuffer(a[block * size:(block + 1) * size], dtype=np.uint8)
    second = np.frombuffer(b[block * size:(block + 1) * size], dtype=np.uint8)
    differing = np.flatnonzero(first != second)
    for index in differing:
        field = next((o for o in offsets if o <= index < o + 2), None)
        if field is None:
            return False
        pair = {bytes(first[field:field + 2]), bytes(second[field:field + 2])}
        if pair != {b"\x00\x00", b"\x00\x80"}:
            return False
    return len(differing) > 0


def _package_version(name: str):
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def _ggml_version(llama_cpp: Path):
    """ggml's version from its CMakeLists.txt, for the record."""
    try:
        text = (llama_cpp / "ggml" / "CMakeLists.txt").read_text()
    except OSError:
        return None
    parts = []
    for key in ("MAJOR", "MINOR", "PATCH"):
        marker = f"set(GGML_VERSION_{key} "
        start = text.find(marker)
        if start < 0:
            return None
        parts.append(text[start + len(marker):text.index(")", start)].strip())
    return ".".join(parts)


if __name__ == "__main__":
    sys.exit(main())
