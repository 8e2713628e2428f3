#!/usr/bin/python3
"""Byte-identity check of the CUDA emitter against a reference tessel binary.

For every workload entry of workloads/small.yaml, gemm.yaml and conv.yaml and every GPU
description (isa/targets/sm75.yaml, sm80.yaml, sm90.yaml) this compiles the kernel with
`tessel compile --target ... --explain -o X.cu`, with the default tiles, with every TensorCore tile
candidate that our build's `--explain` lists (`--gpu-tiles`), with programmatic dependent launch
(`--pdl`, `--pdl --pdl-prefetch <B operand>`) on sm_90, and with a `--tile` given (tiles taken
from the kernel IR), using both binaries, and compares the CUDA text byte for byte and the
`--explain` lines (less timings and the candidate list, which the reference may not print).
A compile error must be the same error on both sides.

  scripts/cuda_source_diff.py [--reference /work/baseline/tessel] [--ours build/compiler/cli/tessel] [--quick]

The reference's outputs are cached under --cache (the reference binary does not change), so a
rerun costs only our compiles. Exit status 0 when every output is identical.
"""
import argparse, concurrent.futures, hashlib, json, os, re, subprocess, sys

import yaml

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCHS = ["sm75", "sm80", "sm90"]
SUITES = ["small.yaml", "gemm.yaml", "conv.yaml"]
CANDIDATES = re.compile(r"^  tile candidates \(ranked\): (.*)$", re.M)
CANDIDATE_LINE = re.compile(r"^  tile candidates \(ranked\): .*\n", re.M)
TIMING = re.compile(r"^tessel compile: .* compiled in [0-9.]+ ms$", re.M)


def compile_once(binary, args, out_dir, key):
    cu = os.path.join(out_dir, key + ".cu")
    r = subprocess.run([binary, "compile", *args, "--explain", "-o", cu], cwd=TOP, capture_output=True, text=True)
    source = open(cu, "rb").read() if r.returncode == 0 and os.path.exists(cu) else b""
    explain = CANDIDATE_LINE.sub("", TIMING.sub("", r.stderr))
    return {"rc": r.returncode, "source": source.decode("utf-8", "replace"), "explain": explain, "stderr": r.stderr}


def reference_targets(base, cache):
    """The GPU descriptions as of `base` (the reference binary's parser may not know newer keys)."""
    out = os.path.join(cache, "targets_" + base)
    os.makedirs(out, exist_ok=True)
    for arch in ARCHS:
        text = subprocess.run(["git", "show", f"{base}:isa/targets/{arch}.yaml"], cwd=TOP, capture_output=True, check=True).stdout
        open(os.path.join(out, arch + ".yaml"), "wb").write(text)
    return out


def reference(binary, args, cache, targets):
    key = hashlib.sha1(json.dumps([os.path.getmtime(binary), targets, args]).encode()).hexdigest()
    path = os.path.join(cache, key + ".json")
    if os.path.exists(path):
        return json.load(open(path))
    ref_args = [os.path.join(targets, os.path.basename(a)) if a.startswith("isa/targets/") else a for a in args]
    res = compile_once(binary, ref_args, cache, key)
    json.dump(res, open(path, "w"))
    return res


def entry_args(e, arch):
    shape = ",".join(f"{k}={v}" for k, v in e["shape"].items())
    return ["workloads/" + e["file"], "--def", e["def"], "--target", f"isa/targets/{arch}.yaml", "--shape", shape]


def jobs_for(ours, e, arch, quick, work):
    """The argument lists to compare for one entry and arch: default, candidates, PDL, --tile."""
    base = entry_args(e, arch)
    first = compile_once(ours, base, work, "probe_" + hashlib.sha1(" ".join(base).encode()).hexdigest())
    m = CANDIDATES.search(first["stderr"])
    cands = m.group(1).split(", ") if m else []
    if quick:
        cands = cands[:4] + [c for c in cands if "/wg" in c or "/kb" in c or "/bc" in c][:4]
    out = [base] + [base + ["--gpu-tiles", c] for c in cands]
    if arch == "sm90" and cands:
        b_operand = "Wt" if "conv" in e["file"] or "resnet" in e["file"] else "B"
        out += [base + ["--pdl"], base + ["--pdl", "--pdl-prefetch", b_operand]]
        for c in [c for c in cands if "/kb" in c or "/bc" in c or "/wg" in c][:3]:
            out += [base + ["--gpu-tiles", c, "--pdl"], base + ["--gpu-tiles", c, "--pdl", "--pdl-prefetch", b_operand]]
    if e["def"] == "matmul" and cands:
        out.append(base + ["--tile", "m=32/16,n=16/16,k=32/16"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference", default="/work/baseline/tessel")
    ap.add_argument("--ours", default=os.path.join(TOP, "build", "compiler", "cli", "tessel"))
    ap.add_argument("--base", default="e6d8ef8", help="commit whose isa/targets the reference binary reads")
    ap.add_argument("--cache", default="/tmp/tessel_cuda_source_diff")
    ap.add_argument("--quick", action="store_true", help="a few candidates per entry instead of all")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.cache, exist_ok=True)
    targets = reference_targets(a.base, a.cache)
    work = os.path.join(a.cache, "ours")
    os.makedirs(work, exist_ok=True)
    entries = []
    for s in SUITES:
        entries += yaml.safe_load(open(os.path.join(TOP, "workloads", s)))["entries"]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        arg_lists = [args for lists in pool.map(lambda ea: jobs_for(a.ours, ea[0], ea[1], a.quick, work),
                                                [(e, arch) for e in entries for arch in ARCHS]) for args in lists]

        def compare(args):
            key = hashlib.sha1(" ".join(args).encode()).hexdigest()
            ref, new = reference(a.reference, args, a.cache, targets), compile_once(a.ours, args, work, key)
            diffs = [f for f in ("rc", "source", "explain") if ref[f] != new[f]]
            return args, diffs, ref, new

        results = list(pool.map(compare, arg_lists))
    bad = [(args, d, r, n) for args, d, r, n in results if d]
    sources = sum(1 for _, _, r, _ in results if r["rc"] == 0)
    for args, d, r, n in bad:
        print("DIFFERS (" + ", ".join(d) + "): tessel compile " + " ".join(args))
        if "explain" in d or "rc" in d:
            print("  reference:\n    " + r["explain"].strip().replace("\n", "\n    "))
            print("  ours:\n    " + n["explain"].strip().replace("\n", "\n    "))
    print(f"cuda_source_diff: {len(results)} compiles compared ({sources} CUDA sources), {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
