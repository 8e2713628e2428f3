"""Helpers shared by scripts/sweep.py, tuning_curve.py and cost_model_check.py: run the tessel
binary, read tuning logs (JSON lines) and --dump-space CSVs, Spearman's rank correlation.
Debian's python3 only (no numpy needed)."""
import csv
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def add_problem_args(ap):
    """The operator, its definition, target, shape and tile space, as every tuning script takes them."""
    ap.add_argument("op")
    ap.add_argument("--def", dest="defn")
    ap.add_argument("--target", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--space", help="tessel tune --space (default: tessel's default space)")


def find_tessel(explicit=None):
    if explicit:
        return explicit
    for rel in ("build-tune", "build", "build-npu", "build-gpu"):
        p = os.path.join(ROOT, rel, "compiler", "cli", "tessel")
        if os.path.exists(p):
            return p
    sys.exit("cannot find the tessel binary; build it (scripts/build.sh) or pass --tessel")


def run(cmd, quiet=False):
    if not quiet:
        print("+", " ".join(cmd), file=sys.stderr)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None if not quiet else subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit("command failed (%d): %s" % (r.returncode, " ".join(cmd)))
    return r.stdout


def tune_cmd(tessel, args):
    cmd = [tessel, "tune", args.op, "--target", args.target, "--shape", args.shape]
    if getattr(args, "defn", None):
        cmd += ["--def", args.defn]
    if getattr(args, "space", None):
        cmd += ["--space", args.space]
    return cmd


def read_log(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a partial last line of a killed run
    return rows


def read_space_csv(text):
    return list(csv.DictReader(text.splitlines()))


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1
        i = j + 1
    return r


def pearson(xs, ys):
    """Pearson r of two equally long sequences; NaN for fewer than two points or a constant side."""
    n = len(xs)
    if n < 2:
        return float("nan")
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")


def spearman(xs, ys):
    """Spearman rho: Pearson r of the ranks (ties averaged); NaN for fewer than two points."""
    return pearson(ranks(xs), ranks(ys)) if len(xs) >= 2 else float("nan")


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def parse_tile(tile):
    """'m=128/64,n=256/128,k=64/32' -> {'m': (128, 64), ...}"""
    out = {}
    for e in tile.split(","):
        axis, sizes = e.split("=")
        o, _, i = sizes.partition("/")
        out[axis] = (int(o), int(i or o))
    return out
