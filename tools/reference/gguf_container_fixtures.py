#!/usr/bin/env python3
"""GGUF container fixtures written by llama.cpp's own gguf-py, and a check
that files kernelscope writes are read by gguf-py's GGUFReader.

The Rust tests (crates/model/tests/gguf_file.rs) read the fixtures this
writes and need no Python; run it again only to regenerate them:

    python3 tools/reference/gguf_container_fixtures.py write \
        --out crates/model/tests/fixtures/gguf

  * all_types.gguf: GGUF v3, every metadata value type and an array of each,
    and tensors of types F32 (2-D, 4-D and a 0-dimensional scalar), F16,
    BF16, I32, Q4_0 and Q8_0; every value is a function of its position, so
    the Rust test recomputes what it expects;
  * alignment_64.gguf: `general.alignment` 64 (tensor sizes that need padding);
  * version2.gguf: GGUF v2 (gguf-py writes v3; its GGUF_VERSION is patched to
    2 here: for little-endian files v2 and v3 are the same layout, v3 only
    added big-endian files);
  * big_endian.gguf: a big-endian v3 file, which kernelscope refuses by name.

Every value is deterministic, so the files come out byte for byte the same
on every run with the same gguf-py (0.19.0 made the ones in the repository).

The second mode reads files with gguf-py's GGUFReader and checks each
tensor's data lies inside the file with the size its type implies; it is
how files written by kernelscope's GgufWriter were cross-checked:

    KSCOPE_GGUF_WRITE_DIR=/tmp/gguf-out cargo test -p kernelscope-model --test gguf_file
    python3 tools/reference/gguf_container_fixtures.py check /tmp/gguf-out/*.gguf

Check with the gguf-py of a current llama.cpp tree (PYTHONPATH=llama.cpp/gguf-py):
the PyPI release 0.19.0 knows no Q2_0 (type 42) and gives Q8_1 blocks 40 bytes
where ggml's are 36, so it refuses such files. Every file the round-trip test
writes reads in the tree's gguf-py except those with a 0-dimensional tensor of a
type gguf-py reads as bytes (BF16, the block types): its quant_shape_to_byte_shape
indexes the empty shape. llama.cpp's gguf.cpp reads those.

It needs `pip install gguf numpy` (exit 2 with a one-line message without).
"""

import argparse
import os
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType, GGUFValueType
except ImportError:
    print("needs gguf-py and numpy: pip install gguf numpy", file=sys.stderr)
    sys.exit(2)


def pattern_bytes(count, salt):
    """Bytes that differ from tensor to tensor: (i * 7 + salt) mod 256."""
    return ((np.arange(count, dtype=np.uint64) * 7 + salt) % 256).astype(np.uint8)


def add_every_value_type(writer):
    writer.add_uint8("test.u8", 200)
    writer.add_int8("test.i8", -100)
    writer.add_uint16("test.u16", 60000)
    writer.add_int16("test.i16", -30000)
    writer.add_uint32("test.u32", 4000000000)
    writer.add_int32("test.i32", -2000000000)
    writer.add_uint64("test.u64", 18000000000000000000)
    writer.add_int64("test.i64", -9000000000000000000)
    writer.add_float32("test.f32", 0.25)
    writer.add_float64("test.f64", -1.0e300)
    writer.add_bool("test.bool", True)
    writer.add_string("test.string", "héllo, GGUF ✓")
    arrays = [
        ("test.array.u8", [0, 1, 255], GGUFValueType.UINT8),
        ("test.array.i8", [-128, 0, 127], GGUFValueType.INT8),
        ("test.array.u16", [0, 65535], GGUFValueType.UINT16),
        ("test.array.i16", [-32768, 32767], GGUFValueType.INT16),
        ("test.array.u32", [0, 4294967295], GGUFValueType.UINT32),
        ("test.array.i32", [-2147483648, 0, 2147483647], GGUFValueType.INT32),
        ("test.array.u64", [0, 18446744073709551615], GGUFValueType.UINT64),
        ("test.array.i64", [-9223372036854775808, 9223372036854775807], GGUFValueType.INT64),
        ("test.array.f32", [0.5, -2.0, 1.0e30], GGUFValueType.FLOAT32),
        ("test.array.f64", [0.1, -1.0e-300], GGUFValueType.FLOAT64),
        ("test.array.bool", [True, False, True], GGUFValueType.BOOL),
        ("test.array.string", ["a", "", "ünïcode", "<|end|>"], GGUFValueType.STRING),
    ]
    for key, values, element_type in arrays:
        writer.add_key_value(key, values, GGUFValueType.ARRAY, sub_type=element_type)
    # Integers written as the "wrong" width, as converters vary: the typed
    # getters accept any integer type that fits.
    writer.add_uint64("llama.context_length", 4096)
    writer.add_int32("llama.block_count", 2)


def add_tensors(writer):
    # numpy shapes are row-major (outermost first); GGUF stores them reversed.
    writer.add_tensor("f32_matrix", np.arange(24, dtype=np.float32).reshape(3, 8) * 0.5)
    writer.add_tensor("f32_4d", np.arange(24, dtype=np.float32).reshape(2, 1, 3, 4) - 7.0)
    writer.add_tensor("f32_scalar", np.array(3.5, dtype=np.float32))
    writer.add_tensor("f16_vector", (np.arange(5, dtype=np.float16) - 2) / 4)
    bf16_bits = np.arange(6, dtype=np.uint16).reshape(2, 3) + 0x3F80
    writer.add_tensor("bf16_matrix", bf16_bits, raw_dtype=GGMLQuantizationType.BF16)
    writer.add_tensor("i32_vector", np.array([-1, 0, 1, 2147483647], dtype=np.int32))
    # Quantized tensors as raw block bytes: [rows, row bytes] of uint8, which
    # gguf-py turns into [rows, elements].
    q4_rows = pattern_bytes(2 * 2 * 18, 3).reshape(2, 36)  # 2 rows of 64 elements
    writer.add_tensor("q4_0_matrix", q4_rows, raw_dtype=GGMLQuantizationType.Q4_0)
    q8_rows = pattern_bytes(3 * 34, 11).reshape(3, 34)  # 3 rows of 32 elements
    writer.add_tensor("q8_0_matrix", q8_rows, raw_dtype=GGMLQuantizationType.Q8_0)


def write(path, fill, **options):
    writer = gguf.GGUFWriter(path, "llama", **options)
    fill(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def write_fixtures(out):
    os.makedirs(out, exist_ok=True)

    def all_types(writer):
        add_every_value_type(writer)
        add_tensors(writer)

    write(os.path.join(out, "all_types.gguf"), all_types)

    def alignment_64(writer):
        writer.add_name("alignment test")
        writer.add_custom_alignment(64)
        writer.add_tensor("first", np.arange(3, dtype=np.float32))
        writer.add_tensor("second", np.arange(17, dtype=np.float16))
        writer.add_tensor("third", pattern_bytes(34, 5).reshape(1, 34), raw_dtype=GGMLQuantizationType.Q8_0)

    write(os.path.join(out, "alignment_64.gguf"), alignment_64)

    def small(writer):
        writer.add_name("version two")
        writer.add_uint32("llama.context_length", 128)
        writer.add_tensor("weight", np.arange(8, dtype=np.float32).reshape(2, 4))

    saved = gguf.gguf_writer.GGUF_VERSION
    gguf.gguf_writer.GGUF_VERSION = 2
    try:
        write(os.path.join(out, "version2.gguf"), small)
    finally:
        gguf.gguf_writer.GGUF_VERSION = saved

    write(os.path.join(out, "big_endian.gguf"), small, endianess=gguf.GGUFEndian.BIG)


def check(paths):
    failures = 0
    for path in paths:
        try:
            reader = gguf.GGUFReader(path)
            size = os.path.getsize(path)
            for tensor in reader.tensors:
                block, block_bytes = gguf.GGML_QUANT_SIZES[tensor.tensor_type]
                expected = tensor.n_elements // block * block_bytes
                if tensor.n_bytes != expected or tensor.data.nbytes != expected:
                    raise ValueError(f"tensor {tensor.name}: {tensor.data.nbytes} bytes, expected {expected}")
                if tensor.data_offset + expected > size:
                    raise ValueError(f"tensor {tensor.name} ends past the file")
                if (tensor.data_offset - reader.data_offset) % reader.alignment != 0:
                    raise ValueError(f"tensor {tensor.name} is not aligned to {reader.alignment}")
            print(f"ok {path}: {len(reader.fields)} fields, {len(reader.tensors)} tensors, alignment {reader.alignment}")
        except Exception as error:  # noqa: BLE001 - report every file, then fail
            failures += 1
            print(f"FAILED {path}: {error}")
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    write_command = commands.add_parser("write", help="write the fixtures")
    write_command.add_argument("--out", required=True, help="folder for the fixture files")
    check_command = commands.add_parser("check", help="read files with gguf-py's GGUFReader")
    check_command.add_argument("files", nargs="+")
    arguments = parser.parse_args()
    if arguments.command == "write":
        write_fixtures(arguments.out)
        return 0
    return check(arguments.files)


if __name__ == "__main__":
    sys.exit(main())
