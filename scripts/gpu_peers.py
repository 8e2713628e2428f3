#!/usr/bin/python3
"""Peer comparison on a GPU machine (issue 15 item 6): tessel's kernels and the same operators in
PyTorch, on the same GPU, in one run; CUDA graphs on both sides.

  scripts/gpu_peers.py --tessel BUILD/dev/bin/tessel [--target isa/targets/sm90.yaml] [--json OUT]
                       [--filter REGEX]

For each case, tessel's time is `tessel run --report` (compiled, verified against the reference
interpreter, then timed: median us/call of a CUDA graph of calls); PyTorch's is the median over
samples of a captured CUDA graph of `calls` calls of the operator, divided by `calls`. A
device-to-device copy (torch, 256 MiB, same graph method) measured in this process gives the copy
bandwidth; each memory-bound kernel's achieved bandwidth (bytes read + written once / time) is
reported as a fraction of it. Ratios > 1 mean tessel is faster. GEMMs also give cuBLAS's time from
tessel's own harness (`baseline_graph_us`), in the same process as tessel's kernel.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name, file, def, shape, kind ("mem": bytes moved matter; "gemm"), torch builder key
CASES = [
    ("softmax_128x768", "bert.tsl", "softmax", {"M": 128, "N": 768}, "mem", "softmax"),
    ("softmax_4096x768", "bert.tsl", "softmax", {"M": 4096, "N": 768}, "mem", "softmax"),
    ("softmax_4096x3072", "bert.tsl", "softmax", {"M": 4096, "N": 3072}, "mem", "softmax"),
    ("layer_norm_128x768", "bert.tsl", "layer_norm", {"M": 128, "N": 768}, "mem", "layer_norm"),
    ("layer_norm_4096x768", "bert.tsl", "layer_norm", {"M": 4096, "N": 768}, "mem", "layer_norm"),
    ("layer_norm_4096x3072", "bert.tsl", "layer_norm", {"M": 4096, "N": 3072}, "mem", "layer_norm"),
    ("bias_gelu_128x3072", "vector.tsl", "bias_gelu", {"M": 128, "N": 3072}, "mem", "bias_gelu"),
    ("bias_gelu_4096x3072", "vector.tsl", "bias_gelu", {"M": 4096, "N": 3072}, "mem", "bias_gelu"),
    ("transpose_4096x768", "vector.tsl", "transpose2d", {"M": 4096, "N": 768}, "mem", "transpose"),
    ("transpose_4096x3072", "vector.tsl", "transpose2d", {"M": 4096, "N": 3072}, "mem", "transpose"),
    ("sum_16M", "vector.tsl", "total", {"N": 16777216}, "mem", "sum"),
    ("row_sum_8x2M", "vector.tsl", "row_sum", {"M": 8, "N": 2097152}, "mem", "row_sum"),
    ("bn_reduce_32x28x28x64", "batch_norm.tsl", "bn_reduce", {"N": 32, "H": 28, "W": 28, "C": 64}, "mem", "bn_reduce"),
    # the general SIMT walk (issue 35): several/non-trailing reduced axes, short reductions, global
    # pooling, floor division in indices, a permutation
    ("group_norm_2x196x8x16", "pool_norm_resample.tsl", "group_norm", {"N": 2, "I": 196, "G": 8, "E": 16}, "mem", "group_norm"),
    ("depthwise_s2_2x29x29x32", "quasi.tsl", "depthwise_stride2", {"N": 2, "H": 29, "W": 29, "C": 32, "R": 3, "S": 3}, "mem",
     "depthwise_s2"),
    ("global_avg_pool_32x7x7x2048", "pool_norm_resample.tsl", "global_avg_pool", {"N": 32, "H": 7, "W": 7, "C": 2048}, "mem",
     "avg_pool"),
    ("upsample2x_16x56x56x64", "pool_norm_resample.tsl", "upsample2x", {"N": 16, "H": 56, "W": 56, "C": 64}, "mem", "upsample2x"),
    ("permute3d_256x128x256", "pool_norm_resample.tsl", "permute3d", {"A": 256, "B": 128, "C": 256}, "mem", "permute3d"),
    ("gemm_nn_1000x1000x200", "gemm_layouts.tsl", "matmul_nn", {"M": 1000, "N": 1000, "K": 200}, "gemm", "mm_nn"),
    ("gemm_tn_1000x1000x200", "gemm_layouts.tsl", "matmul_tn", {"M": 1000, "N": 1000, "K": 200}, "gemm", "mm_tn"),
    ("gemm_nt_777x555x129", "gemm_layouts.tsl", "matmul_nt", {"M": 777, "N": 555, "K": 129}, "gemm", "mm_nt"),
]


def torch_case(torch, key, s):
    """(callable, bytes moved) of the PyTorch operator with tessel's tensor dtypes."""
    dev = "cuda"
    h, f = torch.float16, torch.float32
    if key == "softmax":
        x = torch.randn(s["M"], s["N"], device=dev, dtype=h)
        return (lambda: torch.softmax(x, dim=-1)), 2 * x.numel() * 2
    if key == "layer_norm":
        x = torch.randn(s["M"], s["N"], device=dev, dtype=h)
        g = torch.randn(s["N"], device=dev, dtype=h)
        b = torch.randn(s["N"], device=dev, dtype=h)
        return (lambda: torch.nn.functional.layer_norm(x, (s["N"],), g, b, 1e-5)), 2 * x.numel() * 2
    if key == "bias_gelu":
        x = torch.randn(s["M"], s["N"], device=dev, dtype=h)
        b = torch.randn(s["N"], device=dev, dtype=h)
        return (lambda: torch.nn.functional.gelu(x + b, approximate="tanh")), 2 * x.numel() * 2
    if key == "transpose":
        x = torch.randn(s["M"], s["N"], device=dev, dtype=h)
        y = torch.empty(s["N"], s["M"], device=dev, dtype=h)
        return (lambda: y.copy_(x.t())), 2 * x.numel() * 2
    if key == "sum":
        x = torch.randn(s["N"], device=dev, dtype=f)
        return (lambda: x.sum()), x.numel() * 4 + 4
    if key == "row_sum":
        x = torch.randn(s["M"], s["N"], device=dev, dtype=f)
        return (lambda: x.sum(dim=1)), x.numel() * 4 + s["M"] * 4
    if key == "bn_reduce":  # NHWC f16 in, per-channel f32 sum and sum of squares
        x = torch.randn(s["N"], s["H"], s["W"], s["C"], device=dev, dtype=h)
        d = (0, 1, 2)  # two one-pass f32 reductions (the norm's square root aside)
        return (lambda: (torch.sum(x, dim=d, dtype=f), torch.linalg.vector_norm(x, 2, dim=d, dtype=f))), x.numel() * 2 + 2 * s["C"] * 4
    if key == "group_norm":  # X / its (i, e) group sums
        x = torch.randn(s["N"], s["I"], s["G"], s["E"], device=dev, dtype=f)
        return (lambda: x / x.sum(dim=(1, 3), keepdim=True)), 2 * x.numel() * 4
    if key == "depthwise_s2":  # NHWC (channels_last) f16, 3x3 stride 2, no padding
        x = torch.randn(s["N"], s["C"], s["H"], s["W"], device=dev, dtype=h).to(memory_format=torch.channels_last)
        w = torch.randn(s["C"], 1, s["R"], s["S"], device=dev, dtype=h)
        p, q = (s["H"] - s["R"]) // 2 + 1, (s["W"] - s["S"]) // 2 + 1
        return (lambda: torch.nn.functional.conv2d(x, w, stride=2, groups=s["C"])), x.numel() * 2 + w.numel() * 2 + s["N"] * p * q * s["C"] * 4
    if key == "avg_pool":  # NHWC mean over (h, w)
        x = torch.randn(s["N"], s["H"], s["W"], s["C"], device=dev, dtype=f)
        return (lambda: x.mean(dim=(1, 2))), x.numel() * 4 + s["N"] * s["C"] * 4
    if key == "upsample2x":  # NHWC (channels_last) nearest
        x = torch.randn(s["N"], s["C"], s["H"], s["W"], device=dev, dtype=f).to(memory_format=torch.channels_last)
        return (lambda: torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")), 5 * x.numel() * 4
    if key == "permute3d":
        x = torch.randn(s["A"], s["B"], s["C"], device=dev, dtype=f)
        y = torch.empty(s["C"], s["A"], s["B"], device=dev, dtype=f)
        return (lambda: y.copy_(x.permute(2, 0, 1))), 2 * x.numel() * 4
    M, N, K = s["M"], s["N"], s["K"]
    a = torch.randn(M, K, device=dev, dtype=h) if key in ("mm_nn", "mm_nt") else torch.randn(K, M, device=dev, dtype=h)
    b = torch.randn(K, N, device=dev, dtype=h) if key in ("mm_nn", "mm_tn") else torch.randn(N, K, device=dev, dtype=h)
    A = a if key in ("mm_nn", "mm_nt") else a.t()
    B = b if key in ("mm_nn", "mm_tn") else b.t()
    return (lambda: torch.matmul(A, B)), 2 * (M * K + K * N + M * N)


def time_graph(torch, fn, calls=20, samples=15):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / calls)
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth(torch, moved=None):
    """Bytes read + written per second by a device-to-device copy: of 256 MiB (the peak), or of a
    buffer of moved / 2 bytes (a copy that moves `moved` bytes: what the memory system and a launch
    allow at that size, L2 residency and launch latency included)."""
    n = 256 << 20 if moved is None else max(16, int(moved) // 32 * 16)
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    us = time_graph(torch, lambda: dst.copy_(src), calls=5 if moved is None else 20, samples=10 if moved is None else 15)
    return 2 * n / (us * 1e-6)


def run_tessel(tessel, target, c):
    name, file, def_, shape, kind, _ = c
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        report = f.name
    cmd = [tessel, "run", os.path.join(SOURCE_DIR, "workloads", file), "--def", def_, "--target", target,
           "--shape", ",".join(f"{k}={v}" for k, v in shape.items()), "--report", report]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = {"exit": p.returncode, "verified": bool(re.search(r": verified,", p.stdout))}
    try:
        with open(report) as f:
            out["report"] = json.load(f)
    except (OSError, ValueError):
        out["stderr"] = p.stderr[-600:]
    os.unlink(report)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessel", required=True)
    ap.add_argument("--target", default=os.path.join(SOURCE_DIR, "isa", "targets", "sm90.yaml"))
    ap.add_argument("--json")
    ap.add_argument("--filter")
    args = ap.parse_args()
    import torch  # the GPU machine's image has it
    if not torch.cuda.is_available():
        print("gpu_peers.py: no GPU", file=sys.stderr)
        return 2
    dev = torch.cuda.get_device_name(0)
    bw = copy_bandwidth(torch)
    print(f"gpu_peers: {dev}, torch {torch.__version__}; device-to-device copy {bw / 1e9:.0f} GB/s (read + write)")
    print(f"{'case':<26} {'tessel us':>10} {'torch us':>10} {'tessel/torch speed':>19} {'tessel GB/s':>12} "
          f"{'of copy':>8} {'cuBLAS us':>10} {'vs cuBLAS':>10}  verified")
    rows = []
    for c in CASES:
        if args.filter and not re.search(args.filter, c[0]):
            continue
        t = run_tessel(args.tessel, args.target, c)
        rep = t.get("report", {})
        tus = rep.get("graph_us")
        fn, moved = torch_case(torch, c[5], c[3])
        pus = time_graph(torch, fn)
        row = {"case": c[0], "kind": c[4], "shape": c[3], "tessel_graph_us": tus, "torch_graph_us": pus,
               "tessel_exit": t["exit"], "verified": t["verified"], "bytes_moved": moved}
        if tus:
            row["speed_vs_torch"] = pus / tus
            row["tessel_gbs"] = moved / (tus * 1e-6) / 1e9
            row["fraction_of_copy"] = moved / (tus * 1e-6) / bw
        if rep.get("baseline_graph_us"):
            row["cublas_graph_us"] = rep["baseline_graph_us"]
            row["speed_vs_cublas"] = rep["baseline_graph_us"] / tus
        if "stderr" in t:
            row["error"] = t["stderr"]
        rows.append(row)
        f = lambda k, fmt: (fmt.format(row[k]) if row.get(k) is not None else "-")  # noqa: E731
        print(f"{c[0]:<26} {f('tessel_graph_us', '{:.2f}'):>10} {f('torch_graph_us', '{:.2f}'):>10} "
              f"{f('speed_vs_torch', '{:.2f}x'):>19} {f('tessel_gbs', '{:.0f}'):>12} {f('fraction_of_copy', '{:.0%}'):>8} "
              f"{f('cublas_graph_us', '{:.2f}'):>10} {f('speed_vs_cublas', '{:.2f}x'):>10}  {row['verified']}", flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": dev, "torch": torch.__version__, "copy_bytes_per_s": bw, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
