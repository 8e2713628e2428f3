#!/usr/bin/env python3
"""`--set` description overrides end to end (issue 18): a valid variant changes the simulated
cycles in the direction the hardware change predicts, every record carries the variant's hash,
and the tuner's forked measurements use the overridden description.

usage: set_overrides.py TESSEL SOURCE_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile

TESSEL, SRC = sys.argv[1], sys.argv[2]
TARGET = os.path.join(SRC, "isa/targets/davinci-910.yaml")
MATMUL = os.path.join(SRC, "workloads/matmul.tsl")
SHAPE = "M=512,N=512,K=512"
TILE = "m=128/64,n=128/64,k=64/32"
failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        failures.append(what)


def run(tmp, name, *extra, shape=SHAPE, tile=TILE):
    report = os.path.join(tmp, name + ".json")
    cmd = [TESSEL, "run", MATMUL, "--target", TARGET, "--shape", shape, "--report", report, *extra]
    if tile:
        cmd += ["--tile", tile]
    env = dict(os.environ, TESSEL_TUNE_DB="off")  # the default tile from the description, not a tuned one
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    with open(report) as f:
        return json.load(f)


with tempfile.TemporaryDirectory() as tmp:
    base = run(tmp, "base")
    check(base["verified"] and base["overrides"] == "" and len(base["description_hash"]) == 16,
          f"baseline verified, no overrides, hash {base['description_hash']}: {base['total_cycles']} cycles")
    slow_gm = run(tmp, "slow_gm", "--set", "GM.shared_bandwidth_bytes_per_cycle=16")
    check(slow_gm["total_cycles"] > base["total_cycles"],
          f"GM shared bandwidth 2784 -> 16 B/cycle is slower: {slow_gm['total_cycles']} > {base['total_cycles']}")
    slow_path = run(tmp, "slow_path", "--set", "GM->L1.bandwidth_bytes_per_cycle=8")
    check(slow_path["total_cycles"] > base["total_cycles"],
          f"GM->L1 path 87 -> 8 B/cycle is slower: {slow_path['total_cycles']} > {base['total_cycles']}")
    big_l1 = run(tmp, "big_l1", "--set", "L1.capacity_bytes=4MiB")
    check(big_l1["total_cycles"] <= base["total_cycles"],
          f"L1 1 MiB -> 4 MiB is not slower: {big_l1['total_cycles']} <= {base['total_cycles']}")
    check(big_l1["overrides"] == "L1.capacity_bytes=4194304", f"overrides canonical: {big_l1['overrides']}")
    # with the default tile (chosen from the description), L1's size matters: 1024^3 takes L1 tiles
    # of 1 MiB; a 128 KiB L1 forces smaller tiles (slower), a 4 MiB one is not slower
    big = "M=1024,N=1024,K=1024"
    d_base = run(tmp, "d_base", shape=big, tile=None)
    d_small = run(tmp, "d_small", "--set", "L1.capacity_bytes=128KiB", shape=big, tile=None)
    d_big = run(tmp, "d_big", "--set", "L1.capacity_bytes=4MiB", shape=big, tile=None)
    check(d_small["total_cycles"] > d_base["total_cycles"] >= d_big["total_cycles"] and d_small["tile"] != d_base["tile"],
          f"default tile, 1024^3: L1 128 KiB {d_small['total_cycles']} ({d_small['tile']}) > 1 MiB {d_base['total_cycles']} "
          f"({d_base['tile']}) >= 4 MiB {d_big['total_cycles']}")
    hashes = {base["description_hash"], slow_gm["description_hash"], slow_path["description_hash"], big_l1["description_hash"]}
    check(len(hashes) == 4, "four descriptions, four hashes")
    a = run(tmp, "a", "--set", "cores=8,L1.capacity_bytes=512KiB")
    b = run(tmp, "b", "--set", "L1.capacity_bytes=524288", "--set", "cores=8")
    check(a["description_hash"] == b["description_hash"] and a["overrides"] == b["overrides"] == "L1.capacity_bytes=524288,cores=8",
          "the same overrides in another order (and split over two --set) give the same hash and text")
    check(a["total_cycles"] == b["total_cycles"] and a["cores"] == 8, f"... and the same cycles on 8 cores: {a['total_cycles']}")

    # compile --explain names the description's hash
    p = subprocess.run([TESSEL, "compile", MATMUL, "--target", TARGET, "--shape", SHAPE, "--explain", "--set", "cores=8"],
                       capture_output=True, text=True, timeout=120)
    check(p.returncode == 0 and re.search(r"description davinci-910 hash [0-9a-f]{16} \(--set cores=8\)", p.stderr) is not None,
          "compile --explain prints the description hash and the overrides")

    # the tuner's forked measurement children compile and simulate the overridden description
    log = os.path.join(tmp, "tune.jsonl")
    tune = [TESSEL, "tune", MATMUL, "--target", TARGET, "--shape", SHAPE, "--space", "m=128/64,n=128/64,k=64/32",
            "--strategy", "exhaustive", "--trials", "2", "--log", log, "--db", "off", "--no-progress", "--jobs", "1"]
    # two trials: the default plan (always measured first) and the one configuration of the space
    p = subprocess.run(tune + ["--set", "GM->L1.bandwidth_bytes_per_cycle=8"], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, "tessel tune --set exits 0" + ("" if p.returncode == 0 else ": " + p.stderr))
    with open(log) as f:
        records = [json.loads(line) for line in f]
    check(len(records) == 2 and records[0]["tile"] == "default" and records[1]["tile"] == TILE,
          f"the default plan, then one measurement of {TILE}")
    r = records[1]
    check(r.get("overrides") == "GM->L1.bandwidth_bytes_per_cycle=8" and r.get("description_hash") == slow_path["description_hash"],
          "the tuning log record carries the variant's overrides and hash")
    check(r["cost"] == slow_path["total_cycles"],
          f"the forked measurement used the variant: {r['cost']} cycles == tessel run --set {slow_path['total_cycles']}")
    # the unmodified description is another problem: the log does not answer it
    p = subprocess.run(tune, capture_output=True, text=True, timeout=300)
    with open(log) as f:
        records = [json.loads(line) for line in f]
    check(p.returncode == 0 and len(records) == 4 and records[3]["tile"] == TILE and records[3]["cost"] == base["total_cycles"]
          and "overrides" not in records[3] and records[3]["description_hash"] == base["description_hash"],
          "tuning the unmodified description measures again (not resumed from the variant's record)")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all override checks passed")
