#!/usr/bin/python3
"""Best-so-far against trials for each search strategy on one operator (PNG), with the
exhaustive optimum and its 5 % band. Each strategy runs `tessel tune --strategy S --trials N` for
several seeds. With --replay LOG (an exhaustive log of the same problem, e.g. from sweep.py) the
measurements are looked up instead of simulated again (the simulator is deterministic), so many
seeds are cheap. Without it every search runs on Dask (scripts/tessel_dask.py: `--scheduler
tcp://HOST:8786` or a LocalCluster of `--workers N`): `tessel tune --propose` gives each search's
next batch from its log, the batches of all searches are measured in parallel, each configuration
once for all of them (the store OUT.store.jsonl, also fed by sweep.py's store given as --store).

  scripts/tuning_curve.py workloads/matmul.tsl --target isa/targets/davinci-910.yaml \
      --shape M=1024,N=1024,K=1024 --space '...' --trials 64 --seeds 20 \
      --replay out/sweep/gemm1024.jsonl --out docs/figures/tuning_curve_gemm1024"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_dask as td  # noqa: E402
import tune_common as tc  # noqa: E402


def curve(rows, trials):
    best, out = math.inf, []
    for r in rows[:trials]:
        if r.get("ok"):
            best = min(best, r["cost"])
        out.append(best)
    while len(out) < trials:
        out.append(best)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tc.add_problem_args(ap)
    ap.add_argument("--strategies", default="random,genetic,model")
    ap.add_argument("--model", default="analytic", help="cost model of the model-guided strategy")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--replay", help="exhaustive tuning log of the same problem: look measurements up")
    ap.add_argument("--batch", type=int, default=8, help="configurations a search proposes at once (default 8)")
    ap.add_argument("--store", help="measurement store shared by the searches (default OUT.store.jsonl)")
    td.add_cluster_args(ap)
    ap.add_argument("--out", default="out/tune/tuning_curve", help="prefix of OUT.png, OUT.json and the logs")
    ap.add_argument("--reuse", action="store_true", help="keep the logs of an earlier run of this script (only plot)")
    ap.add_argument("--tessel")
    args = ap.parse_args()
    tessel = tc.find_tessel(args.tessel)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    optimum = None
    unit = "cycles"
    if args.replay:
        ok = [r for r in tc.read_log(args.replay) if r.get("ok")]
        optimum = min(r["cost"] for r in ok)
        unit = ok[0]["unit"]
    results = {}
    logs = {}
    for s in args.strategies.split(","):
        for seed in range(1, args.seeds + 1):
            log = "%s.%s.seed%d.jsonl" % (args.out, s, seed)
            logs[(s, seed)] = log
            if not (args.reuse and os.path.exists(log)) and os.path.exists(log):
                os.remove(log)
    todo = [k for k, log in logs.items() if not os.path.exists(log)]
    if todo and args.replay:
        for s, seed in todo:
            tc.run(tc.tune_cmd(tessel, args) + ["--strategy", s, "--trials", str(args.trials), "--seed", str(seed),
                                                "--log", logs[(s, seed)], "--db", "off", "--no-progress", "--model",
                                                args.model, "--replay", args.replay], quiet=True)
    elif todo:
        runs = [td.TuneRun(args.op, args.defn, args.shape, args.target, args.space, s, seed, args.trials,
                           logs[(s, seed)], args.model) for s, seed in todo]
        store = td.Store(args.store or args.out + ".store.jsonl")
        client, cluster = td.open_client(args.scheduler, args.workers)
        try:
            td.tune_runs(client, runs, store, tessel, args.batch, args.measure_timeout)
        finally:
            client.close()
            if cluster:
                cluster.close()
    for (s, seed), log in logs.items():
        rows = tc.read_log(log)
        if rows:
            unit = rows[0]["unit"]
        results.setdefault(s, []).append(curve(rows, args.trials))
    summary = {"op": args.op, "shape": args.shape, "target": args.target, "trials": args.trials, "seeds": args.seeds,
               "optimum": optimum, "unit": unit, "strategies": {}}
    for s, cs in results.items():
        final = [c[-1] for c in cs]
        mean_curve = [sum(c[i] for c in cs) / len(cs) for i in range(args.trials)]
        entry = {"mean_best": sum(final) / len(final), "worst_best": max(final), "best_best": min(final),
                 "mean_curve": mean_curve}
        if optimum:
            within = [f <= 1.05 * optimum for f in final]
            entry["within_5pct"] = sum(within) / len(within)
            entry["mean_gap_pct"] = 100 * (entry["mean_best"] / optimum - 1)
            firsts = []
            for c in cs:
                hit = next((i + 1 for i, v in enumerate(c) if v <= 1.05 * optimum), None)
                firsts.append(hit)
            entry["trials_to_5pct"] = firsts
        summary["strategies"][s] = entry
        print("%-8s mean best %.6g %s after %d trials (worst %.6g)%s" % (
            s, entry["mean_best"], unit, args.trials, entry["worst_best"],
            "; within 5%% of the optimum %.6g in %.0f%% of %d seeds, mean gap %.2f%%" % (
                optimum, 100 * entry["within_5pct"], len(cs), entry["mean_gap_pct"]) if optimum else ""))
    with open(args.out + ".json", "w") as f:
        json.dump(summary, f, indent=1)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    xs = list(range(1, args.trials + 1))
    for s, cs in results.items():
        mean = summary["strategies"][s]["mean_curve"]
        lo = [min(c[i] for c in cs) for i in range(args.trials)]
        hi = [max(c[i] for c in cs) for i in range(args.trials)]
        line, = ax.plot(xs, mean, label="%s (mean of %d seeds)" % (s, len(cs)))
        ax.fill_between(xs, lo, hi, alpha=0.15, color=line.get_color())
    if optimum:
        ax.axhline(optimum, color="k", lw=0.8, ls="--", label="exhaustive optimum")
        ax.axhline(1.05 * optimum, color="k", lw=0.6, ls=":", label="+5 %")
    finite = [v for cs in results.values() for c in cs for v in c if v < math.inf]
    if finite and max(finite) > 10 * min(finite):
        ax.set_yscale("log")
    ax.set_xlabel("trials")
    ax.set_ylabel("best so far (%s)" % unit)
    ax.set_title("%s %s on %s" % (os.path.basename(args.op), args.shape, os.path.basename(args.target)), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=90)
    print("wrote %s.png and %s.json" % (args.out, args.out))


if __name__ == "__main__":
    main()
