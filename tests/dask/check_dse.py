#!/usr/bin/python3
"""ctest dask.dse: scripts/dse.py on a LocalCluster of two workers over the BERT-base suite at
sequence 128, batch 1 (5 GEMMs) and four descriptions: davinci-910 and davinci-310 as they are, a
910 variant with twice the L1 (L1.capacity_bytes=2MiB) and an invalid one (cores=0).

  - the invalid variant is infeasible, every layer rejected with the validator's rule;
  - a variant's suite cycles are the sum of its layers' cycles x multiplicity in the store;
  - 310 (2 cores, 95 B/cycle GM) is slower than 910 (32 cores); twice the L1 is not slower;
  - the variants' description hashes differ (the store's key), and the Pareto flags hold;
  - a re-run measures nothing;
  - then the same with --model: the f16 BERT layer as one def at a small size, run whole as its program
    of 9 kernels on each variant: the row's cycles are the store's program total and the sum of its
    kernels' cycles, 310 takes longer in µs (its clock is half 910's), the invalid variant names the rule.

  check_dse.py TESSEL WORKDIR"""
import csv
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def has_set(tessel):
    """Whether this tessel takes description overrides (--set); without, the variants are files (--materialize)."""
    r = subprocess.run([tessel, "tune", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return "--set" in r.stdout


def dse(tessel, out):
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "scripts", "dse.py"), "--suite",
           os.path.join(ROOT, "workloads", "bert_base_layers.yaml"), "--tags", "s128,b1", "--workers", "2",
           "--variant", "bigL1:L1.capacity_bytes=2MiB", "--variant", "nocores:cores=0", "--out", out,
           "--tessel", tessel, "--no-plot"] + ([] if has_set(tessel) else ["--materialize"])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=280)
    if r.returncode != 0:
        fail("dse.py exited %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-3000:]))
    return r.stdout


def main():
    tessel, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, "dse")
    text = dse(tessel, out)
    if "20 measured, 0 from the store" not in text:
        fail("expected 4 variants x 5 layers measured: " + text)
    with open(out + ".csv") as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    if sorted(rows) != ["bigL1", "davinci-310", "davinci-910", "nocores"]:
        fail("variants: %s" % sorted(rows))
    bad = rows["nocores"]
    if bad["suite_cycles"] != "" or bad["layers_failed"] != "5" or "cores: must be at least 1" not in bad["first_error"]:
        fail("the invalid variant: %s" % bad)
    with open(out + ".jsonl") as f:
        store = [json.loads(line) for line in f]
    for name in ("davinci-910", "davinci-310", "bigL1"):
        r = rows[name]
        recs = [s for s in store if s["variant"] == r["description_hash"] or s.get("description_hash") == r["description_hash"]]
        if len(recs) != 5 or not all(s["ok"] for s in recs):
            fail("%s: %d stored layers" % (name, len(recs)))
        total = 0
        for s in recs:
            # the Q, K, V and output projections share one entry, times 4 (workloads/bert_base_layers.yaml)
            t = 4 if (s["key_op"] == "matmul.tsl:matmul" and s["key_shape"] == "K=768,M=128,N=768") else 1
            total += s["cost"] * t
        if int(r["suite_cycles"]) != int(total):
            fail("%s: suite cycles %s, the store's layers give %d" % (name, r["suite_cycles"], total))
    c910, c310, cbig = (int(rows[n]["suite_cycles"]) for n in ("davinci-910", "davinci-310", "bigL1"))
    if not c310 > c910:
        fail("davinci-310 (%d) not slower than davinci-910 (%d)" % (c310, c910))
    if cbig > c910:
        fail("twice the L1 is slower: %d > %d" % (cbig, c910))
    hashes = {rows[n]["description_hash"] for n in ("davinci-910", "davinci-310", "bigL1")}
    if len(hashes) != 3:
        fail("description hashes not distinct: %s" % hashes)
    # Pareto: 310 has the least SRAM, so it is on the front; a flagged row is beaten by no other
    feas = [r for r in rows.values() if r["suite_cycles"]]
    for r in feas:
        a = (int(r["sram_bytes"]), float(r["suite_us"]))  # by time: 310's clock is half 910's
        beaten = any(b[0] <= a[0] and b[1] <= a[1] and b != a
                     for b in ((int(o["sram_bytes"]), float(o["suite_us"])) for o in feas if o is not r))
        if (r["pareto"] == "True") == beaten:
            fail("Pareto flag of %s: %s (beaten: %s)" % (r["variant"], r["pareto"], beaten))
    if rows["davinci-310"]["pareto"] != "True":
        fail("davinci-310 (least SRAM) not on the front")
    text = dse(tessel, out)
    if "0 measured, 20 from the store" not in text:
        fail("the re-run measured again: " + text)
    print("ok: 910 %d, 310 %d, 2 MiB L1 %d cycles" % (c910, c310, cbig))
    check_model(tessel, os.path.join(work, "model"))


def check_model(tessel, out):
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "scripts", "dse.py"), "--model",
           os.path.join(ROOT, "workloads", "models", "bert_encoder_layer.tsl"), "--def", "bert_layer_f16",
           "--shape", "T=16,H=2,D=16,F=64", "--workers", "2", "--variant", "bigUB:UB.capacity_bytes=512KiB",
           "--variant", "nocores:cores=0", "--out", out, "--tessel", tessel, "--no-plot"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=280)
    if r.returncode != 0:
        fail("dse.py --model exited %d\n%s\n%s" % (r.returncode, r.stdout, r.stderr[-3000:]))
    if "4 measured, 0 from the store" not in r.stdout:
        fail("expected 4 variants measured once each: " + r.stdout)
    with open(out + ".csv") as f:
        rows = {row["variant"]: row for row in csv.DictReader(f)}
    with open(out + ".jsonl") as f:
        store = {rec["variant"]: rec for rec in map(json.loads, f)}
    for name in ("davinci-910", "davinci-310", "bigUB"):
        row = rows[name]
        rec = [s for s in store.values() if s.get("description_hash") == row["description_hash"]]
        if len(rec) != 1 or not rec[0]["ok"] or rec[0]["tile"] != "program":
            fail("%s: the store's program record: %s" % (name, rec))
        kernels = rec[0]["kernels"]
        if row["kernels"] != "9" or len(kernels) != 9:
            fail("%s: %s kernels (the f16 layer with its fused attention is 9)" % (name, row["kernels"]))
        if int(row["suite_cycles"]) != int(rec[0]["cost"]) or int(rec[0]["cost"]) < sum(k["cycles"] for k in kernels):
            fail("%s: cycles %s, store %s, kernels %d" % (name, row["suite_cycles"], rec[0]["cost"],
                                                         sum(k["cycles"] for k in kernels)))
        if abs(float(row["suite_us"]) - int(row["suite_cycles"]) / float(row["clock_mhz"])) > 0.01:
            fail("%s: %s us is not %s cycles at %s MHz" % (name, row["suite_us"], row["suite_cycles"], row["clock_mhz"]))
    if not float(rows["davinci-310"]["suite_us"]) > float(rows["davinci-910"]["suite_us"]):
        fail("davinci-310 not slower in us: %s vs %s" % (rows["davinci-310"]["suite_us"], rows["davinci-910"]["suite_us"]))
    if rows["nocores"]["suite_cycles"] != "" or "cores: must be at least 1" not in rows["nocores"]["first_error"]:
        fail("the invalid variant: %s" % rows["nocores"])
    if rows["davinci-310"]["pareto"] != "True":
        fail("davinci-310 (least SRAM) not on the front")
    print("ok: model: 910 %s us, 310 %s us" % (rows["davinci-910"]["suite_us"], rows["davinci-310"]["suite_us"]))


if __name__ == "__main__":
    main()
