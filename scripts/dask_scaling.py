#!/usr/bin/python3
"""Throughput scaling of NPU-simulator sweeps on Dask (issue 18 goal): the same sweep of CONFIGS tile
configurations (five small GEMM shapes x 45 tiles: short, even measurements) on davinci-910 measured with a LocalCluster of 1 worker and of N workers
(fresh stores: every configuration measured in every run), printing a table and writing JSON with
the throughput ratio. Needs only a built tessel binary and Debian's python3-distributed.

  scripts/dask_scaling.py --tessel build/compiler/cli/tessel --workers 1,2 --out docs/results/dask_scaling_2core.json
  scripts/dask_scaling.py --tessel build/compiler/cli/tessel --workers 1,16 --out dask_scaling_16core.json

Each measurement is one child `tessel tune --measure` (compile + pruned syncs + timing-only simulation),
so a worker is one core; the cluster's start-up is not timed."""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tessel_dask as td  # noqa: E402

ROOT = td.ROOT


def space_tiles(tessel, args, shape):
    import subprocess
    import csv
    out = subprocess.run([tessel, "tune", args.op, "--target", args.target, "--shape", shape, "--space", args.space,
                          "--dump-space", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    return [r["tile"] for r in csv.DictReader(out.stdout.splitlines())]


def load():
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessel")
    ap.add_argument("--workers", default="1,%d" % (os.cpu_count() or 1), help="worker counts, e.g. 1,2 or 1,16")
    ap.add_argument("--configs", type=int, default=225, help="configurations per sweep (>= 200 for the goal)")
    ap.add_argument("--op", default=os.path.join(ROOT, "workloads", "matmul.tsl"))
    ap.add_argument("--target", default=os.path.join(ROOT, "isa", "targets", "davinci-910.yaml"))
    ap.add_argument("--shapes", default="M=64,N=64,K=64;M=128,N=64,K=64;M=64,N=128,K=64;M=64,N=64,K=128;M=128,N=128,K=64",
                    help="GEMM shapes (';'-separated), each swept over --space")
    ap.add_argument("--space", default="m=16-64:pow2/16,n=16-64:pow2/16,k=16-64:pow2/16|32")
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args()
    tessel = td.find_tessel(args.tessel)
    tasks = [td.Task(args.op, "", shape, t, args.target) for shape in args.shapes.split(";")
             for t in space_tiles(tessel, args, shape)]
    if len(tasks) < args.configs:
        sys.exit("the shapes' spaces have %d configurations, fewer than --configs %d" % (len(tasks), args.configs))
    tasks = tasks[:args.configs]
    runs = []
    work = tempfile.mkdtemp(prefix="tessel_dask_scaling_")
    try:
        for n in [int(x) for x in args.workers.split(",")]:
            client, cluster = td.open_client(None, n)
            try:
                client.wait_for_workers(n)
                store = td.Store(os.path.join(work, "store_%d.jsonl" % n))
                load0 = load()
                stats = td.run_tasks(client, tasks, store, tessel, "scaling %d worker(s)" % n)
            finally:
                client.close()
                cluster.close()
            recs = list(store.records.values())
            failed = sum(1 for r in recs if not r["ok"])
            runs.append({"workers": n, "configs": stats["measured"], "failed": failed, "wall_s": stats["wall_s"],
                         "throughput_per_s": stats["measured"] / stats["wall_s"],
                         "mean_measure_wall_s": sum(r.get("task_wall_s", 0) for r in recs) / max(1, len(recs)),
                         "load_average_before": load0, "load_average_after": load()})
            costs = {(r["key_shape"], r["tile"]): r.get("cost") for r in recs}
            if len(runs) > 1 and costs != runs[0]["_costs"]:
                sys.exit("the runs measured different cycles: the simulator should be deterministic")
            runs[-1]["_costs"] = costs
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = runs[0]["throughput_per_s"]
    print("\n%8s %8s %10s %14s %8s" % ("workers", "configs", "wall s", "configs/s", "ratio"))
    for r in runs:
        r["ratio_to_first"] = r["throughput_per_s"] / base
        del r["_costs"]
        print("%8d %8d %10.1f %14.3f %7.2fx" % (r["workers"], r["configs"], r["wall_s"], r["throughput_per_s"],
                                               r["ratio_to_first"]))
    result = {"op": os.path.relpath(args.op, ROOT), "target": os.path.relpath(args.target, ROOT), "shapes": args.shapes,
              "space": args.space, "configs": args.configs, "cpu_count": os.cpu_count(), "host": os.uname().nodename,
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": runs}
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print("wrote " + args.out)


if __name__ == "__main__":
    main()
