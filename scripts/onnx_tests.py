#!/usr/bin/python3
"""ONNX's own backend tests (Debian's libonnx-testdata) through tessel import + tessel run.

  scripts/onnx_tests.py --tessel build/compiler/cli/tessel --targets c,davinci-910
      [--suites node,pytorch-converted,pytorch-operator,simple] [--filter REGEX] [--jobs N]
      [--timeout S] [--expect-tol ABS,REL] [--keep DIR] --json OUT.json [--markdown TABLE.md]
      [--baseline EXPECTED.json]

Each test directory holds model.onnx and test_data_set_0/{input,output}_K.pb. A test is imported
once, every tensor graph input given with --value (the importer folds the ones an operator needs
as constants, the others stay def inputs), then run on each target:

  tessel import model.onnx -o W/NAME.tsl --value X=test_data_set_0/input_0.pb ...
  tessel run W/NAME.tsl --target T --input-dir W/NAME_weights --input TSL=input_K.pb ...
      --expect TSL=output_K.pb ... --report W/NAME.T.json

(the manifest W/NAME.json says which graph inputs stayed def inputs, by input_index, and which
TSL name each output has). Classified, per test and target:
  pass         run exit 0: the target agrees with the reference interpreter and every output
               with ONNX's expected tensor (tessel run's --expect-tol, default 1e-4 + 1e-3 |e|)
  fail         wrong values: an output differs from ONNX's (the worst element is named), or the
               target differs from the interpreter
  unsupported  exit 1 with "unsupported:" (import: "node 'N' (Op): unsupported: REASON"; the
               operator and the reason are kept)
  error        any other exit 1 (import or compile error that is not "unsupported"), or exit 2
  crash        exit 3 (a tessel bug) or a signal
  timeout      a command past --timeout
  no GPU       a GPU target (sm*) on a machine without a GPU (run exit 2): not a failure
An import outcome other than success applies to every target.

Prints a table by operator (each test's operator: the op type its name is about, else its only
or first non-plumbing op type, from the model's nodes via python3-onnx) and totals per suite and
target; --json holds every test's result, --markdown writes the table. With --baseline
EXPECTED.json ({"suite/test": {"target": "pass", ...}}) the exit status is 1 when a test the
baseline has passing no longer passes (the ctest cli.onnx_runner_sample); otherwise 0 unless a
test crashed. Deterministic: tests run in name order, results are sorted; no network.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = "/usr/share/libonnx-testdata/data"
DEFAULT_SUITES = ("node", "pytorch-converted", "pytorch-operator", "simple")
OUTCOMES = ("pass", "fail", "unsupported", "error", "crash", "timeout", "no GPU")
# op types that move or reshape data around the operator a converted test is about
PLUMBING = {"Constant", "Identity", "Reshape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat",
            "Cast", "Transpose", "Flatten", "Slice", "ConstantOfShape", "Expand", "Range", "Size"}
UNSUPPORTED_RE = re.compile(r"node '([^']*)' \(([A-Za-z0-9_.]+)\): unsupported: (.*)")


def target_path(target):
    if target == "c":
        return "c"
    if target.endswith(".yaml"):
        return target
    return os.path.join(SOURCE_DIR, "isa", "targets", target + ".yaml")


def is_gpu_target(target):
    return os.path.basename(target).startswith("sm")


def snake(op_type):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", op_type).lower()


def model_facts(model_path):
    """(op types in node order incl. subgraphs, [(graph input name, is tensor)] without initializers)."""
    import onnx
    model = onnx.load(model_path, load_external_data=False)
    ops = []

    def walk(graph):
        for node in graph.node:
            ops.append(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)
    walk(model.graph)
    initializers = {i.name for i in model.graph.initializer}
    inputs = [(i.name, i.type.HasField("tensor_type")) for i in model.graph.input
              if i.name not in initializers]
    return ops, inputs


def primary_operator(test_name, ops):
    """The op type a test is about: the longest op type its name starts with, else its only op
    type, else the first that is not plumbing."""
    if not ops:
        return "(no nodes)"
    stem = test_name[len("test_"):].lower() if test_name.startswith("test_") else test_name.lower()
    distinct = sorted(set(ops))
    named = [op for op in distinct
             if stem == snake(op) or stem.startswith(snake(op) + "_")
             or stem == op.lower() or stem.startswith(op.lower() + "_")]
    if named:
        return max(named, key=len)
    if len(distinct) == 1:
        return distinct[0]
    heavy = [op for op in ops if op not in PLUMBING]
    return heavy[0] if heavy else ops[0]


def execute(cmd, timeout):
    """(exit status or None on timeout, combined output, seconds)."""
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, text=True, errors="replace")
        return proc.returncode, proc.stdout, time.monotonic() - start
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out, time.monotonic() - start


def last_line(text, pattern=None):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    if pattern:
        hits = [l for l in lines if pattern in l]
        if hits:
            return hits[0]
    return lines[-1] if lines else ""


def classify_import(rc, out):
    """None when the import succeeded, else the outcome dict every target takes."""
    if rc == 0:
        return None
    if rc is None:
        return {"outcome": "timeout", "stage": "import", "reason": "tessel import past the timeout"}
    if rc < 0 or rc == 3:
        return {"outcome": "crash", "stage": "import",
                "reason": f"tessel import exit {rc}: {last_line(out)}"}
    m = UNSUPPORTED_RE.search(out)
    if rc == 1 and m:
        return {"outcome": "unsupported", "stage": "import", "node": m.group(1),
                "operator": m.group(2), "reason": m.group(3).strip()}
    if rc == 1 and "unsupported:" in out:
        line = last_line(out, "unsupported:")
        return {"outcome": "unsupported", "stage": "import",
                "reason": line.split("unsupported:", 1)[1].strip()}
    return {"outcome": "error", "stage": "import", "reason": f"exit {rc}: {last_line(out)}"}


def read_report(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def classify_run(target, rc, out, report):
    if rc is None:
        return {"outcome": "timeout", "stage": "run", "reason": "tessel run past the timeout"}
    if rc < 0 or rc == 3:
        return {"outcome": "crash", "stage": "run", "reason": f"tessel run exit {rc}: {last_line(out)}"}
    if rc == 2 and is_gpu_target(target) and re.search(r"GPU|CUDA|device", out):
        return {"outcome": "no GPU", "stage": "run", "reason": last_line(out)}
    result = {}
    if report:
        result["max_abs_err"] = report.get("max_abs_err")
        result["verified"] = report.get("verified")
        expects = report.get("expect") or []
        if expects:
            result["expect_max_abs_err"] = max((e.get("max_abs_err") or 0.0) for e in expects)
        for key in ("cycles", "compile_ms"):
            if key in report:
                result[key] = report[key]
    if rc == 0:
        result["outcome"] = "pass"
        return result
    bad_expect = [e for e in (report or {}).get("expect") or [] if not e.get("ok")]
    if rc == 1 and bad_expect:
        worst = max(bad_expect, key=lambda e: e.get("max_abs_err") or 0.0)
        result.update(outcome="fail", stage="expect",
                      reason=f"{worst.get('mismatches')} of {worst.get('elements')} differ from ONNX's; "
                             f"worst {worst.get('worst')}")
        return result
    if rc == 1 and report and report.get("verified") is False:
        result.update(outcome="fail", stage="interpreter",
                      reason="target differs from the interpreter: "
                             + (report.get("first_mismatch") or last_line(out)))
        return result
    if rc == 1 and re.search(r"MISMATCH|differ from|mismatch", out):
        result.update(outcome="fail", stage="run", reason=last_line(out, "differ"))
        return result
    if rc == 1 and "unsupported:" in out:
        line = last_line(out, "unsupported:")
        result.update(outcome="unsupported", stage="compile",
                      reason=line.split("unsupported:", 1)[1].strip())
        return result
    result.update(outcome="error", stage="run", reason=f"exit {rc}: {last_line(out, 'tessel run:')}")
    return result


def run_test(test, args, work_root):
    suite, name, directory = test["suite"], test["name"], test["dir"]
    work = os.path.join(work_root, suite, name)
    os.makedirs(work, exist_ok=True)
    data = os.path.join(directory, "test_data_set_0")
    model = os.path.join(directory, "model.onnx")
    record = {"suite": suite, "test": name, "targets": {}}
    try:
        ops, graph_inputs = model_facts(model)
    except Exception as e:  # a model python3-onnx cannot read: the importer still gets its say
        ops, graph_inputs = [], []
        record["model_note"] = f"python3-onnx: {e}"
    record["ops"] = sorted(set(ops))
    record["operator"] = primary_operator(name, ops)
    tsl = os.path.join(work, name + ".tsl")
    cmd = [args.tessel, "import", model, "-o", tsl]
    for k, (input_name, is_tensor) in enumerate(graph_inputs):
        pb = os.path.join(data, f"input_{k}.pb")
        if is_tensor and os.path.exists(pb):
            cmd += ["--value", f"{input_name}={pb}"]
    rc, out, seconds = execute(cmd, args.timeout)
    record["import_s"] = round(seconds, 3)
    failed = classify_import(rc, out)
    if failed is None:
        try:
            with open(os.path.join(work, name + ".json")) as f:
                manifest = json.load(f)
        except (OSError, ValueError) as e:
            failed = {"outcome": "error", "stage": "import", "reason": f"no manifest: {e}"}
    if failed is not None:
        record["import"] = failed
        for target in args.targets:
            record["targets"][target] = dict(failed)
        return record
    record["import"] = {"outcome": "ok"}
    weights = os.path.join(work, manifest.get("initializers_dir") or (name + "_weights"))
    base = [tsl, "--input-dir", weights]
    for entry in manifest.get("inputs", []):
        if "input_index" in entry and "file" not in entry:
            base += ["--input", f"{entry['tsl']}={os.path.join(data, 'input_%d.pb' % entry['input_index'])}"]
    for entry in manifest.get("outputs", []):
        base += ["--expect", f"{entry['tsl']}={os.path.join(data, 'output_%d.pb' % entry['output_index'])}"]
    if args.expect_tol:
        base += ["--expect-tol", args.expect_tol]
    for target in args.targets:
        report_path = os.path.join(work, f"{name}.{os.path.basename(target)}.report.json")
        if os.path.exists(report_path):
            os.remove(report_path)
        cmd = [args.tessel, "run"] + base[:1] + ["--target", target_path(target)] + base[1:] + \
              ["--report", report_path]
        rc, out, seconds = execute(cmd, args.timeout)
        result = classify_run(target, rc, out, read_report(report_path))
        result["seconds"] = round(seconds, 3)
        record["targets"][target] = result
    return record


def discover(suites, pattern):
    tests = []
    for suite in suites:
        root = os.path.join(DATA_DIR, suite)
        if not os.path.isdir(root):
            sys.exit(f"onnx_tests.py: no suite {root} (install libonnx-testdata: scripts/setup.sh)")
        for name in sorted(os.listdir(root)):
            directory = os.path.join(root, name)
            if not os.path.exists(os.path.join(directory, "model.onnx")) or \
               not os.path.isdir(os.path.join(directory, "test_data_set_0")):
                continue
            if pattern and not re.search(pattern, name) and not re.search(pattern, f"{suite}/{name}"):
                continue
            tests.append({"suite": suite, "name": name, "dir": directory})
    return tests


def cell(counts, total):
    extra = " ".join(f"{short}{counts[o]}" for o, short in
                     (("fail", "F"), ("unsupported", "U"), ("error", "E"), ("crash", "C"),
                      ("timeout", "T"), ("no GPU", "G")) if counts[o])
    return f"{counts['pass']}/{total}" + (f" ({extra})" if extra else "")


def note_for(records, targets):
    """The first non-passing reason of a row, for the table's last column."""
    for r in records:
        for t in targets:
            res = r["targets"][t]
            if res["outcome"] not in ("pass", "no GPU"):
                reason = res.get("reason", "")
                if len(reason) > 90:
                    reason = reason[:87] + "..."
                return f"{r['test']} ({t}): {res['outcome']}: {reason}".replace("|", "\\|")
    return ""


def tables(records, targets):
    by_op = collections.defaultdict(list)
    for r in records:
        by_op[r["operator"]].append(r)
    header = ["operator", "tests"] + targets + ["first non-passing"]
    rows = []
    for op in sorted(by_op, key=str.lower):
        rs = by_op[op]
        cells = [op, str(len(rs))]
        for t in targets:
            counts = collections.Counter(r["targets"][t]["outcome"] for r in rs)
            cells.append(cell(counts, len(rs)))
        cells.append(note_for(rs, targets))
        rows.append(cells)
    totals = []
    for suite in sorted({r["suite"] for r in records}):
        rs = [r for r in records if r["suite"] == suite]
        for t in targets:
            counts = collections.Counter(r["targets"][t]["outcome"] for r in rs)
            totals.append([suite, t, str(len(rs))] + [str(counts[o]) for o in OUTCOMES])
    return header, rows, totals


def markdown(header, rows, totals):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "| suite | target | tests | " + " | ".join(OUTCOMES) + " |",
              "|" + "---|" * (3 + len(OUTCOMES))]
    lines += ["| " + " | ".join(t) + " |" for t in totals]
    return "\n".join(lines) + "\n"


def print_text(header, rows, totals):
    cut = [r[:-1] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(header[:-1], *cut)]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    print(fmt.format(*header[:-1]))
    for r in cut:
        print(fmt.format(*r))
    print()
    head = ["suite", "target", "tests"] + list(OUTCOMES)
    widths = [max(len(x) for x in col) for col in zip(head, *totals)]
    fmt = "  ".join("{:<%d}" % w for w in widths)
    print(fmt.format(*head))
    for t in totals:
        print(fmt.format(*t))


def regressions(records, baseline, targets):
    lost = []
    seen = {f"{r['suite']}/{r['test']}": r for r in records}
    for key, expected in sorted(baseline.items()):
        if key.startswith("_"):
            continue
        for target, outcome in sorted(expected.items()):
            if target not in targets or outcome != "pass":
                continue
            r = seen.get(key)
            got = r["targets"][target] if r else {"outcome": "missing", "reason": "not run"}
            if got["outcome"] != "pass":
                lost.append(f"{key} on {target}: was pass, now {got['outcome']}: {got.get('reason', '')}")
    return lost


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tessel", default=os.path.join(SOURCE_DIR, "build", "compiler", "cli", "tessel"))
    p.add_argument("--targets", default="c", help="comma list: c, davinci-910, davinci-310, sm90, sm75 or a .yaml")
    p.add_argument("--suites", default=",".join(DEFAULT_SUITES))
    p.add_argument("--filter", help="regular expression on the test name (or suite/name)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=120, help="seconds per tessel command")
    p.add_argument("--expect-tol", help="ABS,REL passed to tessel run (default: tessel's 1e-4,1e-3)")
    p.add_argument("--keep", help="directory for the imported programs and reports (default: a temporary one)")
    p.add_argument("--json", required=True)
    p.add_argument("--markdown")
    p.add_argument("--baseline", help="expected outcomes; exit 1 when a test passing there does not pass")
    p.add_argument("--quiet", action="store_true", help="no per-test progress lines")
    args = p.parse_args()
    args.targets = [t for t in args.targets.split(",") if t]
    if not os.access(args.tessel, os.X_OK):
        sys.exit(f"onnx_tests.py: {args.tessel} is not an executable tessel")
    baseline = None
    if args.baseline:
        with open(args.baseline) as f:
            baseline = json.load(f)
    tests = discover([s for s in args.suites.split(",") if s], args.filter)
    work_root = args.keep or tempfile.mkdtemp(prefix="tessel_onnx_")
    start = time.monotonic()
    records = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_test, t, args, work_root): t for t in tests}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            r = future.result()
            records.append(r)
            if not args.quiet:
                outcomes = " ".join(f"{t}={r['targets'][t]['outcome']}" for t in args.targets)
                print(f"[{n}/{len(tests)}] {r['suite']}/{r['test']}: {outcomes}", file=sys.stderr, flush=True)
    records.sort(key=lambda r: (r["suite"], r["test"]))
    if not args.keep:
        shutil.rmtree(work_root, ignore_errors=True)
    header, rows, totals = tables(records, args.targets)
    print_text(header, rows, totals)
    summary = {f"{suite}/{t}": dict(zip(("tests",) + OUTCOMES, map(int, counts)))
               for suite, t, *counts in totals}
    with open(args.json, "w") as f:
        json.dump({"tessel": args.tessel, "targets": args.targets, "suites": args.suites.split(","),
                   "filter": args.filter, "expect_tol": args.expect_tol or "1e-4,1e-3",
                   "totals": summary, "tests": records}, f, indent=1, sort_keys=True)
        f.write("\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(header, rows, totals))
    print(f"\n{len(records)} tests on {','.join(args.targets)} in {time.monotonic() - start:.0f} s")
    status = 0
    if any(r["targets"][t]["outcome"] == "crash" for r in records for t in args.targets):
        status = 1
    if baseline is not None:
        lost = regressions(records, baseline, args.targets)
        for line in lost:
            print("REGRESSION " + line)
        status = 1 if lost else 0
        print(f"baseline {args.baseline}: {len(lost)} regressions")
    return status


if __name__ == "__main__":
    sys.exit(main())
