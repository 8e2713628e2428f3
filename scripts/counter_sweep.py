#!/usr/bin/python3
"""Per-counter correlation, the measuring half (issue 19 item 2), on a GPU machine: for each kernel
of the sweep (GEMM tile configurations on the sm75 / sm80 / sm90 descriptions, i.e. the WMMA,
mma.sync and wgmma paths, two convolutions per description and the memory-bound suite), runs

  ncu --csv --print-units base --metrics <counters> tessel run ... --no-timing --report R.json

(every launch of the program profiled; the counters summed over its launches; GEMMs with
--gpu-tiles set to one of the tile policy's candidates of the description's path, and --tile the
same block and warp tiles), and asks the
analytic model for the same configuration (`tessel tune ... --predict TILE`: predicted cycles,
bytes per level, the L2 fabric's share of the L2 lookups). Writes one JSON record per kernel to
OUT.jsonl, read by scripts/counter_correlation.py. Besides lts__t_bytes the L2's sectors are
recorded by source (the SMs' requests, the fabric between the L2 partitions), so that the model's
request bytes can be compared with the SMs' own lookups.

  scripts/counter_sweep.py --tessel build/dev/bin/tessel --out /tmp/out/counters.jsonl [--jobs 6] [--quick]
      [--run-on isa/targets/sm90-h100.yaml]
  scripts/counter_sweep.py --tessel BIN --repredict IN.jsonl --out OUT.jsonl [--run-on HIERARCHY.yaml]

Only kernels named tessel_* are profiled (ncu --kernel-name): the cuBLAS launches of `tessel run`'s
library check are not ours. Predictions are priced with --run-on's description when given (the
GPU the kernels run on; otherwise each kernel's own --target description) at the rate of the
kernel's tensor-core path.

ncu is looked up on PATH, then /usr/local/cuda/bin. Counters the device's ncu does not know are
dropped (named on stderr)."""
import argparse
import concurrent.futures as cf
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# counter -> what it is compared with (scripts/counter_correlation.py)
COUNTERS = [
    "gpu__time_duration.sum",                       # ns, per launch
    "dram__bytes_read.sum", "dram__bytes_write.sum",
    "lts__t_bytes.sum",                             # every L2 access, bytes
    "smsp__sass_data_bytes_mem_shared.sum",         # shared bytes by SASS instructions (LDS/STS/LDSM)
    "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",  # shared wavefronts (information)
    # L2 sectors by source: lts__t_bytes is 32 B x lts__t_sectors, every lookup of every L2 slice.
    # srcunit_tex: the SMs' own requests (L1TEX: loads, stores, cp.async, TMA), looked up in the slice
    # of the SM's partition: what the model's global_bytes predicts ("L2 bytes from the SMs" in
    # scripts/counter_correlation.py), split into reads and writes; its lookup hits say how many far
    # lines the SM's partition kept. srcunit_ltcfabric: lookups of requests that crossed the fabric
    # between the two L2 partitions (A100 / H100 / H200) to their home slice (the model's
    # l2_fabric_bytes). NVIDIA Developer Forums, "What's the meaning of performance counter:
    # lts__t_sectors_srcunit_ltcfabric" (2022): "srcunit_ltcfabric means another L2 partition send
    # data to current L2 partition"; the fabric joins the L2 partitions of the A100 whitepaper.
    "lts__t_sectors.sum",
    "lts__t_sectors_srcunit_tex.sum", "lts__t_sectors_srcunit_ltcfabric.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum", "lts__t_sectors_srcunit_tex_op_write.sum",
    "lts__t_sectors_srcunit_tex_lookup_hit.sum",
    "sm__cycles_elapsed.avg",
]

GEMM_SHAPES = ["M=1024,N=1024,K=1024", "M=2048,N=512,K=1024", "M=512,N=512,K=2048", "M=4096,N=4096,K=512"]
CONV_SHAPES = ["N=8,H=14,W=14,C=64,K=128,R=3,S=3", "N=16,H=14,W=14,C=128,K=256,R=3,S=3"]
MEMORY_BOUND = [  # workloads/memory_bound.yaml
    ("bert.tsl", "softmax", "M=128,N=768"), ("bert.tsl", "softmax", "M=4096,N=768"), ("bert.tsl", "softmax", "M=4096,N=3072"),
    ("bert.tsl", "layer_norm", "M=128,N=768"), ("bert.tsl", "layer_norm", "M=4096,N=768"), ("bert.tsl", "layer_norm", "M=4096,N=3072"),
    ("vector.tsl", "bias_gelu", "M=4096,N=768"), ("vector.tsl", "bias_gelu", "M=4096,N=3072"),
    ("vector.tsl", "transpose2d", "M=4096,N=768"), ("vector.tsl", "transpose2d", "M=4096,N=3072"),
]


def candidates(tessel, target, shape):
    """The GPU tile policy's ranked TensorCore configurations (`tessel compile --explain`)."""
    p = subprocess.run([tessel, "compile", "workloads/matmul.tsl", "--target", "isa/targets/%s.yaml" % target, "--shape", shape,
                        "--explain", "-o", os.devnull], capture_output=True, text=True, timeout=120)
    m = re.search(r"tile candidates \(ranked\): (.*)", p.stdout + p.stderr)
    return [c.strip() for c in m.group(1).split(",")] if m else []


def path_wanted(cfg, target):
    """Per description the configurations of its path: WMMA (sm75), mma.sync (sm80), wgmma (sm90);
    split-K across blocks (/kb) is left out (the analytic model has no view of it)."""
    if "/kb" in cfg:
        return False
    if target == "sm90":
        return "/wg" in cfg
    if target == "sm80":
        return "/mma" in cfg
    return "/mma" not in cfg and "/wg" not in cfg


def tile_spec(cfg):
    """'128x128x64/64x128/ks1/st6/wg' -> the tile spec the analytic model reads: m=128/64,n=128/128,k=64/16."""
    block, warp = cfg.split("/")[:2]
    bm, bn, bk = block.split("x")
    wm, wn = warp.split("x")
    return "m=%s/%s,n=%s/%s,k=%s/16" % (bm, wm, bn, wn, bk)


def kernels(tessel, quick):
    out = []
    for target in ("sm75", "sm80", "sm90"):
        for si, shape in enumerate(GEMM_SHAPES[:1] if quick else GEMM_SHAPES):
            want = (2 if quick else 6) if si == 0 else 2
            chosen, seen = [], set()
            cands = [c for c in candidates(tessel, target, shape) if path_wanted(c, target)]
            for c in sorted(cands, key=lambda c: "/ks1/" not in c):  # unsplit K first, in rank order
                key = c.split("/st")[0]
                if key not in seen and len(chosen) < want:
                    seen.add(key)
                    chosen.append(c)
            for c in chosen:
                out.append(dict(name=f"gemm_{target}_{shape}_{c}", file="workloads/matmul.tsl", def_name="matmul",
                                target=target, shape=shape, tile=tile_spec(c), gpu_tiles=c))
        for shape in (CONV_SHAPES[:1] if quick else CONV_SHAPES):
            out.append(dict(name=f"conv_{target}_{shape}", file="workloads/conv_seed.tsl", def_name="conv2d_nhwc",
                            target=target, shape=shape, tile=None))
    for f, d, shape in (MEMORY_BOUND[:3] if quick else MEMORY_BOUND):
        out.append(dict(name=f"{d}_{shape}", file="workloads/" + f, def_name=d, target="sm90", shape=shape, tile=None))
    return out


def find_ncu():
    p = shutil.which("ncu")
    if p:
        return p
    for c in ("/usr/local/cuda/bin/ncu",) + tuple(sorted(
            os.path.join("/opt/nvidia", d, "ncu") for d in (os.listdir("/opt/nvidia") if os.path.isdir("/opt/nvidia") else []))):
        if os.path.exists(c):
            return c
    return None


def known_counters(ncu):
    """The counters of COUNTERS the device's ncu knows (by base name)."""
    try:
        text = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120).stdout
    except Exception as e:  # noqa: BLE001
        print("ncu --query-metrics failed (%s): keeping every counter" % e, file=sys.stderr)
        return COUNTERS
    names = set(line.split()[0] for line in text.splitlines() if line.strip() and not line.startswith(("-", " ")))
    keep = [c for c in COUNTERS if c.rsplit(".", 1)[0] in names]
    dropped = [c for c in COUNTERS if c not in keep]
    if dropped:
        print("ncu on this device does not know: " + ", ".join(dropped), file=sys.stderr)
    return keep or COUNTERS


def parse_ncu_csv(path):
    """Metric -> value summed over every profiled launch; and the launch count."""
    sums, launches = {}, set()
    try:
        text = open(path, errors="replace").read()
    except OSError:
        return sums, 0
    start = text.find('"ID"')
    if start < 0:
        return sums, 0
    for row in csv.DictReader(io.StringIO(text[start:])):
        name, value = row.get("Metric Name"), row.get("Metric Value", "")
        if not name:
            continue
        try:
            v = float(value.replace(",", ""))
        except ValueError:
            continue
        launches.add(row.get("ID"))
        # averages (sm__cycles_elapsed.avg) add up over launches too: each launch's own duration
        sums[name] = sums.get(name, 0.0) + v
    return sums, len(launches)


# the L2 fabric figure is printed by tessel builds since the partitioned L2 (isa gpu.l2_partitions)
PREDICT_RE = re.compile(r"predicted ([0-9.]+) cycles.*bytes: global ([0-9.]+), dram ([0-9.]+), stage ([0-9.]+)"
                        r"(?:, l2 fabric ([0-9.]+))?; ([0-9.]+) us")


def path_of(report):
    explain = " ".join(report.get("explain", []))
    if "wgmma path" in explain:
        return "wgmma"
    if "mma.sync path" in explain:
        return "mma.sync"
    return "wmma" if report.get("tensor_cores") else "simt"


def measure(k, args, ncu, counters, tmp):
    t0 = time.time()
    base = os.path.join(tmp, re.sub(r"[^A-Za-z0-9_.-]", "_", k["name"]))
    target = "isa/targets/%s.yaml" % k["target"]
    run = [args.tessel, "run", k["file"], "--def", k["def_name"], "--target", target, "--shape", k["shape"],
           "--no-timing", "--report", base + ".json"]
    if k["tile"]:
        run += ["--tile", k["tile"]]
    if k.get("gpu_tiles"):
        run += ["--gpu-tiles", k["gpu_tiles"]]
    # only tessel's kernels (all named tessel_*): a large GEMM is verified against cuBLAS in the same
    # process, whose launches would otherwise be summed with ours
    cmd = [ncu, "--csv", "--print-units", "base", "--clock-control", "none", "--metrics", ",".join(counters),
           "--kernel-name", "regex:^tessel_", "--log-file", base + ".csv"] + run
    rec = dict(k)
    rec["kernel_filter"] = "regex:^tessel_"  # what ncu profiled (scripts/counter_correlation.py reads it)
    rec["tile_given"] = bool(k["tile"])
    rec["row_kernels"] = True  # this tessel maps row programs run without --tile to register row kernels
    env = dict(os.environ, TESSEL_TUNE_DB=os.path.join(tmp, "no-db.json"))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
        rec["rc"] = p.returncode
        rec["run_tail"] = p.stdout.strip().splitlines()[-1:] + p.stderr.strip().splitlines()[-2:]
    except subprocess.TimeoutExpired:
        rec["rc"] = "timeout"
        return rec
    try:
        report = json.load(open(base + ".json"))
    except (OSError, ValueError):
        report = {}
    rec["tile"] = report.get("tile", k["tile"])
    rec["verified"] = report.get("verified")
    rec["path"] = path_of(report)
    rec["measured"], rec["launches"] = parse_ncu_csv(base + ".csv")
    if rec["tile"]:
        predict(rec, args.tessel, env, args.run_on)
    rec["seconds"] = round(time.time() - t0, 1)
    return rec


def own_mapping(rec):
    """Whether the record's kernel ran the target's own mapping, priced by `--predict default`: run
    without --tile (records from before `tile_given` was recorded say so by having no --gpu-tiles)
    by a tessel with the CUDA row kernels (`row_kernels`; false in records measured before they
    existed, whose untiled kernels ran the SIMT walk of the tile the report names)."""
    return not rec.get("tile_given", bool(rec.get("gpu_tiles"))) and rec.get("row_kernels", True)


def predict(rec, tessel, env=None, run_on=None):
    """The analytic model's prediction for a record's configuration (`tessel tune --predict`), into
    rec["predicted"] (or rec["predict_error"]). The tile fits the description the kernel was compiled
    for (rec["target"]); with `run_on` (the description of the GPU it ran on) the prediction is priced
    there, at the rate of the record's tensor-core path (rec["path"]): a kernel compiled for sm75 that
    ran on an H100 runs at the H100's rates, not a T4's."""
    rec.pop("predicted", None)
    rec.pop("predict_error", None)
    # a kernel run without --tile ran the target's own mapping (a GPU row kernel for softmax or layer
    # norm, whatever the default tile the report names): 'default' prices that mapping
    cmd = [tessel, "tune", rec["file"], "--def", rec["def_name"], "--target", "isa/targets/%s.yaml" % rec["target"],
           "--shape", rec["shape"], "--predict", "default" if own_mapping(rec) else rec["tile"]]
    if run_on:
        cmd += ["--run-on", run_on]
        rec["priced_on"] = run_on
    if rec.get("path"):
        cmd += ["--mma-path", rec["path"]]
    pred = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    m = PREDICT_RE.search(pred.stdout)
    if m:
        rec["predicted"] = dict(cycles=float(m.group(1)), global_bytes=float(m.group(2)), dram_bytes=float(m.group(3)),
                                stage_bytes=float(m.group(4)), time_us=float(m.group(6)))
        if m.group(5) is not None:
            rec["predicted"]["l2_fabric_bytes"] = float(m.group(5))
    else:
        rec["predict_error"] = (pred.stdout + pred.stderr).strip()[-300:]


def repredict(path, out, tessel, run_on=None):
    """The recorded measurements of `path` with the present model's predictions (no GPU needed)."""
    recs = [json.loads(line) for line in open(path) if line.strip()]
    with open(out, "w") as f:
        for rec in recs:
            if rec.get("tile") and rec.get("measured"):
                predict(rec, tessel, run_on=run_on)
            f.write(json.dumps(rec) + "\n")
    print("counter_sweep: %d records re-predicted into %s" % (len(recs), out))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tessel", required=True)
    ap.add_argument("--out", required=True, help="JSON-lines file of records")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=150, help="seconds per kernel (ncu + tessel run)")
    ap.add_argument("--quick", action="store_true", help="a dozen kernels (a smoke test)")
    ap.add_argument("--keep", help="directory for ncu's CSV and the run reports (default: a temporary one)")
    ap.add_argument("--repredict", metavar="IN.jsonl",
                    help="no measurement: the records of IN.jsonl with the present model's predictions, into --out")
    ap.add_argument("--run-on", metavar="HIERARCHY.yaml",
                    help="the description of the GPU the kernels run on (isa/targets/sm90-h100.yaml on an H100): "
                         "predictions are priced there, at each kernel's tensor-core path rate")
    args = ap.parse_args()
    if args.repredict:
        return repredict(args.repredict, args.out, args.tessel, args.run_on)
    ncu = find_ncu()
    if not ncu:
        print("counter_sweep: no ncu on PATH or under /usr/local/cuda/bin", file=sys.stderr)
        return 2
    counters = known_counters(ncu)
    ks = kernels(args.tessel, args.quick)
    tmp = args.keep or tempfile.mkdtemp(prefix="tessel-ncu-")
    os.makedirs(tmp, exist_ok=True)
    print("counter_sweep: %d kernels, %d counters, ncu %s, %d jobs" % (len(ks), len(counters), ncu, args.jobs), flush=True)
    done = 0
    with open(args.out, "w") as out, cf.ThreadPoolExecutor(args.jobs) as pool:
        for rec in pool.map(lambda k: measure(k, args, ncu, counters, tmp), ks):
            done += 1
            out.write(json.dumps(rec) + "\n")
            out.flush()
            ok = rec.get("rc") == 0 and rec.get("measured") and rec.get("predicted")
            print("[%2d/%d] %-60s %s %s %s" % (done, len(ks), rec["name"][:60], rec.get("path", "-"),
                                               "ok" if ok else "FAILED rc=%s" % rec.get("rc"),
                                               "" if ok else " | ".join(rec.get("run_tail", []))[:160] + rec.get("predict_error", "")[:120]),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
