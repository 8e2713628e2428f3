"""tessel from Python: the CLI's commands as functions (issue 18).

    import tessel
    r = tessel.run("workloads/matmul.tsl", target="isa/targets/davinci-910.yaml",
                   shape={"M": 128, "N": 128, "K": 128}, set={"L1.capacity_bytes": "512KiB"})
    r["verified"], r["total_cycles"], r["description_hash"], r["outputs"]["C"]  # numpy array

compile, run, simulate and tune run the `tessel` binary as a child process (SystemC allows one
simulation per process; a failing simulation never touches the interpreter), so results are those
of the CLI by construction: `run` returns the dict `tessel run --report` writes plus the inputs
and outputs as numpy arrays. load_description and check_hierarchy run in-process (the pybind11
binding `tessel._tessel`). Errors raise tessel.Error subclasses whose message is the CLI's; a bad
argument raises tessel.UsageError naming it before any child starts (_args.py).
"""
import json
import os
import re
import signal
import subprocess
import tempfile

import numpy as np

from . import _args, _tessel
from ._config import SOURCE_DIR, TESSEL_CLI
from ._errors import Error, InternalError, NoGpuError, TimeoutError, UsageError, UserError

__all__ = [
    "Error", "UserError", "UsageError", "NoGpuError", "InternalError", "TimeoutError",
    "compile", "run", "simulate", "tune", "check_hierarchy", "load_description", "overrides_text", "cli_path",
]

DEFAULT_TIMEOUT_S = 600


def cli_path():
    """The `tessel` binary the functions run ($TESSEL_CLI, else the one built with this module)."""
    return os.environ.get("TESSEL_CLI", TESSEL_CLI)


# ---------------------------------------------------------------------------------------------
# Arguments as the CLI takes them (checked in _args: a bad one is a UsageError naming it)

def overrides_text(set):
    """The canonical --set text of overrides (sorted by key, sizes expanded); "" for none."""
    return _tessel.canonical_overrides(_args.override_pairs(set))


def _common_args(target, shape, tile, sync, set, def_, no_tuned=False):
    args = ["--no-tuned"] if _args.flag("no_tuned", no_tuned) else []
    if target is not None:
        args += ["--target", target]
    for flag, value in (("--shape", _args.shape(shape)), ("--tile", _args.text("tile", tile)),
                        ("--sync", _args.text("sync", sync)), ("--def", _args.text("def_", def_))):
        if value is not None:
            args += [flag, value]
    text = overrides_text(set)
    if text:
        args += ["--set", text]
    return args


def _write_inputs(arrays, directory):
    """Writes each checked input (an identifier: DIR/NAME.npy stays in DIR) and returns the --input
    flags and, for messages, which argument each file stands for."""
    args, names = [], {}
    os.makedirs(directory, exist_ok=True)
    for name, array in arrays.items():
        path = os.path.join(directory, f"{name}.npy")
        np.save(path, array)
        args += ["--input", f"{name}={path}"]
        names[path] = f"inputs[{name!r}]"
    return args, names


def _read_tensors(directory):
    if not os.path.isdir(directory):
        return {}
    return {f[:-4]: np.load(os.path.join(directory, f)) for f in sorted(os.listdir(directory)) if f.endswith(".npy")}


# ---------------------------------------------------------------------------------------------
# The child process

_ERROR_PREFIX = "tessel: error: "


def _message(stderr):
    """What the CLI said: the text after "tessel: error: " (to the end), else all of stderr."""
    at = stderr.rfind(_ERROR_PREFIX)
    text = stderr[at + len(_ERROR_PREFIX):] if at >= 0 else stderr
    return text.rstrip("\n")


def _raise_for(proc, command, names=None):
    """The CLI's failure as an exception. `names` maps the temporary files of arguments (an input's
    .npy) to the argument they stand for, so the message names `inputs['A']`, not a temporary path;
    a rejected input is a UsageError like any other bad argument."""
    code, err = proc.returncode, proc.stderr
    if code < 0:
        raise InternalError(f"tessel {command}: the tessel process died with signal {-code}", code, proc.stdout, err)
    cls = {1: UserError, 2: UsageError}.get(code, InternalError)
    message = _message(err)
    for path, name in (names or {}).items():
        message = message.replace(path, name)
    if code == 2 and "GPU" in message:
        cls = NoGpuError
    if code == 1 and (message.startswith("--input: ") or message.startswith("inputs[")):
        message = re.sub(r"^--input: ", "inputs: ", message)
        raise UsageError(message, None, proc.stdout, err)
    raise cls(message, code, proc.stdout, err)


def _kill_group(proc):
    """Kills the child and everything it started (tune's measurement workers): the child leads its
    own session and process group (start_new_session), so one signal reaches them all."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _child(command, args, timeout, allowed=(0,), names=None):
    cmd = [cli_path(), command, *args]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            stdout, stderr = proc.communicate()
            raise TimeoutError(f"tessel {command}: no result after {timeout} s (its process group was killed)", None,
                               stdout or "", stderr or "") from None
        except BaseException:  # KeyboardInterrupt: leave no tessel process behind
            _kill_group(proc)
            proc.wait()
            raise
    result = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    if result.returncode not in allowed:
        _raise_for(result, command, names)
    return result


# ---------------------------------------------------------------------------------------------
# The commands

def load_description(path, set=None):
    """The description at `path` with overrides `set` applied, parsed and validated, as a dict with
    the schema's keys plus description_hash, overrides and source_file. UserError when invalid."""
    return _tessel.load_description(_args.path("path", path), _args.override_pairs(set))


def check_hierarchy(path, set=None):
    """`tessel check-hierarchy PATH --set ...`: {"valid": True, "name", "kind", "description_hash",
    "overrides", "text"} (text: the tables the CLI prints). UserError with the rule's message when
    the description (or the variant) is invalid."""
    path, pairs = _args.path("path", path), _args.override_pairs(set)
    d = _tessel.load_description(path, pairs)
    return {"valid": True, "name": d["name"], "kind": d["kind"], "description_hash": d["description_hash"],
            "overrides": d["overrides"], "text": _tessel.describe(path, pairs)}


def compile(path, target="c", shape=None, tile=None, sync=None, set=None, def_=None, hierarchy=None,
            timeout=DEFAULT_TIMEOUT_S, no_tuned=False):
    """`tessel compile PATH --target ... -o OUT --explain`: {"text": OUT's content (C source, the
    .npu program, CUDA source or kernel IR), "format", "operator", "tile", "compile_ms",
    "description_hash", "overrides", "plan" (a tile spec, or a GPU plan), "plan_source": where it came from
    (the tile policy, --tile, or the tuning database with its file and key), "log": what the CLI printed on
    stderr, with the bound and the alternative plans}.
    `no_tuned`: ignore the tuning database (--no-tuned)."""
    path, target = _args.path("path", path), _args.target(target)
    hierarchy, timeout = _args.path("hierarchy", hierarchy, optional=True), _args.seconds("timeout", timeout)
    with tempfile.TemporaryDirectory(prefix="tessel-py-") as tmp:
        out = os.path.join(tmp, "out")
        args = [path, *_common_args(target, shape, tile, sync, set, def_, no_tuned), "--explain", "-o", out]
        if hierarchy is not None:
            args += ["--hierarchy", hierarchy]
        proc = _child("compile", args, timeout)
        with open(out) as f:
            text = f.read()
    result = {"text": text, "log": proc.stderr, "target": target}
    m = re.search(r"^tessel compile: (\S+) \((.*)\) compiled in ([0-9.e+-]+) ms$", proc.stderr, re.M)
    if m:
        result.update(operator=m.group(1), tile=m.group(2), compile_ms=float(m.group(3)))
    m = re.search(r"^tessel compile: description (\S+) hash ([0-9a-f]{16})(?: \(--set (.*)\))?$", proc.stderr, re.M)
    if m:
        result.update(description=m.group(1), description_hash=m.group(2), overrides=m.group(3) or "")
    m = re.search(r"^plan: (\S+) \(from (.*)\)", proc.stderr, re.M)
    if m:
        result.update(plan=m.group(1), plan_source=m.group(2))
    if target == "c":
        result["format"] = "c"
    else:
        result["format"] = "npu" if load_description(target, set)["kind"] == "npu" else "cuda"
    return result


def run(path, target="c", shape=None, tile=None, sync=None, inputs=None, set=None, def_=None, seed=None,
        timeout=DEFAULT_TIMEOUT_S, extra_args=(), no_tuned=False):
    """`tessel run PATH --report ...`: the report's dict (verified, total_cycles, utilization,
    description_hash, ...) plus "inputs" and "outputs" (numpy arrays by tensor name) and "summary"
    (what the CLI printed). `inputs` maps input names to numpy arrays (others are random from
    `seed`). A result that does not verify is returned with verified False, as the report says."""
    path, target = _args.path("path", path), _args.target(target)
    common = _common_args(target, shape, tile, sync, set, def_, no_tuned)
    arrays, seed = _args.input_arrays(inputs), _args.integer("seed", seed, 0, _args.UINT64_MAX)
    timeout, extra = _args.seconds("timeout", timeout), _args.extra_args(extra_args)
    with tempfile.TemporaryDirectory(prefix="tessel-py-") as tmp:
        report = os.path.join(tmp, "report.json")
        given, names = _write_inputs(arrays, os.path.join(tmp, "given"))
        args = [path, *common, *given, "--report", report, "--save-inputs", os.path.join(tmp, "inputs"),
                "--save-outputs", os.path.join(tmp, "outputs")]
        if seed is not None:
            args += ["--seed", str(seed)]
        proc = _child("run", [*args, *extra], timeout, allowed=(0, 1), names=names)
        if proc.returncode != 0 and not os.path.exists(report):
            _raise_for(proc, "run", names)
        with open(report) as f:
            result = json.load(f)
        result["inputs"] = _read_tensors(os.path.join(tmp, "inputs"))
        result["outputs"] = _read_tensors(os.path.join(tmp, "outputs"))
    result["summary"] = proc.stdout
    return result


def simulate(program, target=None, inputs=None, set=None, timing_only=False, race_check=True, max_cycles=None,
             max_instructions=None, timeout=DEFAULT_TIMEOUT_S):
    """`tessel sim PROGRAM --report ...`: the simulator's report dict (total_cycles, per-pipe
    statistics, races, ...) plus description_hash, "outputs" (numpy arrays) and "summary".
    `program` is a .npu/.npubin path or the program's text (a str with a newline);
    `target` defaults to davinci-910."""
    text_given = isinstance(program, str) and "\n" in program
    program_path = None if text_given else _args.path("program", program)
    target = None if target is None else _args.path("target", target)
    arrays, overrides = _args.input_arrays(inputs), overrides_text(set)
    timing_only, race_check = _args.flag("timing_only", timing_only), _args.flag("race_check", race_check)
    max_cycles = _args.integer("max_cycles", max_cycles, 1)
    max_instructions = _args.integer("max_instructions", max_instructions, 1)
    timeout = _args.seconds("timeout", timeout)
    with tempfile.TemporaryDirectory(prefix="tessel-py-") as tmp:
        names = {}
        if text_given:
            program_path = os.path.join(tmp, "program.npu")
            with open(program_path, "w") as f:
                f.write(program)
            names[program_path] = "program"
        report = os.path.join(tmp, "report.json")
        given, input_names = _write_inputs(arrays, os.path.join(tmp, "given"))
        names.update(input_names)
        args = [program_path, "--report", report, *given]
        if target is not None:
            args += ["--target", target]
        if overrides:
            args += ["--set", overrides]
        if timing_only:
            args.append("--timing-only")
        else:
            args += ["--save-outputs", os.path.join(tmp, "outputs")]
        if not race_check:
            args.append("--no-race-check")
        if max_cycles is not None:
            args += ["--max-cycles", str(max_cycles)]
        if max_instructions is not None:
            args += ["--max-instructions", str(max_instructions)]
        proc = _child("sim", args, timeout, names=names)
        with open(report) as f:
            result = json.load(f)
        result["outputs"] = _read_tensors(os.path.join(tmp, "outputs"))
    result["summary"] = proc.stdout
    return result


_BEST = re.compile(r"^tune (\S+) on (\S+) \((.*)\): best (\S+) = (\S+) (\S+) after (\d+) trials", re.M)


def tune(path, target, shape=None, space=None, strategy="model", trials=64, set=None, def_=None, seed=None, jobs=None,
         log=None, db="off", batch=None, measure_timeout=None, timeout=DEFAULT_TIMEOUT_S):
    """`tessel tune PATH ...`: {"best_tile", "best_cost", "unit", "trials", "operator",
    "description_hash", "overrides", "records": the log's records of this problem}. The log is
    `log` (resumed like the CLI's) or a temporary one; `db` is the best-config database ("off":
    none, the default here, so a script does not change what `tessel compile` picks).
    `timeout` kills the tuner and its measurement workers (one process group)."""
    path, target = _args.path("path", path), _args.target(target)
    common = _common_args(target, shape, None, None, set, def_)
    options = [("--space", _args.text("space", space)), ("--strategy", _args.text("strategy", strategy, optional=False)),
               ("--trials", _args.integer("trials", trials, 1, 1 << 30, optional=False)),
               ("--seed", _args.integer("seed", seed, 0, _args.UINT64_MAX)), ("--jobs", _args.integer("jobs", jobs, 0, 4096)),
               ("--batch", _args.integer("batch", batch, 0, 1 << 20)),
               ("--measure-timeout", _args.seconds("measure_timeout", measure_timeout))]
    log = _args.path("log", log, must_exist=False, optional=True)
    db = "off" if isinstance(db, str) and db == "off" else _args.path("db", db, must_exist=False)
    timeout = _args.seconds("timeout", timeout)
    with tempfile.TemporaryDirectory(prefix="tessel-py-") as tmp:
        log_path = log if log is not None else os.path.join(tmp, "tune.jsonl")
        args = [path, *common, "--log", log_path, "--db", db, "--no-progress"]
        for flag, value in options:
            if value is not None:
                args += [flag, str(value)]
        proc = _child("tune", args, timeout)
        m = _BEST.search(proc.stdout)
        if not m:
            raise InternalError(f"tessel tune: no best configuration in its output:\n{proc.stdout}", 3, proc.stdout, proc.stderr)
        description = load_description(target, set)
        records = []
        with open(log_path) as f:
            for line in f:
                if not line.strip():
                    continue
                r = json.loads(line)
                same_variant = (r.get("overrides", "") == description["overrides"]) and (
                    not description["overrides"] or r.get("description_hash") == description["description_hash"])
                if r.get("op") == m.group(1) and r.get("target") == m.group(2) and r.get("shape") == m.group(3) and same_variant:
                    records.append(r)
    return {"operator": m.group(1), "best_tile": m.group(4), "best_cost": float(m.group(5)), "unit": m.group(6),
            "trials": int(m.group(7)), "description_hash": description["description_hash"],
            "overrides": description["overrides"], "records": records, "summary": proc.stdout}
