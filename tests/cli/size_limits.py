#!/usr/bin/env python3
"""Sizes are checked before memory is spent (issue 31 item 5): each hostile input ends with exit 1
and its reason within seconds, and the child's peak memory stays small.

usage: size_limits.py TESSEL SOURCE_DIR WORK_DIR
"""
import os
import resource
import struct
import subprocess
import sys
import time

TESSEL, SRC, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
TARGET = os.path.join(SRC, "isa/targets/davinci-910.yaml")
os.makedirs(WORK, exist_ok=True)
failures = []


def npy(path, descr, shape, payload):
    """A .npy file whose header claims `shape` and holds `payload` bytes of data."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, "".join(f"{d}," for d in shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * payload)


def expect(name, args, code, text, seconds=10, max_rss_mb=1000):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    p = subprocess.run([TESSEL] + args, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the largest child so far
    ok = p.returncode == code and text in p.stderr + p.stdout and took < seconds and (rss_mb < max_rss_mb or before / 1024 >= max_rss_mb)
    print(f"{'ok  ' if ok else 'FAIL'}  {name}: exit {p.returncode} in {took:.1f} s, peak {rss_mb:.0f} MB: {p.stderr.strip()[:200]}")
    if not ok:
        failures.append(f"{name}: expected exit {code} with '{text}' within {seconds} s under {max_rss_mb} MB")


# a 640-byte .npy claiming 4 GiB: refused from its header and the file's size, before allocating
big = os.path.join(WORK, "claims_4gib.npy")
npy(big, "<f2", [2147483648], 512)
assert os.path.getsize(big) == 640
program = os.path.join(WORK, "in_4gib.npu")
with open(program, "w") as f:
    f.write(".tensor X f16 [2147483648] at GM+0 in\npipe_barrier ALL\n")
expect("npy_4gib_sim", ["sim", program, "--target", TARGET, "--input", "X=" + big], 1,
       "truncated .npy data: expected 4294967296 bytes for shape [2147483648], the file holds 512 after its header")
# ... and against the program's declaration, from the header (a 4 GiB claim for a 16-element input)
small = os.path.join(WORK, "in_16.npu")
with open(small, "w") as f:
    f.write(".tensor X f16 [16] at GM+0 in\npipe_barrier ALL\n")
expect("npy_4gib_sim_declared", ["sim", small, "--target", TARGET, "--input", "X=" + big], 1,
       "--input X: the .npy holds f16 [2147483648], the program declares f16 [16]")
# the operator's shapes are checked from the header too (before the data is read)
expect("npy_4gib_eval", ["eval", os.path.join(SRC, "workloads/relu.tsl"), "--shape", "N=1,C=1,H=1,W=16", "--input", "X=" + big], 1,
       "has shape [2147483648] but input 'X' needs [1, 1, 1, 16]")

# a 20 MB YAML list: refused by its size, not parsed
yaml = os.path.join(WORK, "list_20mb.yaml")
with open(yaml, "w") as f:
    f.write("- 1\n" * 5_000_000)
expect("yaml_20mb", ["check-hierarchy", yaml], 1, "hierarchy description is larger than 1048576 bytes")
expect("yaml_20mb_target", ["run", os.path.join(SRC, "workloads/relu.tsl"), "--target", yaml, "--shape", "N=1,C=16,H=8,W=16"], 1,
       "hierarchy description is larger than 1048576 bytes")

# /dev/zero as every kind of input file: bounded reads, exit 1
expect("dev_zero_tsl", ["check", "/dev/zero"], 1, "/dev/zero: operator file is larger than 16777216 bytes")
expect("dev_zero_npu", ["sim", "/dev/zero", "--target", TARGET], 1, "/dev/zero: program is larger than 67108864 bytes")
expect("dev_zero_yaml", ["check-hierarchy", "/dev/zero"], 1, "/dev/zero: hierarchy description is larger than 1048576 bytes")
expect("dev_zero_target", ["run", os.path.join(SRC, "workloads/relu.tsl"), "--target", "/dev/zero", "--shape", "N=1,C=16,H=8,W=16"], 1,
       "/dev/zero: hierarchy description is larger than 1048576 bytes")
expect("dev_zero_npy", ["eval", os.path.join(SRC, "workloads/relu.tsl"), "--shape", "N=1,C=1,H=1,W=16", "--input", "X=/dev/zero"], 1,
       "/dev/zero: not a .npy file")

# a two-line .npu declaring a 6 GiB scratch tensor runs without allocating 6 GB
expect("scratch_6gib", ["sim", os.path.join(SRC, "tests/cli/npu/huge_scratch.npu"), "--target", TARGET], 0, "cycles on 1 core(s)")

if failures:
    sys.exit("failed:\n  " + "\n  ".join(failures))
print("all size limits hold")
