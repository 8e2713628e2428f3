#!/usr/bin/python3
"""Inputs at a realistic scale for a model `tessel import` wrote without its weights (an ONNX model
exported with export_params=False): every f32/f16 input of the manifest (IMPORTED.json) gets values
uniform in +-sqrt(3 / fan_in) (fan_in = the elements of one output row: all dimensions but the first),
so activations keep their scale through the layers as with a trained network's weights; a 1-d input
gets 1 +- 0.1 when its ONNX name says it is a normalisation's scale (LayerNorm / weight / gamma) and
+-0.1 otherwise; integer inputs are uniform in [0, --int-high). An input the import folded from
the graph's constants (its manifest entry names a `file` under the initializers directory, e.g.
BERT's position ids and its bool attention-mask constant) is copied from that file instead. Writes OUTDIR/NAME.npy for each, which
`tessel run IMPORTED.tsl --input-dir OUTDIR` reads (--skip NAME keeps an input out: give it yourself).

  scripts/onnx_model_inputs.py model.json weights/ --seed 1 --skip input_ids --int-high 30522"""
import argparse
import json
import math
import os
import random
import re
import shutil
import struct
import sys


def write_npy(path, dtype, shape, values):
    descr = {"f32": "<f4", "f16": "<f2", "i32": "<i4"}[dtype]
    shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    fmt = {"f32": "f", "f16": "e", "i32": "i"}[dtype]
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", help="the .json tessel import wrote beside the .tsl")
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip", action="append", default=[], help="an input (tsl or ONNX name) to leave out")
    ap.add_argument("--int-high", type=int, default=2, help="integer inputs: uniform in [0, N)")
    args = ap.parse_args()
    try:
        with open(args.manifest) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"onnx_model_inputs.py: {args.manifest}: {e}")
    os.makedirs(args.outdir, exist_ok=True)
    rng = random.Random(args.seed)
    written = 0
    for entry in manifest.get("inputs", []):
        name, onnx_name, dtype, shape = entry["tsl"], entry.get("onnx", ""), entry["dtype"], entry["shape"]
        if name in args.skip or onnx_name in args.skip or (dtype not in ("f32", "f16", "i32") and "file" not in entry):
            continue
        if "file" in entry:  # the graph's own values, written by tessel import
            shutil.copyfile(os.path.join(os.path.dirname(os.path.abspath(args.manifest)), entry["file"]),
                            os.path.join(args.outdir, name + ".npy"))
            written += 1
            continue
        count = math.prod(shape)
        if dtype == "i32":
            values = [rng.randrange(args.int_high) for _ in range(count)]
        elif len(shape) >= 2:
            a = math.sqrt(3.0 / max(1, count // shape[0]))
            values = [rng.uniform(-a, a) for _ in range(count)]
        elif re.search(r"layernorm|norm.*weight|gamma", onnx_name, re.I):
            values = [1 + rng.uniform(-0.1, 0.1) for _ in range(count)]
        else:
            values = [rng.uniform(-0.1, 0.1) for _ in range(count)]
        write_npy(os.path.join(args.outdir, name + ".npy"), dtype, shape, values)
        written += 1
    print(f"onnx_model_inputs.py: {written} inputs written to {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
