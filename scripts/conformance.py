#!/usr/bin/python3
"""tessel's conformance suite: generated operator instances run on every target and classified.

  scripts/conformance.py --tessel build/compiler/tessel [--targets c,davinci-910,davinci-310,sm90,sm75]
      [--sync naive,pruned] [--sample N | --all] [--filter REGEX] [--jobs J] [--timeout S]
      [--json out.json] [--keep DIR] [--seed S] [--quasi-affine] [--strict] [--check-parallel | --nvrtc]

The instances come from scripts/conformance_gen.py (fixed seed: the same list every time). Each is
written to a temporary directory (or --keep DIR) and run as

  tessel run INSTANCE.tsl --target c --shape ...
  tessel run INSTANCE.tsl --target isa/targets/davinci-910.yaml --shape ... --sync naive|pruned
  tessel run INSTANCE.tsl --target isa/targets/sm90.yaml --shape ...      (GPU descriptions: one
                                                                           column, on the GPU at hand)

or, with --check-parallel (no GPU needed), as

  tessel compile INSTANCE.tsl --target T --shape ... --check-parallel

which executes the kernel IR's control flow and checks every loop the polyhedral core marked
parallel for two iterations touching one element with a write (compiler/kernel/check_parallel.h);
such a column passes when it reports 0 conflicts; or, with --nvrtc (GPU descriptions, no GPU
needed), as `tessel compile ... -o K.cu` and NVRTC on K.cu for the description's architecture
(sm_90a where the kernel uses wgmma): it passes when NVRTC accepts the source. Classified:
  pass    exit 0, output verified against the reference interpreter, no race, no deadlock
          (`tessel run`'s bounds: f16 2e-3; bf16 8e-3; f32 1e-5, or max(1e-5, 8·sqrt(n)·2^-24) for a function
          with an f32 sum of n terms, which a vector unit adds as a tree while the interpreter adds
          in order — emit_c::reassociated_sum_tolerance, compiler/emit_npu/README.md)
  reject  exit 1 with a backend's "does not map" / unsupported message (its first line is kept)
  fail    exit 1 with a mismatch, a race or deadlock reported by the simulator (at any exit
          status), or a simulator fault (an instruction outside a buffer)
  error   anything else: another exit status (3 = a tessel bug), a crash, a timeout, or a
          front-end error in the instance itself (a generator bug)

Prints a table (rows: families; columns per target: pass/reject/fail/error) and every non-passing
instance with its reason, and writes --json. Exit status 0 when no instance failed or errored
(rejections are allowed: the NPU backend's vector lowering is still being generalised), 1
otherwise; --strict also fails on rejections. --sample N takes N instances spread over the
families (never the large shape classes), the same N every time.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance_gen  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTCOMES = ("pass", "reject", "fail", "error")
SAMPLE_SEED = 4


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--tessel", required=True, help="the tessel binary")
    ap.add_argument("--targets", default="c,davinci-910,davinci-310",
                    help="comma-separated: c and NPU description names under isa/targets/ (or .yaml paths)")
    ap.add_argument("--sync", default="naive,pruned", help="sync modes for the NPU targets, comma-separated")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--sample", type=int, metavar="N", help="N instances spread over the families (no large ones)")
    which.add_argument("--all", action="store_true", help="every instance (the default)")
    ap.add_argument("--filter", metavar="REGEX", help="only instances whose name matches (re.search)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="runs in parallel")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per run before it counts as an error")
    ap.add_argument("--json", metavar="OUT", help="write every result as JSON")
    ap.add_argument("--keep", metavar="DIR", help="write the instances here instead of a temporary directory")
    ap.add_argument("--seed", type=int, default=conformance_gen.DEFAULT_SEED, help="the generator's seed")
    ap.add_argument("--quasi-affine", action="store_true", help="pooling with '/' in range bounds")
    ap.add_argument("--strict", action="store_true", help="exit 1 on rejections too")
    ap.add_argument("--list", action="store_true", help="list the selected instances and exit")
    ap.add_argument("--check-parallel", action="store_true",
                    help="compile only and check the parallel loops of the kernel IR (tessel compile --check-parallel)")
    ap.add_argument("--nvrtc", action="store_true",
                    help="GPU descriptions, no GPU needed: write each instance's CUDA (tessel compile -o) and compile it "
                    "with NVRTC for the description's architecture (sm_90a where the kernel needs it), as tessel run "
                    "would; a source NVRTC rejects is a tessel bug (error)")
    return ap.parse_args(argv)


# --- selection --------------------------------------------------------------------------------

def sample(instances, n):
    """n instances, round-robin over the families in a seeded order, never a large one."""
    rng = random.Random(SAMPLE_SEED)
    by_family = collections.OrderedDict()
    for inst in instances:
        if not inst.large:
            by_family.setdefault(inst.family, []).append(inst)
    for group in by_family.values():
        rng.shuffle(group)
    families = list(by_family)
    rng.shuffle(families)
    picked = []
    while len(picked) < n and any(by_family.values()):
        for fam in families:
            if by_family[fam] and len(picked) < n:
                picked.append(by_family[fam].pop())
    order = {inst.name: i for i, inst in enumerate(instances)}
    return sorted(picked, key=lambda i: order[i.name])


def select(instances, args):
    if args.filter:
        instances = [i for i in instances if re.search(args.filter, i.name)]
    if args.sample is not None:
        instances = sample(instances, args.sample)
    return instances


# --- targets ----------------------------------------------------------------------------------

def is_gpu_description(path):
    with open(path) as f:
        return any(re.match(r"^kind:\s*gpu\b", line) for line in f)


def columns(args):
    """(column name, --target value, --sync value or None) for every target x sync mode (NPU
    descriptions; a GPU description or c is one column; --check-parallel: one column per target)."""
    cols = []
    syncs = [s for s in args.sync.split(",") if s]
    for t in [t for t in args.targets.split(",") if t]:
        if t == "c":
            cols.append(("c/check" if args.check_parallel else "c", "c", None))
            continue
        path = t if t.endswith(".yaml") else os.path.join(SOURCE_DIR, "isa", "targets", t + ".yaml")
        if not os.path.exists(path):
            sys.exit(f"conformance.py: --targets: no description {path}")
        name = os.path.basename(path)[:-len(".yaml")]
        if args.check_parallel:
            cols.append((f"{name}/check", path, None))
        elif args.nvrtc:
            if not is_gpu_description(path):
                sys.exit(f"conformance.py: --nvrtc: {t} is not a GPU description")
            cols.append((f"{name}/nvrtc", path, None))
        elif is_gpu_description(path):
            cols.append((name, path, None))
        else:
            for s in syncs:
                cols.append((f"{name}/{s}", path, s))
    return cols


# --- running and classifying ------------------------------------------------------------------

def first_error_line(stderr):
    for line in stderr.splitlines():
        line = line.strip()
        if line:
            return re.sub(r"^tessel: (error: )?", "", line)
    return ""


def classify(rc, stdout, stderr, tsl_path):
    """(outcome, reason) of one `tessel run`."""
    races = re.search(r"^\s*RACES\s+(.*)$", stdout, re.M)
    deadlock = re.search(r"^\s*DEADLOCK\s+(.*)$", stdout, re.M)
    if races:
        return "fail", "race: " + races.group(1).strip()
    if deadlock:
        return "fail", "deadlock: " + deadlock.group(1).strip()
    if rc == 0:
        if re.search(r": verified,", stdout):
            return "pass", ""
        checked = re.search(r"^parallel loops: .* (\d+) conflicts$", stdout, re.M)
        if checked:
            return ("pass", "") if checked.group(1) == "0" else ("fail", "parallel loop conflict")
        return "error", "exit 0 without 'verified'"
    if rc == 1:
        mismatch = re.search(r"^\s*first mismatch: (.*)$", stdout, re.M)
        if "MISMATCH" in stdout:
            return "fail", "mismatch: " + (mismatch.group(1).strip() if mismatch else "")
        msg = first_error_line(stderr)
        if "deadlock" in msg.lower():
            return "fail", "deadlock: " + msg
        if os.path.basename(tsl_path) in msg or msg.startswith("--shape"):
            return "error", "invalid instance: " + msg
        if re.search(r" on core \d+: ", msg):
            return "fail", "simulator fault: " + msg
        return "reject", msg
    if rc == 3 and "a loop marked parallel carries a dependence" in stderr:
        return "fail", "parallel loop conflict: " + first_error_line(stderr)
    if rc < 0:
        return "error", f"killed by signal {-rc}: " + first_error_line(stderr)
    return "error", f"exit {rc}: " + first_error_line(stderr)


def nvrtc_one(tessel, inst, tsl_path, target, timeout):
    """(outcome, reason, rc) of `tessel compile -o K.cu` then NVRTC on K.cu (scripts/program_fuzz.py's
    ctypes compile, in a child process)."""
    cu = tsl_path[:-len(".tsl")] + "." + os.path.basename(target)[:-len(".yaml")] + ".cu"
    p = subprocess.run([tessel, "compile", tsl_path, "--target", target, "--shape", inst.shape_arg(), "-o", cu],
                       capture_output=True, text=True, timeout=timeout, errors="replace")
    if p.returncode != 0:
        outcome, reason = classify(p.returncode, p.stdout, p.stderr, tsl_path)
        return outcome, reason, p.returncode
    with open(cu) as f:
        source = f.read()
    fuzz = os.path.join(SOURCE_DIR, "scripts", "program_fuzz.py")
    sys.path.insert(0, os.path.dirname(fuzz))
    import program_fuzz
    arch = program_fuzz.gpu_arch(target, source)
    q = subprocess.run([sys.executable, fuzz, "--nvrtc-compile", cu, "--arch", arch], capture_output=True, text=True,
                       timeout=timeout, errors="replace")
    if q.returncode == 0:
        return "pass", "", 0
    if q.returncode == 2:
        return "reject", "NVRTC not found", 2
    first = next((l.strip() for l in q.stdout.splitlines() if "error" in l), q.stdout.strip()[:200])
    return "error", f"NVRTC ({arch}) rejects the emitted CUDA: {first}", 3


def run_one(tessel, inst, tsl_path, column, timeout):
    name, target, sync = column
    if name.endswith("/nvrtc"):
        start = time.monotonic()
        try:
            outcome, reason, rc = nvrtc_one(tessel, inst, tsl_path, target, timeout)
        except subprocess.TimeoutExpired:
            outcome, reason, rc = "error", f"timeout after {timeout:g} s", None
        return {"instance": inst.name, "family": inst.family, "shape_class": inst.shape_class, "dtype": inst.dtype,
                "column": name, "outcome": outcome, "reason": reason, "exit_status": rc,
                "seconds": round(time.monotonic() - start, 3),
                "command": f"tessel compile {inst.name}.tsl --target {os.path.basename(target)} -o K.cu; NVRTC"}
    if name.endswith("/check"):
        cmd = [tessel, "compile", tsl_path, "--target", target, "--shape", inst.shape_arg(), "--check-parallel"]
    else:
        cmd = [tessel, "run", tsl_path, "--target", target, "--shape", inst.shape_arg()]
        if target != "c" and not sync:  # a GPU description: verify, no timing harness
            cmd += ["--no-timing"]
    if sync:
        cmd += ["--sync", sync]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
        outcome, reason = classify(p.returncode, p.stdout, p.stderr, tsl_path)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        outcome, reason, rc = "error", f"timeout after {timeout:g} s", None
    seconds = time.monotonic() - start
    shown = [os.path.relpath(c, SOURCE_DIR) if c.startswith(SOURCE_DIR) else c for c in cmd]
    return {"instance": inst.name, "family": inst.family, "shape_class": inst.shape_class,
            "dtype": inst.dtype, "column": name, "outcome": outcome, "reason": reason,
            "exit_status": rc, "seconds": round(seconds, 3), "command": " ".join(shown)}


def run_all(args, instances, cols, inst_dir):
    jobs = [(inst, col) for inst in instances for col in cols]
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, args.tessel, inst, os.path.join(inst_dir, inst.name + ".tsl"), col,
                               args.timeout) for inst, col in jobs]
        for done, f in enumerate(concurrent.futures.as_completed(futures), 1):
            results.append(f.result())
            if sys.stderr.isatty():
                print(f"\r{done}/{len(jobs)} runs", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    order = {(inst.name, col[0]): i for i, (inst, col) in enumerate(jobs)}
    return sorted(results, key=lambda r: order[(r["instance"], r["column"])])


# --- reporting --------------------------------------------------------------------------------

def counts(results):
    """{(family, column): Counter(outcome)} plus per-column totals under family 'total'."""
    table = collections.defaultdict(collections.Counter)
    for r in results:
        table[(r["family"], r["column"])][r["outcome"]] += 1
        table[("total", r["column"])][r["outcome"]] += 1
    return table


def print_table(results, instances, cols):
    table = counts(results)
    families = list(dict.fromkeys(i.family for i in instances)) + ["total"]
    n_per_family = collections.Counter(i.family for i in instances)
    n_per_family["total"] = len(instances)
    cell = lambda c: "/".join(str(c[o]) for o in OUTCOMES)  # noqa: E731
    width = max(len("pass/rej/fail/err"), *(len(cell(table[(f, c[0])])) for f in families for c in cols))
    fam_w = max(len(f) for f in families) + 6
    print(f"{'family (n)':<{fam_w}}" + "".join(f"  {c[0]:>{width}}" for c in cols))
    print(f"{'':<{fam_w}}" + "".join(f"  {'pass/rej/fail/err':>{width}}" for _ in cols))
    for f in families:
        if f == "total":
            print("-" * (fam_w + (width + 2) * len(cols)))
        label = f"{f} ({n_per_family[f]})"
        print(f"{label:<{fam_w}}" + "".join(f"  {cell(table[(f, c[0])]):>{width}}" for c in cols))


def print_non_passing(results, cols):
    """One line per instance and reason; the columns it holds for are listed ('all' for every one)."""
    bad = [r for r in results if r["outcome"] != "pass"]
    if not bad:
        print("\nevery run passed")
        return
    groups = collections.OrderedDict()
    for r in bad:
        groups.setdefault((r["outcome"], r["instance"], r["reason"]), []).append(r["column"])
    print("\nnot passing (instance, target columns, first line of the reason):")
    for outcome in ("error", "fail", "reject"):
        rows = [(key, where) for key, where in groups.items() if key[0] == outcome]
        if not rows:
            continue
        runs = sum(len(where) for _, where in rows)
        print(f"  {outcome} ({runs} runs):")
        for (_, instance, reason), where in rows:
            npu = [c[0] for c in cols if c[1] != "c"]
            shown = "all" if len(where) == len(cols) else "all NPU" if where == npu else ",".join(where)
            print(f"    {instance:<40} {shown:<20} {reason}")


def write_json(path, args, instances, cols, results):
    table = counts(results)
    summary = {f"{fam}|{col}": dict(c) for (fam, col), c in table.items()}
    doc = {"tessel": args.tessel, "seed": args.seed, "quasi_affine": args.quasi_affine,
           "columns": [c[0] for c in cols], "instances": len(instances),
           "totals": {c[0]: {o: table[("total", c[0])][o] for o in OUTCOMES} for c in cols},
           "by_family": summary,
           "definitions": {i.name: {"def": i.def_name, "shape": i.shape, "family": i.family,
                                    "shape_class": i.shape_class, "dtype": i.dtype, "large": i.large,
                                    "text": i.text} for i in instances},
           "results": results}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    instances = select(conformance_gen.generate(args.seed, args.quasi_affine), args)
    if args.list:
        for i in instances:
            print(f"{i.name:<44} --shape {i.shape_arg()}")
        return 0
    if not instances:
        sys.exit("conformance.py: no instance selected")
    if not os.access(args.tessel, os.X_OK):
        sys.exit(f"conformance.py: --tessel {args.tessel}: not an executable")
    cols = columns(args)
    with tempfile.TemporaryDirectory(prefix="tessel-conformance-") as tmp:
        inst_dir = args.keep or tmp
        conformance_gen.write(instances, inst_dir)
        start = time.monotonic()
        results = run_all(args, instances, cols, inst_dir)
        elapsed = time.monotonic() - start
    print(f"tessel conformance: {len(instances)} instances x {len(cols)} target columns = {len(results)} runs "
          f"in {elapsed:.0f} s ({args.jobs} jobs)\n")
    print_table(results, instances, cols)
    print_non_passing(results, cols)
    if args.json:
        write_json(args.json, args, instances, cols, results)
    outcomes = collections.Counter(r["outcome"] for r in results)
    failing = outcomes["fail"] + outcomes["error"] + (outcomes["reject"] if args.strict else 0)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
