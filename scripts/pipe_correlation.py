#!/usr/bin/python3
"""Per-pipe correlation of the analytic cost model with the NPU simulator (issue 19 item 3).

For every measured configuration the tuning log carries the simulator's busy cycles per pipe
(busiest core, "pipe_busy") and the analytic model's prediction of them ("predicted_pipe_busy"),
beside the total cycles ("cost") and the model's total ("predicted"). This script prints, per pipe
(M, V, MTE1, MTE2, MTE3) and for the total, Pearson r, Spearman rho and the median relative error
|predicted - measured| / measured over every configuration where the simulator's pipe was busy,
pooled over the problems and per problem; it plots predicted against measured (PNG) and writes
the statistics as JSON.

  # collect: sample the tuner's spaces of a GEMM, convolutions and the vector kernels (workloads/)
  scripts/pipe_correlation.py --collect --out docs/figures/pipe_correlation [--trials 16]
  # analyse existing logs (the CI test runs this on tests/tune/pipe_correlation_sample.jsonl)
  scripts/pipe_correlation.py --log A.jsonl [B.jsonl ...] [--out PREFIX] [--no-plot]

Collecting runs `tessel tune --strategy random` (timing-only simulator, --jobs 2) on each problem
of PROBLEMS; the convolution mapping chooses its own tiles, so its space is sampled across shapes.
Debian's python3 (numpy not needed; matplotlib for the PNG)."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tune_common as tc  # noqa: E402

PIPES = ["M", "V", "MTE1", "MTE2", "MTE3"]
GOAL_RHO, GOAL_TOTAL_ERR = 0.95, 0.10

# (label, .tsl, def, shape, space or None for tessel's default space). Small enough for 2 shared cores.
PROBLEMS = [
    ("gemm256", "workloads/matmul.tsl", "matmul", "M=256,N=256,K=256",
     "m=32-256:pow2/32|64,n=32-256:pow2/32|64,k=32-256:pow2/16|32"),
    ("gemm512x128", "workloads/matmul.tsl", "matmul", "M=512,N=128,K=256",
     "m=64-256:pow2/32|64,n=32-128:pow2/32|64,k=32-128:pow2/16|32"),
    ("conv_n2_7x7_128_128", "workloads/conv_seed.tsl", "conv2d_nhwc", "N=2,H=7,W=7,C=128,K=128,R=3,S=3", None),
    ("conv_n4_7x7_64_128", "workloads/conv_seed.tsl", "conv2d_nhwc", "N=4,H=7,W=7,C=64,K=128,R=3,S=3", None),
    ("conv_n2_14x14_64_64", "workloads/conv_seed.tsl", "conv2d_nhwc", "N=2,H=14,W=14,C=64,K=64,R=3,S=3", None),
    ("softmax_512x512", "workloads/bert.tsl", "softmax", "M=512,N=512", None),
    ("layer_norm_512x768", "workloads/bert.tsl", "layer_norm", "M=512,N=768", None),
    ("bias_gelu_512x1024", "workloads/vector.tsl", "bias_gelu", "M=512,N=1024", None),
]


pearson, spearman, median = tc.pearson, tc.spearman, tc.median


def pairs_of(rows, pipe):
    """(predicted, measured, problem) for every row where the simulator's pipe was busy."""
    out = []
    for r in rows:
        if pipe == "total":
            out.append((float(r["predicted"]), float(r["cost"]), r["_problem"]))
            continue
        measured = float(r["pipe_busy"].get(pipe, 0))
        if measured > 0:
            out.append((float(r["predicted_pipe_busy"].get(pipe, 0)), measured, r["_problem"]))
    return out


def stats(pairs):
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    return {"n": len(pairs), "pearson_r": pearson(xs, ys), "spearman_rho": spearman(xs, ys),
            "median_rel_err": median([abs(x - y) / y for x, y in zip(xs, ys)])}


def load_rows(paths):
    rows = []
    for path in paths:
        for r in tc.read_log(path):
            if r.get("ok") and "pipe_busy" in r and "predicted_pipe_busy" in r:
                r["_problem"] = "%s %s" % (r["op"], r["shape"])
                rows.append(r)
    return rows


def fmt(x):
    return "  nan" if x != x else "%.3f" % x


def analyse(rows):
    result = {"configurations": len(rows), "problems": sorted({r["_problem"] for r in rows}),
              "goals": {"spearman_rho_per_pipe": GOAL_RHO, "total_median_rel_err": GOAL_TOTAL_ERR},
              "pooled": {}, "per_problem": {}}
    for pipe in PIPES + ["total"]:
        pairs = pairs_of(rows, pipe)
        if pairs:
            result["pooled"][pipe] = stats(pairs)
        for prob in result["problems"]:
            sub = [p for p in pairs if p[2] == prob]
            if len(sub) >= 2:
                result["per_problem"].setdefault(prob, {})[pipe] = stats(sub)
    return result


def print_table(result):
    print("per-pipe correlation, analytic model vs simulator: %d configurations of %d problems"
          % (result["configurations"], len(result["problems"])))
    print("%-6s %5s %10s %13s %15s" % ("pipe", "n", "pearson_r", "spearman_rho", "median_rel_err"))
    for pipe, s in result["pooled"].items():
        print("%-6s %5d %10s %13s %14.1f%%" % (pipe, s["n"], fmt(s["pearson_r"]), fmt(s["spearman_rho"]),
                                              100 * s["median_rel_err"]))
    misses = [p for p, s in result["pooled"].items() if p != "total" and not s["spearman_rho"] >= GOAL_RHO]
    total = result["pooled"].get("total")
    print("goals: rho >= %.2f per pipe: %s; total-cycle median error <= %d%%: %s" % (
        GOAL_RHO, "met" if not misses else "missed on " + ", ".join(misses), round(100 * GOAL_TOTAL_ERR),
        "met" if total and total["median_rel_err"] <= GOAL_TOTAL_ERR else "missed"))


def plot(rows, result, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [p for p in PIPES + ["total"] if p in result["pooled"]]
    fig, axes = plt.subplots(2, 3, figsize=(11, 7))
    problems = result["problems"]
    colors = {p: plt.cm.tab10(i % 10) for i, p in enumerate(problems)}
    for ax, pipe in zip(axes.flat, panels):
        pairs = pairs_of(rows, pipe)
        for prob in problems:
            sub = [p for p in pairs if p[2] == prob]
            if sub:
                ax.scatter([p[0] for p in sub], [p[1] for p in sub], s=9, alpha=0.75, color=colors[prob], label=prob)
        vals = [v for p in pairs for v in p[:2] if v > 0]
        lo, hi = min(vals), max(vals)
        ax.plot([lo, hi], [lo, hi], lw=0.6, color="grey")
        ax.set_xscale("log")
        ax.set_yscale("log")
        s = result["pooled"][pipe]
        ax.set_title("%s: r %.3f, rho %.3f, median err %.1f%%" % (pipe, s["pearson_r"], s["spearman_rho"],
                                                                  100 * s["median_rel_err"]), fontsize=8)
        ax.set_xlabel("analytic model (cycles)", fontsize=7)
        ax.set_ylabel("simulator (cycles)", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in axes.flat:
        h, l = ax.get_legend_handles_labels()
        if len(l) > len(labels):
            handles, labels = h, l
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=6)
    fig.suptitle("Per-pipe busy cycles (busiest core): analytic model vs simulator, %d configurations"
                 % result["configurations"], fontsize=9)
    fig.tight_layout(rect=(0, 0.08, 1, 0.96))
    fig.savefig(out + ".png", dpi=90)
    print("wrote %s.png" % out)


def collect(args, tessel):
    logs = []
    os.makedirs(args.work, exist_ok=True)
    for label, tsl, defn, shape, space in PROBLEMS:
        log = os.path.join(args.work, label + ".jsonl")
        cmd = [tessel, "tune", os.path.join(tc.ROOT, tsl), "--def", defn, "--target", args.target, "--shape", shape,
               "--strategy", "random", "--trials", str(args.trials), "--seed", "1", "--log", log, "--db", "off",
               "--jobs", str(args.jobs), "--no-progress", "--measure-timeout", "600"]
        if space:
            cmd += ["--space", space]
        tc.run(cmd)
        logs.append(log)
    return logs


def repredict(args, tessel, logs_by_label):
    """The model's predictions from the current binary (`tessel tune --dump-space`), joined by tile:
    measure once, then iterate on the analytic model without simulating again."""
    rows = []
    for label, tsl, defn, shape, space in PROBLEMS:
        log = logs_by_label.get(label)
        if not log:
            continue
        cmd = [tessel, "tune", os.path.join(tc.ROOT, tsl), "--def", defn, "--target", args.target, "--shape", shape,
               "--dump-space", "-", "--no-progress"]
        if space:
            cmd += ["--space", space]
        table = {r["tile"]: r for r in tc.read_space_csv(tc.run(cmd, quiet=True))}
        for r in load_rows([log]):
            t = table.get(r["tile"])
            if t is None:
                continue
            r["predicted"] = float(t["predicted"])
            r["predicted_pipe_busy"] = {p: float(t["pipe_" + p]) for p in PIPES}
            rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--log", nargs="*", default=[], help="tuning logs with pipe_busy / predicted_pipe_busy")
    ap.add_argument("--collect", action="store_true", help="measure PROBLEMS first (tessel tune --strategy random)")
    ap.add_argument("--target", default=os.path.join(tc.ROOT, "isa/targets/davinci-910.yaml"))
    ap.add_argument("--trials", type=int, default=16, help="configurations sampled per problem (default 16)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--work", default="/tmp/pipe_correlation", help="where --collect writes its logs")
    ap.add_argument("--out", help="write OUT.json (statistics) and OUT.png (plot)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--repredict", action="store_true",
                    help="with --collect: take the model's predictions from the current binary's --dump-space "
                         "(the logs' measurements are kept; already-measured configurations are not simulated again)")
    ap.add_argument("--tessel")
    args = ap.parse_args()
    logs = list(args.log)
    if args.collect:
        logs += collect(args, tc.find_tessel(args.tessel))
    if not logs:
        ap.error("give --log FILE ... or --collect")
    for path in logs:
        if not os.path.exists(path):
            sys.exit("pipe_correlation: %s: no such file" % path)
    if args.repredict:
        if not args.collect:
            ap.error("--repredict needs --collect (it looks the problems up in PROBLEMS)")
        rows = repredict(args, tc.find_tessel(args.tessel),
                         {os.path.basename(p)[:-len(".jsonl")]: p for p in logs})
    else:
        rows = load_rows(logs)
    if len(rows) < 2:
        sys.exit("pipe_correlation: fewer than 2 measurements with per-pipe data in %s" % ", ".join(logs))
    result = analyse(rows)
    print_table(result)
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(result, f, indent=1, sort_keys=True)
            f.write("\n")
        print("wrote %s.json" % args.out)
        if not args.no_plot:
            plot(rows, result, args.out)


if __name__ == "__main__":
    main()
