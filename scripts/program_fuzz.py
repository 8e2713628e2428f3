#!/usr/bin/python3
"""Differential fuzzer of tensor programs (issue 31 item 1).

  scripts/program_fuzz.py [--tessel build/compiler/cli/tessel] [--seed S] [--seconds T | --count N]
      [--index I] [--targets c,davinci-910,davinci-310,sm75,sm90] [--sync naive,pruned] [--jobs J]
      [--timeout S] [--out DIR] [--json OUT] [--minimize-seconds S] [--keep-going]
  scripts/program_fuzz.py --replay FILE_OR_DIR...      # regression corpus (tests/fuzz_programs/): each
                                                       # file's header names its shape and columns
                                                       # (`COLUMN=refused` where a clean refusal is right)
  scripts/program_fuzz.py --print --seed S --index I   # the program as a corpus file (shape, columns), nothing run

Program I of seed S comes from scripts/program_fuzz_gen.py (deterministic: the same (S, I) is the
same program on every machine). Each program is first evaluated by the reference interpreter
(`tessel eval`; a program it rejects is a generator error, counted as `invalid`, never a tessel
bug), then run on every target column:

  c                       tessel run P.tsl --target c --shape ...        (verified vs the interpreter)
  davinci-910/naive ...   tessel run P.tsl --target isa/targets/davinci-910.yaml --sync naive|pruned
  sm75, sm90              tessel compile P.tsl --target isa/targets/sm75.yaml -o P.cu, then NVRTC
                          (libnvrtc through ctypes, the options `tessel run` uses: -fmad=false,
                          --std=c++17, the CUDA include directory; sm_90a where the kernel needs it);
                          with --gpu-run, on a GPU machine: tessel run P.tsl --target ... --verify full

Each run is classified:
  pass     verified (run) / compiled by NVRTC (GPU columns)
  refused  exit 1 with a message matching an accepted refusal (REFUSALS: what a target does not map
           yet, each with the reason it is acceptable)
  known    a bug listed in KNOWN_ISSUES (each with its reason); reported, does not fail
  bug      anything else: a crash or signal, exit 3, a timeout, a verification mismatch, a race or
           deadlock, an exit 1 whose message is not an accepted refusal (the simulator or the
           assembler refusing an instruction tessel emitted, NVRTC rejecting its CUDA)
  skipped  the GPU columns' NVRTC step where libnvrtc cannot be loaded (the compile still runs)

Every bug is written to --out DIR (default build/program_fuzz) as a reproducer: the program
(minimised first, within --minimize-seconds, by shrinking sizes, dropping statements and
replacing expressions by their operands while the same failure persists), its shape, the target
columns, the command and the output. A reproducer is a corpus file as it stands: copy it to
tests/fuzz_programs/ and `--replay` it.

Prints a summary table (columns x outcomes) and each bug with its one-line reason; --json writes the
summary (programs generated, invalid, per-column counts, bugs). Exit status 1 when a bug that is
not a known issue was found, a generated program was invalid (a generator defect), or a replayed
corpus file did not pass; 0 otherwise.
"""
import argparse
import glob
import collections
import concurrent.futures
import copy
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import program_fuzz_gen  # noqa: E402

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTCOMES = ("pass", "refused", "known", "bug", "skipped")
NPU_TARGETS = ("davinci-910", "davinci-310")
GPU_TARGETS = ("sm75", "sm90")

# Exit-1 messages that are clean refusals: the program is outside what the target maps today.
# (column regex, message regex, why it is acceptable)
REFUSALS = [
    (r"davinci", r"no NPU mapping takes it",
     "no NPU mapping accepts the kernel; the message lists every mapping's reason (emit_npu.cc, emit_any)"),
    (r"davinci", r"the NPU backend does not map this matmul yet",
     "the cube paths' refusal (a contraction beside statements that are neither a padding copy nor an "
     "element-wise epilogue) where the general lowering cannot take the kernel either"),
    (r"davinci", r"the NPU backend maps one matmul statement per kernel",
     "a kernel of two contractions: the cube paths take one (emit_npu.cc)"),
    (r"davinci", r"computes with (a reduction in )?(u8|bf16)\b.*the NPU has no mapping for them",
     "the DaVinci vector unit computes in f16, f32, i32 (i8 through i32): u8 and bf16 values can be "
     "moved, not computed (compiler/emit_npu/emit_npu.cc, why_not_vector_dtypes)"),
    (r"davinci", r"is f64: no unit of the NPU description \S+ takes f64",
     "the DaVinci descriptions list no f64 unit (vector f16 f32 i32 i8, cube f16 and i8): an f64 tensor "
     "is refused naming it (compiler/emit_npu/held_dtypes.h); c and the GPU targets compute it"),
    (r"davinci", r"general vector lowering: the output \w+ is read outside its shape",
     "an output read outside its shape under a select has no zero-padded buffer on the NPU (its GM place "
     "is the caller's; nest_plan.cc plan_pads); as 'no NPU mapping takes it' lists it for other kernels, "
     "and alone where the general lowering is the only mapping (u8 arithmetic)"),
    (r"davinci", r"general vector lowering: .*(divided by|floor division or modulo)",
     "the NPU maps floor division / modulo of an index only as a split of a loop by constants that "
     "divide its extent (compiler/README.md: quasi-affine forms)"),
]

# Bugs found and not fixed yet: (id, column regex, reason regex, why it is not fixed here). Keep it short.
KNOWN_ISSUES = [
    ("self-read-accumulate", r".", r"^$",
     "`Y(i) = X(i)` then `Y(i) += Y(r)`: a statement reading its own output at other points depends on "
     "the order its points run (the interpreter's: output indices ascending); c and the NPU compute "
     "another order (Y0[1]: expected -16, got -28): the dependence of a statement on itself is not "
     "kept by the core (compiler/poly, not fixed). The generator no longer writes such reads; the "
     "corpus file names this id in a '# known:' line (tests/fuzz_programs/known_self_read_accumulate.tsl)"),
]


# --- target columns ---------------------------------------------------------------------------

class Column:
    def __init__(self, name, target, sync=None, gpu=False):
        self.name, self.target, self.sync, self.gpu = name, target, sync, gpu
        self.execute = False  # a GPU column run on the GPU (--gpu-run) rather than compiled by NVRTC


def make_columns(targets, syncs, gpu_run=False):
    cols = []
    for t in targets:
        if t == "c":
            cols.append(Column("c", "c"))
        elif t in GPU_TARGETS or t.startswith("sm"):
            cols.append(Column(t, os.path.join(SOURCE_DIR, "isa", "targets", t + ".yaml"), gpu=True))
            cols[-1].execute = gpu_run
        else:
            for s in syncs:
                cols.append(Column(f"{t}/{s}", os.path.join(SOURCE_DIR, "isa", "targets", t + ".yaml"), s))
    for c in cols:
        if c.target != "c" and not os.path.exists(c.target):
            sys.exit(f"program_fuzz.py: --targets: no description {c.target}")
    return cols


def column_by_name(name):
    if name == "c":
        return Column("c", "c")
    base, _, sync = name.partition("/")
    path = os.path.join(SOURCE_DIR, "isa", "targets", base + ".yaml")
    return Column(name, path, sync or None, gpu=not sync)


# --- NVRTC (ctypes, in a child process so a crash or hang is contained) -----------------------

def nvrtc_library():
    cands = [os.environ.get("TESSEL_NVRTC_LIB", ""), "/usr/local/cuda/lib64/libnvrtc.so", "libnvrtc.so",
             "libnvrtc.so.13", "libnvrtc.so.12"]
    for c in cands:
        if not c:
            continue
        try:
            return ctypes.CDLL(c)
        except OSError:
            continue
    return None


def nvrtc_arch(lib, arch):
    """`arch`, or the lowest architecture this NVRTC compiles for when it no longer offers `arch`
    (CUDA 13 dropped sm_70: the sm70 description's code is checked for sm_75, README "Targets")."""
    m = re.match(r"^sm_(\d+)", arch)
    count = ctypes.c_int()
    if not m or not hasattr(lib, "nvrtcGetNumSupportedArchs") or lib.nvrtcGetNumSupportedArchs(ctypes.byref(count)) != 0:
        return arch
    archs = (ctypes.c_int * count.value)()
    if count.value == 0 or lib.nvrtcGetSupportedArchs(archs) != 0:
        return arch
    lowest = min(archs)
    if int(m.group(1)) >= lowest:
        return arch
    print(f"note: this NVRTC does not compile for {arch}; checked for sm_{lowest}, the lowest architecture it offers")
    return f"sm_{lowest}"


def nvrtc_compile(source_path, arch):
    """Compiles a .cu file for `arch`; prints NVRTC's log; exit 0 / 1 (rejected) / 2 (no NVRTC)."""
    lib = nvrtc_library()
    if lib is None:
        print("NVRTC not found (set TESSEL_NVRTC_LIB)")
        return 2
    with open(source_path, "rb") as f:
        src = f.read()
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(source_path).encode(), 0, None, None)
    if rc != 0:
        print(f"nvrtcCreateProgram failed ({rc})")
        return 1
    arch = nvrtc_arch(lib, arch)
    inc = os.environ.get("TESSEL_CUDA_INCLUDE_DIR", "/usr/local/cuda/include")
    opts = [f"--gpu-architecture={arch}", "--std=c++17", f"-I{inc}", "-fmad=false"]
    arr = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    print(log.value.decode(errors="replace"))
    return 0 if rc == 0 else 1


def gpu_arch(description, source):
    if "__CUDA_ARCH_FEAT_SM90_ALL" in source:
        return "sm_90a"
    with open(description) as f:
        for line in f:
            m = re.match(r"^\s*arch:\s*(sm_\w+)", line)
            if m:
                return m.group(1)
    return "sm_75"


# --- running one command ----------------------------------------------------------------------

def child_env(work):
    env = dict(os.environ)
    env["TESSEL_TUNE_DB"] = "off"                 # never the user's tuning database
    env["TESSEL_CACHE_DIR"] = os.path.join(work, "cache")
    return env


def run_cmd(cmd, timeout, env, cwd=None):
    """(rc, stdout, stderr, timed_out); the whole process group is killed on a timeout."""
    for attempt in range(5):  # a binary being relinked cannot be executed for a moment
        try:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                                 start_new_session=True, text=True, errors="replace")
            break
        except OSError as e:
            if attempt == 4:
                return 127, "", f"could not start {cmd[0]}: {e}", False
            time.sleep(2)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err, False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        return None, out, err, True


def first_error_line(text):
    for line in text.splitlines():
        line = line.strip()
        if line:
            return re.sub(r"^tessel: (error: )?", "", line)
    return ""


def classify(col, rc, out, err, timed_out, timeout):
    """(outcome, reason) of a run or compile; outcome pass, refused or bug (known is applied later)."""
    if timed_out:
        return "bug", f"timeout after {timeout:g} s"
    races = re.search(r"^\s*RACES\s+(.*)$", out, re.M)
    if races:
        return "bug", "race: " + races.group(1).strip()
    deadlock = re.search(r"^\s*DEADLOCK\s+(.*)$", out, re.M)
    if deadlock:
        return "bug", "deadlock: " + deadlock.group(1).strip()
    if rc is not None and rc < 0:
        return "bug", f"killed by signal {-rc}: " + first_error_line(err)
    if rc == 0:
        if (col.gpu and not col.execute) or re.search(r": verified,", out):
            return "pass", ""
        return "bug", "exit 0 without 'verified'"
    if rc == 1:
        if "MISMATCH" in out:
            m = re.search(r"^\s*first mismatch: (.*)$", out, re.M)
            return "bug", "mismatch: " + (m.group(1).strip() if m else first_error_line(out))
        msg = first_error_line(err)
        if "the host C compiler failed" in msg:  # its first error names what the emitted C lacks
            cc = re.findall(r"\.c:\d+:\d+: error: (.*)", err + out)
            msg = "the host C compiler rejected the emitted C: " + (cc[0] if cc else msg)
        for col_re, msg_re, _why in REFUSALS:
            if re.search(col_re, col.name) and re.search(msg_re, msg):
                return "refused", msg
        return "bug", "exit 1: " + msg
    return "bug", f"exit {rc}: " + first_error_line(err)


def apply_known(col, outcome, reason):
    if outcome != "bug":
        return outcome, reason, None
    for kid, col_re, reason_re, _why in KNOWN_ISSUES:
        if re.search(col_re, col.name) and re.search(reason_re, reason):
            return "known", reason, kid
    return outcome, reason, None


class Runner:
    def __init__(self, tessel, timeout, work):
        self.tessel, self.timeout, self.work = tessel, timeout, work
        self.env = child_env(work)
        self.nvrtc = nvrtc_library() is not None

    def eval(self, tsl, shape):
        rc, out, err, to = run_cmd([self.tessel, "eval", tsl, "--shape", shape], self.timeout, self.env)
        if to:
            return "bug", f"interpreter timeout after {self.timeout:g} s"
        if rc == 0:
            return "pass", ""
        if rc == 1:
            return "invalid", first_error_line(err)
        return "bug", (f"killed by signal {-rc}" if rc < 0 else f"exit {rc}") + ": " + first_error_line(err)

    def command(self, col, tsl, shape, cu=None):
        rel = lambda p: os.path.relpath(p, SOURCE_DIR) if p.startswith(SOURCE_DIR) else p  # noqa: E731
        if col.gpu and col.execute:  # on this machine's GPU, every output against the interpreter
            return [self.tessel, "run", tsl, "--target", rel(col.target), "--shape", shape, "--verify", "full"]
        if col.gpu:
            return [self.tessel, "compile", tsl, "--target", rel(col.target), "--shape", shape, "-o", cu]
        cmd = [self.tessel, "run", tsl, "--target", rel(col.target) if col.target != "c" else "c", "--shape", shape]
        if col.sync:
            cmd += ["--sync", col.sync]
        return cmd

    def run(self, col, tsl, shape):
        """{outcome, reason, known, command, output} for one column."""
        cu = tsl[:-4] + "." + col.name.replace("/", "_") + ".cu"
        cmd = self.command(col, tsl, shape, cu)
        rc, out, err, to = run_cmd(cmd, self.timeout, self.env, cwd=SOURCE_DIR)
        outcome, reason = classify(col, rc, out, err, to, self.timeout)
        output = out + err
        shown = " ".join(cmd)
        if col.gpu and not col.execute and outcome == "pass":
            if not self.nvrtc:
                outcome, reason = "skipped", "NVRTC not found"
            else:
                # a program of several kernels is written one file per kernel (P.k0.cu, P.k1.cu, ...)
                files = [cu] if os.path.exists(cu) else sorted(
                    glob.glob(cu[:-3] + ".k*.cu"), key=lambda f: int(f.rsplit(".k", 1)[1][:-3]))
                for source in files:
                    with open(source) as f:
                        arch = gpu_arch(col.target, f.read())
                    ncmd = [sys.executable, os.path.abspath(__file__), "--nvrtc-compile", source, "--arch", arch]
                    nrc, nout, nerr, nto = run_cmd(ncmd, max(self.timeout, 120), self.env)
                    shown += f"   # then NVRTC --gpu-architecture={arch} -fmad=false {os.path.basename(source)}"
                    output += nout + nerr
                    if nto:
                        outcome, reason = "bug", "NVRTC timeout"
                    elif nrc == 2:
                        outcome, reason = "skipped", "NVRTC not found"
                    elif nrc != 0:
                        errs = [ln.strip() for ln in nout.splitlines() if "error" in ln]
                        outcome, reason = "bug", "NVRTC rejected the CUDA: " + (errs[0] if errs else first_error_line(nout + nerr))
                    if outcome != "pass":
                        break
                if not files:
                    outcome, reason = "bug", "tessel compile -o wrote no CUDA file"
        outcome, reason, kid = apply_known(col, outcome, reason)
        return {"column": col.name, "outcome": outcome, "reason": reason, "known": kid, "command": shown,
                "output": output[-6000:]}


# --- one program ------------------------------------------------------------------------------

def signature(column, reason):
    """A bug's identity across programs: the column family and the reason without names and numbers."""
    fam = "npu" if column.startswith("davinci") else column
    r = re.sub(r"/tmp/\S*", "TMP", reason)
    r = re.sub(r"\S+\.(tsl|npu|cu)(:\d+:\d+|\(\d+\))?", "FILE", r)
    r = re.sub(r"fuzz_\d+_\d+(\.\d+)?", "P", r)
    r = re.sub(r"\b[XYT]\d+\b", "T", r)
    r = re.sub(r"\[[^\]]*\]", "[.]", r)
    r = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", r)
    r = re.sub(r"'[^']*'", "'.'", r) if "mismatch" in r else r
    r = r.split(": expected")[0]
    return f"{fam}: {r[:120]}"


def test_program(runner, text, shape, cols, tag):
    """Evaluates, then runs every column. Returns {status, eval_reason, results}."""
    d = tempfile.mkdtemp(prefix="p", dir=runner.work)
    tsl = os.path.join(d, f"{tag}.tsl")
    with open(tsl, "w") as f:
        f.write(text)
    status, reason = runner.eval(tsl, shape)
    res = {"status": status, "eval_reason": reason, "results": []}
    if status == "pass":
        res["results"] = [runner.run(c, tsl, shape) for c in cols]
    elif status == "bug":
        res["results"] = [{"column": "interp", "outcome": "bug", "reason": reason, "known": None,
                           "command": f"{runner.tessel} eval P.tsl --shape {shape}", "output": reason}]
    shutil.rmtree(d, ignore_errors=True)
    return res


# --- minimisation -----------------------------------------------------------------------------

def _nodes_with_parents(e, parent=None, slot=None):
    yield e, parent, slot
    for i, c in enumerate(e.children):
        yield from _nodes_with_parents(c, e, i)


def _candidates(p):
    """Smaller variants of program p (each a fresh deep copy), most promising first."""
    out = []
    # drop a statement nobody reads (an output with another output left)
    for k, s in enumerate(p.stmts):
        if len(p.outputs) < 2 or s.out not in p.outputs:
            continue
        readers = [t for t in p.stmts if any(e.kind == "read" and e.tensor is s.out for e in t.rhs.walk())]
        writers = [t for t in p.stmts if t.out is s.out]
        if readers:
            continue
        q = copy.deepcopy(p)
        gone = [q.stmts[p.stmts.index(w)] for w in writers]
        q.stmts = [t for t in q.stmts if t not in gone]
        q.outputs = [t for t in q.outputs if t is not gone[0].out]
        out.append(q)
    # shrink sizes
    for name, v in p.params.items():
        for nv in sorted({1, 2, v // 2, v - 1}):
            if 1 <= nv < v:
                q = copy.deepcopy(p)
                q.params[name] = nv
                out.append(q)
    # replace an expression by one of its operands of the same dtype
    for k, s in enumerate(p.stmts):
        nodes = list(_nodes_with_parents(s.rhs))
        for n, (node, parent, slot) in enumerate(nodes):
            for ci, child in enumerate(node.children):
                if child.dt != node.dt or child.kind == "lit":
                    continue
                q = copy.deepcopy(p)
                qn = list(_nodes_with_parents(q.stmts[k].rhs))
                qnode, qparent, qslot = qn[n]
                repl = qnode.children[ci]
                if qparent is None:
                    q.stmts[k].rhs = repl
                else:
                    qparent.children[qslot] = repl
                out.append(q)
    return out


def minimize(runner, prog, col, sig, budget_s):
    """The smallest variant of prog (greedy) that still fails on `col` with the same signature."""
    deadline = time.monotonic() + budget_s
    best, tries = prog, 0
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for q in _candidates(best):
            if time.monotonic() >= deadline:
                break
            tries += 1
            try:
                text, shape = q.render(), q.shape_arg()
            except Exception:  # noqa: BLE001 - a variant the renderer cannot express
                continue
            if len(text) >= len(best.render()) and shape == best.shape_arg():
                continue
            r = test_program(runner, text, shape, [col], "min")
            if r["status"] != "pass":
                continue
            got = r["results"][0]
            if got["outcome"] in ("bug", "known") and signature(col.name, got["reason"]) == sig:
                best = q
                improved = True
                break
    return best, tries


# --- reproducers and the corpus ---------------------------------------------------------------

def header(shape, columns, found, outcome, command):
    lines = ["# tessel program-fuzz reproducer (scripts/program_fuzz.py --replay THIS_FILE)",
             f"# shape: {shape}", f"# columns: {','.join(columns)}"]
    if found:
        lines.append(f"# found: {found}")
    if outcome:
        lines.append(f"# outcome: {outcome[:300]}")
    if command:
        lines.append(f"# command: {command}")
    return "\n".join(lines) + "\n"


def write_reproducer(out_dir, name, text, shape, columns, found, result):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".tsl")
    cmd = result["command"].replace(result["command"].split()[2], path, 1) if len(result["command"].split()) > 2 else ""
    with open(path, "w") as f:
        f.write(header(shape, columns, found, f"{result['outcome']}: {result['reason']}", cmd))
        f.write(text)
    with open(os.path.join(out_dir, name + ".log"), "w") as f:
        f.write(result["command"] + "\n\n" + result["output"])
    return path


def read_corpus_file(path):
    with open(path) as f:
        text = f.read()
    meta = {}
    for line in text.splitlines():
        m = re.match(r"^#\s*(shape|columns|known):\s*(.*)$", line)
        if m:
            meta[m.group(1)] = m.group(2).strip()
    if "shape" not in meta or "columns" not in meta:
        raise SystemExit(f"program_fuzz.py: {path}: needs '# shape:' and '# columns:' header lines")
    return text, meta


def replay(args, runner):
    files = []
    for p in args.replay:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".tsl"))
        else:
            files.append(p)
    if not files:
        sys.exit("program_fuzz.py: --replay: no .tsl files")
    failed = 0
    table = collections.defaultdict(collections.Counter)

    def one(path):
        text, meta = read_corpus_file(path)
        expect = {}  # column -> the outcome it must have: pass, or refused where written `COLUMN=refused`
        for c in meta["columns"].split(","):
            name, _, want = c.strip().partition("=")
            if name:
                expect[name] = want or "pass"
        cols = [column_by_name(c) for c in expect]
        r = test_program(runner, text, meta["shape"], cols, os.path.basename(path)[:-4])
        known = meta.get("known")
        if known and known not in {k[0] for k in KNOWN_ISSUES}:
            raise SystemExit(f"program_fuzz.py: {path}: '# known: {known}' is not in KNOWN_ISSUES")
        for x in r["results"]:
            x["expected"] = expect.get(x["column"], "pass")
            if known and x["outcome"] == "bug":  # this file's own known issue (one the reason cannot name)
                x["outcome"], x["known"] = "known", known
        return path, r

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for path, r in pool.map(one, files):
            name = os.path.relpath(path, SOURCE_DIR)
            if r["status"] != "pass":
                failed += 1
                print(f"FAIL  {name}: the interpreter: {r['status']}: {r['eval_reason']}")
                continue
            bad = [x for x in r["results"] if x["outcome"] not in (x["expected"], "known", "skipped")]
            for x in r["results"]:
                table[x["column"]][x["outcome"]] += 1
            if bad:
                failed += 1
                for x in bad:
                    print(f"FAIL  {name} [{x['column']}]: {x['outcome']} (expected {x['expected']}): {x['reason']}\n"
                          f"      {x['command']}")
                    print("      " + "\n      ".join(x["output"].strip().splitlines()[-12:]))
            else:
                notes = [f"{x['column']}: known {x['known']}" for x in r["results"] if x["outcome"] == "known"]
                print(f"ok    {name}" + (f" ({'; '.join(notes)})" if notes else ""))
    print(f"\nreplayed {len(files)} corpus programs: {len(files) - failed} passed, {failed} failed")
    return 1 if failed else 0


# --- the fuzzing loop -------------------------------------------------------------------------

def print_table(cols, table, programs, invalid, elapsed):
    print(f"\nprogram fuzz: {programs} programs ({invalid} invalid, skipped) in {elapsed:.0f} s")
    w = max(len(c) for c in cols + ["column"])
    print(f"{'column':<{w}}  " + "  ".join(f"{o:>7}" for o in OUTCOMES))
    for c in cols:
        print(f"{c:<{w}}  " + "  ".join(f"{table[c][o]:>7}" for o in OUTCOMES))


def fuzz(args, runner, cols):
    start = time.monotonic()
    deadline = start + args.seconds if args.seconds else None
    table = collections.defaultdict(collections.Counter)
    bugs = collections.OrderedDict()    # signature -> list of (index, result)
    invalid = []
    refusals = collections.Counter()
    programs = 0
    lock = threading.Lock()
    indices = [args.index] if args.index is not None else None
    counter = iter(indices) if indices else iter(range(args.start, 1 << 62))
    limit = args.count if args.count else (1 if indices else None)

    def next_index():
        nonlocal programs
        with lock:
            if deadline and time.monotonic() >= deadline:
                return None
            if limit is not None and programs >= limit:
                return None
            programs += 1
            return next(counter, None)

    def worker():
        while True:
            i = next_index()
            if i is None:
                return
            prog = program_fuzz_gen.generate(args.seed, i)
            text, shape = prog.render(), prog.shape_arg()
            r = test_program(runner, text, shape, cols, f"s{args.seed}_{i}")
            with lock:
                if r["status"] == "invalid":
                    invalid.append((i, r["eval_reason"]))
                    continue
                for x in r["results"]:
                    table[x["column"]][x["outcome"]] += 1
                    if x["outcome"] == "refused":
                        refusals[signature(x["column"], x["reason"])] += 1
                    if x["outcome"] in ("bug", "known"):
                        sig = signature(x["column"], x["reason"])
                        bugs.setdefault(sig, []).append((i, x, prog))
                if args.verbose:
                    line = " ".join(f"{x['column']}={x['outcome']}" for x in r["results"])
                    print(f"[{i}] {' '.join(prog.notes)}: {line}", flush=True)

    threads = [threading.Thread(target=worker) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    col_names = [c.name for c in cols]
    if any(table["interp"].values()):
        col_names = ["interp"] + col_names
    print_table(col_names, table, programs, len(invalid), elapsed)

    new_bugs = 0
    if refusals:
        print("\nmost frequent refusals (runs):")
        for sig, n in refusals.most_common(6):
            print(f"  {n:>5}  {sig[:150]}")
    if invalid:
        print(f"\ninvalid programs (generator errors, {len(invalid)}):")
        for i, why in invalid[:10]:
            print(f"  seed {args.seed} program {i}: {why}")
    if bugs:
        print("\nbugs (signature: programs; first reproducer):")
    minimised = set()  # (program, reason without its column family): one reproducer for a shared failure
    for sig, hits in bugs.items():
        i, x, prog = hits[0]
        known = x["known"]
        if not known:
            new_bugs += 1
        print(f"  {'known ' + known if known else 'NEW'}  {sig}  ({len(hits)} runs, first: seed {args.seed} program {i})")
        print(f"      {x['reason'][:300]}")
        shared = (i, sig.split(": ", 1)[1])
        if args.out and not known and shared in minimised:
            print("      (the same failure as a reproducer above)")
        elif args.out and not known:
            minimised.add(shared)
            col = column_by_name(x["column"])
            small, tries = prog, 0
            if args.minimize_seconds > 0:
                small, tries = minimize(runner, prog, col, sig, args.minimize_seconds)
            r = test_program(runner, small.render(), small.shape_arg(), [col], "repro")
            res = r["results"][0] if r["results"] else x
            cols_hit = sorted({h[1]["column"] for h in hits if h[0] == i})
            name = f"s{args.seed}_p{i}_" + hashlib.sha1(sig.encode()).hexdigest()[:8]
            path = write_reproducer(args.out, name, small.render(), small.shape_arg(), cols_hit,
                                    f"scripts/program_fuzz.py --seed {args.seed} --index {i}", res)
            print(f"      reproducer {os.path.relpath(path)} (minimised in {tries} tries)")
    if args.json:
        doc = {"seed": args.seed, "programs": programs, "invalid": len(invalid), "seconds": round(elapsed, 1),
               "columns": {c: {o: table[c][o] for o in OUTCOMES} for c in col_names},
               "bugs": [{"signature": sig, "known": hits[0][1]["known"], "runs": len(hits),
                         "first_program": hits[0][0], "reason": hits[0][1]["reason"],
                         "command": hits[0][1]["command"]} for sig, hits in bugs.items()],
               "refusals": dict(refusals.most_common()),
               "invalid_programs": [{"program": i, "reason": why} for i, why in invalid]}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
    if new_bugs:
        print(f"\nprogram fuzz: {new_bugs} new bug signature(s); replay one with "
              f"scripts/program_fuzz.py --seed {args.seed} --index I")
    if invalid:
        print(f"\nprogram fuzz: {len(invalid)} invalid program(s): a generator defect "
              f"(scripts/program_fuzz_gen.py must produce only programs tessel accepts)")
    return 1 if new_bugs or invalid else 0


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--tessel", default=os.path.join(SOURCE_DIR, "build", "compiler", "cli", "tessel"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=0, help="time budget (programs in flight finish)")
    ap.add_argument("--count", type=int, default=0, help="number of programs (default: 20 without --seconds)")
    ap.add_argument("--start", type=int, default=0, help="first program index")
    ap.add_argument("--index", type=int, help="only program I of the seed")
    ap.add_argument("--targets", default="c,davinci-910,davinci-310,sm75,sm90")
    ap.add_argument("--sync", default="naive,pruned")
    ap.add_argument("--gpu-run", action="store_true",
                    help="GPU columns run each program on this machine's GPU (tessel run --verify full) instead of NVRTC only")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60, help="seconds per command")
    ap.add_argument("--out", default=os.path.join(SOURCE_DIR, "build", "program_fuzz"),
                    help="directory for reproducers ('' for none)")
    ap.add_argument("--json", help="write the summary as JSON")
    ap.add_argument("--minimize-seconds", type=float, default=60)
    ap.add_argument("--replay", nargs="+", metavar="FILE_OR_DIR", help="replay corpus files; each must pass")
    ap.add_argument("--print", action="store_true", help="print program --index of --seed and exit")
    ap.add_argument("--verbose", "-v", action="store_true", help="a line per program")
    ap.add_argument("--nvrtc-compile", help=argparse.SUPPRESS)
    ap.add_argument("--arch", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if not a.seconds and not a.count and a.index is None:
        a.count = 20
    return a


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.nvrtc_compile:
        return nvrtc_compile(args.nvrtc_compile, args.arch)
    if args.print:
        p = program_fuzz_gen.generate(args.seed, args.index or 0)
        cols = make_columns([t for t in args.targets.split(",") if t], [s for s in args.sync.split(",") if s], args.gpu_run)
        print(header(p.shape_arg(), [c.name for c in cols], f"scripts/program_fuzz.py --seed {args.seed} --index {args.index or 0}",
                     None, None) + p.render(), end="")
        return 0
    if not os.access(args.tessel, os.X_OK):
        sys.exit(f"program_fuzz.py: --tessel {args.tessel}: not an executable")
    args.tessel = os.path.abspath(args.tessel)
    with tempfile.TemporaryDirectory(prefix="tessel-program-fuzz-") as work:
        runner = Runner(args.tessel, args.timeout, work)
        if args.replay:
            return replay(args, runner)
        cols = make_columns([t for t in args.targets.split(",") if t], [s for s in args.sync.split(",") if s], args.gpu_run)
        print(f"program fuzz: seed {args.seed}, columns {', '.join(c.name for c in cols)}"
              f"{'' if runner.nvrtc else ' (NVRTC not found: GPU columns compile only)'}", flush=True)
        return fuzz(args, runner, cols)


if __name__ == "__main__":
    sys.exit(main())
