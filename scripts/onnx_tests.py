#!/usr/bin/python3
"""ONNX's own backend tests (Debian's libonnx-testdata) through tessel import + tessel run.

  scripts/onnx_tests.py --tessel build/compiler/cli/tessel --targets c,davinci-910
      [--suites node,pytorch-converted,pytorch-operator,simple] [--filter REGEX] [--jobs N]
      [--timeout S] [--expect-tol ABS,REL] [--keep DIR] --json OUT.json [--markdown TABLE.md]
      [--baseline EXPECTED.json [--only-baseline]]

Each test directory holds model.onnx and test_data_set_0/{input,output}_K.pb. A test is imported
once, every tensor graph input given with --value (the importer folds the ones an operator needs
as constants, the others stay def inputs), then run on each target:

  tessel import model.onnx -o W/NAME.tsl --value X=test_data_set_0/input_0.pb ...
  tessel run W/NAME.tsl --target T --input-dir W/NAME_weights --input TSL=input_K.pb ...
      --expect TSL=output_K.pb ... --report W/NAME.T.json

(the manifest W/NAME.json says which graph inputs stayed def inputs, by input_index, and which
TSL name each output has). A sequence or optional input or output (a SequenceProto / OptionalProto
file) is held by the importer as its elements: manifest entries with "element" J (a sequence's
position) and "optional": true name one element each, which this script writes as a TensorProto
of its own (W/input_K.J.pb, W/output_K.J.pb) for --input / --expect; the manifest's
"structured_outputs" give each such output's kind, presence and length, checked against the
expected file first (a mismatch is a fail). Classified, per test and target:
  pass         run exit 0: the target agrees with the reference interpreter and every output
               with ONNX's expected tensor (tessel run's --expect-tol, default 1e-4 + 1e-3 |e|)
  fail         wrong values: an output differs from ONNX's (the worst element is named), or the
               target differs from the interpreter
  documented   a documented expected difference (DOCUMENTED below, its reason printed): the
               outputs differ from ONNX's data only where that data follows another rule than the
               one tessel documents, checked each time: ONNX's data is checked to follow its rule
               element by element, and the run is repeated with --expect on data made by tessel's
               rule, which must pass (the target still agrees with the interpreter). Not a pass.
  unsupported  exit 1 with "unsupported:" (import: "node 'N' (Op): unsupported: REASON"; the
               operator and the reason are kept), or a run whose target refuses in so many words
               ("is not supported by", "has no mapping for", "does not map": bf16 on c, u8 on the
               NPU's vector unit); the JSON marks those "stage": "target"
  error        any other exit 1 (import or compile error that is not "unsupported"), or exit 2
  crash        exit 3 (a tessel bug) or a signal
  timeout      a command past --timeout
  no GPU       a GPU target (sm*) on a machine without a GPU (run exit 2): not a failure
An import outcome other than success applies to every target.

Prints a table by operator (each test's operator: the op type its name is about, else its only
or first non-plumbing op type, from the model's nodes via python3-onnx) and totals per suite and
target; --json holds every test's result, --markdown writes the table. With --baseline
EXPECTED.json ({"suite/test": {"target": "pass", ...}}) the exit status is 1 when a test the
baseline has passing no longer passes, or one it has documented is no longer a documented difference
(the ctests cli.onnx_runner_sample and cli.onnx_runner_documented; --only-baseline runs just the tests it names); otherwise 0 unless a test crashed. Deterministic: tests run in name order, results are sorted; no network. Every 25 tests
--json holds the tests finished so far (marked "partial"), so a run cut short keeps its records.
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
OUTCOMES = ("pass", "documented", "fail", "unsupported", "error", "crash", "timeout", "no GPU")
# op types that move or reshape data around the operator a converted test is about
PLUMBING = {"Constant", "Identity", "Reshape", "Shape", "Gather", "Unsqueeze", "Squeeze", "Concat",
            "Cast", "Transpose", "Flatten", "Slice", "ConstantOfShape", "Expand", "Range", "Size"}
# issue 34's list of operators the importer must translate (the goals count the tests made of these)
ISSUE_OPERATORS = set("""
    Add Sub Mul Div Pow Neg Abs Exp Log Sqrt Reciprocal Relu LeakyRelu PRelu ThresholdedRelu Elu Celu
    Selu Sigmoid HardSigmoid HardSwish Softplus Softsign Mish Shrink Tanh Erf Floor Ceil Round Sign Sin
    Cos Tan Asin Acos Atan Sinh Cosh Asinh Acosh Atanh Max Min Sum Mean Cast Where Clip MatMul Gemm Conv
    ConvTranspose MaxPool AveragePool GlobalAveragePool GlobalMaxPool BatchNormalization
    LayerNormalization Softmax LogSoftmax ReduceSum ReduceMean ReduceMax ReduceMin ReduceL1 ReduceL2
    ReduceSumSquare ReduceLogSum ReduceLogSumExp ReduceProd Transpose Reshape Flatten Squeeze Unsqueeze
    Expand Slice Pad Concat Resize Gather Constant Identity""".split())
# Documented expected differences: (test name pattern, check, reason). The check (see
# check_bf16_rounding) confirms the claim on the test's own data and on tessel's output.
BF16_ROUNDING_REASON = (
    "f32 -> bf16 rounding: ONNX's test data truncates (its cast.py keeps each value's upper 16 bits); "
    "Cast's spec text states no rounding for bf16 (onnx/onnx#3876), ONNX's own "
    "onnx.helper.float32_to_bfloat16 rounds to nearest even by default, and so does tessel")
ADAM_EPSILON_REASON = (
    "Adam's epsilon: ONNX's data for this test is made with epsilon 1e-2 (adam.py's export_adam_multiple passes "
    "epsilon=1e-2 to its reference apply_adam) but the node it writes carries no epsilon attribute, so the node's "
    "epsilon is the schema's default 1e-6, which tessel applies")
DOCUMENTED = [(re.compile(r"^test_cast(like)?_FLOAT_to_BFLOAT16(_expanded)?$"), "bf16_rounding", BF16_ROUNDING_REASON),
              (re.compile(r"^test_adam_multiple$"), "adam_epsilon", ADAM_EPSILON_REASON)]
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


_SCHEMA_NAMES = None


def schema_names():
    global _SCHEMA_NAMES
    if _SCHEMA_NAMES is None:
        import onnx.defs
        _SCHEMA_NAMES = sorted({s.name for s in onnx.defs.get_all_schemas_with_history()})
    return _SCHEMA_NAMES


def names_match(stem, op):
    return any(stem == n or stem.startswith(n + "_") for n in (snake(op), op.lower()))


def primary_operator(test_name, ops):
    """The op type a test is about: the longest op type of the model its name starts with, else
    the longest ONNX operator its name starts with (a function's expanded test is named after the
    function: "LayerNormalization (expanded)"), else the model's only op type, else its first op
    type that is not plumbing."""
    if not ops:
        return "(no nodes)"
    stem = test_name[len("test_"):].lower() if test_name.startswith("test_") else test_name.lower()
    expanded = stem.endswith("_expanded")
    distinct = sorted(set(ops))
    named = [op for op in distinct if names_match(stem, op)]
    if named and not expanded:
        return max(named, key=len)
    named = [op for op in schema_names() if names_match(stem, op)]
    if named:
        return max(named, key=len) + (" (expanded)" if expanded else "")
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


def crash_line(out):
    """The line that says what went wrong, not tessel's closing "(this is a bug ...)"."""
    for pattern in ("internal error", "tessel bug", "Assertion", "terminate", "error"):
        line = last_line(out, pattern)
        if pattern in line:
            return line
    lines = [l for l in out.splitlines() if l.strip() and not l.startswith("(this is a bug")]
    return lines[-1].strip() if lines else ""


def classify_import(rc, out, operator):
    """None when the import succeeded, else the outcome dict every target takes (operator: the
    test's, for a refusal that names no node)."""
    if rc == 0:
        return None
    if rc is None:
        return {"outcome": "timeout", "stage": "import", "reason": "tessel import past the timeout"}
    if rc < 0 or rc == 3:
        return {"outcome": "crash", "stage": "import",
                "reason": f"tessel import exit {rc}: {crash_line(out)}"}
    m = UNSUPPORTED_RE.search(out)
    if rc == 1 and m:
        return {"outcome": "unsupported", "stage": "import", "node": m.group(1),
                "operator": m.group(2), "reason": m.group(3).strip()}
    if rc == 1 and "unsupported:" in out:  # "MODEL: input 'x': unsupported: ..." (no node)
        line = last_line(out, "unsupported:")
        place, reason = line.split("unsupported:", 1)
        place = place.rstrip(": ").rsplit(": ", 1)[-1] if ": " in place else ""
        result = {"outcome": "unsupported", "stage": "import", "operator": operator,
                  "reason": reason.strip()}
        if place and not place.endswith(".onnx"):
            result["place"] = place
        return result
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
        return {"outcome": "crash", "stage": "run", "reason": f"tessel run exit {rc}: {crash_line(out)}"}
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
    result.update(outcome="error", stage="run", reason=f"exit {rc}: {last_line(out, 'error:')}")
    return target_refusal(result)


# a target's documented limit, said in so many words: bf16 on c, u8 on the NPU's vector unit, f64 on
# an NPU description that lists no f64 unit
TARGET_REFUSAL_RE = re.compile(r"is not supported by|has no mapping for|does not map|no NPU mapping takes it|"
                               r"no unit of the NPU description \S+ takes")


def target_refusal(result):
    """An error whose message is a target refusing a dtype or operation becomes unsupported."""
    if result.get("outcome") == "error" and TARGET_REFUSAL_RE.search(result.get("reason", "")):
        result["outcome"] = "unsupported"
        result["stage"] = "target"
        result["reason"] = re.sub(r"^exit 1: (tessel: error: )?", "", result["reason"])
    return result


def bf16_bits(values, truncate):
    """The bf16 bit patterns of f32 values: truncated, or rounded to nearest even (onnx.helper's rule)."""
    import onnx.helper
    import struct
    if truncate:
        return [int.from_bytes(struct.pack("<f", float(v)), "little") >> 16 for v in values]
    return [onnx.helper.float32_to_bfloat16(float(v)) for v in values]


def check_bf16_rounding(data, work, name):
    """({0: nearest-even expected .pb path} or None, note): ONNX's output_0 must equal input_0 truncated
    to bf16 in every element (NaN: any NaN); the file written holds input_0 rounded to nearest even."""
    import numpy
    import onnx
    import onnx.numpy_helper
    x = onnx.load_tensor(os.path.join(data, "input_0.pb"))
    y = onnx.load_tensor(os.path.join(data, "output_0.pb"))
    # the expected bf16 values are stored as their bit patterns, typed bfloat16 or uint16
    if x.data_type != onnx.TensorProto.FLOAT or y.data_type not in (onnx.TensorProto.BFLOAT16, onnx.TensorProto.UINT16):
        return None, "not an f32 -> bf16 cast"
    xs = onnx.numpy_helper.to_array(x).astype(numpy.float32).ravel()
    ys = [v & 0xFFFF for v in y.int32_data] if y.int32_data else \
        list(numpy.frombuffer(y.raw_data, dtype="<u2"))
    trunc, rne = bf16_bits(xs, True), bf16_bits(xs, False)
    nan = lambda b: (b & 0x7F80) == 0x7F80 and (b & 0x7F) != 0
    for k, (want, got) in enumerate(zip(trunc, ys)):
        if want != got and not (nan(want) and nan(got)):
            return None, f"element {k} of ONNX's data is not the truncation of its input"
    differ = sum(1 for a, b in zip(trunc, rne) if a != b)
    path = os.path.join(work, name + ".nearest_even_output_0.pb")
    t = onnx.TensorProto(name=y.name, data_type=onnx.TensorProto.BFLOAT16, dims=list(y.dims),
                         raw_data=numpy.array(rne, dtype="<u2").tobytes())
    with open(path, "wb") as f:
        f.write(t.SerializeToString())
    return {0: path}, f"{differ} of {len(rne)} elements truncated in ONNX's data where nearest-even rounds up"


def adam_outputs(r, t, xs, gs, vs, hs, alpha, beta, norm, epsilon):
    """ONNX's Adam (adam.py's apply_adam, norm_coefficient_post 0) over every optimized tensor, in f64:
    ([X_new...], [V_new...], [H_new...])."""
    import numpy
    out = ([], [], [])
    for x, g, v, h in zip(xs, gs, vs, hs):
        g_reg = norm * x + g
        v_new = alpha * v + (1 - alpha) * g_reg
        h_new = beta * h + (1 - beta) * g_reg * g_reg
        r_adj = r * numpy.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
        out[0].append(x - r_adj * (v_new / (numpy.sqrt(h_new) + epsilon)))
        out[1].append(v_new)
        out[2].append(h_new)
    return out


def check_adam_epsilon(data, work, name):
    """({output index: path} or None, note): ONNX's outputs must be Adam's with epsilon 1e-2 (within 1e-6
    relative) and differ from the node's (epsilon 1e-6); the files written hold the node's outputs."""
    import numpy
    import onnx
    import onnx.numpy_helper
    model = onnx.load(os.path.join(os.path.dirname(data), "model.onnx"))
    node = model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type != "Adam" or "epsilon" in attrs or attrs.get("norm_coefficient_post", 0.0) != 0.0:
        return None, "not an Adam node without epsilon"
    ins = [onnx.numpy_helper.to_array(onnx.load_tensor(os.path.join(data, f"input_{k}.pb"))).astype(numpy.float64)
           for k in range(len(node.input))]
    outs = [onnx.load_tensor(os.path.join(data, f"output_{k}.pb")) for k in range(len(node.output))]
    n = (len(ins) - 2) // 4
    xs, gs, vs, hs = (ins[2 + j * n:2 + (j + 1) * n] for j in range(4))
    args = (float(ins[0]), int(ins[1]), xs, gs, vs, hs, attrs.get("alpha", 0.9), attrs.get("beta", 0.999),
            attrs.get("norm_coefficient", 0.0))
    made, node_rule = (sum(adam_outputs(*args, epsilon=e), []) for e in (1e-2, 1e-6))
    for k, (t, want) in enumerate(zip(outs, made)):
        got = onnx.numpy_helper.to_array(t).astype(numpy.float64)
        if not numpy.allclose(got, want, rtol=1e-6, atol=1e-7):
            return None, f"output {k} of ONNX's data is not Adam's with epsilon 1e-2"
    differ = [k for k, (a, b) in enumerate(zip(made, node_rule)) if not numpy.allclose(a, b, rtol=1e-3, atol=1e-4)]  # --expect-tol
    paths = {}
    for k, (t, value) in enumerate(zip(outs, node_rule)):
        path = os.path.join(work, f"{name}.epsilon_1e-6_output_{k}.pb")
        with open(path, "wb") as f:
            f.write(onnx.numpy_helper.from_array(value.astype(numpy.float32), t.name).SerializeToString())
        paths[k] = path
    return paths, (f"ONNX's data matches epsilon 1e-2 in all {len(outs)} outputs; epsilon 1e-6 changes "
                   f"{', '.join(outs[k].name for k in differ) or 'none'} beyond --expect's default tolerance")


DOCUMENTED_CHECKS = {"bf16_rounding": check_bf16_rounding, "adam_epsilon": check_adam_epsilon}


def documented_difference(name, result, data, work, cmd, expect_files, args):
    """A failing run of a DOCUMENTED test becomes "documented" when its check holds and the run,
    repeated with --expect on the documented rule's data (`expect_files`: TSL name -> (output index,
    ONNX's file); the check gives the documented rule's file of each output it replaces), passes;
    else it stays a fail."""
    if result.get("outcome") != "fail" or result.get("stage") != "expect" or result.get("verified") is False:
        return result
    for pattern, check, reason in DOCUMENTED:
        if not pattern.search(name):
            continue
        paths, note = DOCUMENTED_CHECKS[check](data, work, name)
        if paths is None:
            result["reason"] += f" (not the documented difference: {note})"
            return result
        rerun = cmd[:cmd.index("--report")]
        for tsl, (index, path) in expect_files.items():
            old = f"{tsl}={path}"
            rerun[rerun.index(old)] = f"{tsl}={paths.get(index, path)}"
        rc, out, _ = execute(rerun, args.timeout)
        if rc != 0:
            result["reason"] += f" (not the documented difference: the run fails against the documented rule's data: {last_line(out)})"
            return result
        result.update(outcome="documented", stage="expect", onnx_mismatch=result["reason"],
                      reason=f"{reason}; {note}; passes against the documented rule's data")
        return result
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
    for k, (input_name, _) in enumerate(graph_inputs):  # sequences and optionals too (read as declared)
        pb = os.path.join(data, f"input_{k}.pb")
        if os.path.exists(pb):
            cmd += ["--value", f"{input_name}={pb}"]
    rc, out, seconds = execute(cmd, args.timeout)
    record["import_s"] = round(seconds, 3)
    failed = classify_import(rc, out, record["operator"])
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
    try:
        mismatch = structure_mismatch(manifest, data)
        base = [tsl, "--input-dir", weights]
        for entry in manifest.get("inputs", []):
            if "input_index" in entry and "file" not in entry:
                base += ["--input", f"{entry['tsl']}={element_file(entry, data, work, 'input', entry['input_index'])}"]
        expect_files = {}  # TSL name -> (output index, file)
        for entry in manifest.get("outputs", []):
            expect_files[entry["tsl"]] = (entry["output_index"], element_file(entry, data, work, "output", entry["output_index"]))
            base += ["--expect", f"{entry['tsl']}={expect_files[entry['tsl']][1]}"]
    except (OSError, ValueError, IndexError) as e:
        mismatch = f"the expected structure cannot be read: {e}"
    if mismatch:
        for target in args.targets:
            record["targets"][target] = {"outcome": "fail", "stage": "structure", "reason": mismatch}
        return record
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
        result = documented_difference(name, result, data, work, cmd, expect_files, args)
        result["seconds"] = round(seconds, 3)
        record["targets"][target] = result
    return record


def read_structured(path, optional):
    """A SequenceProto (or an OptionalProto when `optional`) file: (present, is sequence, [TensorProto])."""
    import onnx
    with open(path, "rb") as f:
        data = f.read()
    if optional:
        o = onnx.OptionalProto()
        o.ParseFromString(data)
        if o.HasField("sequence_value"):
            return True, True, list(o.sequence_value.tensor_values)
        if o.HasField("tensor_value"):
            return True, False, [o.tensor_value]
        return False, False, []
    s = onnx.SequenceProto()
    s.ParseFromString(data)
    return True, True, list(s.tensor_values)


def element_file(entry, data, work, kind, index):
    """The TensorProto file of one manifest entry: the test's own file, or (a sequence's element, an
    optional's value) that element written as a TensorProto of its own under `work`."""
    path = os.path.join(data, f"{kind}_{index}.pb")
    if "element" not in entry and not entry.get("optional"):
        return path
    _, _, tensors = read_structured(path, entry.get("optional", False))
    position = entry.get("element", 0)
    out = os.path.join(work, f"{kind}_{index}.{position}.pb")
    with open(out, "wb") as f:
        f.write(tensors[position].SerializeToString())
    return out


def structure_mismatch(manifest, data):
    """Why the expected sequence / optional outputs differ in kind, presence or length from what the
    importer computes (None where they agree)."""
    for s in manifest.get("structured_outputs", []):
        path = os.path.join(data, f"output_{s['output_index']}.pb")
        present, sequence, tensors = read_structured(path, s["kind"] == "optional")
        if present != s["present"]:
            return f"output '{s['onnx']}': expected an optional {'holding a value' if present else 'holding nothing'}, " \
                   f"tessel's {'holds a value' if s['present'] else 'holds nothing'}"
        if present and sequence != s["sequence"]:
            return f"output '{s['onnx']}': expected {'a sequence' if sequence else 'a tensor'}, tessel's is not"
        if present and len(tensors) != s["length"]:
            return f"output '{s['onnx']}': expected {len(tensors)} tensors, tessel's has {s['length']}"
    return None


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
                     (("documented", "D"), ("fail", "F"), ("unsupported", "U"), ("error", "E"), ("crash", "C"),
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


def unsupported_reasons(records, targets, limit=20):
    """[(count, operator, reason)] of the import refusals, most frequent first."""
    counts = collections.Counter()
    for r in records:
        imp = r.get("import", {})
        if imp.get("outcome") == "unsupported":
            reason = re.sub(r"'[^']*'", "'...'", imp.get("reason", ""))
            counts[(imp.get("operator", r["operator"]), reason)] += 1
    return [(n, op, reason) for (op, reason), n in
            sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:limit]


def non_passing(records, targets):
    """Every fail, error, crash and timeout, one line each."""
    lines = []
    for r in records:
        for t in targets:
            res = r["targets"][t]
            if res["outcome"] in ("fail", "error", "crash", "timeout"):
                lines.append(f"{r['suite']}/{r['test']} ({r['operator']}) on {t}: {res['outcome']}: "
                             f"{res.get('reason', '')}")
    return lines


def documented(records, targets):
    """Every documented expected difference, one line each, with its reason."""
    return [f"{r['suite']}/{r['test']} ({r['operator']}) on {t}: {r['targets'][t]['reason']}"
            for r in records for t in targets if r["targets"][t]["outcome"] == "documented"]


def markdown(header, rows, totals, records, targets):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "Cells: passing/tests, then D documented expected difference (not a pass), F fail, U unsupported, E error, C crash, T timeout, "
              "G no GPU.", "", "| suite | target | tests | " + " | ".join(OUTCOMES) + " |",
              "|" + "---|" * (3 + len(OUTCOMES))]
    lines += ["| " + " | ".join(t) + " |" for t in totals]
    listed = [r for r in records if r["ops"] and set(r["ops"]) <= ISSUE_OPERATORS]
    if listed:
        lines += ["", f"Tests made only of issue 34's operators: {len(listed)}; passing: " + ", ".join(
            f"{t} {sum(1 for r in listed if r['targets'][t]['outcome'] == 'pass')}"
            f" ({100.0 * sum(1 for r in listed if r['targets'][t]['outcome'] == 'pass') / len(listed):.1f} %)"
            for t in targets) + "."]
    refused = {t: sum(1 for r in records if r["targets"][t].get("stage") == "target") for t in targets}
    if any(refused.values()):
        lines += ["", "Of the unsupported, refused by the target after a successful import (a dtype its "
                  "units do not take): " + ", ".join(f"{t} {n}" for t, n in refused.items()) + "."]
    reasons = unsupported_reasons(records, targets)
    if reasons:
        lines += ["", "Most frequent import refusals (tests, operator, reason):", "",
                  "| tests | operator | reason |", "|---|---|---|"]
        lines += [f"| {n} | {op} | {reason.replace('|', chr(92) + '|')} |" for n, op, reason in reasons]
    doc = documented(records, targets)
    if doc:
        lines += ["", "Documented expected differences (not counted as passing):", ""]
        lines += ["- " + d.replace("|", "\\|") for d in doc]
    bad = non_passing(records, targets)
    if bad:
        lines += ["", "Every fail, error, crash and timeout:", ""]
        lines += ["- " + b.replace("|", "\\|") for b in bad]
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
            if target not in targets or outcome not in ("pass", "documented"):
                continue
            r = seen.get(key)
            got = r["targets"][target] if r else {"outcome": "missing", "reason": "not run"}
            if got["outcome"] != outcome:
                lost.append(f"{key} on {target}: was {outcome}, now {got['outcome']}: {got.get('reason', '')}")
    return lost


def write_outputs(args, records, targets, meta):
    for r in records:  # a refusal that names no node is about the test's operator
        for res in [r.get("import", {})] + list(r["targets"].values()):
            if res.get("outcome") == "unsupported" and not res.get("operator"):
                res["operator"] = r["operator"]
    header, rows, totals = tables(records, targets)
    print_text(header, rows, totals)
    doc = documented(records, targets)
    if doc:
        print("\ndocumented expected differences (not passes):")
        for line in doc:
            print("  " + line)
    bad = non_passing(records, targets)
    if bad:
        print("\nnot passing (fail, error, crash, timeout):")
        for line in bad:
            print("  " + line)
    summary = {f"{suite}/{t}": dict(zip(("tests",) + OUTCOMES, map(int, counts)))
               for suite, t, *counts in totals}
    with open(args.json, "w") as f:
        json.dump(dict(meta, targets=targets, totals=summary, tests=records), f, indent=1, sort_keys=True)
        f.write("\n")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(header, rows, totals, records, targets))


def save_partial(args, records, total):
    """--json while the run goes on: the tests finished so far (name order), marked "partial" with
    their count of the run's total; --retable turns such a file into tables. Rewritten at the end."""
    done = sorted(records, key=lambda r: (r["suite"], r["test"]))
    with open(args.json + ".tmp", "w") as f:
        json.dump({"partial": f"{len(done)} of {total} tests", "tessel": args.tessel, "suites": args.suites.split(","),
                   "filter": args.filter, "targets": args.targets, "tests": done}, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(args.json + ".tmp", args.json)


def retable(args):
    with open(args.retable) as f:
        old = json.load(f)
    for r in old["tests"]:
        ops, _ = model_facts(os.path.join(DATA_DIR, r["suite"], r["test"], "model.onnx"))
        r["ops"] = sorted(set(ops))
        r["operator"] = primary_operator(r["test"], ops)
        for res in [r["import"]] + list(r["targets"].values()):
            target_refusal(res)
    meta = {k: v for k, v in old.items() if k not in ("targets", "totals", "tests")}
    write_outputs(args, old["tests"], old["targets"], meta)
    return 0


def main():
    global DATA_DIR
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
    p.add_argument("--baseline", help="expected outcomes; exit 1 when a test passing (documented) there does not pass (is not documented)")
    p.add_argument("--only-baseline", action="store_true", help="run just the tests --baseline names")
    p.add_argument("--retable", metavar="RESULTS.json",
                   help="run nothing: re-derive each test's operator from its model and rewrite --json/--markdown from an earlier --json")
    p.add_argument("--quiet", action="store_true", help="no per-test progress lines")
    p.add_argument("--data", default=None, help="the backend test data (a directory of suites; default: libonnx-testdata's)")
    args = p.parse_args()
    if args.data:
        DATA_DIR = args.data
    args.targets = [t for t in args.targets.split(",") if t]
    if not os.access(args.tessel, os.X_OK):
        sys.exit(f"onnx_tests.py: {args.tessel} is not an executable tessel")
    baseline = None
    if args.baseline:
        with open(args.baseline) as f:
            baseline = json.load(f)
    if args.retable:
        return retable(args)
    tests = discover([s for s in args.suites.split(",") if s], args.filter)
    if args.only_baseline:
        if baseline is None:
            sys.exit("onnx_tests.py: --only-baseline needs --baseline")
        tests = [t for t in tests if f"{t['suite']}/{t['name']}" in baseline]
    work_root = args.keep or tempfile.mkdtemp(prefix="tessel_onnx_")
    start = time.monotonic()
    records = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_test, t, args, work_root): t for t in tests}
        for n, future in enumerate(concurrent.futures.as_completed(futures), 1):
            r = future.result()
            records.append(r)
            if n % 25 == 0 and n < len(tests):  # a run cut short (a time limit, a kill) keeps what it ran
                save_partial(args, records, len(tests))
            if not args.quiet:
                outcomes = " ".join(f"{t}={r['targets'][t]['outcome']}" for t in args.targets)
                print(f"[{n}/{len(tests)}] {r['suite']}/{r['test']}: {outcomes}", file=sys.stderr, flush=True)
    records.sort(key=lambda r: (r["suite"], r["test"]))
    if not args.keep:
        shutil.rmtree(work_root, ignore_errors=True)
    write_outputs(args, records, args.targets,
                  {"tessel": args.tessel, "suites": args.suites.split(","), "filter": args.filter,
                   "expect_tol": args.expect_tol or "1e-4,1e-3"})
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
