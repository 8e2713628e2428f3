#!/usr/bin/python3
"""Whole models on a GPU against PyTorch in one run (issue 33 item 4).

  scripts/model_peers.py --tessel BUILD/dev/bin/tessel [--target isa/targets/sm90.yaml]
                         [--models bert128,bert512] [--json OUT] [--no-compile]

For each model, tessel's time is `tessel run --report` on the model's .tsl (a program of kernels,
compiled, verified against the reference interpreter where affordable, then launched as one CUDA
graph: `graph_us`). PyTorch's are measured in this process on the same GPU with the same shapes and
dtype (f16): eager mode captured in a CUDA graph (median over samples of a graph of `calls`
calls / calls), with the eager attention and with scaled_dot_product_attention (sdpa), and torch.compile(mode="max-autotune") called in a loop between CUDA events (that
mode replays CUDA graphs itself). Ratios > 1 mean tessel is faster than the best of the two.
tessel's program is one CUDA graph whose independent kernels are parallel branches
(compiler/program/kernel_graph.h); `serial_graph_us` is the same kernels in sequence, same run.
ResNet-50 is torchvision's resnet50 (random weights, eval, channels-last f16, batch norm as
PyTorch runs it) against workloads/models/resnet50.tsl (batch norm folded), checked at 32 x 32
against the interpreter before the 224 x 224 timing.
The BERT layer is transformers' BertLayer (BERT-base: hidden 768, 12 heads, FFN 3072, eval,
batch 1 or 8) against workloads/models/bert_encoder_layer.tsl's bert_layer_f16 and
bert_layer_f16_batched (the same arithmetic without the attention scale and mask, and tanh-GELU).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gpu_peers: the CUDA-graph harness

MODELS = {
    "bert128": ("workloads/models/bert_encoder_layer.tsl", "bert_layer_f16", {"T": 128, "H": 12, "D": 64, "F": 3072}, "full"),
    "bert512": ("workloads/models/bert_encoder_layer.tsl", "bert_layer_f16", {"T": 512, "H": 12, "D": 64, "F": 3072}, "none"),
    # batch 8: verified at a small size (ctest, and the device run's small check), timed here
    "bert128x8": ("workloads/models/bert_encoder_layer.tsl", "bert_layer_f16_batched",
                  {"B": 8, "T": 128, "H": 12, "D": 64, "F": 3072}, "none"),
    "bert512x8": ("workloads/models/bert_encoder_layer.tsl", "bert_layer_f16_batched",
                  {"B": 8, "T": 512, "H": 12, "D": 64, "F": 3072}, "none"),
    # ResNet-50 at 224 x 224: too large for the interpreter, so checked at 32 x 32 first (full
    # verification, the same def and kernels' code shapes), then timed unverified
    "resnet50": ("workloads/models/resnet50.tsl", "resnet50", {"N": 1, "H": 224, "W": 224}, "none"),
    "resnet50x32": ("workloads/models/resnet50.tsl", "resnet50", {"N": 32, "H": 224, "W": 224}, "none"),
}
SMALL_CHECK = {"resnet50": {"N": 1, "H": 32, "W": 32}, "resnet50x32": {"N": 2, "H": 32, "W": 32}}


def run_tessel(tessel, target, model, autotune=0, small=False):
    path, name, shape, verify = MODELS[model]
    if small:
        shape, verify = SMALL_CHECK[model], "full"
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        cmd = [tessel, "run", os.path.join(SOURCE_DIR, path), "--def", name, "--target", target, "--shape",
               ",".join(f"{k}={v}" for k, v in shape.items()), "--verify", verify, "--report", report]
        if autotune:
            cmd += ["--autotune", str(autotune)]
        t0 = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        wall = time.time() - t0
        if p.returncode != 0 or not os.path.exists(report):
            return {"error": (p.stdout + p.stderr)[-2000:], "rc": p.returncode}
        r = json.load(open(report))
        return {"graph_us": r.get("graph_us"), "serial_graph_us": r.get("serial_graph_us"), "streams": r.get("streams"),
                "kernel_graph": r.get("kernel_graph"), "stream_us": r.get("stream_us"), "verified": r.get("verified"),
                "verify": r.get("verify"), "kernels": r.get("kernels"), "compile_ms": r.get("compile_ms"),
                "wall_s": wall, "stdout": p.stdout[-4000:]}


def torch_bert(shape, attn="eager"):
    import torch
    from transformers import BertConfig
    from transformers.models.bert.modeling_bert import BertLayer
    cfg = BertConfig(hidden_size=shape["H"] * shape["D"], num_attention_heads=shape["H"], intermediate_size=shape["F"],
                     hidden_act="gelu_new", attn_implementation=attn)
    layer = BertLayer(cfg).cuda().half().eval()
    x = torch.randn(shape.get("B", 1), shape["T"], shape["H"] * shape["D"], device="cuda", dtype=torch.half)
    return layer, x


def torch_resnet(shape):
    """torchvision's ResNet-50 (v1.5, random weights, eval: batch norm not folded), f16,
    channels-last (NHWC, the layout of workloads/models/resnet50.tsl)."""
    import torch
    import torchvision
    net = torchvision.models.resnet50(weights=None).cuda().half().eval().to(memory_format=torch.channels_last)
    x = torch.randn(shape["N"], 3, shape["H"], shape["W"], device="cuda", dtype=torch.half).to(memory_format=torch.channels_last)
    return net, x


def time_graph(fn, x):
    """Median us per call of `fn(x)` in a CUDA graph (gpu_peers.time_graph: the same harness as the
    operator peers), gradients off."""
    import torch
    from gpu_peers import time_graph as graph_harness

    def call():
        with torch.no_grad():
            fn(x)
    return graph_harness(torch, call)


def time_loop(fn, x, calls=50, samples=15):
    import torch
    with torch.no_grad():
        for _ in range(10):
            fn(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(samples):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(calls):
                fn(x)
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) * 1000 / calls)
    times.sort()
    return times[len(times) // 2]


def run_torch(model, with_compile):
    import torch
    _, _, shape, _ = MODELS[model]
    if model.startswith("resnet"):
        net, x = torch_resnet(shape)
        fn = lambda v: net(v)
        r = {"eager_graph_us": time_graph(fn, x)}
    else:
        layer, x = torch_bert(shape)
        fn = lambda v: layer(v)[0]
        r = {"eager_graph_us": time_graph(fn, x)}
        try:  # the same layer with scaled_dot_product_attention (flash / memory-efficient kernels)
            sdpa, _ = torch_bert(shape, "sdpa")
            r["sdpa_graph_us"] = time_graph(lambda v: sdpa(v)[0], x)
        except Exception as e:  # reported, not hidden
            r["sdpa_error"] = str(e)[-300:]
    if with_compile:
        t0 = time.time()
        try:
            compiled = torch.compile(fn, mode="max-autotune")
            r["compile_us"] = time_loop(compiled, x)
            r["compile_s"] = time.time() - t0
        except Exception as e:  # reported, not hidden
            r["compile_error"] = str(e)[-500:]
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessel", required=True)
    ap.add_argument("--target", default=os.path.join(SOURCE_DIR, "isa/targets/sm90.yaml"))
    ap.add_argument("--models", default="bert128,bert512")
    ap.add_argument("--json")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (its autotuning takes minutes)")
    ap.add_argument("--autotune", type=int, default=0,
                    help="also run tessel with --autotune N (each kernel's N best-ranked plans timed, the fastest kept)")
    ap.add_argument("--only-autotune", action="store_true", help="with --autotune: skip the run with the default plans")
    a = ap.parse_args()
    rows = []
    for m in a.models.split(","):
        if m not in MODELS:
            print(f"model_peers: unknown model {m} (known: {', '.join(MODELS)})", file=sys.stderr)
            return 2
        p = run_torch(m, not a.no_compile)
        best = min(v for k, v in p.items() if k in ("eager_graph_us", "sdpa_graph_us", "compile_us"))
        if m in SMALL_CHECK:
            c = run_tessel(a.tessel, a.target, m, small=True)
            print(f"{m:12} small check {SMALL_CHECK[m]}: verified {c.get('verified')} {c.get('error', '')[-300:]}", flush=True)
        for tune in ([a.autotune] if a.autotune and a.only_autotune else [0, a.autotune] if a.autotune else [0]):
            t = run_tessel(a.tessel, a.target, m, tune)
            row = {"model": m, "autotune": tune, "tessel": t, "torch": p, "best_torch_us": best,
                   "ratio": (best / t["graph_us"]) if t.get("graph_us") else None}
            rows.append(row)
            label = f"{m}" + (f"/at{tune}" if tune else "")
            print(f"{label:12} tessel {t.get('graph_us') or float('nan'):9.1f} us (in sequence {t.get('serial_graph_us') or float('nan'):.1f} us, "
                  f"{t.get('streams')} streams; verified: {t.get('verified')}, {t.get('verify')})  "
                  f"eager+graph {p['eager_graph_us']:8.1f} us  sdpa+graph {p.get('sdpa_graph_us', float('nan')):8.1f} us  max-autotune {p.get('compile_us', float('nan')):8.1f} us  "
                  f"ratio {row['ratio'] if row['ratio'] is not None else float('nan'):.2f}x", flush=True)
            if "error" in t:
                print(t["error"], file=sys.stderr)
    if a.json:
        json.dump(rows, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
