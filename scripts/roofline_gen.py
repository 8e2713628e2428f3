#!/usr/bin/python3
"""Instances of tessel's roofline suite (issue 30 item 4): operators at realistic sizes.

Each instance is one `.tsl` def (written as conformance_gen.py writes them: one def per file, a
comment line with its shape) with two shapes:

  shape   the measured size: >= 1e7 MACs for a contraction, >= 4 MB read + written once for a
          memory-bound operator (bytes_moved() counts every input and output once)
  small   a size the reference interpreter checks in well under a second (`--target c`), so the
          text of every instance is known to verify before the slow runs

and labels: family (the table's grouping), kind ("contraction" or "memory": which size rule the
instance is held to, not which bound binds on a target; that is the report's), dtype, the
`tessel run --verify` mode its size needs, and `torch`: the key of the same operator in
roofline_suite.py's PyTorch peers (GPU mode).

The list is fixed (no random stream): the same instances, byte for byte, every time.

Usage as a script: roofline_gen.py --out DIR [--small] writes DIR/NAME.tsl and DIR/manifest.json.
"""
import argparse
import os
import re
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance_gen  # noqa: E402  (writes the instance files)

DTYPE_BYTES = {"f16": 2, "f32": 4, "i8": 1, "i32": 4}
MIN_MACS = 1e7
MIN_BYTES = 4e6


@dataclass
class Instance:
    name: str
    family: str
    kind: str           # "contraction" or "memory"
    dtype: str
    def_name: str
    text: str
    shape: dict
    small: dict
    macs_expr: str = ""  # product of the contraction's loop extents, in the shape's names
    verify: str = "auto"
    torch: str = ""
    note: str = ""
    large: bool = False  # conformance.py's label (no instance here is sampled by it)

    def shape_arg(self, small=False):
        return ",".join(f"{k}={v}" for k, v in (self.small if small else self.shape).items())

    def macs(self, small=False):
        return int(eval(self.macs_expr, {}, dict(self.small if small else self.shape))) if self.macs_expr else 0

    def bytes_moved(self, small=False):
        """Every parameter and result of the def read or written once (the roofline's GM term)."""
        env = dict(self.small if small else self.shape)
        header = self.text.split("{", 1)[0]
        total = 0
        for dt, dims in re.findall(r"\b(f16|f32|i8|i32)\[([^\]]*)\]", header):
            n = 1
            for d in [d for d in dims.split(",") if d.strip()]:
                n *= int(eval(d, {}, env))
            total += n * DTYPE_BYTES[dt]
        return total

    def size_label(self):
        if self.kind == "contraction":
            return f"{self.macs() / 1e6:.1f}M MACs"
        return f"{self.bytes_moved() / 1e6:.1f} MB"


class Suite:
    def __init__(self):
        self.instances = []

    def add(self, family, variant, dtype, kind, text, shape, small, macs="", verify="auto", torch="", note=""):
        name = f"{family}.{variant}.{dtype}"
        assert not any(i.name == name for i in self.instances), name
        def_name = text.split("def ", 1)[1].split("(", 1)[0].strip()
        inst = Instance(name, family, kind, dtype, def_name, text.strip() + "\n", dict(shape), dict(small), macs,
                        verify, torch or family, note)
        if kind == "contraction":
            assert inst.macs() >= MIN_MACS, (name, inst.macs())
        else:
            assert inst.bytes_moved() >= MIN_BYTES, (name, inst.bytes_moved())
        self.instances.append(inst)


# --- contractions ------------------------------------------------------------------------------

def attention(s):
    layouts = {  # Q/K/V dims and accesses; scores are [B, H, S, T] in both
        "bshd": ("B, S, H, D", "Q(b, i, h, d)", "B, T, H, D", "K(b, j, h, d)", "V(b, j, h, d)", "B, S, H, D",
                 "O(b, i, h, d)"),
        "bhsd": ("B, H, S, D", "Q(b, h, i, d)", "B, H, T, D", "K(b, h, j, d)", "V(b, h, j, d)", "B, H, S, D",
                 "O(b, h, i, d)"),
    }
    big = {"B": 2, "S": 256, "H": 8, "T": 256, "D": 64}
    small = {"B": 1, "S": 5, "H": 2, "T": 7, "D": 8}
    for lay, (qd, qa, kd, ka, va, od, oa) in layouts.items():
        shape = {k: big[k] for k in re.findall(r"\w", qd)}
        shape["T"] = big["T"]
        sm = {k: small[k] for k in shape}
        s.add("attn_scores", lay, "f16", "contraction", f"""
def attn_scores_{lay}(f16[{qd}] Q, f16[{kd}] K) -> (f32[B, H, S, T] P) {{
  P(b, h, i, j) +=! f32({qa}) * f32({ka})
}}""", shape, sm, macs="B*H*S*T*D", torch=f"attn_scores_{lay}")
        s.add("attn_context", lay, "f16", "contraction", f"""
def attn_context_{lay}(f16[B, H, S, T] P, f16[{kd.replace('K', 'V')}] V) -> (f32[{od}] O) {{
  {oa} +=! f32(P(b, h, i, j)) * f32({va})
}}""", shape, sm, macs="B*H*S*T*D", torch=f"attn_context_{lay}")


def gemms(s):
    s.add("bmm", "shared_weight", "f16", "contraction", """
def bmm_shared_weight(f16[B, M, K] A, f16[K, N] W) -> (f32[B, M, N] C) {
  C(b, m, n) +=! f32(A(b, m, k)) * f32(W(k, n))
}""", {"B": 4, "M": 197, "K": 256, "N": 384}, {"B": 3, "M": 5, "K": 7, "N": 6}, macs="B*M*N*K",
          torch="bmm_shared_weight")
    s.add("bmm", "plain", "f16", "contraction", """
def bmm(f16[B, M, K] X, f16[B, K, N] Y) -> (f32[B, M, N] Z) {
  Z(b, m, n) +=! f32(X(b, m, k)) * f32(Y(b, k, n))
}""", {"B": 8, "M": 128, "K": 96, "N": 160}, {"B": 2, "M": 5, "K": 3, "N": 4}, macs="B*M*N*K")
    majorness = {  # (A dims, A access, B dims, B access, odd sizes)
        "nn": ("M, K", "A(m, k)", "K, N", "B(k, n)", {"M": 333, "K": 191, "N": 257}),
        "tn": ("K, M", "A(k, m)", "K, N", "B(k, n)", {"K": 209, "M": 301, "N": 263}),
        "nt": ("M, K", "A(m, k)", "N, K", "B(n, k)", {"M": 277, "N": 359, "K": 173}),
        "tt": ("K, M", "A(k, m)", "N, K", "B(n, k)", {"K": 181, "M": 269, "N": 311}),
    }
    for major, (ad, aa, bd, ba, shape) in majorness.items():
        s.add("gemm", major, "f16", "contraction", f"""
def gemm_{major}(f16[{ad}] A, f16[{bd}] B) -> (f32[M, N] C) {{
  C(m, n) +=! f32({aa}) * f32({ba})
}}""", shape, {k: v for k, v in zip(shape, (7, 5, 6))}, macs="M*N*K", torch=f"gemm_{major}")
    s.add("gemm", "m196_resnet", "f16", "contraction", """
def gemm_nn(f16[M, K] A, f16[K, N] B) -> (f32[M, N] C) {
  C(m, n) +=! f32(A(m, k)) * f32(B(k, n))
}""", {"M": 196, "K": 256, "N": 1024}, {"M": 13, "K": 16, "N": 32}, macs="M*N*K", torch="gemm_nn",
          note="ResNet-50's 14x14 1x1 layers at batch 1: M not a multiple of 16")
    s.add("gemm", "nn", "f32", "contraction", """
def gemm_f32(f32[M, K] A, f32[K, N] B) -> (f32[M, N] C) {
  C(m, n) +=! A(m, k) * B(k, n)
}""", {"M": 256, "K": 160, "N": 256}, {"M": 7, "K": 5, "N": 6}, macs="M*N*K", torch="gemm_nn",
          note="no f32 cube on the NPU descriptions: the vector unit")
    s.add("gemm", "i8_dequant", "i8", "contraction", """
def gemm_i8_dequant(i8[M, K] A, i8[K, N] B, f32[N] scale) -> (f16[M, N] D) {
  C(m, n) +=! i32(A(m, k)) * i32(B(k, n))
  D(m, n) = f16(f32(C(m, n)) * scale(n))
}""", {"M": 257, "K": 128, "N": 384}, {"M": 7, "K": 32, "N": 5}, macs="M*N*K", torch="gemm_i8_dequant",
          note="per-column dequant to f16")
    s.add("gemv", "rows", "f16", "memory", """
def gemv(f16[M, K] A, f16[K] x) -> (f32[M] y) {
  y(m) +=! f32(A(m, k)) * f32(x(k))
}""", {"M": 4096, "K": 1024}, {"M": 13, "K": 9}, macs="M*K", torch="gemv")


def convolutions(s):
    pad1 = lambda ab: "select(h >= 1 && h <= H && w >= 1 && w <= W, " + ab + ", 0)"  # noqa: E731
    s.add("conv", "nhwc_3x3_pad1", "f16", "contraction", f"""
def conv_nhwc(f16[N, H, W, C] X, f16[R, S, C, K] Wt) -> (f32[N, H, W, K] Y) {{
  Xp(n, h, w, c) = {pad1('X(n, h - 1, w - 1, c)')}
      where h in 0:H + 2, w in 0:W + 2
  Y(n, p, q, k) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c, k))
}}""", {"N": 2, "H": 28, "W": 28, "C": 64, "R": 3, "S": 3, "K": 64},
          {"N": 1, "H": 5, "W": 4, "C": 3, "R": 3, "S": 3, "K": 2}, macs="N*H*W*C*K*R*S", torch="conv_nhwc")
    s.add("conv", "nchw_3x3", "f16", "contraction", """
def conv_nchw(f16[N, C, P + R - 1, Q + S - 1] X, f16[K, C, R, S] Wt) -> (f32[N, K, P, Q] Y) {
  Y(n, k, p, q) +=! f32(X(n, c, p + r, q + s)) * f32(Wt(k, c, r, s))
}""", {"N": 2, "C": 64, "P": 28, "Q": 28, "K": 64, "R": 3, "S": 3},
          {"N": 1, "C": 3, "P": 4, "Q": 5, "K": 2, "R": 3, "S": 3}, macs="N*P*Q*C*K*R*S", torch="conv_nchw")
    s.add("conv", "nhwc_1x1", "f16", "contraction", """
def conv_1x1(f16[N, H, W, C] X, f16[C, K] Wt) -> (f32[N, H, W, K] Y) {
  Y(n, h, w, k) +=! f32(X(n, h, w, c)) * f32(Wt(c, k))
}""", {"N": 1, "H": 14, "W": 14, "C": 256, "K": 1024}, {"N": 1, "H": 3, "W": 5, "C": 7, "K": 6},
          macs="N*H*W*C*K", torch="conv_1x1_nhwc")
    s.add("conv", "grouped_nhwc", "f16", "contraction", """
def conv_grouped_nhwc(f16[N, P + R - 1, Q + S - 1, G, C] X, f16[G, R, S, C, K] Wt) -> (f32[N, P, Q, G, K] Y) {
  Y(n, p, q, g, k) +=! f32(X(n, p + r, q + s, g, c)) * f32(Wt(g, r, s, c, k))
}""", {"N": 2, "P": 28, "Q": 28, "G": 4, "C": 32, "K": 32, "R": 3, "S": 3},
          {"N": 1, "P": 3, "Q": 4, "G": 2, "C": 3, "K": 2, "R": 3, "S": 3}, macs="N*P*Q*G*C*K*R*S",
          torch="conv_grouped_nhwc")
    s.add("conv", "grouped_nchw", "f16", "contraction", """
def conv_grouped_nchw(f16[N, G, C, P + R - 1, Q + S - 1] X, f16[G, K, C, R, S] Wt) -> (f32[N, G, K, P, Q] Y) {
  Y(n, g, k, p, q) +=! f32(X(n, g, c, p + r, q + s)) * f32(Wt(g, k, c, r, s))
}""", {"N": 2, "G": 4, "C": 32, "P": 28, "Q": 28, "K": 32, "R": 3, "S": 3},
          {"N": 1, "G": 2, "C": 3, "P": 3, "Q": 4, "K": 2, "R": 3, "S": 3}, macs="N*P*Q*G*C*K*R*S",
          torch="conv_grouped_nchw")
    s.add("conv3d", "ndhwc_3x3x3", "f16", "contraction", """
def conv3d_ndhwc(f16[N, O + T - 1, P + R - 1, Q + S - 1, C] X, f16[T, R, S, C, K] Wt) -> (f32[N, O, P, Q, K] Y) {
  Y(n, o, p, q, k) +=! f32(X(n, o + t, p + r, q + s, c)) * f32(Wt(t, r, s, c, k))
}""", {"N": 1, "O": 8, "P": 16, "Q": 16, "C": 32, "K": 32, "T": 3, "R": 3, "S": 3},
          {"N": 1, "O": 2, "P": 3, "Q": 3, "C": 3, "K": 2, "T": 3, "R": 3, "S": 3}, macs="N*O*P*Q*C*K*T*R*S",
          torch="conv3d_ndhwc")
    s.add("conv3d", "ncdhw_3x3x3", "f16", "contraction", """
def conv3d_ncdhw(f16[N, C, O + T - 1, P + R - 1, Q + S - 1] X, f16[K, C, T, R, S] Wt) -> (f32[N, K, O, P, Q] Y) {
  Y(n, k, o, p, q) +=! f32(X(n, c, o + t, p + r, q + s)) * f32(Wt(k, c, t, r, s))
}""", {"N": 1, "C": 32, "O": 8, "P": 16, "Q": 16, "K": 32, "T": 3, "R": 3, "S": 3},
          {"N": 1, "C": 3, "O": 2, "P": 3, "Q": 3, "K": 2, "T": 3, "R": 3, "S": 3}, macs="N*O*P*Q*C*K*T*R*S",
          torch="conv3d_ncdhw")
    s.add("conv", "depthwise_nhwc", "f16", "memory", f"""
def depthwise_nhwc(f16[N, H, W, C] X, f16[R, S, C] Wt) -> (f16[N, H, W, C] Y) {{
  Xp(n, h, w, c) = {pad1('X(n, h - 1, w - 1, c)')}
      where h in 0:H + 2, w in 0:W + 2
  Acc(n, p, q, c) +=! f32(Xp(n, p + r, q + s, c)) * f32(Wt(r, s, c))
      where p in 0:H, q in 0:W
  Y(n, p, q, c) = f16(Acc(n, p, q, c))
}}""", {"N": 4, "H": 56, "W": 56, "C": 128, "R": 3, "S": 3}, {"N": 1, "H": 5, "W": 4, "C": 3, "R": 3, "S": 3},
          macs="N*H*W*C*R*S", torch="depthwise_nhwc")
    s.add("conv", "depthwise_nchw", "f16", "memory", """
def depthwise_nchw(f16[N, C, P + R - 1, Q + S - 1] X, f16[C, R, S] Wt) -> (f32[N, C, P, Q] Y) {
  Y(n, c, p, q) +=! f32(X(n, c, p + r, q + s)) * f32(Wt(c, r, s))
}""", {"N": 4, "C": 128, "P": 56, "Q": 56, "R": 3, "S": 3}, {"N": 1, "C": 3, "P": 4, "Q": 5, "R": 3, "S": 3},
          macs="N*P*Q*C*R*S", torch="depthwise_nchw")
    s.add("conv", "dilated2_nhwc", "f16", "contraction", """
def conv_dilated_nhwc(f16[N, P + 2 * R - 2, Q + 2 * S - 2, C] X, f16[R, S, C, K] Wt) -> (f32[N, P, Q, K] Y) {
  Y(n, p, q, k) +=! f32(X(n, p + 2 * r, q + 2 * s, c)) * f32(Wt(r, s, c, k))
}""", {"N": 2, "P": 28, "Q": 28, "C": 64, "K": 64, "R": 3, "S": 3},
          {"N": 1, "P": 3, "Q": 4, "C": 3, "K": 2, "R": 3, "S": 3}, macs="N*P*Q*C*K*R*S", torch="conv_dilated_nhwc")
    s.add("conv", "dilated2_nchw", "f16", "contraction", """
def conv_dilated_nchw(f16[N, C, P + 2 * R - 2, Q + 2 * S - 2] X, f16[K, C, R, S] Wt) -> (f32[N, K, P, Q] Y) {
  Y(n, k, p, q) +=! f32(X(n, c, p + 2 * r, q + 2 * s)) * f32(Wt(k, c, r, s))
}""", {"N": 2, "C": 64, "P": 28, "Q": 28, "K": 64, "R": 3, "S": 3},
          {"N": 1, "C": 3, "P": 3, "Q": 4, "K": 2, "R": 3, "S": 3}, macs="N*P*Q*C*K*R*S", torch="conv_dilated_nchw")
    s.add("conv", "stride2_nhwc", "f16", "contraction", """
def conv_s2_nhwc(f16[N, 2 * P + R - 2, 2 * Q + S - 2, C] X, f16[R, S, C, K] Wt) -> (f32[N, P, Q, K] Y) {
  Y(n, p, q, k) +=! f32(X(n, p * 2 + r, q * 2 + s, c)) * f32(Wt(r, s, c, k))
}""", {"N": 2, "P": 14, "Q": 14, "C": 128, "K": 128, "R": 3, "S": 3},
          {"N": 1, "P": 3, "Q": 2, "C": 3, "K": 2, "R": 3, "S": 3}, macs="N*P*Q*C*K*R*S", torch="conv_s2_nhwc")
    s.add("conv", "nhwc_1x1_s2", "f16", "contraction", """
def conv_1x1_s2_nhwc(f16[N, 2 * P - 1, 2 * Q - 1, C] X, f16[C, K] Wt) -> (f32[N, P, Q, K] Y) {
  Y(n, p, q, k) +=! f32(X(n, p * 2, q * 2, c)) * f32(Wt(c, k))
}""", {"N": 1, "P": 7, "Q": 7, "C": 512, "K": 1024}, {"N": 1, "P": 3, "Q": 2, "C": 3, "K": 2}, macs="N*P*Q*C*K",
          torch="conv_1x1_s2_nhwc", note="strided 1x1 projection (ResNet-50 l3_0_proj at N=1, 112x112)")
    s.add("conv", "stride2_nchw", "f16", "contraction", """
def conv_s2_nchw(f16[N, C, 2 * P + R - 2, 2 * Q + S - 2] X, f16[K, C, R, S] Wt) -> (f32[N, K, P, Q] Y) {
  Y(n, k, p, q) +=! f32(X(n, c, p * 2 + r, q * 2 + s)) * f32(Wt(k, c, r, s))
}""", {"N": 2, "C": 128, "P": 14, "Q": 14, "K": 128, "R": 3, "S": 3},
          {"N": 1, "C": 3, "P": 3, "Q": 2, "K": 2, "R": 3, "S": 3}, macs="N*P*Q*C*K*R*S", torch="conv_s2_nchw")


# --- memory-bound ------------------------------------------------------------------------------

def norms(s):
    s.add("layernorm", "rows", "f16", "memory", """
def layer_norm(f16[M, N] X, f32[N] gamma, f32[N] beta) -> (f16[M, N] Y) {
  Sum(m) +=! f32(X(m, n))
  Mean(m) = Sum(m) / f32(N)
  D(m, n) = f32(X(m, n)) - Mean(m)
  SqSum(m) +=! D(m, n) * D(m, n)
  Rstd(m) = rsqrt(SqSum(m) / f32(N) + 0.00001)
  Y(m, n) = f16(D(m, n) * Rstd(m) * gamma(n) + beta(n))
}""", {"M": 4096, "N": 768}, {"M": 5, "N": 13}, torch="layer_norm")
    s.add("rmsnorm", "rows", "f16", "memory", """
def rms_norm(f16[M, N] X, f32[N] gamma) -> (f16[M, N] Y) {
  SqSum(m) +=! f32(X(m, n)) * f32(X(m, n))
  Rstd(m) = rsqrt(SqSum(m) / f32(N) + 0.00001)
  Y(m, n) = f16(f32(X(m, n)) * Rstd(m) * gamma(n))
}""", {"M": 2048, "N": 1024}, {"M": 5, "N": 13}, torch="rms_norm")
    s.add("groupnorm", "nige", "f32", "memory", """
def group_norm(f32[N, I, G, E] X, f32[G, E] gamma, f32[G, E] beta) -> (f32[N, I, G, E] Y) {
  Sum(n, g) +=! X(n, i, g, e)
  Mean(n, g) = Sum(n, g) / f32(I * E)
  D(n, i, g, e) = X(n, i, g, e) - Mean(n, g)
  SqSum(n, g) +=! D(n, i, g, e) * D(n, i, g, e)
  Y(n, i, g, e) = D(n, i, g, e) * rsqrt(SqSum(n, g) / f32(I * E) + 0.00001) * gamma(g, e) + beta(g, e)
}""", {"N": 2, "I": 1024, "G": 8, "E": 32}, {"N": 2, "I": 5, "G": 3, "E": 4}, torch="group_norm",
          note="groups not trailing: statistics over (i, e) per (n, g)")
    s.add("batchnorm", "train_nhwc", "f16", "memory", """
def bn_train(f16[N, H, W, C] X, f32[C] gamma, f32[C] beta) -> (f16[N, H, W, C] Y) {
  Sum(c) +=! f32(X(n, h, w, c))
  Mean(c) = Sum(c) / f32(N * H * W)
  D(n, h, w, c) = f32(X(n, h, w, c)) - Mean(c)
  SqSum(c) +=! D(n, h, w, c) * D(n, h, w, c)
  Y(n, h, w, c) = f16(D(n, h, w, c) * rsqrt(SqSum(c) / f32(N * H * W) + 0.00001) * gamma(c) + beta(c))
}""", {"N": 16, "H": 28, "W": 28, "C": 128}, {"N": 2, "H": 3, "W": 4, "C": 5}, verify="full",
          torch="bn_train_nhwc")
    # the same statistics written without the D local (each reader recomputes X - Mean), as a
    # user writes it: the split first phase of SqSum must stay parallel over its chunks
    s.add("batchnorm", "train_nhwc_no_local", "f16", "memory", """
def bn_train_nl(f16[N, H, W, C] X, f32[C] gamma, f32[C] beta) -> (f16[N, H, W, C] Y) {
  Sum(c) +=! f32(X(n, h, w, c))
  Mean(c) = Sum(c) / f32(N * H * W)
  SqSum(c) +=! (f32(X(n, h, w, c)) - Mean(c)) * (f32(X(n, h, w, c)) - Mean(c))
  Y(n, h, w, c) = f16((f32(X(n, h, w, c)) - Mean(c)) * rsqrt(SqSum(c) / f32(N * H * W) + 0.00001) * gamma(c) + beta(c))
}""", {"N": 16, "H": 28, "W": 28, "C": 128}, {"N": 2, "H": 3, "W": 4, "C": 5}, verify="full",
          torch="bn_train_nhwc")
    s.add("batchnorm", "infer_nchw", "f32", "memory", """
def bn_infer_nchw(f32[N, C, H, W] X, f32[C] mean, f32[C] var, f32[C] gamma, f32[C] beta) -> (f32[N, C, H, W] Y) {
  Y(n, c, h, w) = (X(n, c, h, w) - mean(c)) * (gamma(c) * rsqrt(abs(var(c)) + 0.00001)) + beta(c)
}""", {"N": 8, "C": 128, "H": 28, "W": 28}, {"N": 2, "C": 3, "H": 4, "W": 5}, torch="bn_infer_nchw")


def pooling(s):
    s.add("pool", "max3x3_s2_nhwc", "f16", "memory", """
def maxpool_nhwc(f16[N, 2 * P + 1, 2 * Q + 1, C] X) -> (f16[N, P, Q, C] Y) {
  Y(n, p, q, c) max=! X(n, p * 2 + r, q * 2 + t, c)
      where r in 0:3, t in 0:3
}""", {"N": 4, "P": 56, "Q": 56, "C": 64}, {"N": 1, "P": 3, "Q": 4, "C": 5}, torch="maxpool3_s2_nhwc")
    s.add("pool", "max2x2_s2_nchw", "f32", "memory", """
def maxpool_nchw(f32[N, C, 2 * P, 2 * Q] X) -> (f32[N, C, P, Q] Y) {
  Y(n, c, p, q) max=! X(n, c, p * 2 + r, q * 2 + t)
      where r in 0:2, t in 0:2
}""", {"N": 4, "C": 64, "P": 28, "Q": 28}, {"N": 1, "C": 3, "P": 3, "Q": 4}, torch="maxpool2_s2_nchw")
    s.add("pool", "avg3x3_s1_nhwc", "f16", "memory", """
def avgpool_nhwc(f16[N, P + 2, Q + 2, C] X) -> (f16[N, P, Q, C] Y) {
  S(n, p, q, c) +=! f32(X(n, p + r, q + t, c))
      where p in 0:P, q in 0:Q, r in 0:3, t in 0:3
  Y(n, p, q, c) = f16(S(n, p, q, c) / 9)
}""", {"N": 4, "P": 56, "Q": 56, "C": 128}, {"N": 1, "P": 3, "Q": 4, "C": 5}, torch="avgpool3_s1_nhwc")
    s.add("pool", "avg2x2_s2_nchw", "f32", "memory", """
def avgpool_nchw(f32[N, C, 2 * P, 2 * Q] X) -> (f32[N, C, P, Q] Y) {
  S(n, c, p, q) +=! X(n, c, p * 2 + r, q * 2 + t)
      where p in 0:P, q in 0:Q, r in 0:2, t in 0:2
  Y(n, c, p, q) = S(n, c, p, q) / 4
}""", {"N": 4, "C": 64, "P": 28, "Q": 28}, {"N": 1, "C": 3, "P": 3, "Q": 4}, torch="avgpool2_s2_nchw")
    s.add("pool", "global_avg_nhwc", "f16", "memory", """
def global_avgpool_nhwc(f16[N, H, W, C] X) -> (f32[N, C] Y) {
  S(n, c) +=! f32(X(n, h, w, c))
  Y(n, c) = S(n, c) / f32(H * W)
}""", {"N": 32, "H": 7, "W": 7, "C": 2048}, {"N": 2, "H": 3, "W": 3, "C": 5}, torch="global_avg_nhwc")
    s.add("pool", "global_max_nchw", "f32", "memory", """
def global_maxpool_nchw(f32[N, C, H, W] X) -> (f32[N, C] Y) {
  Y(n, c) max=! X(n, c, h, w)
}""", {"N": 16, "C": 512, "H": 14, "W": 14}, {"N": 2, "C": 3, "H": 4, "W": 5}, torch="global_max_nchw")


def data_moves(s):
    s.add("upsample", "nearest2x_nhwc", "f16", "memory", """
def upsample_nhwc(f16[N, H, W, C] X) -> (f16[N, 2 * H, 2 * W, C] Y) {
  Y(n, h, w, c) = X(n, h / 2, w / 2, c)
}""", {"N": 8, "H": 28, "W": 28, "C": 128}, {"N": 1, "H": 3, "W": 4, "C": 5}, torch="upsample_nhwc")
    s.add("upsample", "nearest2x_nchw", "f32", "memory", """
def upsample_nchw(f32[N, C, H, W] X) -> (f32[N, C, 2 * H, 2 * W] Y) {
  Y(n, c, h, w) = X(n, c, h / 2, w / 2)
}""", {"N": 4, "C": 64, "H": 28, "W": 28}, {"N": 1, "C": 3, "H": 3, "W": 4}, torch="upsample_nchw")
    s.add("permute", "3d_021", "f16", "memory", """
def permute_021(f16[B, M, N] X) -> (f16[B, N, M] Y) {
  Y(b, n, m) = X(b, m, n)
}""", {"B": 32, "M": 256, "N": 192}, {"B": 2, "M": 5, "N": 7}, torch="permute_021")
    s.add("permute", "4d_nhwc_to_nchw", "f16", "memory", """
def nhwc_to_nchw(f16[N, H, W, C] X) -> (f16[N, C, H, W] Y) {
  Y(n, c, h, w) = X(n, h, w, c)
}""", {"N": 8, "H": 56, "W": 56, "C": 64}, {"N": 2, "H": 3, "W": 4, "C": 5}, torch="nhwc_to_nchw")
    s.add("permute", "4d_bshd_to_bhsd", "f16", "memory", """
def bshd_to_bhsd(f16[B, S, H, D] X) -> (f16[B, H, S, D] Y) {
  Y(b, h, s, d) = X(b, s, h, d)
}""", {"B": 4, "S": 512, "H": 12, "D": 64}, {"B": 2, "S": 5, "H": 3, "D": 4}, torch="bshd_to_bhsd")
    s.add("permute", "5d_03142", "f32", "memory", """
def permute5(f32[A, B, C, D, E] X) -> (f32[A, D, B, E, C] Y) {
  Y(a, d, b, e, c) = X(a, b, c, d, e)
}""", {"A": 4, "B": 8, "C": 16, "D": 32, "E": 32}, {"A": 2, "B": 3, "C": 2, "D": 4, "E": 3}, torch="permute5")


def reductions(s):
    s.add("reduce", "sum_last", "f32", "memory", """
def reduce_last(f32[M, N] X) -> (f32[M] Y) {
  Y(m) +=! X(m, n)
}""", {"M": 1024, "N": 2048}, {"M": 5, "N": 7}, torch="sum_last")
    s.add("reduce", "sum_lead", "f32", "memory", """
def reduce_lead(f32[M, N] X) -> (f32[N] Y) {
  Y(n) +=! X(m, n)
}""", {"M": 2048, "N": 1024}, {"M": 5, "N": 7}, verify="full", torch="sum_lead")
    s.add("reduce", "max_middle", "f16", "memory", """
def reduce_max_middle(f16[A, B, C] X) -> (f16[A, C] Y) {
  Y(a, c) max=! X(a, b, c)
}""", {"A": 16, "B": 512, "C": 256}, {"A": 2, "B": 5, "C": 7}, torch="max_middle")
    s.add("reduce", "sum_outer_two", "f32", "memory", """
def reduce_outer_two(f32[A, B, C] X) -> (f32[B] Y) {
  Y(b) +=! X(a, b, c)
}""", {"A": 16, "B": 256, "C": 256}, {"A": 2, "B": 5, "C": 7}, verify="full", torch="sum_outer_two",
          note="several axes, the kept one in the middle")
    s.add("reduce", "sum_all", "f32", "memory", """
def reduce_all(f32[M, N] X) -> (f32[] Y) {
  Y() +=! X(m, n)
}""", {"M": 1024, "N": 1024}, {"M": 5, "N": 7}, verify="full", torch="sum_all")
    s.add("reduce", "min_hw_nchw", "f16", "memory", """
def reduce_min_hw(f16[N, C, H, W] X) -> (f16[N, C] Y) {
  Y(n, c) min=! X(n, c, h, w)
}""", {"N": 16, "C": 256, "H": 28, "W": 28}, {"N": 2, "C": 3, "H": 4, "W": 5}, torch="min_hw")


def elementwise(s):
    s.add("elementwise", "add_mul_sub", "f16", "memory", """
def ew_add_mul_sub(f16[M, N] A, f16[M, N] B) -> (f16[M, N] C) {
  C(m, n) = (A(m, n) * B(m, n) - A(m, n)) + B(m, n)
}""", {"M": 1024, "N": 1024}, {"M": 5, "N": 7}, torch="add_mul_sub")
    s.add("elementwise", "bias_gelu", "f16", "memory", """
def bias_gelu(f16[M, N] X, f32[N] b) -> (f16[M, N] Y) {
  Z(m, n) = f32(X(m, n)) + b(n)
  Y(m, n) = f16(0.5 * Z(m, n) * (1 + tanh(0.7978845608 * (Z(m, n) + 0.044715 * Z(m, n) * Z(m, n) * Z(m, n)))))
}""", {"M": 1024, "N": 3072}, {"M": 5, "N": 7}, torch="bias_gelu")
    s.add("elementwise", "silu_mul", "f32", "memory", """
def silu_mul(f32[M, N] G, f32[M, N] U) -> (f32[M, N] Y) {
  Y(m, n) = G(m, n) / (1 + exp(-G(m, n))) * U(m, n)
}""", {"M": 512, "N": 1024}, {"M": 5, "N": 7}, torch="silu_mul")
    s.add("elementwise", "scale_bias_relu_nchw", "f16", "memory", """
def scale_bias_relu(f16[N, C, H, W] X, f32[C] s, f32[C] t) -> (f16[N, C, H, W] Y) {
  Y(n, c, h, w) = f16(max(f32(X(n, c, h, w)) * s(c) + t(c), 0))
}""", {"N": 8, "C": 64, "H": 56, "W": 56}, {"N": 2, "C": 3, "H": 4, "W": 5}, torch="scale_bias_relu_nchw")


FAMILIES = [attention, gemms, convolutions, norms, pooling, data_moves, reductions, elementwise]


def generate():
    """All instances, in a fixed order."""
    s = Suite()
    for family in FAMILIES:
        family(s)
    return s.instances


def write(instances, out_dir, small=False):
    conformance_gen.write(instances, out_dir, header=lambda inst: [
        f"roofline instance {inst.name} ({inst.size_label()}): --shape {inst.shape_arg()}",
        f"small (reference check): --shape {inst.shape_arg(small=True)}"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory to write NAME.tsl and manifest.json into")
    args = ap.parse_args()
    instances = generate()
    write(instances, args.out)
    print(f"{len(instances)} instances written to {args.out}")


if __name__ == "__main__":
    sys.exit(main())
