"""The measurement engine of scripts/sweep.py, tuning_curve.py, dse.py and dask_scaling.py (issue 18):
Dask distributed runs measurements, one task per measurement, on a running cluster
(`--scheduler tcp://HOST:8786`) or on a LocalCluster with one single-threaded worker process per
core (`--workers N`).

A measurement is (operator, shape, tile, description variant): one child `tessel tune OP --def D
--shape S --target T [--set K=V,...] --measure TILE --jobs 1` on a worker, whose stdout is one JSON
log record (compiler/cli/cmd_tune.cc). Tasks are idempotent (the simulator is deterministic and a
task writes nothing), so a task lost with a killed worker is simply run again by Dask on another.

Results go to an append-only JSON-lines store written only by the client process: one record per
key (operator, shape, tile, variant), whole lines appended under an flock and fsync'd; a re-run
reads it first and submits only what it lacks, and a key already in the store is never written
again. Records are tuning-log records (op, target, shape, tile, ok, cost, unit, ...) plus `file`,
`set` and `variant`, so `tessel tune --log STORE` reads the store of a one-variant run as its log.

Workers need the tessel binary and the workload files at the same paths (a shared file system
on a cluster); this module is uploaded to the workers of a remote scheduler.
Debian's python3-distributed; no other dependency."""
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- measurements (tasks)

def canonical_shape(shape):
    """'M=2,K=3' or {'M': 2, 'K': 3} -> 'K=3,M=2' (names sorted, as tessel's logs write shapes)."""
    if isinstance(shape, dict):
        items = shape.items()
    else:
        items = (e.split("=", 1) for e in shape.split(",") if e)
    return ",".join("%s=%d" % (k.strip(), int(v)) for k, v in sorted(items, key=lambda kv: kv[0].strip()))


def canonical_sets(sets):
    """Description overrides 'L1.capacity_bytes=1MiB,cores=8' or a dict -> sorted 'K=V,...' ('' for none)."""
    if not sets:
        return ""
    if isinstance(sets, dict):
        items = sets.items()
    else:
        items = (e.split("=", 1) for e in sets.split(",") if e)
    return ",".join("%s=%s" % (k.strip(), str(v).strip()) for k, v in sorted(items, key=lambda kv: kv[0].strip()))


def variant_id(target, sets):
    """The description variant's identity: a hash of the description file's bytes and the overrides."""
    with open(target, "rb") as f:
        h = hashlib.sha256(f.read())
    h.update(b"\0" + canonical_sets(sets).encode())
    return h.hexdigest()[:16]


class Task:
    """One measurement. `file` and `target` are absolute paths (workers may run elsewhere)."""
    __slots__ = ("file", "defn", "shape", "tile", "target", "sets", "variant")

    def __init__(self, file, defn, shape, tile, target, sets="", variant=None):
        self.file = os.path.abspath(file)
        self.defn = defn or ""
        self.shape = canonical_shape(shape)
        self.tile = tile or "default"
        self.target = os.path.abspath(target)
        self.sets = canonical_sets(sets)
        self.variant = variant or variant_id(self.target, self.sets)

    def op(self):
        return "%s:%s" % (os.path.basename(self.file), self.defn)

    def key(self):
        return (self.op(), self.shape, self.tile, self.variant)

    def dask_key(self):
        return "measure-" + hashlib.sha256("|".join(self.key()).encode()).hexdigest()[:24]

    def command(self, tessel, timeout_s):
        return [tessel, "tune", self.file, "--target", self.target, "--shape", self.shape, "--measure", self.tile,
                "--jobs", "1", "--no-progress", "--measure-timeout", str(timeout_s)] + self.def_and_sets()

    def def_and_sets(self):
        """The command's --def and --set arguments, where given."""
        return (["--def", self.defn] if self.defn else []) + (["--set", self.sets] if self.sets else [])

    def __getstate__(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state):
        for k, v in state.items():
            setattr(self, k, v)


class ProgramTask(Task):
    """One measurement of a whole def run as a program of kernels (a model): `tessel run FILE --def D
    --target T --shape S [--set ...] --verify V --report R`, its cost the program's total cycles. Its key's
    tile is "program" (tune's `--measure` compiles one kernel; a model is many)."""
    __slots__ = ("verify",)

    def __init__(self, file, defn, shape, target, sets="", verify="auto", variant=None):
        super().__init__(file, defn, shape, "program", target, sets, variant)
        self.verify = verify

    def command(self, tessel, report):
        return [tessel, "run", self.file, "--target", self.target, "--shape", self.shape, "--verify", self.verify,
                "--report", report] + self.def_and_sets()

    def __getstate__(self):
        return {k: getattr(self, k) for k in Task.__slots__ + ProgramTask.__slots__}


def measure_program(task, tessel, timeout_s):
    """A ProgramTask's record: cost = the report's total cycles, with the kernels' cycles, the arena bytes and
    the verification; ok false with tessel's last error line (or the timeout) otherwise."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix="tessel_dse_") as tmp:
        report = os.path.join(tmp, "report.json")
        try:
            r = subprocess.run(task.command(tessel, report), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=timeout_s, preexec_fn=_die_with_parent)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": "timed out after %d s" % timeout_s, "retryable": True}
        if r.returncode != 0 or not os.path.exists(report):
            err = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
            return {"ok": False, "error": "tessel exited %d: %s" % (r.returncode, err), "retryable": r.returncode != 1}
        with open(report) as f:
            rep = json.load(f)
    if not rep.get("verified", True):
        return {"ok": False, "error": "not verified: %s" % rep.get("first_mismatch", ""), "retryable": False}
    kernels = [{"kernel": k.get("kernel", k.get("name", "")), "cycles": k.get("cycles", k.get("total_cycles"))}
               for k in rep.get("kernels", [])]
    return {"ok": True, "cost": float(rep["total_cycles"]), "unit": "cycles", "kernels": kernels,
            "arena_bytes": (rep.get("memory_plan") or {}).get("arena_bytes"), "verify": rep.get("verify"),
            "description_hash": rep.get("description_hash")}


def _trace(task):
    """With TESSEL_DASK_TRACE=FILE in a worker's environment, one line per execution (tests count them)."""
    path = os.environ.get("TESSEL_DASK_TRACE")
    if not path:
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({"key": list(task.key()), "pid": os.getpid(), "t": time.time()}) + "\n")


def _die_with_parent():
    """In the measurement child before exec: SIGKILL when the worker dies (Linux prctl PR_SET_PDEATHSIG), so a
    killed worker leaves no simulation running."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)
    except OSError:
        pass


def measure(task, tessel, timeout_s=300):
    """Runs on a worker: the child tessel process; a record (ok false with the error on failure). Never raises
    for a failing configuration; writes nothing but the optional trace."""
    _trace(task)
    t0 = time.time()
    if isinstance(task, ProgramTask):
        rec = measure_program(task, tessel, timeout_s)
        rec.update({"op": task.defn, "shape": task.shape, "file": task.file, "def": task.defn, "key_op": task.op(),
                    "key_shape": task.shape, "tile": task.tile, "set": task.sets, "variant": task.variant,
                    "task_wall_s": time.time() - t0, "worker_host": os.uname().nodename})
        rec.setdefault("unit", "cycles")
        return rec
    r = subprocess.run(task.command(tessel, timeout_s), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       preexec_fn=_die_with_parent)
    rec = None
    for line in r.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
    if r.returncode != 0 or rec is None:
        err = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        rec = {"op": task.defn, "shape": task.shape, "tile": task.tile, "ok": False, "unit": "cycles",
               "error": "tessel exited %d: %s" % (r.returncode, err),
               # exit 1: the input is wrong (a variant the validator refuses): the same every time. Else (no
               # device, exit 2; a signal; an internal error) it may not recur on another worker or run.
               "retryable": r.returncode != 1}
    elif not rec.get("ok"):
        rec["retryable"] = "timed out" in rec.get("error", "")
    rec.update({"file": task.file, "def": task.defn, "key_op": task.op(), "key_shape": task.shape, "tile": task.tile,
                "set": task.sets, "variant": task.variant, "task_wall_s": time.time() - t0})
    rec["worker_host"] = os.uname().nodename
    return rec


def record_key(rec):
    return (rec["key_op"], rec["key_shape"], rec["tile"], rec["variant"])


# ---------------------------------------------------------------- the store

MAX_ATTEMPTS = 2  # a failed measurement is run again until it has failed this many times


class Store:
    """Append-only JSON lines, written by the client only. A key is settled (not measured again) once it has a
    successful record, a failure that would recur (`"retryable": false`: tessel refused the input), or
    MAX_ATTEMPTS failed ones: any other failure (a timeout, a missing device, a crashed worker) is stored as a
    failure and measured again by a later run, never taken for a result. A torn last line (a client killed
    mid-write) is cut off before the next append."""

    def __init__(self, path):
        self.path = path
        self.records = {}
        self.failures = {}
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        self._read()

    def _read(self):
        self.records, self.failures = {}, {}
        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            self._read_text(f.read())

    def _note(self, rec):
        key = record_key(rec)
        if rec.get("ok"):
            if not (self.records.get(key) or {}).get("ok"):
                self.records[key] = rec
        else:
            self.failures[key] = self.failures.get(key, 0) + 1
            if key not in self.records:
                self.records[key] = rec

    def __contains__(self, key):
        """Whether `key` is settled: measured, refused for good, or failed MAX_ATTEMPTS times."""
        rec = self.records.get(key)
        return rec is not None and (rec.get("ok") or rec.get("retryable", True) is False or
                                    self.failures.get(key, 0) >= MAX_ATTEMPTS)

    def failed_before(self, key):
        return self.failures.get(key, 0)

    def get(self, key):
        return self.records.get(key)

    def append(self, rec):
        """Writes `rec` unless its key is settled (re-read under the lock: another client may share the store).
        Returns whether it was written."""
        key = record_key(rec)
        with open(self.path, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            text = f.read()
            if text and not text.endswith("\n"):
                cut = text.rfind("\n") + 1
                f.truncate(cut)
                print("tessel_dask: %s: dropped a torn last line (%d bytes)" % (self.path, len(text) - cut),
                      file=sys.stderr)
                text = text[:cut]
            self.records, self.failures = {}, {}
            self._read_text(text)
            if key in self:
                return False
            line = json.dumps(rec, sort_keys=True) + "\n"
            f.seek(0, os.SEEK_END)
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
            self._note(rec)
            return True

    def _read_text(self, text):
        for line in text.splitlines(keepends=True):
            if line.endswith("\n") and line.strip():
                rec = json.loads(line)
                if "key_op" in rec:
                    self._note(rec)


# ---------------------------------------------------------------- progress

def _clock(s):
    if not (s >= 0) or s > 1e7:
        return "?"
    t = int(s + 0.5)
    return "%d:%02d:%02d" % (t // 3600, t // 60 % 60, t % 60) if t >= 3600 else "%d:%02d" % (t // 60, t % 60)


class Progress:
    """done/total, best so far, rate, ETA: one '\\r' line on a terminal, a plain line per step otherwise (the same
    line as tessel's compiler/tune/progress.h)."""

    def __init__(self, label, total, stream=None, enabled=True):
        self.label, self.total = label, total
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty()
        self.enabled = enabled
        self.t0 = time.time()
        self.last = 0.0
        self.open = False

    @staticmethod
    def text(label, done, total, fresh, best, elapsed):
        rate = fresh / elapsed if elapsed > 0 and fresh > 0 else 0
        eta = "0:00" if done >= total else _clock((total - done) / rate) if rate > 0 else "?"
        return "%s: %d/%d  best %s  %s/s  ETA %s" % (label, done, total, best or "-",
                                                     ("%.3g" % rate) if rate > 0 else "-", eta)

    def update(self, done, fresh, best=""):
        if not self.enabled:
            return
        now = time.time()
        line = self.text(self.label, done, self.total, fresh, best, now - self.t0)
        if not self.terminal:
            print(line, file=self.stream, flush=True)
            return
        if self.open and done < self.total and now - self.last < 0.2:
            return
        self.last = now
        self.stream.write("\r" + line + "   ")
        self.stream.flush()
        self.open = True

    def finish(self):
        if self.enabled and self.terminal and self.open:
            self.stream.write("\n")
            self.stream.flush()
        self.open = False


# ---------------------------------------------------------------- the cluster

def add_cluster_args(ap):
    ap.add_argument("--scheduler", help="address of a running Dask scheduler, e.g. tcp://HOST:8786 "
                    "(default: a LocalCluster on this machine)")
    ap.add_argument("--workers", type=int, default=0,
                    help="LocalCluster worker processes (default: one per core); ignored with --scheduler")
    ap.add_argument("--gpus", default="0",
                    help="GPU measurements: a LocalCluster of one worker per GPU, each pinned to its device "
                    "(CUDA_VISIBLE_DEVICES); N, or 'all' for every GPU nvidia-smi lists (default 0: CPU workers). With "
                    "--scheduler, start one worker per GPU yourself, each with its own CUDA_VISIBLE_DEVICES")
    ap.add_argument("--measure-timeout", type=float, default=300, help="seconds one measurement may take")


def visible_gpus():
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES's entries where it is set, else nvidia-smi's list."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g for g in env.split(",") if g.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, _ in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]


def gpu_count(text):
    """--gpus: 'all' or a number; an error naming the value when it is neither or exceeds the GPUs here."""
    have = visible_gpus()
    if text in ("", "0"):
        return 0
    n = len(have) if text == "all" else int(text) if text.isdigit() else -1
    if n < 0:
        sys.exit("--gpus: %r is not a number or 'all'" % text)
    if n == 0 or n > len(have):
        sys.exit("--gpus %s: %d GPU(s) visible here" % (text, len(have)))
    return n


def _pin_gpu(device):
    """On a worker: every child it starts (the tessel measurement) sees only `device`."""
    os.environ["CUDA_VISIBLE_DEVICES"] = device
    return device


def open_client(scheduler=None, workers=0, quiet=True, gpus=0):
    """A distributed.Client on `scheduler`, or on a new LocalCluster of `workers` (0: os.cpu_count())
    single-threaded worker processes, or with `gpus` > 0 of one worker per GPU, each pinned to its own device
    (a measurement then never shares a GPU with another). Returns (client, cluster or None)."""
    import logging
    from distributed import Client, LocalCluster
    if quiet:
        logging.getLogger("distributed").setLevel(logging.ERROR)
    if scheduler:
        client = Client(scheduler)
        client.upload_file(os.path.abspath(__file__))  # workers elsewhere import this module for `measure`
        return client, None
    n = gpus or workers or os.cpu_count() or 1
    # Debian's distributed 2022.12 calls .decode() on NVML's device name, which newer pynvml
    # returns as str: on a GPU machine with pynvml the cluster fails to start. Measurements do not
    # need its GPU diagnostics.
    import dask
    dask.config.set({"distributed.diagnostics.nvml": False})
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                           silence_logs=logging.ERROR if quiet else logging.WARNING)
    client = Client(cluster)
    if gpus:
        devices = visible_gpus()
        addresses = sorted(client.scheduler_info()["workers"])
        for device, address in zip(devices, addresses):
            client.run(_pin_gpu, device, workers=[address])
    return client, cluster


def best_text(records, unit="cycles"):
    ok = [r for r in records if r.get("ok")]
    if not ok:
        return ""
    b = min(ok, key=lambda r: r["cost"])
    return "%.6g %s (%s)" % (b["cost"], b.get("unit", unit), b["tile"])


def run_tasks(client, tasks, store, tessel, label="measure", timeout_s=300, progress=True, best=best_text):
    """Measures every task whose key the store lacks on the cluster; appends each result to the store as it
    arrives. Returns {"total", "skipped", "measured", "written", "wall_s"}. Duplicate tasks (same key) count once.
    `best(records)`: the progress line's best-so-far text over the records done."""
    from distributed import as_completed
    tessel = os.path.abspath(tessel)
    unique = {}
    for t in tasks:
        unique.setdefault(t.key(), t)
    todo = [t for k, t in unique.items() if k not in store]
    skipped = len(unique) - len(todo)
    bar = Progress(label, len(unique), enabled=progress)
    done_records = [store.get(k) for k in unique if k in store]
    t0 = time.time()
    bar.update(skipped, 0, best(done_records))
    futures = [client.submit(measure, t, tessel, timeout_s, key=t.dask_key(), pure=False, retries=1) for t in todo]
    written = measured = 0
    for fut in as_completed(futures):
        rec = fut.result()
        fut.release()
        measured += 1
        if store.append(rec):
            written += 1
        done_records.append(rec)
        bar.update(skipped + measured, measured, best(done_records))
    bar.finish()
    return {"total": len(unique), "skipped": skipped, "measured": measured, "written": written,
            "wall_s": time.time() - t0}


def find_tessel(explicit=None):
    if explicit:
        return os.path.abspath(explicit)
    for rel in ("build", "build-tune", "build-npu"):
        p = os.path.join(ROOT, rel, "compiler", "cli", "tessel")
        if os.path.exists(p):
            return p
    sys.exit("cannot find the tessel binary; build it (scripts/build.sh) or pass --tessel")


# ---------------------------------------------------------------- search strategies on Dask

def append_log(path, rec):
    """One tuning-log line under the log's flock (the lock tessel's compiler/tune/tuning_log.cc takes)."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(rec, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


class TuneRun:
    """One search (strategy, seed) of one problem, driven from here: `tessel tune --propose` gives the next
    batch from the run's log, Dask measures it (through the shared store: a configuration another run or an
    earlier sweep measured is not measured again), the client appends the batch to the log in order."""

    def __init__(self, file, defn, shape, target, space, strategy, seed, trials, log, model="analytic", sets=""):
        self.file, self.defn, self.shape, self.target, self.space = file, defn, shape, target, space
        self.strategy, self.seed, self.trials, self.log, self.model, self.sets = strategy, seed, trials, log, model, sets
        self.done = False
        self.logged = 0

    def propose(self, tessel, batch):
        cmd = [tessel, "tune", self.file, "--target", self.target, "--shape", self.shape, "--strategy", self.strategy,
               "--seed", str(self.seed), "--trials", str(self.trials), "--model", self.model, "--log", self.log,
               "--propose", str(batch), "--no-progress"]
        if self.defn:
            cmd += ["--def", self.defn]
        if self.space:
            cmd += ["--space", self.space]
        if self.sets:
            cmd += ["--set", self.sets]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit("tessel tune --propose failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-2000:]))
        return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]

    def task(self, tile):
        return Task(self.file, self.defn, self.shape, tile, self.target, self.sets)


def tune_runs(client, runs, store, tessel, batch=8, timeout_s=300, progress=True):
    """Drives `runs` (TuneRun) together, round by round: every unfinished run proposes its next batch, the union
    of what the store lacks is measured on Dask in one go, each run's batch is appended to its log. A run ends
    when it proposes nothing (its trials are logged or the space is exhausted)."""
    tessel = os.path.abspath(tessel)
    total = sum(r.trials for r in runs)
    bar = Progress("tune", total, enabled=progress)
    fresh = 0
    best = {}
    while True:
        proposals = []
        for r in runs:
            if r.done:
                continue
            p = r.propose(tessel, batch)
            if not p:
                r.done = True
                continue
            proposals.append((r, p))
        if not proposals:
            break
        tasks = [r.task(p["tile"]) for r, ps in proposals for p in ps]
        stats = run_tasks(client, tasks, store, tessel, timeout_s=timeout_s, progress=False)
        fresh += stats["measured"]
        for r, ps in proposals:
            for p in ps:
                m = store.get(r.task(p["tile"]).key())
                rec = {"op": p["op"], "target": p["target"], "shape": p["shape"], "tile": p["tile"], "ok": m["ok"],
                       "unit": m.get("unit", "cycles"), "strategy": r.strategy, "trial": r.logged + 1,
                       "predicted": p["predicted"], "wall_s": m.get("wall_s", 0)}
                rec["cost" if m["ok"] else "error"] = m["cost"] if m["ok"] else m.get("error", "")
                append_log(r.log, rec)
                r.logged += 1
                if m["ok"]:
                    best[r.strategy] = min(best.get(r.strategy, float("inf")), m["cost"])
        bar.update(sum(r.logged for r in runs), fresh,
                   "  ".join("%s %.6g" % kv for kv in sorted(best.items())))
    bar.finish()
