"""The Python module `tessel` against the `tessel` CLI on the same inputs (issue 18): same cycles,
same outputs element by element, the same hash for overrides given as a dict and as --set, errors
carrying the CLI's message, and several simulations in one interpreter.

Run by ctest as /usr/bin/python3 -m unittest with PYTHONPATH=build/python and TESSEL_SOURCE_DIR.
"""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np

import tessel

SRC = os.environ.get("TESSEL_SOURCE_DIR", tessel._config.SOURCE_DIR)
CLI = tessel.cli_path()
DAVINCI = os.path.join(SRC, "isa/targets/davinci-910.yaml")
MATMUL = os.path.join(SRC, "workloads/matmul.tsl")
BERT = os.path.join(SRC, "workloads/bert.tsl")
I8 = os.path.join(SRC, "workloads/gemm_fused.tsl")


def cli(*args, timeout=300):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout)


def cli_error(*args):
    """The message the CLI prints after "tessel: error: ", and its exit status."""
    p = cli(*args)
    at = p.stderr.rfind("tessel: error: ")
    return p.stderr[at + len("tessel: error: "):].rstrip("\n"), p.returncode


def cli_run(tmp, path, inputs, *args):
    """`tessel run` with the given inputs as .npy files: (report, outputs by name)."""
    flags = []
    for name, a in inputs.items():
        np.save(os.path.join(tmp, f"in_{name}.npy"), a)
        flags += ["--input", f"{name}={os.path.join(tmp, f'in_{name}.npy')}"]
    out = os.path.join(tmp, "cli_out")
    p = cli("run", path, *args, *flags, "--report", os.path.join(tmp, "cli.json"), "--save-outputs", out)
    if p.returncode != 0:
        raise AssertionError(f"tessel run failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    with open(os.path.join(tmp, "cli.json")) as f:
        report = json.load(f)
    return report, {n[:-4]: np.load(os.path.join(out, n)) for n in os.listdir(out)}


class ModuleAgainstCli(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.rng = np.random.default_rng(7)

    def tearDown(self):
        self.tmp.cleanup()

    def assert_same_run(self, mine, report, outputs):
        self.assertTrue(mine["verified"])
        self.assertTrue(report["verified"])
        for key in ("total_cycles", "utilization", "tile", "description_hash", "overrides", "syncs_pruned", "cores"):
            self.assertEqual(mine[key], report[key], key)
        self.assertEqual(sorted(mine["outputs"]), sorted(outputs))
        for name, a in outputs.items():
            self.assertEqual(mine["outputs"][name].dtype, a.dtype, name)
            self.assertEqual(mine["outputs"][name].shape, a.shape, name)
            self.assertTrue(np.array_equal(mine["outputs"][name], a), name)

    def test_matmul_f16_inputs_from_numpy(self):
        a = self.rng.standard_normal((64, 96)).astype(np.float16)
        b = self.rng.standard_normal((96, 128)).astype(np.float16)
        shape = {"M": 64, "N": 128, "K": 96}
        mine = tessel.run(MATMUL, target=DAVINCI, shape=shape, sync="pruned", inputs={"A": a, "B": b})
        report, outputs = cli_run(self.tmp.name, MATMUL, {"A": a, "B": b}, "--target", DAVINCI, "--shape",
                                  "M=64,N=128,K=96", "--sync", "pruned")
        self.assert_same_run(mine, report, outputs)
        self.assertGreater(mine["total_cycles"], 0)
        self.assertEqual(mine["outputs"]["C"].dtype, np.float32)
        # the inputs the run used are the ones given, and the output is their product
        self.assertTrue(np.array_equal(mine["inputs"]["A"], a))
        expected = a.astype(np.float32) @ b.astype(np.float32)
        self.assertLess(np.max(np.abs(mine["outputs"]["C"] - expected)), 1e-3)

    def test_softmax_vector_op(self):
        x = self.rng.standard_normal((32, 256)).astype(np.float16)
        mine = tessel.run(BERT, target=DAVINCI, shape={"M": 32, "N": 256}, def_="softmax", inputs={"X": x})
        report, outputs = cli_run(self.tmp.name, BERT, {"X": x}, "--def", "softmax", "--target", DAVINCI, "--shape",
                                  "M=32,N=256")
        self.assert_same_run(mine, report, outputs)
        self.assertTrue(np.allclose(mine["outputs"]["Y"].astype(np.float32).sum(axis=1), 1, atol=2e-2))

    def test_i8_inputs_i32_outputs(self):
        a = self.rng.integers(-128, 128, (32, 64), dtype=np.int8)
        b = self.rng.integers(-128, 128, (64, 32), dtype=np.int8)
        mine = tessel.run(I8, target=DAVINCI, shape={"M": 32, "N": 32, "K": 64}, def_="matmul_i8", inputs={"A": a, "B": b})
        report, outputs = cli_run(self.tmp.name, I8, {"A": a, "B": b}, "--def", "matmul_i8", "--target", DAVINCI,
                                  "--shape", "M=32,N=32,K=64")
        self.assert_same_run(mine, report, outputs)
        self.assertEqual(mine["outputs"]["C"].dtype, np.int32)
        self.assertTrue(np.array_equal(mine["outputs"]["C"], a.astype(np.int32) @ b.astype(np.int32)))

    def test_two_runs_in_one_interpreter(self):
        first = tessel.run(MATMUL, target=DAVINCI, shape={"M": 32, "N": 32, "K": 32})
        second = tessel.run(MATMUL, target=DAVINCI, shape={"M": 128, "N": 128, "K": 128})
        third = tessel.run(MATMUL, target=DAVINCI, shape={"M": 32, "N": 32, "K": 32})
        self.assertTrue(first["verified"] and second["verified"] and third["verified"])
        self.assertGreater(second["total_cycles"], first["total_cycles"])
        self.assertEqual(first["total_cycles"], third["total_cycles"])

    def test_overrides_dict_equal_set_flag(self):
        variant = {"GM->L1.bandwidth_bytes_per_cycle": 8, "L1.capacity_bytes": "512KiB"}
        shape = {"M": 128, "N": 128, "K": 128}
        x = {"A": self.rng.standard_normal((128, 128)).astype(np.float16),
             "B": self.rng.standard_normal((128, 128)).astype(np.float16)}
        mine = tessel.run(MATMUL, target=DAVINCI, shape=shape, inputs=x, set=variant)
        report, outputs = cli_run(self.tmp.name, MATMUL, x, "--target", DAVINCI, "--shape", "M=128,N=128,K=128",
                                  "--set", "L1.capacity_bytes=524288,GM->L1.bandwidth_bytes_per_cycle=8")
        self.assert_same_run(mine, report, outputs)
        self.assertEqual(mine["overrides"], "GM->L1.bandwidth_bytes_per_cycle=8,L1.capacity_bytes=524288")
        base = tessel.run(MATMUL, target=DAVINCI, shape=shape, inputs=x)
        self.assertNotEqual(base["description_hash"], mine["description_hash"])
        self.assertGreater(mine["total_cycles"], base["total_cycles"])  # an 8 B/cycle GM->L1 path is slower
        d = tessel.load_description(DAVINCI, set=variant)
        self.assertEqual(d["description_hash"], mine["description_hash"])
        self.assertEqual(tessel.load_description(DAVINCI, set="L1.capacity_bytes=512KiB,GM->L1.bandwidth_bytes_per_cycle=8")
                         ["description_hash"], mine["description_hash"])
        self.assertEqual(d["levels"][1]["capacity_bytes"], 512 * 1024)
        # energies are description fields like any other (issue 19): in the dict and overridable
        self.assertEqual(tessel.load_description(DAVINCI, set="L1.read_energy_pj_per_byte=2.5")["levels"][1]
                         ["read_energy_pj_per_byte"], 2.5)
        self.assertEqual([p for p in d["paths"] if p["from"] == "GM" and p["to"] == "L1"][0]["bandwidth_bytes_per_cycle"], 8)
        self.assertEqual(tessel.load_description(DAVINCI)["description_hash"], base["description_hash"])

    def test_simulate_compiled_program_twice(self):
        shape = {"M": 64, "N": 64, "K": 64}
        a = self.rng.standard_normal((64, 64)).astype(np.float16)
        b = self.rng.standard_normal((64, 64)).astype(np.float16)
        c = tessel.compile(MATMUL, target=DAVINCI, shape=shape, sync="pruned")
        self.assertEqual(c["format"], "npu")
        self.assertEqual(len(c["description_hash"]), 16)
        ran = tessel.run(MATMUL, target=DAVINCI, shape=shape, tile=c["tile"], sync="pruned", inputs={"A": a, "B": b})
        for _ in range(2):
            s = tessel.simulate(c["text"], target=DAVINCI, inputs={"A": a, "B": b})
            self.assertEqual(s["total_cycles"], ran["total_cycles"])
            self.assertTrue(np.array_equal(s["outputs"]["C"], ran["outputs"]["C"]))
        self.assertEqual(s["description_hash"], ran["description_hash"])
        slow = tessel.simulate(c["text"], target=DAVINCI, inputs={"A": a, "B": b}, set={"GM.shared_bandwidth_bytes_per_cycle": 4})
        self.assertGreater(slow["total_cycles"], s["total_cycles"])

    def test_tune_returns_best_and_records(self):
        r = tessel.tune(MATMUL, target=DAVINCI, shape={"M": 128, "N": 128, "K": 128}, strategy="exhaustive",
                        space="m=64|128/64,n=64/64,k=64/32", trials=3, jobs=1)
        self.assertEqual(len(r["records"]), 3)
        self.assertEqual(r["records"][0]["tile"], "default")  # the target's own plan is measured first
        self.assertEqual(r["best_cost"], min(rec["cost"] for rec in r["records"]))
        self.assertIn(r["best_tile"], [rec["tile"] for rec in r["records"]])
        self.assertEqual(r["unit"], "cycles")
        best = tessel.run(MATMUL, target=DAVINCI, shape={"M": 128, "N": 128, "K": 128}, tile=r["best_tile"])
        self.assertEqual(best["total_cycles"], r["best_cost"])


class Errors(unittest.TestCase):
    def test_tsl_error_carries_the_cli_message(self):
        bad = os.path.join(SRC, "tests/errors/tsl/chained_comparison.tsl")
        message, code = cli_error("run", bad, "--target", DAVINCI, "--shape", "M=4")
        self.assertEqual(code, 1)
        self.assertIn(f"{bad}:3:26: comparisons do not chain", message)
        with self.assertRaises(tessel.UserError) as e:
            tessel.run(bad, target=DAVINCI, shape={"M": 4})
        self.assertEqual(str(e.exception), message)
        self.assertEqual(e.exception.exit_code, 1)

    def test_invalid_variant_rejected_with_its_rule(self):
        message, code = cli_error("check-hierarchy", DAVINCI, "--set", "L1.capacity_bytes=0")
        self.assertEqual(code, 1)
        self.assertIn("capacity must be positive (got 0)", message)
        with self.assertRaises(tessel.UserError) as e:
            tessel.check_hierarchy(DAVINCI, set={"L1.capacity_bytes": 0})
        self.assertEqual(str(e.exception), message)
        with self.assertRaises(tessel.UserError) as e:
            tessel.run(MATMUL, target=DAVINCI, shape={"M": 16, "N": 16, "K": 16}, set={"L1.capacity_bytes": 0})
        self.assertEqual(str(e.exception), message)

    def test_unknown_override_key(self):
        message, code = cli_error("check-hierarchy", DAVINCI, "--set", "L9.capacity_bytes=1")
        self.assertEqual(code, 1)
        with self.assertRaises(tessel.UserError) as e:
            tessel.load_description(DAVINCI, set={"L9.capacity_bytes": 1})
        self.assertEqual(str(e.exception), message)
        self.assertIn("no level or unit named 'L9' (levels: GM, L1, L0A, L0B, L0C, UB;", message)

    def test_usage_error(self):
        with self.assertRaises(tessel.UsageError) as e:
            tessel.tune(MATMUL, target=DAVINCI, shape={"M": 16, "N": 16, "K": 16}, strategy="sometimes")
        self.assertEqual(e.exception.exit_code, 2)
        self.assertIn("--strategy: sometimes not in {exhaustive,random,genetic,model}", str(e.exception))
        # a bad --sync value is a usage error (exit 2), as on the CLI
        p = cli("run", MATMUL, "--target", DAVINCI, "--shape", "M=16,N=16,K=16", "--sync", "sometimes")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--sync: sometimes not in {naive,pruned}", p.stderr)
        with self.assertRaises(tessel.UsageError) as e:
            tessel.run(MATMUL, target=DAVINCI, shape={"M": 16, "N": 16, "K": 16}, sync="sometimes")
        self.assertEqual(e.exception.exit_code, 2)
        self.assertIn("--sync: sometimes not in {naive,pruned}", str(e.exception))

    def test_simulator_failures_are_exceptions(self):
        bad = os.path.join(SRC, "tests/cli/npu/div_zero.npu")
        message, code = cli_error("sim", bad)
        self.assertEqual(code, 1)
        self.assertEqual(message, f"{bad}:3:1: 'div r1, 5, r2' on core 0: division by zero")
        for _ in range(2):  # the interpreter goes on after a failing simulation
            with self.assertRaises(tessel.UserError) as e:
                tessel.simulate(bad)
            self.assertEqual(str(e.exception), message)
        self.assertTrue(tessel.run(MATMUL, target=DAVINCI, shape={"M": 16, "N": 16, "K": 16})["verified"])

    def test_a_dying_child_is_an_internal_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "tessel")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\nkill -SEGV $$\n")
            os.chmod(fake, 0o755)
            os.environ["TESSEL_CLI"] = fake
            try:
                with self.assertRaises(tessel.InternalError) as e:
                    tessel.run(MATMUL, target=DAVINCI, shape={"M": 16, "N": 16, "K": 16})
            finally:
                del os.environ["TESSEL_CLI"]
        self.assertEqual(str(e.exception), "tessel run: the tessel process died with signal 11")

    def test_timeout_kills_the_child(self):
        with self.assertRaises(tessel.TimeoutError):
            tessel.run(MATMUL, target=DAVINCI, shape={"M": 1024, "N": 1024, "K": 1024}, timeout=0.05)

    def test_check_hierarchy_valid(self):
        r = tessel.check_hierarchy(DAVINCI, set={"cores": 8})
        self.assertTrue(r["valid"])
        self.assertEqual(r["overrides"], "cores=8")
        p = cli("check-hierarchy", DAVINCI, "--set", "cores=8")
        self.assertEqual(p.returncode, 0)
        self.assertIn(f"valid npu description 'davinci-910', hash {r['description_hash']} (--set cores=8)", p.stdout)
        self.assertTrue(p.stdout.startswith(r["text"]))


if __name__ == "__main__":
    unittest.main()
