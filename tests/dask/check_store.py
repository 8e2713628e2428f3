#!/usr/bin/python3
"""ctest dask.store: the Dask drivers' result store (scripts/tessel_dask.py Store) keeps failures as failures.
Rules: a key with a successful record is settled and never written again; a failed record leaves the key
unsettled (a later run measures it again) until MAX_ATTEMPTS failures are stored, unless it would recur (tessel
refused the input, exit 1: settled at once); a success after a failure
settles the key with the success; a re-opened store reads the same. Also `--gpus` parsing (no GPU here).

  check_store.py WORKDIR"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts"))
import tessel_dask as td  # noqa: E402


def rec(tile, ok, cost=None, retryable=True):
    r = {"key_op": "matmul.tsl:matmul", "key_shape": "K=8,M=8,N=8", "tile": tile, "variant": "v", "ok": ok}
    if ok:
        r["cost"] = cost
    else:
        r["error"] = "no GPU here" if retryable else "tessel exited 1: a rule of the validator"
        r["retryable"] = retryable
    return r


def main():
    work = sys.argv[1]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    path = os.path.join(work, "store.jsonl")
    s = td.Store(path)
    key = lambda tile: ("matmul.tsl:matmul", "K=8,M=8,N=8", tile, "v")  # noqa: E731
    assert s.append(rec("a", False)), "a first failure is stored"
    assert key("a") not in s, "one failure does not settle a key"
    assert s.failed_before(key("a")) == 1
    assert s.append(rec("a", True, 5.0)), "a retry that succeeds is stored"
    assert key("a") in s and s.get(key("a"))["ok"] and s.get(key("a"))["cost"] == 5.0
    assert not s.append(rec("a", True, 4.0)), "a settled key is never written again"
    assert s.append(rec("b", False)) and s.append(rec("b", False)), "failures are stored up to MAX_ATTEMPTS"
    assert key("b") in s, "MAX_ATTEMPTS failures settle a key (as failed)"
    assert not s.get(key("b"))["ok"]
    assert not s.append(rec("b", False)), "a key failed MAX_ATTEMPTS times is not retried"
    assert s.append(rec("c", False, retryable=False)), "a failure that would recur is stored"
    assert key("c") in s, "and settles its key at once (exit 1: the input is wrong)"
    again = td.Store(path)
    assert key("a") in again and again.get(key("a"))["cost"] == 5.0
    assert key("b") in again and again.failed_before(key("b")) == td.MAX_ATTEMPTS
    assert key("c") in again
    assert len(open(path).read().splitlines()) == 5
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    assert td.gpu_count("0") == 0
    try:
        td.gpu_count("2")
        raise AssertionError("--gpus 2 without GPUs must fail")
    except SystemExit as e:
        assert "0 GPU(s) visible" in str(e), e
    print("store: ok")


if __name__ == "__main__":
    main()
