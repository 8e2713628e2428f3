#!/usr/bin/python3
"""Fused attention on a GPU against PyTorch's scaled_dot_product_attention, in one run.

  scripts/attention_peers.py --tessel BUILD/dev/bin/tessel [--target isa/targets/sm90.yaml]
                             [--only prefill|decode] [--filter REGEX] [--json OUT] [--quick]
                             [--plans PLAN,...]

Each case is a def of workloads/attention.tsl (scores, scale, optional causal mask, softmax,
context as written; the core fuses it into one kernel: compiler/poly/online_softmax.h). tessel's
time is `tessel run --report`'s graph_us (the kernel replayed in a CUDA graph). Every case is first
run at a small size of the same def with full verification against the reference interpreter (the
large sizes are too long for the interpreter), then timed at its size with --verify none. PyTorch's
time is torch.nn.functional.scaled_dot_product_attention (it picks its fastest backend) on tensors
of the same shapes, layout and dtype, captured in a CUDA graph (median of samples of 20 calls), in
this process on the same GPU. Ratio = PyTorch us / tessel us (> 1: tessel faster). --plans also
times each given --tile plan (e.g. attention/wgmma/128x128/cpasync) on the prefill cases, one
column each, after tessel's own choice. TFLOP/s count
4 * B * H * S * T * D flops (causal: the kept half).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

SOURCE_DIR = os.path.dirname(os.path.abspath(__file__)) + "/.."
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# name, def, shape, kind
PREFILL = []
for d in (64, 128):
    for s, b, h in ((1024, 16, 16), (4096, 4, 16), (16384, 1, 16)):
        for causal in (False, True):
            PREFILL.append((f"{'causal ' if causal else ''}d{d} s{s} b{b} h{h}",
                            "attention_causal_bhsd" if causal else "attention_bhsd",
                            {"B": b, "H": h, "S": s, "T": s, "D": d}, "prefill"))
PREFILL.append(("bshd d128 s4096 b4 h16", "attention_bshd", {"B": 4, "H": 16, "S": 4096, "T": 4096, "D": 128}, "prefill"))
PREFILL.append(("bf16 d128 s4096 b4 h16", "attention_bf16_bhsd", {"B": 4, "H": 16, "S": 4096, "T": 4096, "D": 128}, "prefill"))
DECODE = []
for t in (4096, 32768, 65536):
    for b in (1, 16):
        DECODE.append((f"decode d128 t{t} b{b} h32", "attention_bhsd", {"B": b, "H": 32, "S": 1, "T": t, "D": 128}, "decode"))
CASES = PREFILL + DECODE


def small_shape(shape):
    """The same def at a size the reference interpreter checks in seconds (odd lengths: partial blocks)."""
    s = dict(shape, B=1, H=2)
    if shape["S"] == 1:
        s["T"] = 333
    else:
        s["S"] = s["T"] = 200
    return s


def run_tessel(tessel, target, def_, shape, verify, plan=None):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        cmd = [tessel, "run", os.path.join(SOURCE_DIR, "workloads", "attention.tsl"), "--def", def_, "--target", target,
               "--shape", ",".join(f"{k}={v}" for k, v in shape.items()), "--verify", verify, "--report", report]
        if plan:
            cmd += ["--tile", plan]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        out = {"exit": p.returncode, "verified": bool(re.search(r": verified,", p.stdout)), "stdout": p.stdout[-1500:]}
        if p.returncode != 0:
            out["stderr"] = p.stderr[-1500:]
        try:
            with open(report) as f:
                out["report"] = json.load(f)
        except (OSError, ValueError):
            pass
        return out


def torch_time(torch, time_graph, def_, s):
    dt = torch.bfloat16 if "bf16" in def_ else torch.float16
    B, H, S, T, D = s["B"], s["H"], s["S"], s["T"], s["D"]
    if "bshd" in def_:  # [B, S, H, D] storage, viewed as [B, H, S, D]
        q = torch.randn(B, S, H, D, device="cuda", dtype=dt).transpose(1, 2)
        k = torch.randn(B, T, H, D, device="cuda", dtype=dt).transpose(1, 2)
        v = torch.randn(B, T, H, D, device="cuda", dtype=dt).transpose(1, 2)
    else:
        q = torch.randn(B, H, S, D, device="cuda", dtype=dt)
        k = torch.randn(B, H, T, D, device="cuda", dtype=dt)
        v = torch.randn(B, H, T, D, device="cuda", dtype=dt)
    causal = "causal" in def_
    f = torch.nn.functional.scaled_dot_product_attention
    return time_graph(torch, lambda: f(q, k, v, is_causal=causal), calls=20, samples=15)


def flops(def_, s):
    B, H, S, T, D = s["B"], s["H"], s["S"], s["T"], s["D"]
    if "causal" in def_:
        kept = sum(min(T, i + (T - S) + 1) for i in range(S)) if S <= 65536 else S * T / 2
    else:
        kept = S * T
    return 4.0 * B * H * kept * D


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessel", required=True)
    ap.add_argument("--target", default=os.path.join(SOURCE_DIR, "isa", "targets", "sm90.yaml"))
    ap.add_argument("--only", choices=["prefill", "decode"])
    ap.add_argument("--filter")
    ap.add_argument("--quick", action="store_true", help="skip the small-size verification runs")
    ap.add_argument("--json")
    ap.add_argument("--plans", default="", help="comma-separated --tile plans also timed on the prefill cases")
    args = ap.parse_args()
    plans = [x for x in args.plans.split(",") if x]
    import torch
    if not torch.cuda.is_available():
        print("attention_peers.py: no GPU", file=sys.stderr)
        return 2
    from gpu_peers import time_graph
    dev = torch.cuda.get_device_name(0)
    rows = []
    print(f"GPU {dev}, PyTorch {torch.__version__}, target {os.path.basename(args.target)}")
    print(f"{'case':34} {'check':>9} {'tessel us':>10} {'TFLOP/s':>8} {'sdpa us':>10} {'TFLOP/s':>8} {'ratio':>6}"
          + "".join(f" {p[-24:]:>24}" for p in plans))
    for name, def_, shape, kind in CASES:
        if args.only and kind != args.only:
            continue
        if args.filter and not re.search(args.filter, name):
            continue
        row = {"case": name, "def": def_, "shape": shape, "kind": kind}
        if not args.quick:
            small = run_tessel(args.tessel, args.target, def_, small_shape(shape), "full")
            row["check_shape"] = small_shape(shape)
            row["check"] = "verified" if small["verified"] else "FAILED"
            if not small["verified"]:
                row["check_output"] = small.get("stdout", "") + small.get("stderr", "")
            for plan in plans if kind == "prefill" else []:
                small = run_tessel(args.tessel, args.target, def_, small_shape(shape), "full", plan)
                if not small["verified"]:
                    row["check"] = "FAILED"
                    row.setdefault("check_output", "")
                    row["check_output"] += plan + ": " + small.get("stdout", "") + small.get("stderr", "")
        r = run_tessel(args.tessel, args.target, def_, shape, "none")
        us = (r.get("report") or {}).get("graph_us")
        row["tessel_us"] = us
        row["plan"] = ((r.get("report") or {}).get("plan"))
        row["plans_us"] = {}
        for plan in plans if kind == "prefill" else []:
            rp = run_tessel(args.tessel, args.target, def_, shape, "none", plan)
            row["plans_us"][plan] = (rp.get("report") or {}).get("graph_us")
        if us is None:
            row["error"] = (r.get("stdout", "") + r.get("stderr", ""))[-800:]
        try:
            row["sdpa_us"] = torch_time(torch, time_graph, def_, shape)
        except Exception as e:  # noqa: BLE001 - a backend PyTorch lacks is a row, not a crash
            row["sdpa_error"] = str(e)[:300]
        fl = flops(def_, shape)
        row["flops"] = fl
        t_tf = fl / us * 1e-6 if us else None
        p_tf = fl / row["sdpa_us"] * 1e-6 if row.get("sdpa_us") else None
        row["ratio"] = row["sdpa_us"] / us if us and row.get("sdpa_us") else None
        rows.append(row)
        fmt = lambda v, f: (f % v) if v is not None else "-"  # noqa: E731
        print(f"{name:34} {row.get('check', '-'):>9} {fmt(us, '%.1f'):>10} {fmt(t_tf, '%.1f'):>8} "
              f"{fmt(row.get('sdpa_us'), '%.1f'):>10} {fmt(p_tf, '%.1f'):>8} {fmt(row['ratio'], '%.2f'):>6}"
              + "".join(f" {fmt(row['plans_us'].get(p), '%.1f'):>24}" for p in plans), flush=True)
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    if geo:
        print(f"geomean ratio (PyTorch us / tessel us) over {len(ratios)} cases: {geo:.2f}; "
              f"min {min(ratios):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": dev, "torch": torch.__version__, "rows": rows, "geomean_ratio": geo}, f, indent=1)
    return 0 if all(r.get("check", "verified") == "verified" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
