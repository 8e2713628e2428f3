#!/usr/bin/python3
"""Compile time of the models in workloads/models/ on every target (issue 33's goal: on the
2-core development machine a BERT-base layer compiles in 5 s or less, ResNet-50 in 30 s or less).

For each model and target it runs `tessel compile MODEL --def D --shape S --target T -o DIR/out.EXT`
(the whole path a user waits for: partition, the polyhedral pipeline of every kernel, the
emitter: C, the NPU program with its syncs, CUDA source; no host compiler, no NVRTC) and records
the wall time and the CPU time (user + sys of the child) with the load average beside them: the
machine is shared, so CPU time is the figure to compare, wall time is what a user saw under that
load. A table on stdout, the rows as JSON (--json PATH).

--compare-memo compiles each entry a second time with TESSEL_NO_COMPILE_MEMO=1 (the AST memo
off: compiler/poly/isl_util.cc) and checks that every emitted file is byte-identical; exit 1
if one differs. --budget-check exits 1 when a CPU time is over its model's goal.

  scripts/model_compile_times.py --tessel build/compiler/cli/tessel --json docs/results/x.json
  scripts/model_compile_times.py --tessel T --small --targets c,davinci-910 --compare-memo   # ctest
"""
import argparse
import filecmp
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# model name -> (file, def, shape at the size the goal names, a small shape for ctest, goal s CPU)
MODELS = {
    "bert_layer_f16": ("workloads/models/bert_encoder_layer.tsl", "bert_layer_f16", "T=128,H=12,D=64,F=3072",
                       "T=16,H=2,D=16,F=64", 5.0),
    "resnet50": ("workloads/models/resnet50.tsl", "resnet50", "N=1,H=224,W=224", "N=1,H=32,W=32", 30.0),
}
TARGETS = ["c", "davinci-910", "davinci-310", "sm90", "sm75"]
EXTENSION = {"c": "c", "davinci-910": "npu", "davinci-310": "npu", "sm90": "cu", "sm75": "cu"}


def target_arg(t):
    return "c" if t == "c" else os.path.join(ROOT, "isa", "targets", t + ".yaml")


def compile_once(tessel, model, shape, target, out_dir, memo):
    path, def_name = MODELS[model][0], MODELS[model][1]
    cmd = [tessel, "compile", os.path.join(ROOT, path), "--def", def_name, "--shape", shape, "--target",
           target_arg(target), "--no-tuned", "-o", os.path.join(out_dir, "out." + EXTENSION.get(target, "txt"))]
    env = dict(os.environ)
    env.pop("TESSEL_NO_COMPILE_MEMO", None)
    if not memo:
        env["TESSEL_NO_COMPILE_MEMO"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"model_compile_times: {model} on {target}: tessel compile exit {p.returncode}")
    kernels = len([f for f in os.listdir(out_dir) if f.startswith("out.k")])
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "load_avg_1min": round(load, 2), "kernels": kernels}


def same_outputs(a, b):
    names = sorted(os.listdir(a))
    if names != sorted(os.listdir(b)):
        return ["file lists differ"]
    return [n for n in names if not filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tessel", default=os.path.join(ROOT, "build", "compiler", "cli", "tessel"))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--targets", default=",".join(TARGETS))
    ap.add_argument("--small", action="store_true", help="the small shapes (ctest) instead of the goal's sizes")
    ap.add_argument("--shape", action="append", default=[], metavar="MODEL=SHAPE",
                    help="another shape for a model, e.g. resnet50=N=32,H=224,W=224 (repeatable)")
    ap.add_argument("--compare-memo", action="store_true", help="also compile with the memo off; outputs must match")
    ap.add_argument("--budget-check", action="store_true", help="exit 1 if a CPU time is over its goal")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()

    runs = []
    for m in args.models.split(","):
        if m not in MODELS:
            raise SystemExit(f"model_compile_times: --models: unknown model '{m}' (known: {', '.join(MODELS)})")
        runs.append((m, MODELS[m][3] if args.small else MODELS[m][2]))
    for s in args.shape:
        m, _, shape = s.partition("=")
        if m not in MODELS or not shape:
            raise SystemExit(f"model_compile_times: --shape '{s}': expected MODEL=SHAPE with MODEL one of {', '.join(MODELS)}")
        runs.append((m, shape))

    rows, failed = [], []
    head = f"{'model':<16} {'shape':<24} {'target':<12} {'kernels':>7} {'cpu s':>7} {'wall s':>7} {'load':>5} {'goal s':>6}"
    if args.compare_memo:
        head += f" {'cpu s memo off':>14} {'outputs':>9}"
    print(head)
    with tempfile.TemporaryDirectory(prefix="tessel_compile_times_") as tmp:
        for n, (model, shape) in enumerate(runs):
            goal = MODELS[model][4]
            for t in args.targets.split(","):
                d = os.path.join(tmp, f"{n}.{model}.{t}.memo")
                os.makedirs(d)
                r = compile_once(args.tessel, model, shape, t, d, True)
                r.update({"model": model, "shape": shape, "target": t, "goal_cpu_s": goal})
                line = (f"{model:<16} {shape:<24} {t:<12} {r['kernels']:>7} {r['cpu_s']:>7.2f} {r['wall_s']:>7.2f} "
                        f"{r['load_avg_1min']:>5.1f} {goal:>6.0f}")
                if args.compare_memo:
                    d0 = os.path.join(tmp, f"{n}.{model}.{t}.nomemo")
                    os.makedirs(d0)
                    r0 = compile_once(args.tessel, model, shape, t, d0, False)
                    diff = same_outputs(d, d0)
                    r["memo_off"] = r0
                    r["outputs_identical"] = not diff
                    line += f" {r0['cpu_s']:>14.2f} {'same' if not diff else 'DIFFER':>9}"
                    if diff:
                        failed.append(f"{model} {shape} {t}: outputs differ with the memo off: {', '.join(diff[:5])}")
                if args.budget_check and not args.small and r["cpu_s"] > goal:
                    failed.append(f"{model} {shape} {t}: {r['cpu_s']} s CPU over the {goal} s goal")
                print(line, flush=True)
                rows.append(r)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"bench": "model_compile_times", "tessel": args.tessel, "cpus": os.cpu_count(), "rows": rows}, f,
                      indent=1)
            f.write("\n")
    for msg in failed:
        print("FAIL " + msg)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
