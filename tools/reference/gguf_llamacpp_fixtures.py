"""llama.cpp's logits on GGUF files kscope writes, for the parity test
(crates/model/tests/gguf_llamacpp.rs).

For each file type (Q4_K_M, Q6_K, Q8_0): `kscope gen-model --preset tiny-256
--seed 5 --quant TYPE` writes the file; libllama (through
tools/reference/llamacpp_reference.cpp) computes the logits of every
position of a fixed prompt on it, and on its "twin": the same file with
every tensor dequantized to F32 by gguf-py. The quantized run shows how far
llama.cpp's own arithmetic (activations quantized to 8 bits for its
integer dot products, an f16 KV cache) lands from kscope's; the twin shows
that the weights both read are the same numbers.

  python tools/reference/gguf_llamacpp_fixtures.py --kscope target/release/kscope \
      --reference PATH/llamacpp_reference

Writes crates/model/tests/fixtures/gguf_llamacpp/{TYPE}.llama.npy,
{TYPE}.twin.npy and fixtures.json (prompt, file digests). Needs gguf, numpy.
"""

import argparse
import json
import os
import re
import subprocess
import tempfile

import gguf
import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "model", "tests", "fixtures", "gguf_llamacpp")
PROMPT = [264, 72, 101, 108, 108, 111, 262, 260]
TYPES = ["q4_k_m", "q6_k", "q8_0"]


def twin(source, destination):
    """`source` with every tensor dequantized to F32, the metadata copied."""
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(destination, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if field.types[0] == gguf.GGUFValueType.ARRAY:
            writer.add_array(name, field.contents())
        else:
            writer.add_key_value(name, field.contents(), field.types[0])
    for tensor in reader.tensors:
        writer.add_tensor(tensor.name, gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def logits(reference, path, out):
    ids = ",".join(str(token) for token in PROMPT)
    subprocess.run([reference, "logits", path, ids, out], check=True, capture_output=True)
    return np.fromfile(out, dtype=np.float32).reshape(len(PROMPT), -1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kscope", required=True)
    parser.add_argument("--reference", required=True)
    args = parser.parse_args()
    os.makedirs(OUT, exist_ok=True)
    record = {"preset": "tiny-256", "seed": 5, "prompt": PROMPT, "digests": {}}
    with tempfile.TemporaryDirectory() as folder:
        for name in TYPES:
            path = os.path.join(folder, f"{name}.gguf")
            written = subprocess.run(
                [args.kscope, "gen-model", "--preset", "tiny-256", "--seed", "5", "--quant", name, "--out", path, "--quiet"],
                check=True, capture_output=True, text=True,
            ).stdout
            record["digests"][name] = re.search(r"fnv1a64 ([0-9a-f]{16})", written).group(1)
            np.save(os.path.join(OUT, f"{name}.llama.npy"), logits(args.reference, path, os.path.join(folder, "a.f32")))
            twin_path = os.path.join(folder, f"{name}-twin.gguf")
            twin(path, twin_path)
            np.save(os.path.join(OUT, f"{name}.twin.npy"), logits(args.reference, twin_path, os.path.join(folder, "b.f32")))
    with open(os.path.join(OUT, "fixtures.json"), "w") as file:
        json.dump(record, file, indent=1)
        file.write("\n")


if __name__ == "__main__":
    main()
