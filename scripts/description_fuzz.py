#!/usr/bin/python3
"""Description-variant fuzzer (issue 31 item 2).

Draws random variants of the NPU descriptions (isa/targets/davinci-910.yaml, davinci-310.yaml) with
`--set KEY=VALUE` over every numeric key, each within its plausible range and often at an awkward
value (1, odd, not a power of two, tiny or huge bandwidths), and runs `tessel run` on relu, matmul
and softmax with each. Every variant must either verify on all three or be refused by the
validator: exit 1, the message ending "(in the variant with --set ...)" and naming a key that was
set. Anything else is a bug and is reported:

  crash      a signal, exit 3, or any exit status other than 0 and 1
  mismatch   the run finished but its outputs differ from the reference interpreter
  refusal    exit 1 from the compiler or the simulator instead of the validator
  no-key     the validator refused, but without naming any key that was set
  slower     a strictly slower variant (lower bandwidths, longer latencies) simulated the stock
             description's program (`tessel compile`, then `tessel sim --timing-only --set`) in
             fewer cycles than the stock description (the compiler may pick another mapping for
             the variant, so `run`'s cycles are not compared)
  timeout    the run did not end within --timeout seconds

usage: description_fuzz.py [--tessel PATH] [--seed N] [--count N] [--seconds S] [--json OUT]
                           [--timeout S] [--jobs N] [--verbose] [--operators relu,matmul,softmax|all]

Exit status 0 when no bug was found, 1 otherwise, 2 on a usage error. Runs with TESSEL_TUNE_DB=off
(the description's default tile, never a tuned one).
"""
import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ["isa/targets/davinci-910.yaml", "isa/targets/davinci-310.yaml"]
# Small shapes with odd sizes, so a variant run costs a fraction of a second.
OPERATORS = [
    ("relu", "workloads/relu.tsl", None, "N=1,C=16,H=8,W=16"),
    ("matmul", "workloads/matmul.tsl", None, "M=48,N=40,K=33"),
    ("softmax", "workloads/bert.tsl", "softmax", "M=16,N=100"),
]
# More of the NPU backend's mappings, for --operators (by hand: each finds rules the three above miss).
EXTRA_OPERATORS = [
    ("conv2d", "workloads/conv2d.tsl", "conv2d", "N=1,C=16,H=8,W=8,K=16,R=3,S=3"),
    ("one_hot", "workloads/one_hot.tsl", None, "N=40,D=20"),
    ("matmul_i8", "workloads/gemm_fused.tsl", "matmul_i8", "M=32,N=48,K=64"),
    ("transpose", "workloads/transpose.tsl", None, "N=1,H=16,W=16,C=32"),
    ("batch_matmul", "workloads/batch_matmul.tsl", None, "B=2,M=16,N=32,K=16"),
    ("cast", "workloads/cast.tsl", "cast_f32_to_f16", "M=16,N=100"),
    ("bias_gelu", "workloads/vector.tsl", "bias_gelu", "M=8,N=100"),
    ("row_sum", "workloads/vector.tsl", "row_sum", "M=8,N=100"),
]

# Keys whose larger value makes the machine strictly slower (with the tile held fixed) and those
# whose smaller value does; a draw that moves only such keys in that direction must not report
# fewer cycles than the stock description.
SLOWER_WHEN_LARGER = ("latency_cycles", "startup_cycles", "set_flag_cycles", "barrier_cycles", "scalar_cycles")
SLOWER_WHEN_SMALLER = ("bandwidth_bytes_per_cycle",)


def awkward_ints(stock, lo, hi):
    """Values around and far from stock: 1, odd, non-powers of two, halves and doubles."""
    vals = {lo, hi, 1, 2, 3, 7, 48, 100, stock, stock + 1, max(lo, stock - 1), stock * 2, stock * 3,
            max(lo, stock // 2), max(lo, stock // 3), max(lo, stock * 3 // 4 + 7)}
    return sorted(v for v in vals if lo <= v <= hi)


def candidates(section, field, stock):
    """The values a draw may give KEY: within its plausible range, awkward ones included."""
    if "energy" in field:
        return [1e-6, 0.01, stock / 3, stock, stock * 10, 99.0]
    if "bandwidth" in field:
        return [1e-20, 1e-9, 1e-3, 0.37, 1, 3, 17.5, stock / 2, stock, stock * 2, 1e6, 1e20]
    if field == "capacity_bytes":
        if stock > (1 << 30):  # the global level
            return awkward_ints(stock, 1 << 20, stock * 2) + [(1 << 24) + 3, 1 << 26]
        return awkward_ints(stock, 1, 1 << 30) + [stock // 16, stock // 4, stock + 32, stock * 4]
    if field in ("alignment_bytes", "granularity_bytes"):
        return [1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 2048, 4096, stock]
    if field == "bytes_per_repeat":
        return [1, 2, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 4096]
    if field == "max_repeat":
        return [1, 2, 3, 7, 8, 100, 255, 256, 1000, 65535, 1 << 24]
    if field == "mask_bits":
        return [1, 2, 7, 8, 16, 32, 64, 100, 127, 128]
    if field.endswith("cycles") or field.endswith("latency_cycles"):
        return [0, 1, 2, 7, stock, stock + 1, stock * 2 + 3, 1000, 100000, 1000000]
    if field == "cores":
        return [1, 2, 3, 5, 7, 16, 31, 32, 33, 64, 100, 4096]
    if field == "clock_mhz":
        return [0.001, 1, 333.3, stock, 2000, 1e6]
    if field == "event_ids_per_pipe_pair":
        return [1, 2, 3, 4, 5, 8, 16, 64, 4096]
    if field == "queue_depth":
        return [1, 2, 3, 4, 31, 32, 1000, 4096]
    if field == "count":
        return [1, 2, 3, 4, 16]
    return awkward_ints(int(stock), 0, max(1, int(stock) * 4))


def numeric_keys(path):
    """Every numeric key of one description in --set form, with its stock value."""
    with open(os.path.join(ROOT, path)) as f:
        d = yaml.safe_load(f)
    keys = {}

    def num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    for k, v in d.items():
        if num(v):
            keys[k] = v
    for level in d["levels"]:
        for k, v in level.items():
            if num(v):
                keys[f"{level['name']}.{k}"] = v
    for unit in d["units"]:
        for k, v in unit.items():
            if num(v):
                keys[f"{unit['name']}.{k}"] = v
        keys.setdefault(f"{unit['name']}.count", 1)  # a schema key the files leave at its default
    for p in d["paths"]:
        for k, v in p.items():
            if num(v):
                keys[f"{p['from']}->{p['to']}.{k}"] = v
    for k, v in d.get("sync", {}).items():
        if num(v):
            keys[f"sync.{k}"] = v
    return keys


def fmt_value(v):
    if isinstance(v, float):
        return repr(v) if v != int(v) or abs(v) >= 1e16 else str(int(v)) if abs(v) < 1e15 else repr(v)
    return str(v)


def draw(rng, target, keys):
    """1 to 3 keys, each set to one of its candidates (a changed value most of the time)."""
    names = rng.sample(sorted(keys), rng.choice([1, 1, 1, 2, 2, 3]))
    sets = {}
    for key in names:
        field = key.rsplit(".", 1)[-1]
        section = key.rsplit(".", 1)[0] if "." in key else ""
        stock = keys[key]
        values = [v for v in candidates(section, field, stock) if v != stock] or [stock]
        sets[key] = rng.choice(values)
    return sets


def strictly_slower(sets, keys):
    """True when every key set moves the machine only towards slower (and something changed)."""
    if not sets:
        return False
    for key, value in sets.items():
        field = key.rsplit(".", 1)[-1]
        stock = keys[key]
        if field.endswith(SLOWER_WHEN_LARGER) and value > stock:
            continue
        if field.endswith(SLOWER_WHEN_SMALLER) and value < stock:
            continue
        return False
    return True


def run_tessel(args, target, op, sets, tile=None, report=None):
    name, tsl, definition, shape = op
    cmd = [args.tessel, "run", os.path.join(ROOT, tsl), "--target", os.path.join(ROOT, target), "--shape", shape]
    if definition:
        cmd += ["--def", definition]
    if sets:
        cmd += ["--set", ",".join(f"{k}={fmt_value(v)}" for k, v in sorted(sets.items()))]
    if tile:
        cmd += ["--tile", tile]
    if report:
        cmd += ["--report", report]
    env = dict(os.environ, TESSEL_TUNE_DB="off")
    started = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"cmd": cmd, "rc": None, "out": "", "err": "timeout", "seconds": args.timeout}
    return {"cmd": cmd, "rc": p.returncode, "out": p.stdout, "err": p.stderr, "seconds": time.monotonic() - started}


def compile_tessel(args, target, op, out):
    name, tsl, definition, shape = op
    cmd = [args.tessel, "compile", os.path.join(ROOT, tsl), "--target", os.path.join(ROOT, target), "--shape", shape, "-o", out]
    if definition:
        cmd += ["--def", definition]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=dict(os.environ, TESSEL_TUNE_DB="off"))
    return {"cmd": cmd, "rc": p.returncode, "err": p.stderr}


def sim_tessel(args, program, target, sets, report):
    """The stock program, timing only, on a variant of the description."""
    cmd = [args.tessel, "sim", program, "--target", os.path.join(ROOT, target), "--timing-only", "--report", report]
    if sets:
        cmd += ["--set", ",".join(f"{k}={fmt_value(v)}" for k, v in sorted(sets.items()))]
    if os.path.exists(report):
        os.unlink(report)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"cmd": cmd, "rc": None, "err": "timeout", "report": report}
    return {"cmd": cmd, "rc": p.returncode, "err": p.stderr, "report": report}


def read_report(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def names_a_key(message, sets):
    """The refusal names one of the keys set: its field and, where the message says, its element."""
    for key in sets:
        field = key.rsplit(".", 1)[-1]
        if field in message:
            return True
    return False


def classify(r, sets, report):
    """(verdict, detail): verdict is 'verified', 'refused' or a bug kind (module docstring)."""
    err = r["err"].strip()
    first = err.splitlines()[0] if err else ""
    if r["rc"] is None:
        return "timeout", "no exit within the timeout"
    if r["rc"] == 0:
        if report and report.get("verified") is True:
            return "verified", ""
        return "mismatch", (report or {}).get("first_mismatch", "") or "exit 0 without 'verified'"
    if r["rc"] == 1:
        if "MISMATCH" in r["out"] or (report and report.get("verified") is False):
            return "mismatch", (report or {}).get("first_mismatch", "") or "MISMATCH"
        if "(in the variant with --set" in err:
            return ("refused", first) if names_a_key(err, sets) else ("no-key", first)
        return "refusal", first
    if r["rc"] < 0:
        return "crash", f"signal {-r['rc']}: {first}"
    return "crash", f"exit {r['rc']}: {first}"


def evaluate(args, index, target, sets, keys, stock, tmpdir):
    """Runs one variant on every operator; returns its record."""
    record = {"draw": index, "target": target, "set": {k: fmt_value(v) for k, v in sorted(sets.items())}, "runs": []}
    slower = strictly_slower(sets, keys)
    for op in OPERATORS:
        report = os.path.join(tmpdir, f"d{index}_{op[0]}.json")
        if os.path.exists(report):
            os.unlink(report)
        base = stock[(target, op[0])]
        r = run_tessel(args, target, op, sets, report=report)
        rep = read_report(report)
        verdict, detail = classify(r, sets, rep)
        cycles = rep.get("total_cycles") if rep else None
        command = " ".join(r["cmd"])
        if verdict == "verified" and slower:  # the stock program on the slower machine: never fewer cycles
            s = sim_tessel(args, base["program"], target, sets, os.path.join(tmpdir, f"d{index}_{op[0]}_sim.json"))
            sim_cycles = (read_report(s["report"]) or {}).get("total_cycles")
            if s["rc"] != 0 or sim_cycles is None:
                verdict, detail, command = "refusal", f"tessel sim exit {s['rc']}: {s['err'].strip()[:300]}", " ".join(s["cmd"])
            elif sim_cycles < base["sim_cycles"]:
                verdict, detail, command = "slower", f"{sim_cycles} cycles < stock {base['sim_cycles']}", " ".join(s["cmd"])
        record["runs"].append({"operator": op[0], "verdict": verdict, "detail": detail, "cycles": cycles,
                               "seconds": round(r["seconds"], 3), "command": command})
        if verdict == "refused":
            break  # the validator refuses the description itself: the other operators would say the same
    bugs = [x for x in record["runs"] if x["verdict"] not in ("verified", "refused")]
    record["verdict"] = bugs[0]["verdict"] if bugs else record["runs"][-1]["verdict"]
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessel", default=os.path.join(ROOT, "build/compiler/cli/tessel"))
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: from the time; printed)")
    ap.add_argument("--count", type=int, default=None, help="number of variants to draw (default 100 without --seconds)")
    ap.add_argument("--seconds", type=float, default=None, help="stop drawing after this many seconds")
    ap.add_argument("--json", default=None, help="write every draw and its verdict here")
    ap.add_argument("--timeout", type=float, default=60, help="seconds one tessel run may take")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--verbose", action="store_true", help="print every draw, not only the bugs")
    ap.add_argument("--operators", default="relu,matmul,softmax",
                    help="comma-separated operators to run each variant on, or 'all' (known: " +
                         ",".join(op[0] for op in OPERATORS + EXTRA_OPERATORS) + ")")
    args = ap.parse_args()
    known = {op[0]: op for op in OPERATORS + EXTRA_OPERATORS}
    names = list(known) if args.operators == "all" else [n for n in args.operators.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        ap.error(f"--operators: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}")
    OPERATORS[:] = [known[n] for n in names]
    if args.count is None and args.seconds is None:
        args.count = 100
    if (args.count is not None and args.count < 0) or (args.seconds is not None and args.seconds <= 0) or args.jobs < 1:
        ap.error("--count must be >= 0, --seconds and --jobs positive")
    if not os.access(args.tessel, os.X_OK):
        print(f"description_fuzz: {args.tessel} is not an executable tessel (build first)", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else int(time.time() * 1000) % (1 << 31)
    rng = random.Random(seed)
    print(f"description_fuzz: seed {seed}", flush=True)

    import shutil
    import tempfile
    tmp = tempfile.TemporaryDirectory(prefix="tessel_dfuzz_")
    # a private copy of the binary: a rebuild during a long run does not pull it away mid-draw
    args.tessel = shutil.copy2(args.tessel, os.path.join(tmp.name, "tessel"))
    keys = {t: numeric_keys(t) for t in TARGETS}
    stock = {}
    for t in TARGETS:  # the stock description must verify on every operator: the baseline
        for op in OPERATORS:
            report = os.path.join(tmp.name, f"stock_{os.path.basename(t)}_{op[0]}.json")
            r = run_tessel(args, t, op, {}, report=report)
            rep = read_report(report)
            if r["rc"] != 0 or not rep or not rep.get("verified"):
                print(f"description_fuzz: the stock run does not verify: {' '.join(r['cmd'])}\n{r['err']}", file=sys.stderr)
                return 1
            # the stock program and its timing-only cycles: the baseline of the strictly slower variants
            program = os.path.join(tmp.name, f"stock_{os.path.basename(t)}_{op[0]}.npu")
            c = compile_tessel(args, t, op, program)
            s = sim_tessel(args, program, t, {}, report + ".sim.json")
            sim_rep = read_report(s["report"])
            if c["rc"] != 0 or s["rc"] != 0 or not sim_rep:
                print(f"description_fuzz: the stock program does not compile and simulate: {' '.join(c['cmd'])}\n{c['err']}{s['err']}",
                      file=sys.stderr)
                return 1
            rep["program"], rep["sim_cycles"] = program, sim_rep["total_cycles"]
            stock[(t, op[0])] = rep

    started = time.monotonic()
    draws = []
    n = 0
    while True:
        if args.count is not None and n >= args.count:
            break
        if args.seconds is not None and time.monotonic() - started >= args.seconds:
            break
        batch = []
        for _ in range(args.jobs):
            if args.count is not None and n >= args.count:
                break
            t = rng.choice(TARGETS)
            batch.append((n, t, draw(rng, t, keys[t])))
            n += 1
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(lambda b: evaluate(args, b[0], b[1], b[2], keys[b[1]], stock, tmp.name), batch))
        for rec in results:
            draws.append(rec)
            bad = rec["verdict"] not in ("verified", "refused")
            if bad or args.verbose:
                sets = ",".join(f"{k}={v}" for k, v in rec["set"].items())
                print(f"[{rec['draw']}] {os.path.basename(rec['target'])} --set {sets}: {rec['verdict']}", flush=True)
                for x in rec["runs"]:
                    if x["verdict"] not in ("verified",) or args.verbose:
                        print(f"    {x['operator']}: {x['verdict']} {x['detail']}")
                        if x["verdict"] not in ("verified", "refused"):
                            print(f"    reproduce: {x['command']}")

    counts = {}
    for rec in draws:
        counts[rec["verdict"]] = counts.get(rec["verdict"], 0) + 1
    bugs = sum(v for k, v in counts.items() if k not in ("verified", "refused"))
    elapsed = time.monotonic() - started
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"description_fuzz: {len(draws)} variants in {elapsed:.1f} s (seed {seed}): {summary or 'none'}; "
          f"{bugs} bug(s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "variants": len(draws), "seconds": round(elapsed, 1), "counts": counts,
                       "draws": draws}, f, indent=1)
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
