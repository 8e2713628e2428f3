#!/usr/bin/python3
"""PyTorch's f32 contractions on the GPU, the peer of scripts/gpu_f32_gemm.sh in the same device call.

    python3 scripts/gpu_f32_gemm_peers.py [--tf32 off,on] [--json FILE] Z,M,N,K ...

Each shape is timed as torch.matmul (Z = 0) or torch.bmm (Z > 0) on random f32 operands, with
cuBLAS's TF32 off and/or on (`--tf32`), by scripts/gpu_peers.py's method (a CUDA graph of 20 calls,
median of 15 replays). Prints one `TORCH tf32=... z=... MxNxK: T us (F TFLOP/s)` line per shape and
mode; `--json` writes the rows (tf32, shape, torch_graph_us, tflops)."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_peers import time_graph  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="+", help="Z,M,N,K (Z = 0: one matrix product)")
    ap.add_argument("--tf32", default="off,on", help="off, on or off,on (default)")
    ap.add_argument("--json", help="write the rows to this file")
    a = ap.parse_args()
    import torch
    modes = {"off": False, "on": True}
    rows = []
    for mode in a.tf32.split(","):
        if mode not in modes:
            ap.error(f"--tf32: {mode!r} is not off or on")
        torch.backends.cuda.matmul.allow_tf32 = modes[mode]
        torch.backends.cudnn.allow_tf32 = modes[mode]
        for spec in a.shapes:
            try:
                z, m, n, k = (int(x) for x in spec.split(","))
            except ValueError:
                ap.error(f"shape {spec!r}: expected Z,M,N,K")
            if z:
                x = torch.randn(z, m, k, device="cuda"); y = torch.randn(z, k, n, device="cuda"); fn = lambda: torch.bmm(x, y)
            else:
                x = torch.randn(m, k, device="cuda"); y = torch.randn(k, n, device="cuda"); fn = lambda: torch.matmul(x, y)
            us = time_graph(torch, fn)
            fl = 2.0 * max(z, 1) * m * n * k
            rows.append({"tf32": modes[mode], "shape": [z, m, n, k], "torch_graph_us": us, "tflops": fl / us / 1e6})
            print(f"TORCH tf32={modes[mode]} z={z} {m}x{n}x{k}: {us:.2f} us ({fl / us / 1e6:.1f} TFLOP/s)", flush=True)
    print("torch", torch.__version__, torch.cuda.get_device_name())
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
