#!/usr/bin/python3
"""Spearman rank correlation between the analytic cost model and measurements over a sweep:
simulator cycles on NPU descriptions, measured kernel time on GPU ones. Prints rho and plots
predicted against measured (PNG). Measures with `tessel tune --strategy exhaustive` (resumed from
OUT.jsonl) unless --log gives an existing sweep; predictions come from `tessel tune --dump-space`.

  scripts/cost_model_check.py --target isa/targets/davinci-910.yaml          # 1024^3 GEMM sweep
  scripts/cost_model_check.py --target isa/targets/sm90.yaml                  # on the GPU machine
  scripts/cost_model_check.py --log out/sweep/gemm1024.jsonl --space '...'   # an existing sweep

With --shapes 'A;B;...' (one --shape each) the check runs across problem sizes instead of tiles:
one measurement per shape (the default tile spec), predicted against measured. That is the check
for mappings that choose their sizes themselves (the NPU convolution, compiler/emit_npu/conv.cc):
  scripts/cost_model_check.py workloads/conv_seed.tsl --def conv2d_nhwc \
      --shapes 'N=32,H=14,W=14,C=256,K=512,R=3,S=3;N=16,H=7,W=7,C=128,K=256,R=3,S=3' --out ..."""
import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tune_common as tc  # noqa: E402

DEFAULT_SPACE = {
    "npu": "m=128-512:pow2/64|128,n=128-512:pow2/64|128,k=32-256:pow2/16|32",
    "gpu": "m=64-256:pow2/32|64,n=64-256:pow2/32|64,k=32|64/16",
}


def plot(xs, ys, labels, title, out, unit):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    ax.scatter(xs, ys, s=10, alpha=0.7)
    if max(xs) > 10 * min(xs) or max(ys) > 10 * min(ys):
        ax.set_xscale("log")
        ax.set_yscale("log")
    lo, hi = min(xs + ys), max(xs + ys)
    ax.plot([lo, hi], [lo, hi], lw=0.6, color="grey", label="measured = predicted")
    for x, y, lab in zip(xs, ys, labels or []):
        ax.annotate(lab, (x, y), fontsize=5, alpha=0.7)
    ax.set_xlabel("analytic model (predicted cycles)")
    ax.set_ylabel("measured (%s)" % unit)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(out + ".png", dpi=90)
    print("wrote %s.png" % out)


def across_shapes(args, tessel, target_name, out):
    log = args.log or out + ".jsonl"
    shapes = [s.strip() for s in args.shapes.split(";") if s.strip()]
    for shape in shapes:
        a = argparse.Namespace(**vars(args))
        a.shape = shape
        cmd = tc.tune_cmd(tessel, a) + ["--strategy", "exhaustive", "--trials", "1", "--log", log, "--db", "off",
                                        "--no-progress", "--measure-timeout", "1200", "--jobs", "1"]
        tc.run(cmd)
    def key(shape):
        return ",".join(sorted(shape.split(",")))
    rows = {}
    for r in tc.read_log(log):
        if r.get("ok"):
            rows[key(r["shape"])] = r
    pairs = [(rows[key(s)]["predicted"], rows[key(s)]["cost"], s) for s in shapes if key(s) in rows]
    if len(pairs) < 3:
        sys.exit("fewer than 3 measured shapes in %s" % log)
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    rho = tc.spearman(xs, ys)
    unit = next(r["unit"] for r in rows.values())
    print("Spearman rho (analytic model vs measured %s) = %.3f over %d shapes" % (unit, rho, len(pairs)))
    for x, y, s in pairs:
        print("  %-40s predicted %10.0f measured %10.0f (%+.1f%%)" % (s, x, y, 100 * (x / y - 1)))
    title = args.title or "%s on %s, %d shapes\nSpearman rho = %.3f" % (os.path.basename(args.op), target_name, len(pairs), rho)
    short = []
    for s in [p[2] for p in pairs]:
        d = dict(kv.split("=") for kv in s.split(","))
        short.append("N%s %sx%s %s>%s" % (d.get("N", "?"), d.get("H", "?"), d.get("W", "?"), d.get("C", "?"), d.get("K", "?")))
    plot(xs, ys, short, title, out, unit)
    with open(out + ".rho.txt", "w") as f:
        f.write("%.4f %d\n" % (rho, len(pairs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op", nargs="?", default=os.path.join(tc.ROOT, "workloads", "matmul.tsl"))
    ap.add_argument("--def", dest="defn")
    ap.add_argument("--target", default=os.path.join(tc.ROOT, "isa", "targets", "davinci-910.yaml"))
    ap.add_argument("--shape", default="M=1024,N=1024,K=1024")
    ap.add_argument("--space", help="tessel tune --space (default: a GEMM space for the target kind)")
    ap.add_argument("--shapes", help="';'-separated shapes: check across problem sizes (one measurement each)")
    ap.add_argument("--title", help="plot title (default: operator, shape, target, rho)")
    ap.add_argument("--log", help="an existing sweep log (skip measuring)")
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--out", help="prefix of OUT.jsonl / OUT.png (default out/cost_model_check/<target>)")
    ap.add_argument("--tessel")
    args = ap.parse_args()
    tessel = tc.find_tessel(args.tessel)
    target_name = os.path.splitext(os.path.basename(args.target))[0]
    kind = "gpu" if target_name.startswith("sm") else "npu"
    if not args.space and os.path.basename(args.op) == "matmul.tsl":
        args.space = DEFAULT_SPACE[kind]
    out = args.out or os.path.join("out", "cost_model_check", target_name)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if args.shapes:
        return across_shapes(args, tessel, target_name, out)
    log = args.log
    if not log:
        log = out + ".jsonl"
        cmd = tc.tune_cmd(tessel, args) + ["--strategy", "exhaustive", "--trials", "1000000", "--log", log, "--db", "off"]
        if args.jobs:
            cmd += ["--jobs", str(args.jobs)]
        tc.run(cmd)
    space = tc.read_space_csv(tc.run(tc.tune_cmd(tessel, args) + ["--dump-space", "-"], quiet=True))
    predicted = {r["tile"]: float(r["predicted"]) for r in space}
    pairs = [(predicted[r["tile"]], r["cost"], r["tile"]) for r in tc.read_log(log) if r.get("ok") and r["tile"] in predicted]
    if len(pairs) < 3:
        sys.exit("fewer than 3 measured configurations of the space in %s" % log)
    unit = next(r["unit"] for r in tc.read_log(log) if r.get("ok"))
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    rho = tc.spearman(xs, ys)
    best_measured = min(pairs, key=lambda p: p[1])
    best_predicted = min(pairs, key=lambda p: p[0])
    print("Spearman rho (analytic model vs measured %s) = %.3f over %d configurations" % (unit, rho, len(pairs)))
    print("measured best %s: %g %s; model's pick %s measures %g %s (%.1f%% slower)" % (
        best_measured[2], best_measured[1], unit, best_predicted[2], best_predicted[1], unit,
        100 * (best_predicted[1] / best_measured[1] - 1)))
    title = args.title or "%s %s on %s\nSpearman rho = %.3f (n=%d)" % (os.path.basename(args.op), args.shape, target_name,
                                                                      rho, len(pairs))
    plot(xs, ys, None, title, out, unit)
    with open(out + ".rho.txt", "w") as f:
        f.write("%.4f %d\n" % (rho, len(pairs)))


if __name__ == "__main__":
    main()
