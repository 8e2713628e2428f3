#!/usr/bin/env python3
"""Writes deterministic .npy inputs for the example programs (no NumPy needed) and prints the
`tessel sim` command line for each. The tests (tests/npu_sim/test_examples.cc) generate their own
inputs and check the outputs against C++ references; this script is for running examples by hand.

usage: npu_sim/examples/make_inputs.py OUT_DIR
"""
import os
import random
import struct
import sys

EXAMPLES = {  # program -> (inputs: name -> (dtype, shape), outputs)
    "gemm64.npu": ({"A": ("f16", [64, 64]), "B": ("f16", [64, 64])}, ["C"]),
    "gemm64_double.npu": ({"A": ("f16", [64, 64]), "B": ("f16", [64, 64])}, ["C"]),
    "add_relu.npu": ({"X": ("f16", [32, 128]), "Y": ("f16", [32, 128])}, ["Z"]),
    "conv_img2col.npu": ({"X": ("f16", [1, 8, 8, 16]), "W": ("f16", [144, 16])}, ["Y"]),
    "gemm16_missing_sync.npu": ({"A": ("f16", [16, 16]), "B": ("f16", [16, 16])}, ["C"]),
}
DESCR = {"f16": ("<f2", "e"), "f32": ("<f4", "f")}


def write_npy(path, dtype, shape, values):
    descr, fmt = DESCR[dtype]
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%d%s" % (len(values), fmt), *values))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(1)
    for program, (inputs, outputs) in EXAMPLES.items():
        stem = program[:-4]
        args = []
        for name, (dtype, shape) in inputs.items():
            count = 1
            for d in shape:
                count *= d
            path = os.path.join(out, "%s_%s.npy" % (stem, name))
            write_npy(path, dtype, shape, [rng.uniform(-2.0, 2.0) for _ in range(count)])
            args.append("--input %s=%s" % (name, path))
        args += ["--output %s=%s" % (n, os.path.join(out, "%s_%s.npy" % (stem, n))) for n in outputs]
        args += ["--report %s" % os.path.join(out, stem + "_report.json"),
                 "--trace %s" % os.path.join(out, stem + "_trace.json")]
        print("tessel sim %s %s" % (os.path.join(here, program), " ".join(args)))


if __name__ == "__main__":
    main()
