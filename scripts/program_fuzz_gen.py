#!/usr/bin/python3
"""Seeded generator of valid `.tsl` programs for the differential program fuzzer (issue 31 item 1).

`generate(seed, index)` returns a `Program`: a tree of statements (each an expression tree) that
renders to one `.tsl` def plus the `--shape` binding its size parameters. The same (seed, index)
gives the same program, byte for byte. Every program is meant to be valid under the reference
interpreter (scripts/program_fuzz.py gates each on `tessel eval`; a program it rejects is counted
as a generator error, never as a tessel bug).

What it covers (compiler/README.md is the reference for what is valid):
  dtypes      f16 bf16 f32 i8 u8 i32, casts between any two
  statements  element-wise maps (broadcasts, transposes, index masks), reductions +=! max=! min=! *=!
              over any axes (leading, middle, trailing, several, all: 0-d outputs), `+=` onto an
              earlier value, contractions (batched, any majorness, several K indices, outer
              products), padding through a guarded select, windows with strides and dilations,
              quasi-affine reads (floor division and modulo by constants, reversal, offsets),
              ranges with `/` in their bounds and inferred output sizes; 1-4 statements per def;
              attention written out (scores, steps, max, exp, sum, context: s_attention)
  functions   every built-in: abs exp log sqrt rsqrt tanh min max select, and erf pow floor ceil round
              sign sin cos tan asin acos atan sinh cosh asinh acosh atanh sigmoid (issue 34), each
              argument brought into its function's domain (v_builtin)
  sizes       1..~40 per axis (tiny, prime, multiples of 16, odd), iteration spaces kept small

Values stay comparable across targets: random inputs are floats in [-2, 2] and integers in
[-8, 8] (u8 in [0, 8]), so divisors are `abs(x) + c` (or `x % 7 + 1` for u8), `log`/`sqrt`/`rsqrt`
take `abs(x) + c`, float magnitudes are bounded so f16 does not overflow, and a value that a
target may legitimately compute differently (a float sum, which a target may reassociate) never
feeds a comparison, a float-to-integer cast, a float `%` or an f16 subtraction.

Layout: program_fuzz_ir (dtypes, axes, tensors, expressions, statements, programs and their
rendering), then the generator in layers, each a class the next one extends: program_fuzz_reads
(sizes, dtypes, tensors, reads), program_fuzz_values (expressions and conditions),
program_fuzz_statements (one statement of each family), program_fuzz_attention (the attention
family) and this file's Gen (a program's mix of families and its outputs) and generate().
"""
import math
import random

from program_fuzz_ir import E, Program, Ctx, _is_param, _tokens, _mentions
from program_fuzz_attention import AttentionGen


class Gen(AttentionGen):
    """One program: the families' mix (program), then which locals are outputs (choose_outputs)."""

    def __init__(self, seed, index):
        self.rng = random.Random(f"tessel-program-fuzz:{seed}:{index}")
        self.p = Program(seed, index)
        self.n_param = 0
        self.n_input = 0
        self.n_local = 0
        self.points_limit = 60000
        # a program leans on one float and one integer dtype, with the others mixed in
        # bf16 and u8 (which C / CUDA / the NPU refuse or only move) lead about one program in ten
        self.main_float = "bf16" if self.rng.random() < 0.1 else self.rng.choice(("f16", "f32"))
        self.main_int = "u8" if self.rng.random() < 0.12 else self.rng.choice(("i32", "i32", "i8"))
        self.row_mode = False  # rows: statements over [M, N] and [M] only (softmax / layer norm shapes)

    def program(self):
        rng = self.rng
        if rng.random() < 0.08:
            self.axes = [self.param(self.size()) for _ in range(rng.randint(1, 2))]
            self.s_attention()
            if rng.random() < 0.3:
                self.s_map()
            self.choose_outputs()
            return self.p
        if rng.random() < 0.25:
            self.row_mode = True
            self.axes = [self.param(self.size()), self.param(rng.choice((16, 32, 40, 17, 33, 64, 96, 128)))]
            kinds, weights = ("map", "reduce", "accumulate"), (45, 45, 10)
            n = rng.choice((2, 3, 4, 4, 5))
        else:
            self.axes = [self.param(self.size()) for _ in range(rng.randint(1, 4))]
            kinds = ("map", "reduce", "contract", "pad", "window", "quasi", "accumulate", "conv2d")
            weights = (28, 26, 12, 8, 10, 10, 6, 8)
            n = rng.choice((1, 2, 2, 3, 3, 4))
        for _ in range(n):
            kind = rng.choices(kinds, weights)[0]
            locals_ = [t for t in self.p.tensors if t.kind == "local"]
            if kind == "map":
                self.s_map()
            elif kind == "reduce":
                self.s_reduce()
            elif kind == "contract":
                t = self.s_contract()
                if t.kind == "local" and len(t.axes) >= 1 and rng.random() < 0.5:
                    self.s_epilogue(t)
            elif kind == "pad":
                src = rng.choice(locals_) if locals_ and rng.random() < 0.6 else None
                if src is None or not src.axes:
                    src = self.new_input(self.pick_dtype(), self.choose_axes(1, 3))
                self.s_pad(src)
            elif kind == "window":
                self.s_window()
            elif kind == "conv2d":
                t = self.s_conv2d()
                if t.kind == "local" and rng.random() < 0.4:
                    self.s_epilogue(t)
            elif kind == "quasi":
                axes = self.choose_axes(1, 3)
                lhs = self.fresh_names("i", len(axes))
                ctx = Ctx(lhs, dict(zip(lhs, axes)), reduce=False)
                dt = self.pick_dtype()
                e = self.compound_read(ctx, dt)
                if rng.random() < 0.5:
                    e2 = self.value(ctx, dt, 1)
                    if e2.dt == dt:
                        e = E("minmax", dt, [e, e2], text=rng.choice(("min", "max")), exact=e.exact and e2.exact,
                              bound=max(e.bound, e2.bound))
                self.p.notes.append("quasi")
                self.finish(ctx, dt, "=", e, e.exact, e.bound)
            else:
                if locals_ and self.p.stmts and self.p.stmts[-1].out is locals_[-1] and locals_[-1].axes \
                        and self.p.stmts[-1].op == "=":
                    self.s_accumulate(locals_[-1])
                else:
                    self.s_map()
        self.choose_outputs()
        return self.p

    def choose_outputs(self):
        """Locals nobody reads become outputs (an output may also be read later)."""
        read = set()
        for s in self.p.stmts:
            for e in s.rhs.walk():
                if e.kind == "read":
                    read.add(e.tensor.name)
        outs = []
        for s in self.p.stmts:
            t = s.out
            if t in outs:
                continue
            if t.name not in read or self.rng.random() < 0.15:
                outs.append(t)
        for t in outs:
            # an output whose first statement ranges a dimension's index with a where clause of a
            # quasi-affine bound may leave that size to inference, unless a later statement reads
            # it: its reader's other accesses give that index the quasi-affine range, a different
            # expression from the inferred size ('conflicting ranges', an invalid program). `read`
            # holds the local's name, so it is tested before the output's rename.
            unread = t.name not in read
            t.kind = "output"
            t.name = "Y" + t.name[1:]
            first = next(s for s in self.p.stmts if s.out is t)
            for d, i in enumerate(first.lhs):
                if i in first.where and not _is_param(first.where[i][1]) and unread \
                        and getattr(t, "window_quasi", False) and self.rng.random() < 0.6:
                    t.inferred[d] = f"I{d}{t.name}"
        self.p.outputs = outs



def generate(seed, index):
    """The program number `index` of the stream `seed`."""
    for attempt in range(20):
        g = Gen(seed, index if attempt == 0 else f"{index}.{attempt}")
        p = g.program()
        p.index = index
        if p.outputs and _iteration_points(p) <= 200000 and _params_declared(p):
            return p
    return p


def _params_declared(p):
    """Every size parameter the body mentions is bound by the signature (or inferred)."""
    text = p.render()
    head, body = text.split("{", 1)
    declared = set(_tokens(head))
    return all(name in declared for name in p.params if _mentions(body, name))


def _iteration_points(p):
    total = 0
    for s in p.stmts:
        total += math.prod(a.value for a in s.idx_axes.values()) if s.idx_axes else 1
    return total
