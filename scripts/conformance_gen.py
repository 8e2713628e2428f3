#!/usr/bin/python3
"""Generator of tessel's conformance suite (issue 14 item 4).

Deterministic: a fixed seed picks the sizes inside each shape class, so the same seed always gives
the same instances, byte for byte. Each instance is one `.tsl` file holding one def, a shape that
binds exactly its size parameters, and labels:

  family       what operator it is (rows of the runner's table)
  shape_class  tiny (1-7), prime (13, 37, 97, ...), m16 (multiples of 16), bigrow (a row longer than
               the NPU's unified buffer holds), bigl1 (tensors larger than L1)
  dtype        the input dtype that names the variant (f16, f32, i8, i32)
  large        true for the explicitly large shape classes (excluded from --sample)

Every instance is valid under the reference interpreter (`tessel run --target c` verifies it);
inputs come from `tessel run`'s random inputs (floats in [-2, 2], integers in [-8, 8]), so
divisors, logarithms and square roots are taken of `abs(x) + c`, never of a value that may be 0.

Pooling is written with explicit output-size parameters (the input extent is affine in them:
`2 * P + 1` for a 3x3 window at stride 2); `--quasi-affine` emits the form with `/` in the range
bounds instead (`p in 0:(H - 3) / 2 + 1`), for the front end that accepts it.

Usage as a script: conformance_gen.py --out DIR [--seed S] [--quasi-affine] writes DIR/NAME.tsl
and DIR/manifest.json; scripts/conformance.py imports generate().
"""
import argparse
import json
import os
import random
import sys
from dataclasses import asdict, dataclass, field

DEFAULT_SEED = 14

# UB of isa/targets/davinci-{910,310}.yaml is 256 KiB (65536 f32) and L1 1 MiB: a row of 300000
# elements is larger than UB in f16 and f32, and the bigl1 shapes hold more than 1 MiB per tensor.
BIG_ROW = 300000


@dataclass
class Instance:
    name: str
    family: str
    shape_class: str
    dtype: str
    def_name: str
    text: str
    shape: dict
    large: bool = False
    note: str = ""

    def shape_arg(self):
        return ",".join(f"{k}={v}" for k, v in self.shape.items())


@dataclass
class Sizes:
    """Sizes of one shape class, drawn from the generator's seeded random stream."""
    rng: random.Random

    def pick(self, cls, count=1):
        pools = {
            "tiny": list(range(1, 8)),
            "prime": [13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97],
            "m16": [16, 32, 48, 64, 80, 96],
        }
        pool = pools[cls]
        if cls == "tiny":
            return [self.rng.choice(pool) for _ in range(count)]
        picked = self.rng.sample(pool, count)
        return picked


class Generator:
    def __init__(self, seed=DEFAULT_SEED, quasi_affine=False):
        self.rng = random.Random(seed)
        self.sizes = Sizes(self.rng)
        self.quasi_affine = quasi_affine
        self.instances = []

    def add(self, family, variant, dtype, shape_class, text, shape, large=False, note=""):
        name = f"{family}.{variant}.{dtype}.{shape_class}"
        def_name = text.split("def ", 1)[1].split("(", 1)[0].strip()
        assert not any(i.name == name for i in self.instances), name
        self.instances.append(Instance(name, family, shape_class, dtype, def_name, text.strip() + "\n",
                                       dict(shape), large, note))

    def mn(self, cls):
        m, n = self.sizes.pick(cls, 2)
        return {"M": m, "N": n}


# ---------------------------------------------------------------------------------------------
# Families. Each function adds its instances; the text of each def is written for one dtype.

FLOATS = ("f16", "f32")


def elementwise(g):
    # + * - on every dtype: the simplest chain, on each small shape class.
    for dt in ("f16", "f32", "i32"):
        for cls in ("tiny", "prime", "m16"):
            g.add("elementwise", "add_mul_sub", dt, cls, f"""
def ew_add_mul_sub({dt}[M, N] A, {dt}[M, N] B) -> ({dt}[M, N] C) {{
  C(m, n) = (A(m, n) * B(m, n) - A(m, n)) + B(m, n)
}}""", g.mn(cls))
    for dt, cls in (("f16", "prime"), ("f32", "m16"), ("f32", "tiny")):
        g.add("elementwise", "div_min_max", dt, cls, f"""
def ew_div_min_max({dt}[M, N] A, {dt}[M, N] B) -> ({dt}[M, N] C) {{
  C(m, n) = max(min(A(m, n) / (abs(B(m, n)) + 0.5), 1.5), -1.5)
}}""", g.mn(cls))
    for dt, cls in (("f16", "m16"), ("f32", "prime"), ("i32", "prime")):
        g.add("elementwise", "select_abs", dt, cls, f"""
def ew_select_abs({dt}[M, N] A, {dt}[M, N] B) -> ({dt}[M, N] C) {{
  C(m, n) = select(A(m, n) > B(m, n), abs(A(m, n)), B(m, n) - A(m, n))
}}""", g.mn(cls))
    for dt, cls in (("f32", "prime"), ("f16", "m16")):
        g.add("elementwise", "exp_log", dt, cls, f"""
def ew_exp_log({dt}[M, N] A, {dt}[M, N] B) -> ({dt}[M, N] C) {{
  C(m, n) = exp(A(m, n)) - log(abs(B(m, n)) + 1)
}}""", g.mn(cls))
    for dt, cls in (("f32", "m16"), ("f16", "prime")):
        g.add("elementwise", "sqrt_rsqrt", dt, cls, f"""
def ew_sqrt_rsqrt({dt}[M, N] A, {dt}[M, N] B) -> ({dt}[M, N] C) {{
  C(m, n) = sqrt(abs(A(m, n))) * rsqrt(abs(B(m, n)) + 0.25)
}}""", g.mn(cls))
    for dt, cls in (("f32", "tiny"), ("f16", "m16")):
        g.add("elementwise", "tanh_neg", dt, cls, f"""
def ew_tanh_neg({dt}[M, N] A) -> ({dt}[M, N] C) {{
  C(m, n) = -tanh(A(m, n) * 1.5)
}}""", g.mn(cls))
    for dt, cls in (("f16", "m16"), ("f32", "prime")):
        n, c, h, w = g.sizes.pick(cls, 1)[0], 3, 5, g.sizes.pick(cls, 1)[0]
        g.add("elementwise", "relu4d", dt, cls, f"""
def ew_relu({dt}[N, C, H, W] X) -> ({dt}[N, C, H, W] Y) {{
  Y(n, c, h, w) = max(X(n, c, h, w), 0)
}}""", {"N": 2, "C": c, "H": h, "W": w})
    for dt, cls in (("f32", "m16"), ("f16", "prime")):
        g.add("elementwise", "gelu_tanh", dt, cls, f"""
def ew_gelu({dt}[M, N] X) -> ({dt}[M, N] Y) {{
  Z(m, n) = f32(X(m, n))
  Y(m, n) = {dt}(0.5 * Z(m, n) * (1 + tanh(0.7978845608 * (Z(m, n) + 0.044715 * Z(m, n) * Z(m, n) * Z(m, n)))))
}}""", g.mn(cls))
    g.add("elementwise", "silu", "f32", "prime", """
def ew_silu(f32[M, N] X) -> (f32[M, N] Y) {
  Y(m, n) = X(m, n) / (1 + exp(-X(m, n)))
}""", g.mn("prime"))
    for dt, cls in (("f32", "prime"), ("f16", "m16"), ("i32", "tiny")):
        g.add("elementwise", "fmod", dt, cls, f"""
def ew_mod({dt}[M, N] A, {dt}[M, N] B) -> ({dt}[M, N] C) {{
  C(m, n) = A(m, n) % (abs(B(m, n)) + {'1' if dt == 'i32' else '0.25'})
}}""", g.mn(cls))
    g.add("elementwise", "add_mul_sub", "f32", "bigrow", """
def ew_add_mul_sub(f32[M, N] A, f32[M, N] B) -> (f32[M, N] C) {
  C(m, n) = (A(m, n) * B(m, n) - A(m, n)) + B(m, n)
}""", {"M": 2, "N": BIG_ROW}, large=True)
    g.add("elementwise", "add_mul_sub", "f16", "bigl1", """
def ew_add_mul_sub(f16[M, N] A, f16[M, N] B) -> (f16[M, N] C) {
  C(m, n) = (A(m, n) * B(m, n) - A(m, n)) + B(m, n)
}""", {"M": 640, "N": 1024}, large=True, note="1.25 MiB per tensor")


def casts(g):
    conversions = [  # (from, to, expression of X(m, n))
        ("f32", "f16", "f16(X(m, n))"),
        ("f16", "f32", "f32(X(m, n))"),
        ("f32", "i32", "i32(X(m, n) * 10)"),
        ("i32", "f32", "f32(X(m, n)) * 0.5"),
        ("f16", "i32", "i32(X(m, n) * 7)"),
        ("i32", "f16", "f16(X(m, n))"),
        ("i8", "i32", "i32(X(m, n)) * 1000"),
        ("i32", "i8", "i8(X(m, n) * 40)"),          # wraps
        ("f32", "i8", "i8(X(m, n) * 100)"),         # saturates
        ("i8", "f16", "f16(X(m, n))"),
    ]
    classes = ("tiny", "prime", "m16")
    for i, (src, dst, expr) in enumerate(conversions):
        cls = classes[i % len(classes)]
        g.add("cast", f"to_{dst}", src, cls, f"""
def cast_{src}_to_{dst}({src}[M, N] X) -> ({dst}[M, N] Y) {{
  Y(m, n) = {expr}
}}""", g.mn(cls))
    g.add("cast", "to_f16", "f32", "m16", """
def cast_chain(f32[M, N] X) -> (f16[M, N] Y, f32[M, N] Z) {
  Y(m, n) = f16(X(m, n) * 3.3)
  Z(m, n) = f32(Y(m, n)) - X(m, n) * 3.3
}""", g.mn("m16"), note="two outputs: the f16 rounding error")


def integer(g):
    for cls in ("prime", "m16"):
        g.add("integer", "mul_div", "i32", cls, """
def int_mul_div(i32[M, N] A, i32[M, N] B) -> (i32[M, N] C) {
  C(m, n) = (A(m, n) * B(m, n) + A(m, n)) / (abs(B(m, n)) + 1)
}""", g.mn(cls))
    g.add("integer", "min_max_mod", "i32", "tiny", """
def int_min_max_mod(i32[M, N] A, i32[M, N] B) -> (i32[M, N] C) {
  C(m, n) = (max(A(m, n), B(m, n)) - min(A(m, n), B(m, n))) % 5
}""", g.mn("tiny"))
    g.add("integer", "compare_select", "i32", "m16", """
def int_compare(i32[M, N] A, i32[M, N] B) -> (i32[M, N] C) {
  C(m, n) = select(A(m, n) >= 0 && B(m, n) != 3 || A(m, n) == -8, A(m, n) - B(m, n) * 3, -A(m, n))
}""", g.mn("m16"))
    g.add("integer", "wrap_i8", "i8", "prime", """
def int_wrap_i8(i8[M, N] A, i8[M, N] B) -> (i8[M, N] C) {
  C(m, n) = A(m, n) * B(m, n) * 4 + 100
}""", g.mn("prime"), note="wraps at 8 bits")
    g.add("integer", "index_value", "i32", "prime", """
def int_index_value(i32[M, N] A) -> (i32[M, N] C) {
  C(m, n) = A(m, n) * m - n
}""", g.mn("prime"), note="indices used as values")


def reductions(g):
    ops = ("+=!", "max=!", "min=!")
    opname = {"+=!": "sum", "max=!": "max", "min=!": "min"}
    # (variant, input dims, output dims, lhs indices, rhs indices)
    axes = [
        ("2d_last", "M, N", "M", "m", "m, n"),
        ("2d_lead", "M, N", "N", "n", "m, n"),
        ("3d_last", "B, M, N", "B, M", "b, m", "b, m, n"),
        ("3d_mid", "B, M, N", "B, N", "b, n", "b, m, n"),
        ("3d_lead", "B, M, N", "M, N", "m, n", "b, m, n"),
    ]
    variants = []
    for i, ax in enumerate(axes):
        for j, op in enumerate(ops):
            if (i + j) % 3 == 2:
                continue  # 10 of the 15 axis x operator pairs
            variants.append((ax, op))
    dtypes = ("f32", "f16", "i32")
    classes = ("prime", "m16", "tiny")
    for k, ((var, ind, outd, lhs, rhs), op) in enumerate(variants):
        dt = dtypes[k % 3]
        cls = classes[(k // 3) % 3]
        acc = "f32" if dt == "f16" and op == "+=!" else dt
        read = f"X({rhs})" if acc == dt else f"f32(X({rhs}))"
        shape = {"B": g.sizes.pick(cls)[0]} if ind.startswith("B") else {}
        shape.update(g.mn(cls))
        g.add("reduce", f"{opname[op]}_{var}", dt, cls, f"""
def reduce_{opname[op]}({dt}[{ind}] X) -> ({acc}[{outd}] Y) {{
  Y({lhs}) {op} {read}
}}""", shape)
    g.add("reduce", "sum_all_scalar", "f32", "prime", """
def reduce_all(f32[M, N] X) -> (f32[] Y) {
  Y() +=! X(m, n)
}""", g.mn("prime"), note="a 0-d output")
    g.add("reduce", "accumulate_onto", "f32", "m16", """
def reduce_onto(f32[M, N] X, f32[M] init) -> (f32[M] Y) {
  Y(m) = init(m) * 2
  Y(m) += X(m, n) * X(m, n)
}""", g.mn("m16"), note="'+=' onto an earlier statement's value")
    g.add("reduce", "sum_2d_last_f16acc", "f16", "tiny", """
def reduce_sum_f16(f16[M, N] X) -> (f16[M] Y) {
  Y(m) +=! X(m, n)
}""", g.mn("tiny"), note="f16 accumulation, rounded every step")
    g.add("reduce", "sum_2d_last", "f32", "bigrow", """
def reduce_sum(f32[M, N] X) -> (f32[M] Y) {
  Y(m) +=! X(m, n)
}""", {"M": 2, "N": BIG_ROW}, large=True)
    g.add("reduce", "max_2d_lead", "f32", "bigl1", """
def reduce_max(f32[M, N] X) -> (f32[N] Y) {
  Y(n) max=! X(m, n)
}""", {"M": 1024, "N": 400}, large=True, note="1.6 MB input")


def rows(g):
    for dt, cls in (("f16", "prime"), ("f32", "m16"), ("f32", "tiny"), ("f32", "bigrow")):
        conv = f"f32(X(m, n))" if dt == "f16" else "X(m, n)"
        out = "f16(E(m, n) / Den(m))" if dt == "f16" else "E(m, n) / Den(m)"
        shape = {"M": 2, "N": BIG_ROW} if cls == "bigrow" else g.mn(cls)
        g.add("softmax", "rows", dt, cls, f"""
def softmax({dt}[M, N] X) -> ({dt}[M, N] Y) {{
  Mx(m) max=! {conv}
  E(m, n) = exp({conv} - Mx(m))
  Den(m) +=! E(m, n)
  Y(m, n) = {out}
}}""", shape, large=cls == "bigrow")
    for dt, cls in (("f16", "m16"), ("f32", "prime"), ("f16", "tiny"), ("f32", "bigrow")):
        conv = f"f32(X(m, n))" if dt == "f16" else "X(m, n)"
        out = "f16(D(m, n) * Rstd(m) * gamma(n) + beta(n))" if dt == "f16" else "D(m, n) * Rstd(m) * gamma(n) + beta(n)"
        shape = {"M": 2, "N": BIG_ROW} if cls == "bigrow" else g.mn(cls)
        g.add("layernorm", "rows", dt, cls, f"""
def layer_norm({dt}[M, N] X, f32[N] gamma, f32[N] beta) -> ({dt}[M, N] Y) {{
  Sum(m) +=! {conv}
  Mean(m) = Sum(m) / f32(N)
  D(m, n) = {conv} - Mean(m)
  SqSum(m) +=! D(m, n) * D(m, n)
  Rstd(m) = rsqrt(SqSum(m) / f32(N) + 0.00001)
  Y(m, n) = {out}
}}""", shape, large=cls == "bigrow")


def batch_norm(g):
    for dt, cls in (("f16", "prime"), ("f16", "m16"), ("f32", "tiny")):
        c = g.sizes.pick(cls)[0]
        conv = f"f32(X(n, h, w, c))" if dt == "f16" else "X(n, h, w, c)"
        g.add("batchnorm", "reduce_nhwc", dt, cls, f"""
def bn_reduce({dt}[N, H, W, C] X) -> (f32[C] Sum, f32[C] SumSq) {{
  Sum(c) +=! {conv}
  SumSq(c) +=! {conv} * {conv}
}}""", {"N": 2, "H": 3, "W": 5, "C": c})
    g.add("batchnorm", "reduce_nchw", "f32", "prime", """
def bn_reduce_nchw(f32[N, C, H, W] X) -> (f32[C] Sum, f32[C] SumSq) {
  Sum(c) +=! X(n, c, h, w)
  SumSq(c) +=! X(n, c, h, w) * X(n, c, h, w)
}""", {"N": 2, "C": 13, "H": 7, "W": 11})
    for dt, cls in (("f16", "m16"), ("f16", "prime"), ("f32", "tiny")):
        c = g.sizes.pick(cls)[0]
        conv = f"f32(X(n, h, w, c))" if dt == "f16" else "X(n, h, w, c)"
        y = "f16" if dt == "f16" else ""
        g.add("batchnorm", "update_nhwc", dt, cls, f"""
def bn_update({dt}[N, H, W, C] X, f32[C] Sum, f32[C] SumSq, f32[C] gamma, f32[C] beta)
    -> ({dt}[N, H, W, C] Y, f32[C] Mean, f32[C] Var) {{
  Mean(c) = Sum(c) / f32(N * H * W)
  Var(c) = abs(SumSq(c) / f32(N * H * W) - Mean(c) * Mean(c))
  Scale(c) = gamma(c) * rsqrt(Var(c) + 0.00001)
  Y(n, h, w, c) = {y}(({conv} - Mean(c)) * Scale(c) + beta(c))
}}""", {"N": 2, "H": 4, "W": 3, "C": c})
    g.add("batchnorm", "train_fused", "f32", "m16", """
def bn_train(f32[N, H, W, C] X, f32[C] gamma, f32[C] beta) -> (f32[N, H, W, C] Y) {
  Sum(c) +=! X(n, h, w, c)
  Mean(c) = Sum(c) / f32(N * H * W)
  D(n, h, w, c) = X(n, h, w, c) - Mean(c)
  SqSum(c) +=! D(n, h, w, c) * D(n, h, w, c)
  Y(n, h, w, c) = D(n, h, w, c) * rsqrt(SqSum(c) / f32(N * H * W) + 0.00001) * gamma(c) + beta(c)
}""", {"N": 2, "H": 5, "W": 3, "C": 32}, note="reduce and update in one def")


def pooling(g):
    # (kind, window, stride, layout, dtype, class)
    cases = [
        ("max", 2, 2, "nhwc", "f16", "m16"),
        ("max", 3, 1, "nhwc", "f32", "prime"),
        ("max", 3, 2, "nchw", "f16", "prime"),
        ("max", 2, 1, "nchw", "f32", "tiny"),
        ("avg", 2, 2, "nhwc", "f32", "m16"),
        ("avg", 3, 1, "nchw", "f16", "tiny"),
        ("avg", 3, 2, "nhwc", "f16", "prime"),
        ("avg", 2, 2, "nchw", "f32", "prime"),
        ("max", 3, 2, "nhwc", "i8", "m16"),
    ]
    for kind, k, s, layout, dt, cls in cases:
        p, q = g.sizes.pick("tiny", 2) if cls == "tiny" else (g.sizes.pick("tiny")[0] + 3, g.sizes.pick(cls)[0] % 11 + 2)
        c = g.sizes.pick(cls)[0]
        g.add("pool", f"{kind}{k}x{k}_s{s}_{layout}", dt, cls,
              pool_text(kind, k, s, layout, dt, g.quasi_affine),
              pool_shape(k, s, layout, p, q, c, g.quasi_affine))


def pool_extent(k, s, out):
    """Input extent of a window k at stride s producing `out` positions, affine in `out`."""
    scaled = out if s == 1 else f"{s} * {out}"
    return scaled if k == s else f"{scaled} + {k - s}"


def pool_text(kind, k, s, layout, dt, quasi_affine):
    op = "max=!" if kind == "max" else "+=!"
    acc = dt if kind == "max" else "f32"
    if quasi_affine:
        h, w = "H", "W"
    else:
        h, w = pool_extent(k, s, "P"), pool_extent(k, s, "Q")
    xd = f"N, {h}, {w}, C" if layout == "nhwc" else f"N, C, {h}, {w}"
    yd = "N, P, Q, C" if layout == "nhwc" else "N, C, P, Q"
    hi, wi = (f"p + r" if s == 1 else f"p * {s} + r"), (f"q + t" if s == 1 else f"q * {s} + t")
    xi = f"n, {hi}, {wi}, c" if layout == "nhwc" else f"n, c, {hi}, {wi}"
    yi = "n, p, q, c" if layout == "nhwc" else "n, c, p, q"
    read = f"X({xi})" if acc == dt else f"f32(X({xi}))"
    ranges = f"r in 0:{k}, t in 0:{k}"
    if quasi_affine:
        bound = (lambda d: f"{d} - {k - 1}") if s == 1 else (lambda d: f"({d} - {k}) / {s} + 1")
        ranges = f"p in 0:{bound('H')}, q in 0:{bound('W')}, " + ranges
    elif kind == "avg":  # the sum is a new local: its left-hand indices need ranges
        ranges = "p in 0:P, q in 0:Q, " + ranges
    name = f"{kind}pool_{k}x{k}_s{s}_{layout}"
    body = f"  S({yi}) {op} {read}\n      where {ranges}\n"
    if kind == "max":
        body = body.replace("S(", "Y(", 1)
    else:
        out = f"S({yi}) / {k * k}"
        body += f"  Y({yi}) = {dt}({out})\n" if dt != "f32" else f"  Y({yi}) = {out}\n"
        if quasi_affine:  # the same output ranges on both statements (P and Q are inferred)
            body += f"      where p in 0:{bound('H')}, q in 0:{bound('W')}\n"
    return f"def {name}({dt}[{xd}] X) -> ({dt}[{yd}] Y) {{\n{body}}}"


def pool_shape(k, s, layout, p, q, c, quasi_affine):
    if quasi_affine:
        hw = {"H": s * (p - 1) + k, "W": s * (q - 1) + k}
    else:
        hw = {"P": p, "Q": q}
    return {"N": 2, **({"C": c} if layout == "nchw" else {}), **hw, **({"C": c} if layout == "nhwc" else {})}


def transposes(g):
    g.add("transpose", "2d", "f16", "prime", """
def transpose_2d(f16[M, N] X) -> (f16[N, M] Y) {
  Y(n, m) = X(m, n)
}""", g.mn("prime"))
    g.add("transpose", "2d", "f32", "m16", """
def transpose_2d(f32[M, N] X) -> (f32[N, M] Y) {
  Y(n, m) = X(m, n)
}""", g.mn("m16"))
    g.add("transpose", "2d", "i32", "tiny", """
def transpose_2d(i32[M, N] X) -> (i32[N, M] Y) {
  Y(n, m) = X(m, n)
}""", g.mn("tiny"))
    perms = [  # (variant, output dims from input N H W C, output indices)
        ("nhwc_to_nchw", "N, C, H, W", "n, c, h, w", "f16", "m16"),
        ("nchw_to_nhwc", "N, H, W, C", "n, h, w, c", "f32", "prime"),
        ("0213", "N, W, H, C", "n, w, h, c", "f16", "tiny"),
        ("3210", "C, W, H, N", "c, w, h, n", "f32", "m16"),
    ]
    for var, yd, yi, dt, cls in perms:
        if var == "nchw_to_nhwc":  # the input is NCHW here
            text = f"""
def transpose_{var}({dt}[N, C, H, W] X) -> ({dt}[{yd}] Y) {{
  Y({yi}) = X(n, c, h, w)
}}"""
        else:
            text = f"""
def transpose_{var}({dt}[N, H, W, C] X) -> ({dt}[{yd}] Y) {{
  Y({yi}) = X(n, h, w, c)
}}"""
        a, b = g.sizes.pick(cls, 2)
        g.add("transpose", var, dt, cls, text, {"N": 2, "H": 3, "W": a, "C": b} if var != "nchw_to_nhwc"
              else {"N": 2, "C": b, "H": 3, "W": a})
    g.add("transpose", "2d", "f32", "bigl1", """
def transpose_2d(f32[M, N] X) -> (f32[N, M] Y) {
  Y(n, m) = X(m, n)
}""", {"M": 1024, "N": 384}, large=True, note="1.5 MiB")


def broadcasts(g):
    for dt, cls in (("f16", "m16"), ("f32", "prime"), ("i32", "tiny")):
        g.add("broadcast", "bias_last", dt, cls, f"""
def bias_last({dt}[M, N] X, {dt}[N] b) -> ({dt}[M, N] Y) {{
  Y(m, n) = X(m, n) + b(n)
}}""", g.mn(cls))
    for dt, cls in (("f32", "m16"), ("f16", "prime")):
        g.add("broadcast", "row_scale", dt, cls, f"""
def row_scale({dt}[M, N] X, {dt}[M] s) -> ({dt}[M, N] Y) {{
  Y(m, n) = X(m, n) * s(m)
}}""", g.mn(cls))
    g.add("broadcast", "scale_bias_3d", "f32", "prime", """
def scale_bias_3d(f32[B, M, N] X, f32[M] s, f32[N] b) -> (f32[B, M, N] Y) {
  Y(i, m, n) = X(i, m, n) * s(m) + b(n)
}""", {"B": 3, **g.mn("prime")})
    g.add("broadcast", "channel_nchw", "f16", "m16", """
def channel_nchw(f16[N, C, H, W] X, f32[C] s, f32[C] t) -> (f16[N, C, H, W] Y) {
  Y(n, c, h, w) = f16(f32(X(n, c, h, w)) * s(c) + t(c))
}""", {"N": 2, "C": 16, "H": 5, "W": 7})
    g.add("broadcast", "scalar", "f32", "prime", """
def scalar_axpy(f32[M, N] X, f32[M, N] Z, f32[] alpha) -> (f32[M, N] Y) {
  Y(m, n) = X(m, n) * alpha() + Z(m, n)
}""", g.mn("prime"), note="a 0-d tensor")
    g.add("broadcast", "bias_last", "f32", "bigrow", """
def bias_last(f32[M, N] X, f32[N] b) -> (f32[M, N] Y) {
  Y(m, n) = X(m, n) + b(n)
}""", {"M": 2, "N": BIG_ROW}, large=True)


def gemms(g):
    majorness = {  # (A dims, A access, B dims, B access)
        "nn": ("M, K", "A(m, k)", "K, N", "B(k, n)"),
        "tn": ("K, M", "A(k, m)", "K, N", "B(k, n)"),
        "nt": ("M, K", "A(m, k)", "N, K", "B(n, k)"),
        "tt": ("K, M", "A(k, m)", "N, K", "B(n, k)"),
    }
    cases = [("f16", "m16"), ("f16", "prime"), ("f32", "tiny")]
    for major, (ad, aa, bd, ba) in majorness.items():
        for dt, cls in cases:
            acc = "i32" if dt == "i8" else "f32"
            lhs = f"{acc}({aa}) * {acc}({ba})" if dt != acc else f"{aa} * {ba}"
            m, n, k = g.sizes.pick(cls, 3)
            g.add("gemm", major, dt, cls, f"""
def gemm_{major}({dt}[{ad}] A, {dt}[{bd}] B) -> ({acc}[M, N] C) {{
  C(m, n) +=! {lhs}
}}""", {"M": m, "K": k, "N": n} if major[0] == "n" else {"K": k, "M": m, "N": n})
    m, n, k = g.sizes.pick("m16", 3)
    g.add("gemm", "nn", "i8", "m16", """
def gemm_i8(i8[M, K] A, i8[K, N] B) -> (i32[M, N] C) {
  C(m, n) +=! i32(A(m, k)) * i32(B(k, n))
}""", {"M": m, "K": k, "N": n})
    g.add("gemm", "nt", "i8", "prime", """
def gemm_i8_nt(i8[M, K] A, i8[N, K] B) -> (i32[M, N] C) {
  C(m, n) +=! i32(A(m, k)) * i32(B(n, k))
}""", {"M": 37, "K": 19, "N": 13})
    g.add("gemm", "nn_f16out", "f16", "m16", """
def gemm_f16_out(f16[M, K] A, f16[K, N] B, f32[N] bias) -> (f16[M, N] D) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
  D(m, n) = f16(max(C(m, n) + bias(n), 0))
}""", {"M": 32, "K": 48, "N": 64})
    g.add("gemm", "nn", "f16", "bigl1", """
def gemm_nn(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
}""", {"M": 512, "K": 512, "N": 512}, large=True, note="C is 1 MiB")


def batched_gemms(g):
    g.add("bmm", "plain", "f16", "m16", """
def bmm(f16[B, M, K] X, f16[B, K, N] Y) -> (f32[B, M, N] Z) {
  Z(b, m, n) +=! f32(X(b, m, k)) * f32(Y(b, k, n))
}""", {"B": 3, "M": 32, "K": 16, "N": 48})
    g.add("bmm", "bias", "f16", "m16", """
def bmm_bias(f16[B, M, K] X, f16[B, K, N] Y, f32[N] bias) -> (f32[B, M, N] Z) {
  C(b, m, n) +=! f32(X(b, m, k)) * f32(Y(b, k, n))
  Z(b, m, n) = C(b, m, n) + bias(n)
}""", {"B": 2, "M": 16, "K": 32, "N": 32})
    g.add("bmm", "gelu", "f16", "prime", """
def bmm_gelu(f16[B, M, K] X, f16[B, K, N] Y, f32[N] bias) -> (f16[B, M, N] Z) {
  C(b, m, n) +=! f32(X(b, m, k)) * f32(Y(b, k, n))
  E(b, m, n) = C(b, m, n) + bias(n)
  Z(b, m, n) = f16(0.5 * E(b, m, n) * (1 + tanh(0.7978845608 * (E(b, m, n) + 0.044715 * E(b, m, n) * E(b, m, n) * E(b, m, n)))))
}""", {"B": 2, "M": 13, "K": 17, "N": 19})
    g.add("bmm", "batch_middle", "f16", "m16", """
def bmm_batch_middle(f16[M, B, K] X, f16[B, K, N] Y) -> (f32[M, B, N] Z) {
  Z(m, b, n) +=! f32(X(m, b, k)) * f32(Y(b, k, n))
}""", {"M": 32, "B": 3, "K": 16, "N": 16}, note="batch not leading")
    g.add("bmm", "qkt", "f16", "m16", """
def bmm_qkt(f16[B, M, D] Q, f16[B, N, D] Kt) -> (f32[B, M, N] S) {
  S(b, m, n) +=! f32(Q(b, m, d)) * f32(Kt(b, n, d))
}""", {"B": 2, "M": 32, "D": 16, "N": 48}, note="attention scores: B transposed")
    g.add("bmm", "plain", "f32", "tiny", """
def bmm(f32[B, M, K] X, f32[B, K, N] Y) -> (f32[B, M, N] Z) {
  Z(b, m, n) +=! X(b, m, k) * Y(b, k, n)
}""", {"B": 2, "M": 3, "K": 5, "N": 4})


def convolutions(g):
    pad1_nhwc = """
def conv_nhwc({dt}[N, H, W, C] X, {dt}[R, S, C, K] Wt) -> ({acc}[N, H, W, K] Y) {{
  Xp(n, h, w, c) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, h - 1, w - 1, c), 0)
      where h in 0:H + 2, w in 0:W + 2
  Y(n, p, q, k) +=! {acc}(Xp(n, p + r, q + s, c)) * {acc}(Wt(r, s, c, k))
}}"""
    for dt, cls, shape in (("f16", "m16", {"N": 2, "H": 6, "W": 5, "C": 16, "R": 3, "S": 3, "K": 32}),
                           ("f16", "prime", {"N": 1, "H": 7, "W": 13, "C": 5, "R": 3, "S": 3, "K": 13}),
                           ("f16", "tiny", {"N": 1, "H": 3, "W": 2, "C": 3, "R": 3, "S": 3, "K": 2}),
                           ("i8", "m16", {"N": 1, "H": 4, "W": 4, "C": 32, "R": 3, "S": 3, "K": 16})):
        acc = "i32" if dt == "i8" else "f32"
        g.add("conv", "nhwc_pad1", dt, cls, pad1_nhwc.format(dt=dt, acc=acc), shape)
    g.add("conv", "nchw_pad1", "f16", "m16", """
def conv_nchw(f16[N, C, H, W] X, f16[K, C, R, S] Wt) -> (f32[N, K, H + 3 - R, W + 3 - S] Y) {
  Xp(n, c, h, w) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, c, h - 1, w - 1), 0)
      where h in 0:H + 2, w in 0:W + 2
  Y(n, k, p, q) +=! f32(Xp(n, c, p + r, q + s)) * f32(Wt(k, c, r, s))
}""", {"N": 2, "C": 16, "H": 5, "W": 6, "K": 16, "R": 3, "S": 3})
    g.add("conv", "nchw_pad1", "f32", "prime", """
def conv_nchw(f32[N, C, H, W] X, f32[K, C, R, S] Wt) -> (f32[N, K, H + 3 - R, W + 3 - S] Y) {
  Xp(n, c, h, w) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, c, h - 1, w - 1), 0)
      where h in 0:H + 2, w in 0:W + 2
  Y(n, k, p, q) +=! Xp(n, c, p + r, q + s) * Wt(k, c, r, s)
}""", {"N": 1, "C": 3, "H": 13, "W": 7, "K": 5, "R": 2, "S": 3})
    g.add("conv", "nhwc_stride2", "f16", "m16", """
def conv_nhwc_s2(f16[N, 2 * P + R - 2, 2 * Q + S - 2, C] X, f16[R, S, C, K] Wt) -> (f32[N, P, Q, K] Y) {
  Y(n, p, q, k) +=! f32(X(n, p * 2 + r, q * 2 + s, c)) * f32(Wt(r, s, c, k))
}""", {"N": 2, "P": 4, "Q": 3, "R": 3, "S": 3, "C": 16, "K": 32})
    g.add("conv", "nchw_stride2", "f16", "prime", """
def conv_nchw_s2(f16[N, C, 2 * P + R - 2, 2 * Q + S - 2] X, f16[K, C, R, S] Wt) -> (f32[N, K, P, Q] Y) {
  Y(n, k, p, q) +=! f32(X(n, c, p * 2 + r, q * 2 + s)) * f32(Wt(k, c, r, s))
}""", {"N": 1, "C": 7, "P": 5, "Q": 3, "K": 11, "R": 3, "S": 2})
    g.add("conv", "nhwc_dilated2", "f16", "m16", """
def conv_nhwc_d2(f16[N, P + 2 * R - 2, Q + 2 * S - 2, C] X, f16[R, S, C, K] Wt) -> (f32[N, P, Q, K] Y) {
  Y(n, p, q, k) +=! f32(X(n, p + 2 * r, q + 2 * s, c)) * f32(Wt(r, s, c, k))
}""", {"N": 1, "P": 5, "Q": 4, "R": 3, "S": 3, "C": 16, "K": 16})
    g.add("conv", "nhwc_1x1", "f16", "prime", """
def conv_1x1(f16[N, H, W, C] X, f16[C, K] Wt) -> (f32[N, H, W, K] Y) {
  Y(n, h, w, k) +=! f32(X(n, h, w, c)) * f32(Wt(c, k))
}""", {"N": 2, "H": 5, "W": 7, "C": 13, "K": 17})
    g.add("conv", "depthwise_nhwc", "f16", "m16", """
def depthwise_nhwc(f16[N, H, W, C] X, f16[R, S, C] Wt) -> (f16[N, H, W, C] Y) {
  Xp(n, h, w, c) = select(h >= 1 && h <= H && w >= 1 && w <= W, X(n, h - 1, w - 1, c), 0)
      where h in 0:H + 2, w in 0:W + 2
  Acc(n, p, q, c) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c))
      where p in 0:H, q in 0:W
  Y(n, p, q, c) = f16(min(max(Acc(n, p, q, c), 0), 6))
}""", {"N": 2, "H": 5, "W": 6, "C": 32, "R": 3, "S": 3})
    g.add("conv", "depthwise_nchw", "f32", "prime", """
def depthwise_nchw(f32[N, C, P + R - 1, Q + S - 1] X, f32[C, R, S] Wt) -> (f32[N, C, P, Q] Y) {
  Y(n, c, p, q) +=! X(n, c, p + r, q + s) * Wt(c, r, s)
}""", {"N": 1, "C": 13, "P": 7, "Q": 5, "R": 3, "S": 3})
    g.add("conv", "depthwise_s2", "f16", "tiny", """
def depthwise_s2(f16[N, 2 * P + 1, 2 * Q + 1, C] X, f16[3, 3, C] Wt) -> (f32[N, P, Q, C] Y) {
  Y(n, p, q, c) +=! f32(X(n, p * 2 + r, q * 2 + s, c)) * f32(Wt(r, s, c))
}""", {"N": 1, "P": 3, "Q": 2, "C": 5})
    g.add("conv", "nhwc_pad1", "f16", "bigl1", pad1_nhwc.format(dt="f16", acc="f32"),
          {"N": 8, "H": 32, "W": 32, "C": 64, "R": 3, "S": 3, "K": 64}, large=True, note="X and Y over 1 MiB")


def one_hots(g):
    for dt, cls in (("f32", "prime"), ("f16", "m16"), ("i32", "tiny")):
        on, off = ("1", "0") if dt == "i32" else ("1.0", "0.0")
        n, d = g.sizes.pick(cls, 2)
        g.add("onehot", "select", dt, cls, f"""
def one_hot(i32[N] idx) -> ({dt}[N, D] Y) {{
  Y(n, d) = select(d == idx(n), {on}, {off})
}}""", {"N": n, "D": d})
    g.add("onehot", "shifted", "f32", "m16", """
def one_hot_shifted(i32[N] idx) -> (f32[N, D] Y) {
  Y(n, d) = select(d == idx(n) + 8, 2.5, -1.0)
}""", {"N": 32, "D": 16}, note="indices in [-8, 8] shifted into [0, 16]")


def functions(g):
    """The built-in functions ONNX import needs (issue 34), element-wise in f32 and f16: on the NPU
    most are compositions of vector instructions (compiler/emit_npu/compositions.h). Last in
    FAMILIES, so the earlier families' shapes stay as they were."""
    for dt, cls in (("f32", "prime"), ("f16", "m16")):
        g.add("functions", "erf_sigmoid", dt, cls, f"""
def fn_erf_sigmoid({dt}[M, N] A, {dt}[M, N] B) -> ({dt}[M, N] C) {{
  C(m, n) = erf(A(m, n)) * sigmoid(B(m, n))
}}""", g.mn(cls))
    for dt, cls in (("f32", "tiny"), ("f16", "prime")):
        g.add("functions", "rounding", dt, cls, f"""
def fn_rounding({dt}[M, N] A) -> ({dt}[M, N] C) {{
  C(m, n) = floor(A(m, n) * 2.5) + ceil(A(m, n) * 1.5) - round(A(m, n) * 4) * sign(A(m, n))
}}""", g.mn(cls))
    for dt, cls in (("f32", "m16"), ("f16", "tiny")):
        g.add("functions", "trig", dt, cls, f"""
def fn_trig({dt}[M, N] A) -> ({dt}[M, N] C) {{
  C(m, n) = sin(A(m, n) * 3) - cos(A(m, n)) + tan(A(m, n) * 0.5) + asin(A(m, n) * 0.5) + acos(A(m, n) * 0.25) + atan(A(m, n))
}}""", g.mn(cls))
    for dt, cls in (("f32", "prime"), ("f16", "m16")):
        g.add("functions", "hyperbolic_pow", dt, cls, f"""
def fn_hyperbolic_pow({dt}[M, N] A, {dt}[M, N] B) -> ({dt}[M, N] C) {{
  C(m, n) = sinh(A(m, n)) + cosh(B(m, n)) + asinh(A(m, n)) + acosh(abs(B(m, n)) + 1) + atanh(A(m, n) * 0.25) + pow(abs(A(m, n)) + 0.5, B(m, n))
}}""", g.mn(cls))


def attentions(g):
    """Attention written out (scores, softmax, context): the core fuses it into one kernel with an
    online softmax where the target lowers that (compiler/poly/online_softmax.h), else keeps the
    statements; every target verifies either way."""
    g.add("attention", "bhsd_scaled", "f16", "m16", """
def attention_bhsd(f16[B, H, S, D] Q, f16[B, H, T, D] K, f16[B, H, T, D] V) -> (f16[B, H, S, D] Out) {
  Sc(b, h, i, j) +=! f32(Q(b, h, i, d)) * f32(K(b, h, j, d))
  Mx(b, h, i) max=! Sc(b, h, i, j) * 0.25
  E(b, h, i, j) = exp(Sc(b, h, i, j) * 0.25 - Mx(b, h, i))
  Z(b, h, i) +=! E(b, h, i, j)
  O(b, h, i, e) +=! E(b, h, i, j) * f32(V(b, h, j, e))
  Out(b, h, i, e) = f16(O(b, h, i, e) / Z(b, h, i))
}""", {"B": 1, "H": 2, "S": 64, "T": 96, "D": 16})
    g.add("attention", "bshd_causal", "f16", "prime", """
def attention_causal_bshd(f16[B, S, H, D] Q, f16[B, S, H, D] K, f16[B, S, H, D] V) -> (f16[B, S, H, D] Out) {
  Sc(b, h, i, j) +=! f32(Q(b, i, h, d)) * f32(K(b, j, h, d))
  L(b, h, i, j) = select(j <= i, Sc(b, h, i, j) * 0.25, -1.0e30)
  Mx(b, h, i) max=! L(b, h, i, j)
  E(b, h, i, j) = f16(exp(L(b, h, i, j) - Mx(b, h, i)))
  Z(b, h, i) +=! f32(E(b, h, i, j))
  O(b, i, h, e) +=! f32(E(b, h, i, j)) * f32(V(b, j, h, e))
  Out(b, i, h, e) = f16(O(b, i, h, e) / Z(b, h, i))
}""", {"B": 2, "S": 37, "H": 2, "D": 16}, note="causal, exponentials rounded to f16, sequence not a multiple of 16")
    g.add("attention", "softmax_first_mask", "f16", "m16", """
def attention_softmax_first(f16[H, S, D] Q, f16[H, T, D] K, f16[H, T, D] V, f32[S, T] M) -> (f16[H, S, D] Out) {
  Sc(h, i, j) +=! f32(Q(h, i, d)) * f32(K(h, j, d))
  L(h, i, j) = Sc(h, i, j) * 0.25 + M(i, j)
  Mx(h, i) max=! L(h, i, j)
  E(h, i, j) = exp(L(h, i, j) - Mx(h, i))
  Z(h, i) +=! E(h, i, j)
  P(h, i, j) = f16(E(h, i, j) / Z(h, i))
  O(h, i, e) +=! f32(P(h, i, j)) * f32(V(h, j, e))
  Out(h, i, e) = f16(O(h, i, e))
}""", {"H": 2, "S": 32, "T": 80, "D": 16}, note="softmax then matmul, additive mask")
    g.add("attention", "multi_query_decode", "f16", "tiny", """
def attention_mqa_decode(f16[B, H, D] Q, f16[B, T, D] K, f16[B, T, D] V) -> (f16[B, H, D] Out) {
  Sc(b, h, j) +=! f32(Q(b, h, d)) * f32(K(b, j, d))
  Mx(b, h) max=! Sc(b, h, j)
  E(b, h, j) = exp(Sc(b, h, j) - Mx(b, h))
  Z(b, h) +=! E(b, h, j)
  O(b, h, e) +=! E(b, h, j) * f32(V(b, j, e))
  Out(b, h, e) = f16(O(b, h, e) / Z(b, h))
}""", {"B": 2, "H": 4, "T": 133, "D": 16}, note="one query per head, keys shared by the heads")
    g.add("attention", "plain", "f32", "tiny", """
def attention_f32(f32[S, D] Q, f32[T, D] K, f32[T, D] V) -> (f32[S, D] Out) {
  Sc(i, j) +=! Q(i, d) * K(j, d)
  Mx(i) max=! Sc(i, j)
  E(i, j) = exp(Sc(i, j) - Mx(i))
  Z(i) +=! E(i, j)
  O(i, e) +=! E(i, j) * V(j, e)
  Out(i, e) = O(i, e) / Z(i)
}""", {"S": 5, "T": 7, "D": 3})


def products(g):
    """Product reductions, last of the families so that the shapes drawn for every earlier
    instance stay as they were."""
    # `*=!`, `*=`: factors near 1 (random inputs in [-2, 2] scaled by 1/16 around 1, or
    # odd integers) so that long products neither vanish nor overflow
    g.add("reduce", "prod_2d_last", "f32", "prime", """
def reduce_prod(f32[M, N] X) -> (f32[M] Y) {
  Y(m) *=! X(m, n) * 0.0625 + 1
}""", g.mn("prime"), note="a product along the rows")
    g.add("reduce", "prod_2d_lead", "f16", "m16", """
def reduce_prod(f16[M, N] X) -> (f16[N] Y) {
  Y(n) *=! X(m, n) * 0.0625 + 1
}""", g.mn("m16"), note="f16 product, rounded every step")
    g.add("reduce", "prod_3d_mid", "i32", "tiny", """
def reduce_prod(i32[B, M, N] X) -> (i32[B, N] Y) {
  Y(b, n) *=! 2 * X(b, m, n) + 1
}""", {"B": g.sizes.pick("tiny")[0], **g.mn("tiny")}, note="i32 product, wrapping")
    g.add("reduce", "prod_all_scalar", "f32", "prime", """
def reduce_prod_all(f32[M, N] X) -> (f32[] Y) {
  Y() *=! X(m, n) * 0.0625 + 1
}""", g.mn("prime"), note="a 0-d product")
    g.add("reduce", "prod_onto", "f32", "m16", """
def reduce_prod_onto(f32[M, N] X, f32[M] init) -> (f32[M] Y) {
  Y(m) = init(m) * 2
  Y(m) *= X(m, n) * 0.0625 + 1
}""", g.mn("m16"), note="'*=' onto an earlier statement's value")


FAMILIES = [elementwise, casts, integer, reductions, rows, batch_norm, pooling, transposes, broadcasts,
            gemms, batched_gemms, convolutions, one_hots, functions, attentions, products]


def generate(seed=DEFAULT_SEED, quasi_affine=False):
    """All instances, in a fixed order; the same seed gives the same list."""
    g = Generator(seed, quasi_affine)
    for family in FAMILIES:
        family(g)
    return g.instances


def write(instances, out_dir, header=None):
    """NAME.tsl per instance (its header comment lines, its note, its text) and manifest.json;
    `header(inst)` gives the header lines (default: the conformance instance and its shape)."""
    os.makedirs(out_dir, exist_ok=True)
    for inst in instances:
        with open(os.path.join(out_dir, inst.name + ".tsl"), "w") as f:
            for line in (header(inst) if header else [f"conformance instance {inst.name}: --shape {inst.shape_arg()}"]):
                f.write(f"# {line}\n")
            if inst.note:
                f.write(f"# {inst.note}\n")
            f.write(inst.text)
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        json.dump([asdict(i) for i in instances], f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory to write NAME.tsl and manifest.json into")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--quasi-affine", action="store_true",
                    help="pooling with '/' in range bounds instead of explicit output sizes")
    args = ap.parse_args()
    instances = generate(args.seed, args.quasi_affine)
    write(instances, args.out)
    print(f"{len(instances)} instances written to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
