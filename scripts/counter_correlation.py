#!/usr/bin/python3
"""Per-counter correlation of the analytic cost model with Nsight Compute (issue 19 item 2), the
analysing half: reads the records of scripts/counter_sweep.py (one JSON object per line: the
kernel, its path, `predicted` {time_us, dram_bytes, global_bytes, stage_bytes} from `tessel tune
--predict`, `measured` {ncu counter: value summed over the program's launches}) and prints, per
counter, the number of kernels, Pearson r, Spearman rho and the median relative error
|predicted - measured| / measured; then Spearman rho of time per path, and the issue's goals
(time rho >= 0.9 over all paths; bytes per level within 15 % median error). --png writes
predicted against measured, one panel per counter.

  scripts/counter_correlation.py OUT/counters.jsonl [--png OUT/counters.png] [--json OUT/stats.json]

Pairs: time: predicted time_us (cycles at the description's clock) vs gpu__time_duration.sum;
DRAM: dram_bytes vs dram__bytes_read.sum + dram__bytes_write.sum; shared: stage_bytes vs
smsp__sass_data_bytes_mem_shared.sum; and the L2 twice:

  L2 bytes (all sources): global_bytes + l2_fabric_bytes vs lts__t_bytes.sum, every lookup of every
      L2 slice: the SMs' requests in the slice of their own partition, and, on a GPU whose L2 is
      split into partitions joined by a fabric (A100, H100, H200: isa gpu.l2_partitions), those
      homed in the other partition looked up again there (a prediction without l2_fabric_bytes,
      from a tessel before the partitioned L2 was described, has none);
  L2 bytes from the SMs: global_bytes (every load / store of the global level the kernel issues)
      vs 32 x lts__t_sectors_srcunit_tex.sum, the SMs' requests alone (recorded by sweeps since
      the partitioned L2; records without the counter are named as not measured).

The issue's goal (bytes per level within 15 %) is judged on "L2 bytes (all sources)": it is the
counter the goal names (lts__t_bytes), every recorded set has it, and the model now predicts what it
counts. "L2 bytes from the SMs" compares the request part alone, like with like, and tells a wrong
request count apart from a wrong fabric share; it is printed beside it, not judged.
A record that failed (rc != 0, no counters, no prediction)
is counted and left out. So is a record whose counters include other programs' kernels: measured
before the sweep profiled only tessel_* kernels (no `kernel_filter`) and verified against cuBLAS /
cuDNN in the same process (`check: library` in its run tail), its sums hold the library's launches
too (the 4096 x 4096 x 512 GEMMs: 9 launches, ours and cuBLAS's); it is named, not compared."""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tune_common as tc  # noqa: E402

L2_ALL, L2_SMS = "L2 bytes (all sources)", "L2 bytes from the SMs"
PAIRS = [
    # name, predicted keys (summed; the first required, the others 0 when absent), measured counters
    # (summed), scale of measured into predicted's unit, unit
    ("time", ["time_us"], ["gpu__time_duration.sum"], 1e-3, "us"),
    ("DRAM bytes", ["dram_bytes"], ["dram__bytes_read.sum", "dram__bytes_write.sum"], 1.0, "B"),
    (L2_ALL, ["global_bytes", "l2_fabric_bytes"], ["lts__t_bytes.sum"], 1.0, "B"),
    (L2_SMS, ["global_bytes"], ["lts__t_sectors_srcunit_tex.sum"], 32.0, "B"),  # 32 B sectors
    ("shared bytes", ["stage_bytes"], ["smsp__sass_data_bytes_mem_shared.sum"], 1.0, "B"),
]
TIME_RHO_GOAL = 0.9
BYTES_ERROR_GOAL = 0.15
JUDGED_BYTES = ["DRAM bytes", L2_ALL, "shared bytes"]  # the goal's levels; L2_SMS is information


pearson, spearman, median = tc.pearson, tc.spearman, tc.median


def includes_library_launches(r):
    """Whether the record's counters are summed over the library check's launches as well as ours."""
    return not r.get("kernel_filter") and any("check: library" in line for line in r.get("run_tail", []))


def load(path):
    recs, failed, mixed = [], [], []
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if r.get("rc") != 0 or not r.get("measured") or not r.get("predicted"):
            failed.append(r.get("name", "?"))
        elif includes_library_launches(r):
            mixed.append(r.get("name", "?"))
        else:
            recs.append(r)
    return recs, failed, mixed


def pairs_of(recs, pair):
    _, keys, counters, scale, _ = pair
    out = []
    for r in recs:
        m, p = r["measured"], r["predicted"]
        if keys[0] not in p or not all(c in m for c in counters):
            continue
        out.append((sum(p.get(k, 0.0) for k in keys), sum(m[c] for c in counters) * scale, r))
    return out


def not_measured(recs, pair):
    """Records with a prediction for the pair whose counters the sweep did not record."""
    _, keys, counters, _, _ = pair
    return [r for r in recs if keys[0] in r["predicted"] and not all(c in r["measured"] for c in counters)]


def stats(pts):
    xs = [p for p, _, _ in pts]
    ys = [m for _, m, _ in pts]
    errs = [abs(p - m) / m for p, m, _ in pts if m > 0]
    return dict(n=len(pts), pearson=pearson(xs, ys), spearman=spearman(xs, ys), median_rel_error=median(errs),
                zero_measured=sum(1 for _, m, _ in pts if m <= 0))


def ratio_by_path(recs, pair):
    """Per path: n, the median of measured / predicted, the median relative error."""
    out = {}
    for path in sorted(set(r.get("path", "?") for r in recs)):
        pts = [(p, m) for p, m, r in pairs_of(recs, pair) if r.get("path", "?") == path and p > 0 and m > 0]
        if pts:
            out[path] = dict(n=len(pts), median_ratio=median([m / p for p, m in pts]),
                             median_rel_error=median([abs(p - m) / m for p, m in pts]))
    return out


def fmt(x, pct=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "%.0f %%" % (100 * x) if pct else "%.3f" % x


def plot(recs, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = [pair for pair in PAIRS if pairs_of(recs, pair)]  # a counter no record has gets no panel
    fig, axes = plt.subplots(1, len(shown), figsize=(4.2 * len(shown), 4), squeeze=False)
    colours = {"wmma": "tab:blue", "mma.sync": "tab:orange", "wgmma": "tab:green", "simt": "tab:grey"}
    for ax, pair in zip(axes[0], shown):
        pts = [(p, m, r) for p, m, r in pairs_of(recs, pair) if p > 0 and m > 0]
        for path, c in colours.items():
            sel = [(p, m) for p, m, r in pts if r.get("path") == path]
            if sel:
                ax.scatter([p for p, _ in sel], [m for _, m in sel], s=12, color=c, label=path, alpha=0.8)
        if pts:
            lo = min(min(p, m) for p, m, _ in pts)
            hi = max(max(p, m) for p, m, _ in pts)
            ax.plot([lo, hi], [lo, hi], lw=0.6, color="black")
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_title("%s (%s)" % (pair[0], pair[4]), fontsize=9)
        ax.set_xlabel("analytic model")
        ax.set_ylabel("ncu")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print("wrote %s" % out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records")
    ap.add_argument("--png")
    ap.add_argument("--json")
    args = ap.parse_args()
    try:
        recs, failed, mixed = load(args.records)
    except (OSError, ValueError) as e:
        print("counter_correlation: %s: %s" % (args.records, e), file=sys.stderr)
        return 1
    print("%d kernels (%d failed or incomplete%s)" % (len(recs), len(failed), (": " + ", ".join(failed[:6])) if failed else ""))
    if mixed:
        print("%d left out: counters summed with the library check's launches (cuBLAS / cuDNN; measured before the "
              "sweep profiled only tessel_* kernels): %s" % (len(mixed), ", ".join(mixed)))
    print("%-22s %4s  %9s  %11s  %18s" % ("counter", "n", "Pearson r", "Spearman rho", "median rel. error"))
    table = {}
    for pair in PAIRS:
        s = stats(pairs_of(recs, pair))
        s["not_measured"] = len(not_measured(recs, pair))
        table[pair[0]] = s
        if s["n"] == 0 and s["not_measured"]:
            print("%-22s %4d  not measured (%s not recorded in %d records)" % (pair[0], 0, " + ".join(pair[2]), s["not_measured"]))
            continue
        print("%-22s %4d  %9s  %11s  %18s%s" % (pair[0], s["n"], fmt(s["pearson"]), fmt(s["spearman"]),
                                               fmt(s["median_rel_error"], pct=True),
                                               "  (%d not measured)" % s["not_measured"] if s["not_measured"] else ""))
    paths = sorted(set(r.get("path", "?") for r in recs))
    print("time per path:")
    per_path = {}
    for path in paths:
        s = stats(pairs_of([r for r in recs if r.get("path") == path], PAIRS[0]))
        per_path[path] = s
        print("  %-9s n=%-3d Spearman rho %s, median rel. error %s" % (path, s["n"], fmt(s["spearman"]),
                                                                      fmt(s["median_rel_error"], pct=True)))
    l2_paths = {}
    for pair in PAIRS:
        if pair[0] in (L2_ALL, L2_SMS) and table[pair[0]]["n"]:
            l2_paths[pair[0]] = ratio_by_path(recs, pair)
            print("%s per path (median measured / predicted):" % pair[0])
            for path, s in l2_paths[pair[0]].items():
                print("  %-9s n=%-3d ratio %.2f, median rel. error %s" % (path, s["n"], s["median_ratio"],
                                                                        fmt(s["median_rel_error"], pct=True)))
    t = table["time"]["spearman"]
    print("goal: time Spearman rho >= %.2f over all paths: %s (%s)" % (TIME_RHO_GOAL, fmt(t),
                                                                       "met" if t >= TIME_RHO_GOAL else "not met"))
    for name in JUDGED_BYTES:
        e = table[name]["median_rel_error"]
        verdict = "no data" if math.isnan(e) else ("met" if e <= BYTES_ERROR_GOAL else "not met")
        print("goal: %s median rel. error <= %.0f %%: %s (%s)" % (name, 100 * BYTES_ERROR_GOAL, fmt(e, pct=True), verdict))
    e = table[L2_SMS]["median_rel_error"]
    print("information: %s median rel. error %s (the request bytes alone; not judged)" %
          (L2_SMS, "not measured" if math.isnan(e) else fmt(e, pct=True)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(counters=table, time_per_path=per_path, l2_per_path=l2_paths, failed=failed,
                           library_launches_included=mixed), f, indent=1)
    if args.png and recs:
        try:
            import matplotlib  # noqa: F401
        except ImportError:  # e.g. the GPU machine's Python: plot later from the JSON lines
            print("no plot: matplotlib is not installed here (run this script again where it is, on the same file)")
            return 0
        plot(recs, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
