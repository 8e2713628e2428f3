#!/usr/bin/python3
"""tessel's roofline suite (issue 30 item 4, issue 35): operators at realistic sizes, each run on
every target with the bound that binds and the fraction of it reached.

  scripts/roofline_suite.py [--tessel build/compiler/cli/tessel] [--targets davinci-910,davinci-310]
      [--filter REGEX] [--jobs J] [--timeout S] [--verify MODE] [--json OUT] [--keep DIR] [--list]
      [--baseline FILE [--update-baseline]] [--plot PNG]
  scripts/roofline_suite.py --plot-from OUT.json --plot PNG      (redraw from an earlier --json)
  scripts/roofline_suite.py --targets sm90[,sm75] --dry-run     (no GPU: tessel compile -o K.cu, NVRTC)
  scripts/roofline_suite.py --targets sm90 [--peers torch]      (on a GPU machine)

The instances come from scripts/roofline_gen.py (a fixed list: >= 1e7 MACs per contraction, >= 4 MB
read and written once per memory-bound operator). Each is first checked at its small shape on the
reference target (`tessel run --target c`, column "c"), then run at its measured shape as

  tessel run INSTANCE.tsl --target isa/targets/X.yaml --shape ... --no-tuned --verify V --report R.json

(NPU descriptions: pruned sync, the default; the tuning database is ignored so that a figure does
not depend on what was tuned on this machine). From R.json: `verified`, `total_cycles` and
`roofline` {cycles, fraction, binds, cube_cycles, vector_cycles, gm_cycles, latency_cycles}.
Status of a run:
  ok        exit 0 and verified
  mismatch  the target's outputs differ from the reference
  timeout   still simulating after --timeout seconds (no figure: it is far off its roofline)
  reject    exit 1 with a backend's message (its first line is kept)
  error     anything else (exit 3 = a tessel bug, a crash, no report)

Prints one table (instance, MACs or MB; per target: cycles, the bound that binds, % of roofline,
status), then per target the geomean % of roofline over the instances that produced a figure and
the number below 10 % (timeouts are counted apart: they have no figure but are certainly slow).

GPU descriptions (sm90, sm75): the figure is the kernel time (`graph_us`: median us per call of a
CUDA graph of calls, as scripts/gpu_peers.py reads it), beside the bound that binds and the % of
tessel's GPU roofline it reaches (the report's `roofline`: compiler/kernel/gpu_roofline.h, its
microseconds over graph_us); runs are one at a time. With --peers torch
the same operator is timed in PyTorch in this process (CUDA graphs, gpu_peers.time_graph) and each
row gets torch us, speed vs torch (torch us / tessel us: > 1 means tessel is faster) and, for
memory-bound instances, % of the device-to-device copy bandwidth measured in this process (a 256 MiB
copy: the peak) and % of a same-size copy's (a copy moving the instance's bytes, timed the same way:
the best a memory-bound kernel of that size can do with its launch and L2 residency).
--dry-run (or --nvrtc) needs no GPU: `tessel compile -o K.cu` and NVRTC for the description's
architecture (conformance.py --nvrtc), so every instance is known to compile for sm_90 and sm_75.

--baseline FILE (tests/cli/data/roofline_baseline.json: {"target", "instances": {name: cycles}})
runs exactly the baseline's instances on its target and compares total_cycles (the simulator is
deterministic): more than --tolerance (2 %) slower than the baseline fails; faster passes with a
note to refresh the baseline; --update-baseline rewrites FILE from this run (every instance must
verify). --scale-baseline F multiplies the baseline's figures before comparing (a check that the
comparison can fail: F = 0.5 must fail unless the instances got twice as fast).

Exit status: 0 when every instance ran and verified (and, with --baseline, none regressed); 1
otherwise, with the reasons listed; 2 for usage errors.
"""
import argparse
import collections
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import roofline_gen  # noqa: E402
from conformance import first_error_line  # noqa: E402  (one reading of tessel's error line)

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TESSEL = os.path.join(SOURCE_DIR, "build", "compiler", "cli", "tessel")
LOW_FRACTION = 0.10


def usage_error(msg):
    print(f"roofline_suite.py: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--tessel", default=DEFAULT_TESSEL, help="the tessel binary (default: build/compiler/cli/tessel)")
    ap.add_argument("--targets", default="davinci-910,davinci-310",
                    help="comma-separated description names under isa/targets/ (or .yaml paths): NPU or GPU")
    ap.add_argument("--filter", metavar="REGEX", help="only instances whose name matches (re.search)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="NPU runs in parallel (GPU: always 1)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per run before it counts as a timeout")
    ap.add_argument("--verify", choices=("instance", "auto", "full", "sample"), default="instance",
                    help="tessel run --verify for the measured shape (default: each instance's own, mostly auto)")
    ap.add_argument("--no-c-check", action="store_true", help="skip the small-shape check on --target c")
    ap.add_argument("--json", metavar="OUT", help="write every result as JSON")
    ap.add_argument("--keep", metavar="DIR",
                    help="write the instances (and reports) here instead of a temporary directory")
    ap.add_argument("--list", action="store_true", help="list the selected instances and exit")
    ap.add_argument("--dry-run", "--nvrtc", dest="dry_run", action="store_true",
                    help="GPU descriptions, no GPU needed: tessel compile -o K.cu and NVRTC for the description's "
                    "architecture; NPU descriptions: tessel compile only")
    ap.add_argument("--peers", choices=("torch",), help="GPU descriptions: time the same operator in PyTorch")
    ap.add_argument("--plot", metavar="PNG", help="NPU targets: a bar chart of the %% of roofline per instance")
    ap.add_argument("--plot-from", metavar="JSON", help="draw --plot from an earlier --json instead of running")
    ap.add_argument("--baseline", metavar="FILE", help="compare total_cycles with FILE's (its target and instances)")
    ap.add_argument("--update-baseline", action="store_true", help="with --baseline: rewrite FILE from this run")
    ap.add_argument("--tolerance", type=float, default=0.02, help="with --baseline: allowed slowdown (0.02 = 2 %%)")
    ap.add_argument("--scale-baseline", type=float, default=1.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0:
        usage_error("--jobs and --timeout must be positive")
    if args.update_baseline and not args.baseline:
        usage_error("--update-baseline needs --baseline FILE")
    if args.peers and args.dry_run:
        usage_error("--peers needs a GPU run, not --dry-run")
    if args.filter:
        try:
            re.compile(args.filter)
        except re.error as e:
            usage_error(f"--filter: {e}")
    return args


# --- targets and selection ---------------------------------------------------------------------

def description_path(t):
    path = t if t.endswith(".yaml") else os.path.join(SOURCE_DIR, "isa", "targets", t + ".yaml")
    if not os.path.exists(path):
        usage_error(f"--targets: no description {path}")
    return path


def is_gpu(path):
    with open(path) as f:
        return any(re.match(r"^kind:\s*gpu\b", line) for line in f)


def targets(names):
    """[(column name, description path, 'npu' | 'gpu')]"""
    cols = []
    for t in [t for t in names.split(",") if t]:
        path = description_path(t)
        cols.append((os.path.basename(path)[:-len(".yaml")], path, "gpu" if is_gpu(path) else "npu"))
    if not cols:
        usage_error("--targets: none given")
    return cols


def load_baseline(path):
    try:
        with open(path) as f:
            doc = json.load(f)
        return doc["target"], doc["instances"]
    except (OSError, ValueError, KeyError) as e:
        if not os.path.exists(path):
            return None, {}
        usage_error(f"--baseline {path}: {e}")


def select(args):
    instances = roofline_gen.generate()
    if args.baseline:
        _, cycles = load_baseline(args.baseline)
        if cycles:
            known = {i.name for i in instances}
            missing = sorted(set(cycles) - known)
            if missing:
                usage_error(f"--baseline: instances not in roofline_gen.py: {', '.join(missing)}")
            instances = [i for i in instances if i.name in cycles]
    if args.filter:
        instances = [i for i in instances if re.search(args.filter, i.name)]
    return instances


# --- running ------------------------------------------------------------------------------------

def status_of(rc, stdout, stderr, report):
    """(status, reason) of one `tessel run`."""
    mismatched = report and report.get("verified") is False and rc in (0, 1) and report.get("mismatches")
    if "MISMATCH" in stdout or mismatched:
        m = re.search(r"^\s*first mismatch: (.*)$", stdout, re.M)
        first = m.group(1).strip() if m else (report or {}).get("first_mismatch", "")
        return "mismatch", "mismatch: " + first
    for what in ("RACES", "DEADLOCK"):
        m = re.search(rf"^\s*{what}\s+(.*)$", stdout, re.M)
        if m:
            return "error", f"{what.lower()}: {m.group(1).strip()}"
    if rc == 0 and report is not None and report.get("verified"):
        return "ok", ""
    if rc == 0:
        return "error", "exit 0 without a verified report"
    if rc == 1:
        return "reject", first_error_line(stderr)
    if rc < 0:
        return "error", f"killed by signal {-rc}: " + first_error_line(stderr)
    return "error", f"exit {rc}: " + first_error_line(stderr)


def verify_mode(args, inst):
    return inst.verify if args.verify == "instance" else args.verify


def run_c_check(args, inst, tsl):
    cmd = [args.tessel, "run", tsl, "--target", "c", "--shape", inst.shape_arg(small=True)]
    row = {"instance": inst.name, "target": "c", "shape": inst.shape_arg(small=True)}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, errors="replace")
    except subprocess.TimeoutExpired:
        row.update(status="timeout", reason=f"c check: timeout after {args.timeout:g} s")
        return row
    except OSError as e:
        row.update(status="error", reason=f"c check: {e}")
        return row
    ok = p.returncode == 0 and re.search(r": verified,", p.stdout)
    row.update(status="ok" if ok else "error",
               reason="" if ok else "c check at the small shape: " + (first_error_line(p.stderr) or "not verified"))
    return row


def run_measured(args, inst, tsl, col, report_dir):
    """One `tessel run` at the measured shape; the row's figures from its report."""
    name, path, kind = col
    report_path = os.path.join(report_dir, f"{inst.name}.{name}.json")
    cmd = [args.tessel, "run", tsl, "--target", path, "--shape", inst.shape_arg(), "--no-tuned",
           "--verify", verify_mode(args, inst), "--report", report_path]
    shown = " ".join(os.path.relpath(c, SOURCE_DIR) if c.startswith(SOURCE_DIR) else c for c in cmd)
    row = {"instance": inst.name, "target": name, "command": shown}
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, errors="replace")
    except subprocess.TimeoutExpired:
        row.update(status="timeout", reason=f"still running after {args.timeout:g} s", seconds=args.timeout)
        return row
    except OSError as e:
        row.update(status="error", reason=str(e))
        return row
    row["seconds"] = round(time.monotonic() - start, 2)
    report = None
    if os.path.exists(report_path):
        try:
            with open(report_path) as f:
                report = json.load(f)
        except ValueError:
            report = None
    row["status"], row["reason"] = status_of(p.returncode, p.stdout, p.stderr, report)
    row["exit_status"] = p.returncode
    if report:
        row["verify"] = report.get("verify")
        row["verified"] = report.get("verified")
        if kind == "npu":
            row["total_cycles"] = report.get("total_cycles")
            row["cores"] = report.get("cores")
            roof = report.get("roofline") or {}
            row["roofline"] = {k: roof.get(k) for k in ("cycles", "fraction", "binds", "cube_cycles", "vector_cycles",
                                                       "scalar_cycles", "gm_cycles", "latency_cycles")}
        else:
            for k in ("graph_us", "stream_us", "tiles", "device", "arch", "tensor_cores"):
                if k in report:
                    row[k] = report[k]
            roof = report.get("roofline") or {}  # tessel's GPU roofline (compiler/kernel/gpu_roofline.h)
            if roof:
                row["roofline"] = {k: roof.get(k) for k in ("microseconds", "fraction", "binds", "tensor_core_cycles",
                                                           "cuda_core_cycles", "dram_cycles", "latency_cycles")}
    return row


def compile_only(args, inst, tsl, col):
    """--dry-run: tessel compile (NPU) or tessel compile -o K.cu and NVRTC (GPU)."""
    name, path, kind = col
    row = {"instance": inst.name, "target": name}
    start = time.monotonic()
    try:
        if kind == "gpu":
            import conformance
            outcome, reason, rc = conformance.nvrtc_one(args.tessel, inst, tsl, path, args.timeout)
        else:
            p = subprocess.run([args.tessel, "compile", tsl, "--target", path, "--shape", inst.shape_arg()],
                               capture_output=True, text=True, timeout=args.timeout, errors="replace")
            rc = p.returncode
            outcome = "pass" if rc == 0 else "reject" if rc == 1 else "error"
            reason = "" if rc == 0 else first_error_line(p.stderr)
        row.update(status={"pass": "ok"}.get(outcome, outcome), reason=reason, exit_status=rc)
    except subprocess.TimeoutExpired:
        row.update(status="timeout", reason=f"compile still running after {args.timeout:g} s")
    except OSError as e:
        row.update(status="error", reason=str(e))
    row["seconds"] = round(time.monotonic() - start, 2)
    row["command"] = ("tessel compile -o K.cu; NVRTC" if kind == "gpu" else "tessel compile") + f" --target {name}"
    return row


def run_all(args, instances, cols, inst_dir):
    """{(instance, column): row}; column 'c' is the small-shape check."""
    results = {}
    jobs = []
    for inst in instances:
        tsl = os.path.join(inst_dir, inst.name + ".tsl")
        if not args.no_c_check:
            jobs.append((inst, "c", lambda inst=inst, tsl=tsl: run_c_check(args, inst, tsl)))
        for col in cols:
            if args.dry_run:
                fn = lambda inst=inst, tsl=tsl, col=col: compile_only(args, inst, tsl, col)  # noqa: E731
            else:
                fn = lambda inst=inst, tsl=tsl, col=col: run_measured(args, inst, tsl, col, inst_dir)  # noqa: E731
            jobs.append((inst, col[0], fn))
    gpu_timed = not args.dry_run and any(c[2] == "gpu" for c in cols)
    workers = 1 if gpu_timed else args.jobs  # one kernel on the GPU at a time
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(fn): (inst.name, col) for inst, col, fn in jobs}
        for done, f in enumerate(concurrent.futures.as_completed(futures), 1):
            results[futures[f]] = f.result()
            if sys.stderr.isatty():
                print(f"\r{done}/{len(jobs)} runs", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return results


# --- GPU peers ----------------------------------------------------------------------------------

def add_torch_peers(instances, cols, results):
    """Time each instance's PyTorch peer in this process; returns the copy bandwidth (bytes/s)."""
    import torch
    import gpu_peers
    import roofline_torch
    bw = gpu_peers.copy_bandwidth(torch)
    same_size = {}  # bytes moved -> a copy of that many bytes' bandwidth
    for inst in instances:
        try:
            fn = roofline_torch.build(torch, inst)
            us = gpu_peers.time_graph(torch, fn)
        except Exception as e:  # a peer that PyTorch cannot build or capture is reported, not fatal
            us, err = None, f"{type(e).__name__}: {e}"
        else:
            err = ""
        for col in cols:
            row = results.get((inst.name, col[0]))
            if col[2] != "gpu" or row is None:
                continue
            row["torch_graph_us"] = us
            if err:
                row["torch_error"] = err
            if us and row.get("graph_us"):
                row["speed_vs_torch"] = us / row["graph_us"]
                if inst.kind == "memory":
                    row["fraction_of_copy"] = inst.bytes_moved() / (row["graph_us"] * 1e-6) / bw
                    same = same_size.setdefault(inst.bytes_moved(), gpu_peers.copy_bandwidth(torch, inst.bytes_moved()))
                    row["fraction_of_same_size_copy"] = inst.bytes_moved() / (row["graph_us"] * 1e-6) / same
    return bw


# --- reporting ----------------------------------------------------------------------------------

def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def cell_npu(row):
    if row is None:
        return ("-", "-", "-", "-")
    roof = row.get("roofline") or {}
    cyc = row.get("total_cycles")
    frac = roof.get("fraction")
    return (f"{cyc:,}" if cyc is not None else "-", roof.get("binds") or "-",
            f"{100 * frac:.1f}%" if frac is not None else "-", row["status"])


def cell_gpu(row, inst):
    if row is None:
        return ("-", "-", "-", "-", "-", "-", "-", "-")
    roof = row.get("roofline") or {}
    frac = roof.get("fraction")
    us = row.get("graph_us")
    speed = row.get("speed_vs_torch")
    copy, same = row.get("fraction_of_copy"), row.get("fraction_of_same_size_copy")
    gbs = inst.bytes_moved() / (us * 1e3) if us else None
    return (f"{us:.2f}" if us else "-", roof.get("binds") or "-", f"{100 * frac:.1f}%" if frac else "-",
            f"{gbs:.0f}" if gbs else "-", f"{speed:.2f}x" if speed else "-",
            f"{100 * copy:.0f}%" if copy else "-", f"{100 * same:.0f}%" if same else "-", row["status"])


def print_table(instances, cols, results, args):
    heads = []
    for name, _, kind in cols:
        if args.dry_run:
            heads.append((name, ("compile",), (10,)))
        elif kind == "npu":
            heads.append((name, ("cycles", "bound", "% roof", "status"), (12, 8, 7, 8)))
        else:
            heads.append((name, ("us", "bound", "% roof", "GB/s", "vs torch", "% copy", "% same", "status"),
                          (9, 11, 7, 6, 8, 7, 7, 8)))
    name_w = max(len(i.name) for i in instances) + 1
    c_w = 0 if args.no_c_check else 4
    line1 = f"{'':<{name_w}} {'':>13}" + (f" {'':>{c_w}}" if c_w else "")
    line2 = f"{'instance':<{name_w}} {'MACs / MB':>13}" + (f" {'c':>{c_w}}" if c_w else "")
    for name, subs, widths in heads:
        w = sum(widths) + len(widths) - 1
        line1 += f" | {name:^{w}}"
        line2 += " | " + " ".join(f"{s:>{wd}}" for s, wd in zip(subs, widths))
    print(line1)
    print(line2)
    print("-" * len(line2))
    for inst in instances:
        line = f"{inst.name:<{name_w}} {inst.size_label():>13}"
        if c_w:
            c = results.get((inst.name, "c"))
            line += f" {c['status'] if c else '-':>{c_w}}".replace("ok", "ok", 1)
        for (name, _, kind), (_, subs, widths) in zip(cols, heads):
            row = results.get((inst.name, name))
            if args.dry_run:
                cells = (row["status"] if row else "-",)
            else:
                cells = cell_npu(row) if kind == "npu" else cell_gpu(row, inst)
            line += " | " + " ".join(f"{c:>{wd}}" for c, wd in zip(cells, widths))
        print(line)


def summaries(instances, cols, results):
    """Per target: geomean of the fraction of roofline (NPU) or speed vs torch (GPU), counts."""
    out = {}
    for name, _, kind in cols:
        rows = [results.get((i.name, name)) for i in instances]
        rows = [r for r in rows if r]
        s = {"runs": len(rows), "ok": sum(r["status"] == "ok" for r in rows),
             "timeouts": sum(r["status"] == "timeout" for r in rows)}
        if kind == "npu":
            measured = [r for r in rows if r["status"] == "ok" and (r.get("roofline") or {}).get("fraction")]
            fr = [r["roofline"]["fraction"] for r in measured]
            s["measured"] = len(fr)
            s["lowest"] = [[r["instance"], r["roofline"]["fraction"]]
                           for r in sorted(measured, key=lambda r: r["roofline"]["fraction"])[:5]]
            s["geomean_fraction_of_roofline"] = geomean(fr)
            s["below_10_percent"] = sum(f < LOW_FRACTION for f in fr)
            s["binds"] = dict(collections.Counter(r["roofline"]["binds"] for r in rows if r.get("roofline")))
        else:
            fr = [r["roofline"]["fraction"] for r in rows if r["status"] == "ok" and (r.get("roofline") or {}).get("fraction")]
            s["measured"] = len(fr)
            s["geomean_fraction_of_roofline"] = geomean(fr)
            s["binds"] = dict(collections.Counter(r["roofline"]["binds"] for r in rows if r.get("roofline")))
            sp = [r["speed_vs_torch"] for r in rows if r["status"] == "ok" and r.get("speed_vs_torch")]
            s["geomean_speed_vs_torch"] = geomean(sp)
            s["below_half_torch"] = sum(x < 0.5 for x in sp)
            cp = [r["fraction_of_copy"] for r in rows if r["status"] == "ok" and r.get("fraction_of_copy")]
            s["geomean_fraction_of_copy"] = geomean(cp)
            s["geomean_fraction_of_same_size_copy"] = geomean(
                [r["fraction_of_same_size_copy"] for r in rows if r["status"] == "ok" and r.get("fraction_of_same_size_copy")])
        out[name] = s
    return out


def print_summaries(summ, cols, args):
    if args.dry_run:
        for name, s in summ.items():
            gpu = dict((c[0], c[2]) for c in cols)[name] == "gpu"
            print(f"{name}: {s['ok']} of {s['runs']} compile" + (" (NVRTC)" if gpu else ""))
        return
    for name, _, kind in cols:
        s = summ[name]
        if kind == "npu":
            g = s["geomean_fraction_of_roofline"]
            print(f"{name}: geomean {100 * g:.2f}% of roofline over {s['measured']} of {s['runs']} instances"
                  if g else f"{name}: no instance gave a figure", end="")
            print(f"; {s['below_10_percent']} below 10%; {s['timeouts']} timed out (no figure, not in the geomean);"
                  f" {s['ok']} verified")
            if s["lowest"]:
                print("  lowest: " + ", ".join(f"{n} {100 * f:.2f}%" for n, f in s["lowest"]))
        else:
            g, c, r = s["geomean_speed_vs_torch"], s["geomean_fraction_of_copy"], s.get("geomean_fraction_of_roofline")
            print(f"{name}: geomean " + (f"{100 * r:.1f}% of tessel's roofline over {s['measured']} instances; " if r else "")
                  + "speed vs torch " + (f"{g:.2f}x" if g else "-") + f"; {s['below_half_torch']} below"
                  " 0.5x; memory-bound geomean " + (f"{100 * c:.0f}% of copy bandwidth" if c else "-")
                  + (f" ({100 * s['geomean_fraction_of_same_size_copy']:.0f}% of a same-size copy's)"
                     if s.get("geomean_fraction_of_same_size_copy") else "")
                  + f"; {s['ok']} of {s['runs']} verified")


def plot(doc, path):
    """Horizontal bars: % of roofline per instance (log scale), one bar per NPU target; a run with no
    figure is marked with its status at the left edge. Lines at the issue's goals (10 %, 50 %)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(doc["definitions"])
    res = {(r["instance"], r["target"]): r for r in doc["results"]}
    targets = [t for t in doc["targets"] if any("total_cycles" in r for r in doc["results"] if r["target"] == t)]
    if not targets:
        usage_error("--plot: no NPU target with cycle counts in the results")
    fig, ax = plt.subplots(figsize=(9, 0.22 * len(names) * len(targets) + 1.5))
    height = 0.8 / len(targets)
    floor = 1e-3
    for k, t in enumerate(targets):
        ys = [i + k * height for i in range(len(names))]
        fr = []
        for n in names:
            r = res.get((n, t)) or {}
            f = (r.get("roofline") or {}).get("fraction") if r.get("status") == "ok" else None
            fr.append(f)
        ax.barh(ys, [f or 0 for f in fr], height=height, left=0, label=t)
        for y, f, n in zip(ys, fr, names):
            if f is None:
                ax.text(floor * 1.1, y, (res.get((n, t)) or {}).get("status", "-"), va="center", fontsize=6)
    for goal in (0.1, 0.5):
        ax.axvline(goal, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlim(floor, 1.2)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(names))])
    ax.set_yticklabels(names, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("fraction of roofline (simulated cycles; pruned sync)")
    summ = doc.get("summary", {})
    title = "; ".join(f"{t} geomean {100 * summ[t]['geomean_fraction_of_roofline']:.1f} %" for t in targets
                      if summ.get(t, {}).get("geomean_fraction_of_roofline"))
    ax.set_title(f"tessel roofline suite: {title}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def failures(instances, cols, results):
    bad = []
    for inst in instances:
        for col in ["c"] + [c[0] for c in cols]:
            r = results.get((inst.name, col))
            if r and r["status"] != "ok":
                bad.append(f"{inst.name} on {col}: {r['status']}" + (f": {r['reason']}" if r.get("reason") else ""))
    return bad


# --- baseline -----------------------------------------------------------------------------------

def compare_baseline(args, instances, cols, results):
    """(regressions, faster) lines; every instance of the baseline on its target."""
    target, base = load_baseline(args.baseline)
    regress, faster, within = [], [], []
    for inst in instances:
        row = results.get((inst.name, target))
        was = base.get(inst.name)
        if row is None or was is None:
            continue
        was *= args.scale_baseline
        now = row.get("total_cycles")
        if now is None:
            regress.append(f"{inst.name}: no cycle count ({row['status']}); baseline {was:,.0f}")
            continue
        change = now / was - 1
        if change > args.tolerance:
            regress.append(f"{inst.name}: {now:,} cycles, {100 * change:+.2f}% against the baseline's {was:,.0f}")
        elif now < was:
            faster.append(f"{inst.name}: {now:,} cycles, {100 * change:+.2f}% against the baseline's {was:,.0f}")
        elif now > was:
            within.append(f"{inst.name}: {now:,} cycles, {100 * change:+.2f}% against the baseline's {was:,.0f}")
    return regress, faster, within


def write_baseline(args, instances, cols, results):
    target = cols[0][0]
    doc = {"about": "total_cycles of scripts/roofline_suite.py instances (pruned sync, --no-tuned); "
                    "tests/cli/CMakeLists.txt cli.roofline_sample; rewrite with --update-baseline",
           "target": target,
           "instances": {i.name: results[(i.name, target)]["total_cycles"] for i in instances}}
    with open(args.baseline, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def write_json(path, args, instances, cols, results, summ, elapsed, copy_bw):
    """The run as one document (written to path when given); --plot draws from it."""
    doc = {"tessel": getattr(args, "tessel_given", args.tessel), "targets": [c[0] for c in cols],
           "dry_run": args.dry_run,
           "instances": len(instances), "seconds": round(elapsed, 1), "jobs": args.jobs,
           "timeout_s": args.timeout, "summary": summ,
           "definitions": {i.name: {"def": i.def_name, "family": i.family, "kind": i.kind, "dtype": i.dtype,
                                    "shape": i.shape, "small": i.small, "macs": i.macs(),
                                    "bytes_moved": i.bytes_moved(), "text": i.text} for i in instances},
           "results": [results[k] for k in sorted(results)]}
    if copy_bw:
        doc["copy_bytes_per_s"] = copy_bw
    if path:
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    return doc


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.plot_from:
        if not args.plot:
            usage_error("--plot-from needs --plot PNG")
        with open(args.plot_from) as f:
            plot(json.load(f), args.plot)
        return 0
    cols = targets(args.targets)
    if args.baseline:
        target, _ = load_baseline(args.baseline)
        if target:  # the file's target; --targets names it only when the file is written the first time
            cols = targets(target)
        if len(cols) != 1 or cols[0][2] != "npu" or args.dry_run:
            usage_error("--baseline: one NPU target, measured (not --dry-run)")
    if args.peers and not any(c[2] == "gpu" for c in cols):
        usage_error("--peers torch: no GPU description in --targets")
    if args.peers:  # before the runs: a missing peer is a usage error, not a table of blanks
        try:
            import torch
        except ImportError:
            usage_error("--peers torch: PyTorch is not importable by this interpreter")
        if not torch.cuda.is_available():
            usage_error("--peers torch: no GPU visible to PyTorch")
    instances = select(args)
    if args.list:
        for i in instances:
            print(f"{i.name:<40} {i.kind:<12} {i.size_label():>14}  --shape {i.shape_arg()}"
                  f"  (small {i.shape_arg(True)})")
        return 0
    if not instances:
        usage_error("no instance selected")
    if not os.access(args.tessel, os.X_OK):
        usage_error(f"--tessel {args.tessel}: not an executable")
    with tempfile.TemporaryDirectory(prefix="tessel-roofline-") as tmp:
        inst_dir = args.keep or tmp
        roofline_gen.write(instances, inst_dir)
        # A copy of the binary: a rebuild in the shared build directory during the run neither
        # breaks a run (the file is replaced while linking) nor mixes two compilers in one table.
        snapshot = os.path.join(tmp, "tessel")
        shutil.copy2(args.tessel, snapshot)
        args.tessel_given, args.tessel = args.tessel, snapshot
        start = time.monotonic()
        results = run_all(args, instances, cols, inst_dir)
        elapsed = time.monotonic() - start
    copy_bw = add_torch_peers(instances, cols, results) if args.peers else None
    print(f"tessel roofline suite: {len(instances)} instances x {len(cols)} targets in {elapsed:.0f} s "
          f"({1 if args.peers or (not args.dry_run and any(c[2] == 'gpu' for c in cols)) else args.jobs} jobs, "
          f"timeout {args.timeout:g} s)\n")
    print_table(instances, cols, results, args)
    print()
    summ = summaries(instances, cols, results)
    print_summaries(summ, cols, args)
    if copy_bw:
        print(f"device-to-device copy: {copy_bw / 1e9:.0f} GB/s (read + write)")
    bad = failures(instances, cols, results)
    if bad:
        print(f"\nnot ok ({len(bad)}):")
        for line in bad:
            print("  " + line)
    regress = []
    if args.baseline:
        if args.update_baseline:
            if bad:
                print("\n--update-baseline: not written (not every instance verified)")
            else:
                write_baseline(args, instances, cols, results)
                print(f"\nbaseline written: {args.baseline}")
        else:
            regress, faster, within = compare_baseline(args, instances, cols, results)
            print(f"\nagainst {args.baseline} (tolerance {100 * args.tolerance:g}%):")
            for line in regress:
                print("  slower: " + line)
            for line in within:
                print("  slower, within the tolerance: " + line)
            for line in faster:
                print("  faster: " + line)
            if faster:
                print("  faster than the baseline: refresh it (--update-baseline)")
            if not regress and not faster and not within:
                print("  every instance as in the baseline")
    doc = write_json(args.json, args, instances, cols, results, summ, elapsed, copy_bw)
    if args.plot:
        plot(doc, args.plot)
    return 1 if bad or regress else 0


if __name__ == "__main__":
    sys.exit(main())
