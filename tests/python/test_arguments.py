"""Misuse of the Python module (issue 31 item 6, python/tessel/_args.py): every bad argument raises
a tessel.Error subclass naming the argument (UsageError for a wrong type or value, UserError for a
file that does not exist), before a child process starts or a file is written; input names never
leave the temporary folder; a timeout kills the child's whole process group; a description that
never ends (/dev/zero) fails fast.

Run by ctest (python.module) as /usr/bin/python3 -m unittest with PYTHONPATH=build/python.
"""
import os
import resource
import tempfile
import threading
import time
import unittest

import numpy as np

import tessel

SRC = os.environ.get("TESSEL_SOURCE_DIR", tessel._config.SOURCE_DIR)
DAVINCI = os.path.join(SRC, "isa/targets/davinci-910.yaml")
MATMUL = os.path.join(SRC, "workloads/matmul.tsl")
SHAPE = {"M": 16, "N": 16, "K": 16}
A16 = np.ones((16, 16), np.float16)


class BadArgumentsNameTheArgument(unittest.TestCase):
    """Each case: the call, the exception class, the start of its message (the argument's name)."""

    def assert_raises(self, cls, starts, call):
        with self.assertRaises(tessel.Error) as e:
            call()
        self.assertIs(type(e.exception), cls, str(e.exception))
        self.assertTrue(str(e.exception).startswith(starts), f"{e.exception!s} does not start with {starts!r}")
        return str(e.exception)

    def test_shape(self):
        U = tessel.UsageError
        self.assert_raises(U, "shape['M']: expected an integer, got 'x'", lambda: tessel.run(MATMUL, target=DAVINCI, shape={"M": "x"}))
        self.assert_raises(U, "shape: expected a dict", lambda: tessel.run(MATMUL, target=DAVINCI, shape=5))
        self.assert_raises(U, "shape['M']: expected an integer, got True", lambda: tessel.compile(MATMUL, shape={"M": True}))
        self.assert_raises(U, "shape['M']: expected an integer, got 1.5", lambda: tessel.compile(MATMUL, shape={"M": 1.5}))
        self.assert_raises(U, "shape['M']: expected an integer in 1..", lambda: tessel.compile(MATMUL, shape={"M": 0}))
        self.assert_raises(U, "shape: 'M,N' is not a dimension name", lambda: tessel.compile(MATMUL, shape={"M,N": 4}))

    def test_set(self):
        U = tessel.UsageError
        self.assert_raises(U, "set: expected a dict", lambda: tessel.run(MATMUL, target=DAVINCI, shape=SHAPE, set=3))
        self.assert_raises(U, "set: expected (key, value) pairs, got 1", lambda: tessel.load_description(DAVINCI, set=[1, 2]))
        self.assert_raises(U, "set: 5 is not a description key", lambda: tessel.check_hierarchy(DAVINCI, set={5: 5}))
        self.assert_raises(U, "set['cores']: expected a number or a string", lambda: tessel.load_description(DAVINCI, set={"cores": None}))
        self.assert_raises(U, "set: expected a dict", lambda: tessel.overrides_text(3))
        # must not fire: a list of pairs and numpy numbers are overrides like a dict's
        self.assertEqual(tessel.load_description(DAVINCI, set=[("cores", np.int64(8))])["cores"], 8)

    def test_numbers(self):
        U = tessel.UsageError
        self.assert_raises(U, "trials: expected an integer, got 'many'", lambda: tessel.tune(MATMUL, target=DAVINCI, trials="many"))
        self.assert_raises(U, "trials: expected an integer in 1..", lambda: tessel.tune(MATMUL, target=DAVINCI, trials=0))
        self.assert_raises(U, "jobs: expected an integer, got 'x'", lambda: tessel.tune(MATMUL, target=DAVINCI, jobs="x"))
        self.assert_raises(U, "seed: expected an integer in 0..", lambda: tessel.run(MATMUL, shape=SHAPE, seed=-1))
        self.assert_raises(U, "seed: expected an integer, got 'a'", lambda: tessel.run(MATMUL, shape=SHAPE, seed="a"))
        self.assert_raises(U, "seed: expected an integer in 0..", lambda: tessel.tune(MATMUL, target=DAVINCI, seed=2**64))
        self.assert_raises(U, "measure_timeout: expected a positive", lambda: tessel.tune(MATMUL, target=DAVINCI, measure_timeout=0))
        self.assert_raises(U, "max_cycles: expected an integer, got 'x'",
                           lambda: tessel.simulate("halt\n", max_cycles="x"))
        for timeout in (-1, 0, float("nan"), float("inf"), "10"):
            self.assert_raises(U, "timeout: expected a", lambda: tessel.run(MATMUL, shape=SHAPE, timeout=timeout))
        self.assert_raises(U, "timeout: expected a", lambda: tessel.simulate("halt\n", timeout=-1))

    def test_strings_and_switches(self):
        U = tessel.UsageError
        self.assert_raises(U, "tile: expected a string, got 5", lambda: tessel.compile(MATMUL, target=DAVINCI, shape=SHAPE, tile=5))
        self.assert_raises(U, "sync: contains a NUL", lambda: tessel.run(MATMUL, target=DAVINCI, shape=SHAPE, sync="pruned\0"))
        self.assert_raises(U, "strategy: expected a string, got None", lambda: tessel.tune(MATMUL, target=DAVINCI, strategy=None))
        self.assert_raises(U, "no_tuned: expected True or False, got 'yes'", lambda: tessel.run(MATMUL, shape=SHAPE, no_tuned="yes"))
        self.assert_raises(U, "race_check: expected True or False", lambda: tessel.simulate("halt\n", race_check=None))
        self.assert_raises(U, "extra_args: expected a list of strings", lambda: tessel.run(MATMUL, shape=SHAPE, extra_args="--x"))

    def test_target_required(self):
        for call in (lambda: tessel.tune(MATMUL, target=None), lambda: tessel.compile(MATMUL, target=None),
                     lambda: tessel.run(MATMUL, target=None, shape=SHAPE)):
            self.assert_raises(tessel.UsageError, "target: required", call)

    def test_paths(self):
        U, E = tessel.UsageError, tessel.UserError
        self.assert_raises(E, "path: /nonexistent/op.tsl: no such file", lambda: tessel.run("/nonexistent/op.tsl", shape=SHAPE))
        self.assert_raises(E, "path: /nonexistent/op.tsl: no such file", lambda: tessel.compile("/nonexistent/op.tsl"))
        self.assert_raises(E, "path: /nonexistent/t.yaml: no such file", lambda: tessel.load_description("/nonexistent/t.yaml"))
        self.assert_raises(E, "path: /nonexistent/t.yaml: no such file", lambda: tessel.check_hierarchy("/nonexistent/t.yaml"))
        self.assert_raises(E, "target: /nonexistent/t.yaml: no such file", lambda: tessel.run(MATMUL, target="/nonexistent/t.yaml"))
        self.assert_raises(E, "program: /nonexistent/p.npu: no such file", lambda: tessel.simulate("/nonexistent/p.npu"))
        self.assert_raises(E, f"path: {SRC}: is a directory", lambda: tessel.run(SRC, shape=SHAPE))
        self.assert_raises(U, "path: expected a path (str or os.PathLike), got None", lambda: tessel.load_description(None))
        self.assert_raises(U, "path: expected a path (str or os.PathLike), got 5", lambda: tessel.check_hierarchy(5))
        self.assert_raises(U, "program: expected a path (str or os.PathLike), got 5", lambda: tessel.simulate(5))
        self.assert_raises(U, "hierarchy: expected a path", lambda: tessel.compile(MATMUL, shape=SHAPE, hierarchy=3))
        # program text (a str with a newline) is named `program` in the simulator's message, not by a temporary path
        self.assert_raises(E, "program:1:1: unknown mnemonic 'foo'", lambda: tessel.simulate("foo\n"))

    def test_inputs(self):
        U = tessel.UsageError
        run = lambda inputs: tessel.run(MATMUL, target=DAVINCI, shape=SHAPE, inputs=inputs)  # noqa: E731
        self.assert_raises(U, "inputs: expected a dict", lambda: run([A16]))
        self.assert_raises(U, "inputs['A']: dtype <U8 is not one tessel reads", lambda: run({"A": "notarray"}))
        self.assert_raises(U, "inputs['A']: dtype float64 is not one tessel reads", lambda: run({"A": np.ones((16, 16))}))
        # the CLI's checks of an input name the argument, not the temporary .npy
        self.assert_raises(U, "inputs['A']: has dtype f32 but input 'A' is f16", lambda: run({"A": A16.astype(np.float32)}))
        self.assert_raises(U, "inputs['A']: has shape [8, 16] but input 'A' needs [16, 16]", lambda: run({"A": A16[:8]}))
        self.assert_raises(U, "inputs: 'Z' is not an input of 'matmul'", lambda: run({"Z": A16}))


class InputNamesStayInTheTemporaryFolder(unittest.TestCase):
    def test_path_like_names_are_refused_before_any_write(self):
        with tempfile.TemporaryDirectory() as tmp:
            # run's inputs go to $TMPDIR/tessel-py-*/given/NAME.npy: '../../escaped' would be $TMPDIR/escaped.npy
            old = os.environ.get("TMPDIR")
            os.environ["TMPDIR"] = tmp
            tempfile.tempdir = None
            try:
                for name in ("../../escaped", "../escaped", "/tmp/escaped", "a/b", "A\0", "", ".", "A.npy"):
                    with self.assertRaises(tessel.UsageError) as e:
                        tessel.run(MATMUL, target=DAVINCI, shape=SHAPE, inputs={name: A16})
                    self.assertEqual(str(e.exception), f"inputs: {name!r} is not an input name (an identifier of the operator, such as 'A')")
                    with self.assertRaises(tessel.UsageError):
                        tessel.simulate("halt\n", inputs={name: A16})
            finally:
                if old is None:
                    del os.environ["TMPDIR"]
                else:
                    os.environ["TMPDIR"] = old
                tempfile.tempdir = None
            self.assertEqual(os.listdir(tmp), [])  # nothing written, not even the temporary folder


def _process_group(pgid):
    """(pid, comm) of the live processes (not zombies) in process group `pgid`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp session ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append((int(pid), comm))
    return found


class TimeoutKillsTheProcessGroup(unittest.TestCase):
    def test_no_tune_worker_survives(self):
        """tune forks its measurement workers; a timeout kills them with the tuner. The CLI is run
        through a wrapper that writes its pid (the group's id: the child leads its own session) and
        leaves a `sleep` in the group, a worker that would outlive a kill of the tuner alone."""
        with tempfile.TemporaryDirectory() as tmp:
            pidfile, wrapper = os.path.join(tmp, "pid"), os.path.join(tmp, "tessel")
            with open(wrapper, "w") as f:
                f.write(f"#!/bin/sh\necho $$ > {pidfile}\nsleep 300 </dev/null >/dev/null 2>&1 &\nexec {tessel.cli_path()} \"$@\"\n")
            os.chmod(wrapper, 0o755)
            seen, done = set(), threading.Event()

            def watch():  # the group's members while tune runs: the tuner, its workers, the sleep
                while not done.is_set():
                    if os.path.exists(pidfile):
                        with open(pidfile) as f:
                            text = f.read().strip()
                        if text:
                            seen.update(_process_group(int(text)))
                    time.sleep(0.02)

            watcher = threading.Thread(target=watch)
            os.environ["TESSEL_CLI"] = wrapper
            watcher.start()
            try:
                with self.assertRaises(tessel.TimeoutError) as e:
                    tessel.tune(MATMUL, target=DAVINCI, shape={"M": 512, "N": 512, "K": 512}, strategy="exhaustive",
                                trials=64, jobs=2, timeout=4)
            finally:
                done.set()
                watcher.join()
                del os.environ["TESSEL_CLI"]
            self.assertIn("its process group was killed", str(e.exception))
            with open(pidfile) as f:
                pgid = int(f.read())
            workers = {pid for pid, comm in seen if comm == "tessel" and pid != pgid}
            self.assertTrue(workers, f"no tune worker was seen before the timeout: {sorted(seen)}")
            deadline = time.time() + 5
            while _process_group(pgid) and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(_process_group(pgid), [])


class BoundedDescriptions(unittest.TestCase):
    def test_dev_zero_fails_fast(self):
        """/dev/zero as a description: UserError from the bounded reader (1 MiB), not 4 GB read."""
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.monotonic()
        for call in (tessel.load_description, tessel.check_hierarchy):
            with self.assertRaises(tessel.UserError) as e:
                call("/dev/zero")
            self.assertTrue(str(e.exception).startswith("/dev/zero: hierarchy description is larger than 1048576 bytes"),
                            str(e.exception))
        self.assertLess(time.monotonic() - start, 5)
        grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        self.assertLess(grown_kib, 64 * 1024)  # the interpreter's peak grew by less than 64 MiB


if __name__ == "__main__":
    unittest.main()
