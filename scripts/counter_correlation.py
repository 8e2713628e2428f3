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
DRAM: dram_bytes vs dram__bytes_read.sum + dram__bytes_write.sum; L2: global_bytes (every
load/store of the global level) vs lts__t_bytes.sum; shared: stage_bytes vs
smsp__sass_data_bytes_mem_shared.sum. A record that failed (rc != 0, no counters, no prediction)
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

PAIRS = [
    # name, predicted key, measured counters (summed), scale of measured into predicted's unit, unit
    ("time", "time_us", ["gpu__time_duration.sum"], 1e-3, "us"),
    ("DRAM bytes", "dram_bytes", ["dram__bytes_read.sum", "dram__bytes_write.sum"], 1.0, "B"),
    ("L2 bytes", "global_bytes", ["lts__t_bytes.sum"], 1.0, "B"),
    ("shared bytes", "stage_bytes", ["smsp__sass_data_bytes_mem_shared.sum"], 1.0, "B"),
]
TIME_RHO_GOAL = 0.9
BYTES_ERROR_GOAL = 0.15


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
    _, key, counters, scale, _ = pair
    out = []
    for r in recs:
        m = r["measured"]
        if key not in r["predicted"] or not all(c in m for c in counters):
            continue
        out.append((r["predicted"][key], sum(m[c] for c in counters) * scale, r))
    return out


def stats(pts):
    xs = [p for p, _, _ in pts]
    ys = [m for _, m, _ in pts]
    errs = [abs(p - m) / m for p, m, _ in pts if m > 0]
    return dict(n=len(pts), pearson=pearson(xs, ys), spearman=spearman(xs, ys), median_rel_error=median(errs),
                zero_measured=sum(1 for _, m, _ in pts if m <= 0))


def fmt(x, pct=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return "%.0f %%" % (100 * x) if pct else "%.3f" % x


def plot(recs, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(PAIRS), figsize=(4.2 * len(PAIRS), 4))
    colours = {"wmma": "tab:blue", "mma.sync": "tab:orange", "wgmma": "tab:green", "simt": "tab:grey"}
    for ax, pair in zip(axes, PAIRS):
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
    print("%-14s %4s  %9s  %11s  %18s" % ("counter", "n", "Pearson r", "Spearman rho", "median rel. error"))
    table = {}
    for pair in PAIRS:
        s = stats(pairs_of(recs, pair))
        table[pair[0]] = s
        print("%-14s %4d  %9s  %11s  %18s" % (pair[0], s["n"], fmt(s["pearson"]), fmt(s["spearman"]),
                                             fmt(s["median_rel_error"], pct=True)))
    paths = sorted(set(r.get("path", "?") for r in recs))
    print("time per path:")
    per_path = {}
    for path in paths:
        s = stats(pairs_of([r for r in recs if r.get("path") == path], PAIRS[0]))
        per_path[path] = s
        print("  %-9s n=%-3d Spearman rho %s, median rel. error %s" % (path, s["n"], fmt(s["spearman"]),
                                                                      fmt(s["median_rel_error"], pct=True)))
    t = table["time"]["spearman"]
    print("goal: time Spearman rho >= %.2f over all paths: %s (%s)" % (TIME_RHO_GOAL, fmt(t),
                                                                       "met" if t >= TIME_RHO_GOAL else "not met"))
    for name in ("DRAM bytes", "L2 bytes", "shared bytes"):
        e = table[name]["median_rel_error"]
        verdict = "no data" if math.isnan(e) else ("met" if e <= BYTES_ERROR_GOAL else "not met")
        print("goal: %s median rel. error <= %.0f %%: %s (%s)" % (name, 100 * BYTES_ERROR_GOAL, fmt(e, pct=True), verdict))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(counters=table, time_per_path=per_path, failed=failed, library_launches_included=mixed), f, indent=1)
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
