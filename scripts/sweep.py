#!/usr/bin/python3
"""Sweep tile sizes of an operator on an NPU description: every configuration of the space that fits
(`tessel tune --dump-space`) measured on the simulator, one Dask task each (scripts/tessel_dask.py:
`--scheduler tcp://HOST:8786` or a LocalCluster of `--workers N`, default one per core); write a CSV
of every configuration and a PNG heatmap of the best cycles over m-tile x n-tile (best over the
other axes).

  scripts/sweep.py workloads/matmul.tsl --target isa/targets/davinci-910.yaml \
      --shape M=1024,N=1024,K=1024 --space 'm=128-512:pow2/64|128,n=128-512:pow2/64|128,k=32-256:pow2/16|32' \
      --out out/sweep/gemm1024

The store (OUT.jsonl, also a tuning log `tessel tune --log` reads) is resumed: re-running measures
only what an interrupted sweep left out. `--set` sweeps a description variant (overrides)."""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_dask as td  # noqa: E402
import tune_common as tc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tc.add_problem_args(ap)
    ap.add_argument("--x", default="m", help="axis on the heatmap's x (outer tile size), default m")
    ap.add_argument("--y", default="n", help="axis on the heatmap's y, default n")
    ap.add_argument("--set", default="", help="description overrides, e.g. L1.capacity_bytes=1MiB")
    ap.add_argument("--limit", type=int, default=0, help="measure only the first N configurations of the space")
    ap.add_argument("--no-plot", action="store_true", help="CSV only")
    td.add_cluster_args(ap)
    ap.add_argument("--out", default="out/sweep/sweep", help="prefix of OUT.jsonl, OUT.csv, OUT.png")
    ap.add_argument("--tessel")
    args = ap.parse_args()
    tessel = tc.find_tessel(args.tessel)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    log = args.out + ".jsonl"
    dump = tc.tune_cmd(tessel, args) + (["--set", args.set] if args.set else []) + ["--dump-space", "-"]
    space = tc.read_space_csv(tc.run(dump, quiet=True))
    if args.limit:
        space = space[:args.limit]
    predicted = {r["tile"]: float(r["predicted"]) for r in space}
    tasks = [td.Task(args.op, args.defn, args.shape, r["tile"], args.target, args.set) for r in space]
    store = td.Store(log)
    client, cluster = td.open_client(args.scheduler, args.workers)
    try:
        stats = td.run_tasks(client, tasks, store, tessel, "sweep", args.measure_timeout)
    finally:
        client.close()
        if cluster:
            cluster.close()
    print("sweep: %d configurations: %d measured, %d already in %s; %.1f s" % (
        stats["total"], stats["measured"], stats["skipped"], log, stats["wall_s"]))
    rows = [store.get(t.key()) for t in tasks]
    axes = list(tc.parse_tile(rows[0]["tile"]).keys()) if rows else []
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tile"] + ["%s_%s" % (a, l) for a in axes for l in ("outer", "inner")] +
                   ["ok", "cost", "unit", "predicted"])
        for r in rows:
            t = tc.parse_tile(r["tile"])
            w.writerow([r["tile"]] + [v for a in axes for v in t[a]] +
                       [r["ok"], r.get("cost", ""), r["unit"], predicted.get(r["tile"], "")])
    print("wrote %s.csv (%d configurations)" % (args.out, len(rows)))
    ok = [r for r in rows if r["ok"]]
    if not ok:
        first = next((r for r in rows if r), {})
        sys.exit("sweep: no successful measurement of %d configurations; first: %s: %s" % (
            len(rows), first.get("tile", "?"), first.get("error", "not measured")))
    best = min(ok, key=lambda r: r["cost"])
    print("best %s: %g %s" % (best["tile"], best["cost"], best["unit"]))
    if args.no_plot:
        return
    cell = {}
    for r in ok:
        t = tc.parse_tile(r["tile"])
        key = (t[args.x][0], t[args.y][0])
        cell[key] = min(cell.get(key, math.inf), r["cost"])
    xs = sorted({k[0] for k in cell})
    ys = sorted({k[1] for k in cell})
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    grid = [[cell.get((x, y), math.nan) for x in xs] for y in ys]
    fig, ax = plt.subplots(figsize=(1.2 * len(xs) + 2.5, 0.9 * len(ys) + 2))
    im = ax.imshow(grid, origin="lower", cmap="viridis_r", aspect="auto")
    ax.set_xticks(range(len(xs)), [str(x) for x in xs])
    ax.set_yticks(range(len(ys)), [str(y) for y in ys])
    ax.set_xlabel("%s tile (outer)" % args.x)
    ax.set_ylabel("%s tile (outer)" % args.y)
    for j, row in enumerate(grid):
        for i, v in enumerate(row):
            if not math.isnan(v):
                ax.text(i, j, "%.3g" % v, ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(im, ax=ax, label="best %s over the other axes" % best["unit"])
    ax.set_title("%s %s on %s\nbest %s" % (os.path.basename(args.op), args.shape, os.path.basename(args.target), best["tile"]),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=90)
    print("wrote %s.png" % args.out)


if __name__ == "__main__":
    main()
