#!/usr/bin/python3
"""Hardware design-space exploration over a layer suite or a whole model (issue 18, issue 33): description variants of a base
NPU description (`tessel --set` overrides of L1 / L0A / L0B / L0C / UB capacities, the shared GM
bandwidth and the core count) x every layer of the suite, each measured on the NPU simulator as one
Dask task (scripts/tessel_dask.py: `--scheduler tcp://HOST:8786` or a LocalCluster of `--workers N`).
A variant's suite cycles are the sum over layers of cycles x the layer's multiplicity (tag times_N);
its on-chip SRAM is cores x (L1 + L0A + L0B + L0C + UB). Writes OUT.csv (every variant) and OUT.png
(time in µs at each description's clock against SRAM bytes, the Pareto front by time, davinci-910 and
davinci-310 marked: their clocks differ, so cycles would not compare).

  scripts/dse.py --suite workloads/resnet50_layers.yaml --tags b1 --variants 56 --out docs/figures/dse_resnet50

A model instead of a suite: `--model FILE.tsl --def D --shape S` measures the whole def, run as the
program of kernels `tessel run` makes of it (its partition, memory plan and per-kernel mappings on each
variant; `--verify auto` as `run` does by default, or full, sample, none), one task per variant; the CSV gives the
kernels' cycles and the arena bytes of each variant.

  scripts/dse.py --model workloads/models/bert_encoder_layer.tsl --def bert_layer_f16 --shape T=128,H=12,D=64,F=3072

Tiles: `--tile-search 0` (default) measures each layer with the target's own tile policy on that
variant (compile without --tile: the GEMM tile from a time model over the description, the
convolution plan of compiler/tile/npu_conv_plan), so the policy adapts to the variant's capacities;
`--tile-search N` runs the model-guided search (`tessel tune --propose`) for N trials per layer and
variant and takes the best of it and the default. The store OUT.jsonl resumes an interrupted run."""
import argparse
import csv
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_dask as td  # noqa: E402

ROOT = td.ROOT
LEVELS = ("L1", "L0A", "L0B", "L0C", "UB")
KIB = 1024
# The grid variants are drawn from (one value per knob), around davinci-910's numbers.
GRID = {
    "cores": [8, 16, 32],  # fewer cores: minutes per layer to compile and simulate (unrolled per-core loops)
    "L1.capacity_bytes": [256 * KIB, 512 * KIB, 1024 * KIB, 2048 * KIB],
    "L0A.capacity_bytes": [32 * KIB, 64 * KIB, 128 * KIB],
    "L0B.capacity_bytes": [32 * KIB, 64 * KIB, 128 * KIB],
    "L0C.capacity_bytes": [128 * KIB, 256 * KIB, 512 * KIB],
    "UB.capacity_bytes": [128 * KIB, 256 * KIB, 512 * KIB],
    "GM.shared_bandwidth_bytes_per_cycle": [95, 348, 696, 1392, 2784],
}


def read_description(path):
    import yaml
    with open(path) as f:
        d = yaml.safe_load(f)
    levels = {lv["name"]: lv for lv in d["levels"]}
    out = {"cores": int(d["cores"]), "clock_mhz": float(d["clock_mhz"]),
           "GM.shared_bandwidth_bytes_per_cycle": float(levels["GM"].get("shared_bandwidth_bytes_per_cycle", 0))}
    for lv in LEVELS:
        out[lv + ".capacity_bytes"] = int(levels[lv]["capacity_bytes"])
    return out


def size_value(v):
    v = str(v).strip()
    for suffix, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
        if v.endswith(suffix):
            return float(v[:-3]) * scale
    return float(v)


def effective(desc, sets):
    d = dict(desc)
    for k, v in sets.items():
        if k in d:
            d[k] = size_value(v) if "bandwidth" in k or "clock" in k else int(size_value(v))
    return d


def materialize(base, sets, path):
    """The description `base` with `sets` (cores, clock_mhz, LEVEL.FIELD) applied, written to `path`."""
    import yaml
    with open(base) as f:
        d = yaml.safe_load(f)
    levels = {lv["name"]: lv for lv in d["levels"]}
    for k, v in sets.items():
        v = size_value(v)
        v = int(v) if v == int(v) else v
        if "." in k:
            name, field = k.split(".", 1)
            levels[name][field] = v
        else:
            d[k] = v
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("# %s with %s (scripts/dse.py --materialize)\n" % (os.path.relpath(base, ROOT), sets_text(sets)))
        yaml.safe_dump(d, f, sort_keys=False)
    return os.path.abspath(path)


def sram_bytes(d):
    return d["cores"] * sum(d[lv + ".capacity_bytes"] for lv in LEVELS)


def variants(base, ref310, n, seed):
    """The base as it is, davinci-310 as it is, then n - 2 distinct grid points drawn with `seed`."""
    out = [("davinci-910", base, {}), ("davinci-310", ref310, {})]
    rng = random.Random(seed)
    seen = set()
    while len(out) < n:
        sets = {k: rng.choice(v) for k, v in GRID.items()}
        key = tuple(sorted(sets.items()))
        if key in seen:
            continue
        seen.add(key)
        out.append(("v%03d" % (len(out) - 1), base, sets))
    return out


def suite_layers(path, tags, with_slow):
    import yaml
    with open(path) as f:
        s = yaml.safe_load(f)
    out = []
    for e in s["entries"]:
        et = set(e.get("tags", []))
        if not set(tags) <= et or ("slow" in et and not with_slow):
            continue
        times = [int(t[6:]) for t in et if t.startswith("times_")]
        out.append({"name": e["name"], "file": os.path.join(os.path.dirname(os.path.abspath(path)), e["file"]),
                    "def": e.get("def", ""), "shape": e["shape"], "times": times[0] if times else 1})
    return s["suite"], out


def pareto(points):
    """Indices of the points (x, y) no other point beats in both (smaller is better), by x."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], points[i][1]))
    front, best = [], math.inf
    for i in order:
        if points[i][1] < best:
            front.append(i)
            best = points[i][1]
    return front


def sets_text(sets):
    return ",".join("%s=%s" % kv for kv in sorted(sets.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default=os.path.join(ROOT, "workloads", "resnet50_layers.yaml"))
    ap.add_argument("--model", help="a .tsl whose def (--def) is measured whole, as a program of kernels, "
                                    "instead of the layers of --suite")
    ap.add_argument("--def", dest="defn", default="", help="with --model: the def (default: the file's only one)")
    ap.add_argument("--shape", default="", help="with --model: its sizes, e.g. T=128,H=12,D=64,F=3072")
    ap.add_argument("--verify", default="auto", choices=("auto", "full", "sample", "none"),
                    help="with --model: each run's check against the reference interpreter")
    ap.add_argument("--tags", default="b1", help="entries carrying all these tags (comma-separated)")
    ap.add_argument("--with-slow", action="store_true", help="include entries tagged slow")
    ap.add_argument("--target", default=os.path.join(ROOT, "isa", "targets", "davinci-910.yaml"),
                    help="the base description the variants override")
    ap.add_argument("--reference", default=os.path.join(ROOT, "isa", "targets", "davinci-310.yaml"),
                    help="a second description measured as it is and marked on the plot")
    ap.add_argument("--variants", type=int, default=56, help="variants in all, the two descriptions included")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE,...",
                    help="an explicit variant of --target (repeatable); with it, no variants are drawn from the grid")
    ap.add_argument("--tile-search", type=int, default=0, help="model-guided trials per layer and variant (0: default tile)")
    ap.add_argument("--out", default="out/dse/dse")
    ap.add_argument("--tessel")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--materialize", action="store_true",
                    help="write each variant as a description file (OUT.variants/NAME.yaml) and measure on it, "
                         "instead of passing --set to tessel (top-level and LEVEL.FIELD keys only)")
    td.add_cluster_args(ap)
    args = ap.parse_args()
    tessel = td.find_tessel(args.tessel)
    if args.model:
        if not os.path.exists(args.model):
            sys.exit("dse: --model %s: no such file" % args.model)
        if args.tile_search:
            sys.exit("dse: --tile-search measures single kernels; a --model runs as a program of kernels")
        name = args.defn or os.path.splitext(os.path.basename(args.model))[0]
        suite, layers = name, [{"name": name, "file": os.path.abspath(args.model), "def": args.defn,
                                "shape": args.shape, "times": 1}]
        args.tags = args.shape
    else:
        suite, layers = suite_layers(args.suite, [t for t in args.tags.split(",") if t], args.with_slow)
    if not layers:
        sys.exit("no entry of %s carries the tags %s" % (args.suite, args.tags))
    if args.variant:
        vs = variants(args.target, args.reference, 2, args.seed)
        for v in args.variant:
            name, _, text = v.partition(":")
            vs.append((name, args.target, dict(e.split("=", 1) for e in text.split(",") if e)))
    else:
        vs = variants(args.target, args.reference, args.variants, args.seed)
    if args.materialize:
        vs = [(n, materialize(t, sets, "%s.variants/%s.yaml" % (args.out, n)) if sets else t, {}, sets)
              for n, t, sets in vs]
    else:
        vs = [(n, t, sets, sets) for n, t, sets in vs]
    tasks = {}
    for vname, target, sets, _ in vs:
        for lay in layers:
            if args.model:
                tasks[(vname, lay["name"])] = td.ProgramTask(lay["file"], lay["def"], lay["shape"], target,
                                                             sets_text(sets), args.verify)
            else:
                tasks[(vname, lay["name"])] = td.Task(lay["file"], lay["def"], lay["shape"], "default", target,
                                                      sets_text(sets))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    store = td.Store(args.out + ".jsonl")
    t0 = time.time()
    client, cluster = td.open_client(args.scheduler, args.workers)
    try:
        print("dse: %s, %d layers (%s) x %d variants = %d measurements" % (
            suite, len(layers), ("model, " if args.model else "tags ") + args.tags, len(vs), len(tasks)),
              file=sys.stderr)
        times = {t.key(): lay["times"] for (v, ln), t in tasks.items() for lay in layers if lay["name"] == ln}

        def best_variant(records):
            """The progress line's best: the fewest suite cycles of the variants measured in full so far."""
            sums, counts = {}, {}
            for r in records:
                k = td.record_key(r)
                if r.get("ok") and k in times:
                    sums[r["variant"]] = sums.get(r["variant"], 0) + r["cost"] * times[k]
                    counts[r["variant"]] = counts.get(r["variant"], 0) + 1
            full = [c for v, c in sums.items() if counts[v] == len(layers)]
            return "%.6g suite cycles (%d variants complete)" % (min(full), len(full)) if full else ""

        stats = td.run_tasks(client, list(tasks.values()), store, tessel, "dse", args.measure_timeout,
                             best=best_variant)
        searched = {}
        if args.tile_search > 0:
            runs = {}
            for (vname, lname), t in tasks.items():
                log = "%s.search/%s.%s.jsonl" % (args.out, vname, lname)
                os.makedirs(os.path.dirname(log), exist_ok=True)
                runs[(vname, lname)] = td.TuneRun(t.file, t.defn, t.shape, t.target, None, "model", 1,
                                                  args.tile_search, log, sets=t.sets)
            td.tune_runs(client, [r for r in runs.values() if not os.path.exists(r.log)], store, tessel,
                         batch=min(8, args.tile_search), timeout_s=args.measure_timeout)
            import tune_common as tc
            for k, r in runs.items():
                ok = [x for x in tc.read_log(r.log) if x.get("ok")]
                if ok:
                    searched[k] = min(ok, key=lambda x: x["cost"])
    finally:
        client.close()
        if cluster:
            cluster.close()
    wall = time.time() - t0
    base_desc, ref_desc = read_description(args.target), read_description(args.reference)
    rows = []
    for vname, target, _, sets in vs:
        d = effective(ref_desc if target == args.reference else base_desc, sets)
        total, failed, first_err, hashes, program = 0.0, 0, "", set(), {}
        for lay in layers:
            rec = store.get(tasks[(vname, lay["name"])].key())
            best = rec["cost"] if rec and rec.get("ok") else math.inf
            s = searched.get((vname, lay["name"]))
            if s:
                best = min(best, s["cost"])
            if rec and rec.get("description_hash"):
                hashes.add(rec["description_hash"])
            if args.model and rec and rec.get("ok"):
                program = {"kernels": len(rec.get("kernels", [])), "arena_bytes": rec.get("arena_bytes", ""),
                           "kernel_cycles": " ".join("%s=%d" % (k["kernel"], k["cycles"]) for k in rec.get("kernels", []))}
            if math.isinf(best):
                failed += 1
                first_err = first_err or (rec or {}).get("error", "not measured")
            else:
                total += best * lay["times"]
        rows.append({"variant": vname, "target": os.path.relpath(target, ROOT), "set": sets_text(sets),
                     "description_hash": ",".join(sorted(hashes)) or tasks[(vname, layers[0]["name"])].variant,
                     "cores": d["cores"], "clock_mhz": d["clock_mhz"],
                     **{lv + "_bytes": d[lv + ".capacity_bytes"] for lv in LEVELS},
                     "gm_bytes_per_cycle": d["GM.shared_bandwidth_bytes_per_cycle"], "sram_bytes": sram_bytes(d),
                     "suite_cycles": int(total) if not failed else "", "layers_failed": failed,
                     "suite_us": ("%.2f" % (total / d["clock_mhz"])) if not failed else "", "pareto": False,
                     "first_error": first_err,
                     **({k: program.get(k, "") for k in ("kernels", "arena_bytes", "kernel_cycles")} if args.model else {})})
    ok = [i for i, r in enumerate(rows) if r["suite_cycles"] != ""]
    for j in pareto([(rows[i]["sram_bytes"], float(rows[i]["suite_us"])) for i in ok]):
        rows[ok[j]]["pareto"] = True
    with open(args.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    front = sorted((r for r in rows if r["pareto"]), key=lambda r: r["sram_bytes"])
    print("dse: %d variants (%d feasible, %d on the Pareto front); %d measured, %d from the store; %.1f s wall" % (
        len(rows), len(ok), len(front), stats["measured"], stats["skipped"], wall))
    for r in rows[:2]:
        print("  %s: %s cycles = %s us at %g MHz, %.2f MiB SRAM" % (r["variant"], r["suite_cycles"], r["suite_us"],
                                                                    r["clock_mhz"], r["sram_bytes"] / 2 ** 20))
    print("wrote %s.csv" % args.out)
    if not ok:
        # nothing feasible is not a result: say why (tessel's own message for the first variant) and fail
        sys.exit("dse: no feasible variant: %d of %d measured; first: %s: %s" % (
            stats["measured"] + stats["skipped"], len(rows), rows[0]["variant"], rows[0]["first_error"] or "not measured"))
    if args.no_plot:
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.6))
    xs = [rows[i]["sram_bytes"] / 2 ** 20 for i in ok]
    ys = [float(rows[i]["suite_us"]) for i in ok]
    ax.scatter(xs, ys, s=14, c="0.6", label="feasible variants (%d of %d)" % (len(ok), len(rows)))
    fx = [r["sram_bytes"] / 2 ** 20 for r in front]
    fy = [float(r["suite_us"]) for r in front]
    ax.step(fx, fy, where="post", color="C0", lw=1.2, label="Pareto front (%d)" % len(front))
    ax.scatter(fx, fy, s=20, color="C0")
    for r, color in ((rows[0], "C3"), (rows[1], "C2")):
        if r["suite_cycles"] != "":
            ax.scatter([r["sram_bytes"] / 2 ** 20], [float(r["suite_us"])], s=90, marker="*", color=color, zorder=5,
                       label="%s (%d cores, %g MHz)" % (r["variant"], r["cores"], r["clock_mhz"]))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("on-chip SRAM: cores x (L1 + L0A + L0B + L0C + UB), MiB")
    ax.set_ylabel("%s time, µs at the description's clock" % ("model" if args.model else "suite"))
    ax.set_title("%s (%s): %d description variants, the whole def as one program" % (suite, args.tags, len(rows))
                 if args.model else
                 "%s (%s, %d layers): %d description variants, default tile policy" % (
        suite, args.tags, len(layers), len(rows)) if args.tile_search == 0 else
        "%s (%s): %d variants, best of %d model-guided trials per layer" % (suite, args.tags, len(rows),
                                                                             args.tile_search), fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(args.out + ".png", dpi=100)
    print("wrote %s.png" % args.out)


if __name__ == "__main__":
    main()
