#!/usr/bin/python3
"""Sweep the GPU plans of an operator: the tile policy's TensorCore plans (`tessel tune --list-plans`, ranked),
each measured on a GPU as `tessel run --tile PLAN` runs it (one Dask task each through
scripts/tessel_dask.py; `--gpus all` runs one worker per GPU of this machine, each pinned to its device, or
`--scheduler tcp://HOST:8786` a cluster whose workers you started one per GPU). Each measurement is checked
against the library's output (or the default plan's) before its time counts. Prints a table (best first) and
writes OUT.json (plans, times, wall time, GPUs) beside the store OUT.jsonl (resumed: a re-run measures only what
is missing; failures are measured again, twice at most).

  scripts/gpu_sweep.py workloads/matmul.tsl --target isa/targets/sm90.yaml --shape M=4096,N=4096,K=4096 \\
      --limit 64 --gpus all --out out/gpu_sweep/gemm4096

Every plan of the sweep is a distinct kernel (the plan text is what `tessel run --tile` and the tuning database
take); `--limit N` keeps the policy's first N."""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_dask as td  # noqa: E402
import tune_common as tc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op")
    ap.add_argument("--def", dest="defn")
    ap.add_argument("--target", required=True, help="a GPU description (isa/targets/sm90.yaml, ...)")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--limit", type=int, default=0, help="the policy's first N plans (default: all)")
    ap.add_argument("--plans", help="a file of plans, one per line, instead of the policy's list")
    td.add_cluster_args(ap)
    ap.add_argument("--out", default="out/gpu_sweep/sweep", help="prefix of OUT.jsonl (store) and OUT.json")
    ap.add_argument("--tessel")
    args = ap.parse_args()
    tessel = tc.find_tessel(args.tessel)
    gpus = td.gpu_count(args.gpus) if not args.scheduler else 0
    if not args.scheduler and not gpus:
        sys.exit("gpu_sweep: no GPU workers: pass --gpus N|all (or --scheduler with one worker per GPU)")
    if args.plans:
        with open(args.plans) as f:
            plans = [line.strip() for line in f if line.strip()]
    else:
        cmd = tc.tune_cmd(tessel, args) + ["--list-plans"]
        plans = tc.run(cmd, quiet=True).split()
    if args.limit:
        plans = plans[:args.limit]
    if not plans:
        sys.exit("gpu_sweep: no plans to measure")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    store = td.Store(args.out + ".jsonl")
    tasks = [td.Task(args.op, args.defn, args.shape, p, args.target) for p in plans]
    client, cluster = td.open_client(args.scheduler, args.workers, gpus=gpus)
    t0 = time.time()
    try:
        workers = len(client.scheduler_info()["workers"])
        stats = td.run_tasks(client, tasks, store, tessel, "gpu sweep", args.measure_timeout,
                             best=lambda recs: td.best_text(recs, "s"))
    finally:
        client.close()
        if cluster:
            cluster.close()
    wall = time.time() - t0
    rows = [store.get(t.key()) for t in tasks]
    ok = sorted((r for r in rows if r and r.get("ok")), key=lambda r: r["cost"])
    print("%-44s %12s" % ("plan", "us"))
    for r in ok:
        print("%-44s %12.2f" % (r["tile"], r["cost"] * 1e6))
    failed = [r for r in rows if not r or not r.get("ok")]
    for r in failed:
        print("%-44s %12s  %s" % (r["tile"] if r else "?", "failed", (r or {}).get("error", "")[:100]))
    summary = {"op": args.op, "def": args.defn, "shape": args.shape, "target": args.target, "plans": len(plans),
               "distinct_plans": len(set(plans)), "measured": stats["measured"], "from_store": stats["skipped"],
               "failed": len(failed), "workers": workers, "gpus": gpus, "wall_s": wall,
               "best": ok[0]["tile"] if ok else None, "best_us": ok[0]["cost"] * 1e6 if ok else None,
               "results": [{"plan": r["tile"], "ok": r["ok"], "us": r["cost"] * 1e6 if r.get("ok") else None,
                            "error": r.get("error")} for r in rows if r]}
    with open(args.out + ".json", "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print("gpu sweep: %d plans (%d distinct) on %d worker(s): %d measured, %d from the store, %d failed; %.1f s; "
          "best %s" % (len(plans), len(set(plans)), workers, stats["measured"], stats["skipped"], len(failed), wall,
                       summary["best"]))
    if not ok:
        sys.exit("gpu_sweep: nothing measured (first error: %s)" % ((failed[0] or {}).get("error") if failed else "?"))


if __name__ == "__main__":
    main()
