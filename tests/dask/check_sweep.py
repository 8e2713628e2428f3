#!/usr/bin/python3
"""ctest dask.*: scripts/sweep.py on a real Dask cluster on 127.0.0.1 (issue 18): a scheduler and two
worker processes (no nanny: a killed worker stays dead) started here, a sweep of the 45 tile
configurations of a 64^3 GEMM on davinci-910.

  complete:    every configuration measured and stored exactly once;
  kill_worker: one worker SIGKILLed mid-sweep: the sweep still completes, nothing lost or duplicated,
               and the tasks it was running ran again elsewhere (the execution trace);
  resume:      the sweep client SIGKILLed mid-sweep, then re-run: the re-run measures exactly the
               configurations the store lacks, nothing stored twice.

  check_sweep.py TESSEL MODE WORKDIR"""
import collections
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPACE = "m=16-64:pow2/16,n=16-64:pow2/16,k=16-64:pow2/16|32"
CONFIGS = 45  # the space's fitting configurations (tessel tune --dump-space)


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n") and line.strip()]


def keys(records):
    return [(r["key_op"], r["key_shape"], r["tile"], r["variant"]) for r in records]


def trace(path, since=0.0):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip() and json.loads(line)["t"] >= since]


def wait_for(pred, timeout, what):
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout:
            fail("timed out waiting for " + what)
        time.sleep(0.1)


class Cluster:
    def __init__(self, work, workers=2):
        self.port = free_port()
        self.addr = "tcp://127.0.0.1:%d" % self.port
        self.trace = os.path.join(work, "trace.jsonl")
        env = dict(os.environ, TESSEL_DASK_TRACE=self.trace)
        log = open(os.path.join(work, "cluster.log"), "w")
        self.scheduler = subprocess.Popen(["dask-scheduler", "--host", "127.0.0.1", "--port", str(self.port),
                                           "--dashboard-address", ":0", "--no-show"], stdout=log, stderr=log, env=env)
        self.workers = [subprocess.Popen(["dask-worker", self.addr, "--nthreads", "1", "--no-nanny",
                                          "--host", "127.0.0.1", "--dashboard-address", ":0", "--name", "w%d" % i,
                                          "--local-directory", os.path.join(work, "w%d" % i)],
                                         stdout=log, stderr=log, env=env) for i in range(workers)]
        from distributed import Client
        with Client(self.addr, timeout=60) as c:
            c.wait_for_workers(workers, timeout=120)

    def close(self):
        for p in self.workers + [self.scheduler]:
            if p.poll() is None:
                p.terminate()
        for p in self.workers + [self.scheduler]:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def sweep(tessel, cluster, out):
    return subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "scripts", "sweep.py"),
                             os.path.join(ROOT, "workloads", "matmul.tsl"), "--target",
                             os.path.join(ROOT, "isa", "targets", "davinci-910.yaml"), "--shape", "M=64,N=64,K=64",
                             "--space", SPACE, "--out", out, "--scheduler", cluster.addr, "--tessel", tessel,
                             "--no-plot"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, what):
    out, err = p.communicate(timeout=240)
    if p.returncode != 0:
        fail("%s exited %d\n%s\n%s" % (what, p.returncode, out, err[-3000:]))
    return out


def check_complete(store, what):
    ks = keys(store_lines(store))
    dup = [k for k, n in collections.Counter(ks).items() if n > 1]
    if dup:
        fail("%s: stored more than once: %s" % (what, dup[:3]))
    if len(ks) != CONFIGS:
        fail("%s: %d configurations stored, expected %d" % (what, len(ks), CONFIGS))
    bad = [r for r in store_lines(store) if not r["ok"]]
    if bad:
        fail("%s: failed measurements: %s" % (what, bad[:2]))
    return set(ks)


def main():
    tessel, mode, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cluster = Cluster(work)
    out = os.path.join(work, "sweep")
    store = out + ".jsonl"
    try:
        if mode == "complete":
            text = finish(sweep(tessel, cluster, out), "the sweep")
            check_complete(store, "complete")
            if "sweep: %d configurations: %d measured, 0 already" % (CONFIGS, CONFIGS) not in text:
                fail("unexpected summary: " + text)
            runs = collections.Counter(tuple(e["key"]) for e in trace(cluster.trace))
            if len(runs) != CONFIGS or max(runs.values()) != 1:
                fail("executions per configuration: %s" % sorted(runs.values()))
            # a second run finds everything stored and measures nothing
            t1 = time.time()
            text = finish(sweep(tessel, cluster, out), "the re-run")
            if "sweep: %d configurations: 0 measured, %d already" % (CONFIGS, CONFIGS) not in text:
                fail("the re-run measured again: " + text)
            if trace(cluster.trace, t1):
                fail("the re-run executed tasks")
        elif mode == "kill_worker":
            p = sweep(tessel, cluster, out)
            wait_for(lambda: len(store_lines(store)) >= 8 or p.poll() is not None, 200, "8 stored measurements")
            victim = cluster.workers[0]
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            killed_at = time.time()
            before = set(keys(store_lines(store)))
            finish(p, "the sweep with a killed worker")
            ks = check_complete(store, "kill_worker")
            runs = collections.Counter(tuple(e["key"]) for e in trace(cluster.trace))
            rerun = [k for k, n in runs.items() if n > 1]
            print("kill_worker: worker killed after %d stored; %d configurations ran twice (lost with the worker): %s" % (
                len(before), len(rerun), rerun))
            if set(runs) != ks:
                fail("executed and stored configurations differ")
            if any(n > 2 for n in runs.values()):
                fail("a configuration ran more than twice: %s" % runs.most_common(1))
            if not rerun:
                fail("no task was lost with the killed worker: the kill did not happen mid-sweep")
            if any(k in before for k in rerun):
                fail("a stored configuration ran again")
            del killed_at
        elif mode == "resume":
            p = sweep(tessel, cluster, out)
            wait_for(lambda: len(store_lines(store)) >= 15 or p.poll() is not None, 200, "15 stored measurements")
            p.send_signal(signal.SIGKILL)
            p.communicate()
            stored = set(keys(store_lines(store)))
            if len(stored) >= CONFIGS:
                fail("the sweep finished before it was killed")
            missing = CONFIGS - len(stored)
            time.sleep(1.0)
            t1 = time.time()
            text = finish(sweep(tessel, cluster, out), "the re-run")
            expect = "sweep: %d configurations: %d measured, %d already" % (CONFIGS, missing, len(stored))
            if expect not in text:
                fail("expected '%s' in: %s" % (expect, text))
            ks = check_complete(store, "resume")
            again = [tuple(e["key"]) for e in trace(cluster.trace, t1)]
            if any(k in stored for k in again):
                fail("the re-run measured a stored configuration")
            if len(again) > missing or set(again) - (ks - stored):
                fail("the re-run ran %d tasks for %d missing" % (len(again), missing))
            print("resume: killed with %d of %d stored; the re-run measured the %d missing (%d executions)" % (
                len(stored), CONFIGS, missing, len(again)))
        else:
            fail("unknown mode " + mode)
    finally:
        cluster.close()
    print("ok: " + mode)


if __name__ == "__main__":
    main()
