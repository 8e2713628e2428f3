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
"""
import math
import random

FLOATS = ("f16", "bf16", "f32")
INTS = ("i8", "u8", "i32")
DTYPES = FLOATS + INTS
FLOAT_LIMIT = {"f16": 2000.0, "bf16": 2000.0, "f32": 1e5}
INT_MAX = {"i8": 127, "u8": 255, "i32": 2 ** 31 - 1}
INPUT_BOUND = {"f16": 2.0, "bf16": 2.0, "f32": 2.0, "i8": 8, "u8": 8, "i32": 8}


# --- axes and tensors -------------------------------------------------------------------------

class Axis:
    """A symbolic extent (a size parameter or a quasi-affine expression of them) and its value."""

    def __init__(self, text, value):
        self.text, self.value = text, value

    def __repr__(self):
        return f"Axis({self.text}={self.value})"


class Tensor:
    def __init__(self, name, dtype, axes, kind, exact=True, bound=None):
        self.name, self.dtype, self.axes, self.kind = name, dtype, list(axes), kind  # kind: input | local
        self.exact = exact
        self.bound = INPUT_BOUND[dtype] if bound is None else bound
        self.inferred = {}  # dim -> inferred parameter name (outputs only)


# --- expressions ------------------------------------------------------------------------------

class E:
    """An expression node. dt: a dtype, 'int'/'real' (weak) or 'cond'."""

    def __init__(self, kind, dt, children=(), text=None, exact=True, bound=0.0, tensor=None, index=None):
        self.kind, self.dt, self.children = kind, dt, list(children)
        self.text = text            # leaves and operators
        self.exact = exact
        self.bound = bound          # bound on |value| (floats), for overflow avoidance
        self.tensor = tensor        # read: the Tensor
        self.index = index          # read: list of index expression texts

    def render(self):
        k, c = self.kind, self.children
        if k in ("lit", "idx", "param"):
            return self.text
        if k == "read":
            return f"{self.tensor.name}({', '.join(self.index)})"
        if k == "cast":
            return f"{self.text}({c[0].render()})"
        if k == "bin":
            return f"({c[0].render()} {self.text} {c[1].render()})"
        if k == "neg":
            return f"-({c[0].render()})"
        if k == "not":
            return f"!({c[0].render()})"
        if k in ("call", "minmax", "select"):
            return f"{self.text}({', '.join(x.render() for x in c)})"
        if k == "cmp":
            return f"{c[0].render()} {self.text} {c[1].render()}"
        if k in ("and", "or"):
            return f"({c[0].render()} {self.text} {c[1].render()})"
        raise AssertionError(k)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()


def is_float(dt):
    return dt in FLOATS


class Stmt:
    def __init__(self, out, lhs, op, rhs, where, idx_axes):
        self.out, self.lhs, self.op, self.rhs = out, lhs, op, rhs
        self.where = where          # index -> (lo text, hi text), in order
        self.idx_axes = idx_axes    # index -> Axis

    def render(self):
        s = f"  {self.out.name}({', '.join(self.lhs)}) {self.op} {self.rhs.render()}"
        if self.where:
            s += "\n      where " + ", ".join(f"{i} in {lo}:{hi}" for i, (lo, hi) in self.where.items())
        return s


class Program:
    def __init__(self, seed, index):
        self.seed, self.index = seed, index
        self.params = {}            # name -> value (given in --shape)
        self.tensors = []           # inputs and locals in creation order
        self.stmts = []
        self.outputs = []           # Tensor, in order
        self.notes = []             # what the generator chose (kinds of statements)

    @property
    def name(self):
        return f"fuzz_{self.seed}_{self.index}"

    def read_tensors(self):
        seen = []
        for s in self.stmts:
            for e in s.rhs.walk():
                if e.kind == "read" and e.tensor not in seen:
                    seen.append(e.tensor)
        return seen

    def decl(self, t):
        dims = [t.inferred.get(i, a.text) for i, a in enumerate(t.axes)]
        return f"{t.dtype}[{', '.join(dims)}] {t.name}"

    def render(self):
        used = self.read_tensors()
        inputs = [t for t in self.tensors if t.kind == "input" and t in used]
        head = f"def {self.name}({', '.join(self.decl(t) for t in inputs)})"
        head += f" -> ({', '.join(self.decl(t) for t in self.outputs)}) {{"
        return head + "\n" + "\n".join(s.render() for s in self.stmts) + "\n}\n"

    def shape(self):
        """The size parameters the rendered signature uses (inferred ones left out)."""
        text = self.render().split("{", 1)[0]
        out = {}
        for name, v in self.params.items():
            if _mentions(text, name):
                out[name] = v
        return out

    def shape_arg(self):
        return ",".join(f"{k}={v}" for k, v in self.shape().items())


def _mentions(text, name):
    import re
    return re.search(r"(?<![A-Za-z0-9_])" + re.escape(name) + r"(?![A-Za-z0-9_])", text) is not None


# --- the generator ----------------------------------------------------------------------------

class Ctx:
    """One statement under construction: its indices and what the right-hand side may use."""

    def __init__(self, lhs, idx_axes, reduce):
        self.lhs = list(lhs)
        self.idx_axes = dict(idx_axes)   # every index of the statement -> Axis
        self.reduce = reduce
        self.plain = set()               # indices used as a whole dimension index
        self.where = {}                  # index -> (lo, hi) given explicitly
        self.require_all = []            # reduction indices that must appear

    def value_indices(self):
        return list(self.idx_axes) if self.reduce else list(self.lhs)


class Gen:
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

    # sizes and parameters
    def size(self):
        r = self.rng.random()
        if r < 0.35:
            return self.rng.randint(1, 7)
        if r < 0.6:
            return self.rng.choice((11, 13, 17, 19, 23, 29, 31, 37))
        if r < 0.8:
            return self.rng.choice((16, 32))
        return self.rng.randint(8, 40)

    def param(self, value, prefix=None):
        names = "MNKHWCPQRSTUVBDEFGJL"
        if prefix is None and self.n_param < len(names):
            name = names[self.n_param]
        else:
            name = f"{prefix or 'Z'}{self.n_param}"
        self.n_param += 1
        self.p.params[name] = value
        return Axis(name, value)

    def pick_dtype(self, floats=True, ints=True):
        pool = []
        if floats:
            pool += [self.main_float] * 5 + ["f16", "f32"]
        if ints:
            pool += [self.main_int] * 3 + ["i32", "i8"]
        return self.rng.choice(pool)

    def new_input(self, dtype, axes):
        t = Tensor(f"X{self.n_input}", dtype, axes, "input")
        self.n_input += 1
        self.p.tensors.append(t)
        return t

    def new_local(self, dtype, axes, exact, bound):
        t = Tensor(f"T{self.n_local}", dtype, axes, "local", exact, bound)
        self.n_local += 1
        self.p.tensors.append(t)
        return t

    # --- reads --------------------------------------------------------------------------------
    def match(self, ctx, tensor):
        """Index names for a plain read of `tensor` in ctx, or None."""
        names = []
        for a in tensor.axes:
            cands = [i for i in ctx.value_indices() if ctx.idx_axes[i].text == a.text]
            if not cands:
                return None
            names.append(self.rng.choice(cands))
        return names

    def read(self, ctx, dtype, exact=False, fresh=None):
        """A read of a tensor of `dtype` (an existing compatible one or a fresh input)."""
        cands = [t for t in self.p.tensors if t.dtype == dtype and (t.exact or not exact) and self.match(ctx, t)
                 is not None]
        if cands and fresh is not True and (fresh is False or self.rng.random() < 0.6):
            t = self.rng.choice(cands)
            names = self.match(ctx, t)
        else:
            pool = ctx.value_indices()
            k = self.rng.randint(0, min(3, len(pool))) if pool else 0
            if pool and k == 0 and self.rng.random() < 0.8:
                k = 1
            names = self.rng.sample(pool, k)
            t = self.new_input(dtype, [ctx.idx_axes[i] for i in names])
        ctx.plain.update(names)
        return E("read", dtype, tensor=t, index=list(names), exact=t.exact, bound=t.bound)

    def compound_read(self, ctx, dtype):
        """A read of a fresh input through quasi-affine index expressions (strides, offsets,
        floor division, modulo, reversal); its compound dimensions get their own size parameter
        bound to the largest index reached plus some slack."""
        pool = ctx.value_indices()
        if not pool:
            return self.read(ctx, dtype, fresh=True)
        dims, axes = [], []
        for _ in range(self.rng.randint(1, min(3, len(pool) + 1))):
            text, hi = self.index_expr(ctx, pool)
            if text is None:
                continue
            dims.append(text)
            if isinstance(hi, Axis):
                axes.append(hi)
            else:
                axes.append(self.param(hi + self.rng.choice((0, 0, 1, 3)), "D"))
        if not dims:
            return self.read(ctx, dtype, fresh=True)
        t = self.new_input(dtype, axes)
        return E("read", dtype, tensor=t, index=dims, exact=True, bound=t.bound)

    def index_expr(self, ctx, pool):
        """(text, max value or Axis for a plain index) of a quasi-affine expression >= 0."""
        rng = self.rng
        i = rng.choice(pool)
        ax = ctx.idx_axes[i]
        form = rng.choice(("plain", "stride", "window", "div", "mod", "offset", "reverse", "shuffle"))
        if form == "plain":
            ctx.plain.add(i)
            return i, ax
        if form == "stride":
            s = rng.choice((2, 3))
            return f"{i} * {s}", s * (ax.value - 1) + 1
        if form == "window":
            others = [j for j in pool if j != i]
            if not others:
                return f"{i} + 1", ax.value + 1
            j = rng.choice(others)
            s, d = rng.choice(((1, 1), (2, 1), (1, 2), (2, 2), (3, 1)))
            a = f"{i} * {s}" if s > 1 else i
            b = f"{j} * {d}" if d > 1 else j
            return f"{a} + {b}", s * (ax.value - 1) + d * (ctx.idx_axes[j].value - 1) + 1
        if form == "div":
            d = rng.choice((2, 3, 4))
            return f"{i} / {d}", (ax.value - 1) // d + 1
        if form == "mod":
            d = rng.choice((2, 3, 5))
            return f"{i} % {d}", min(d, ax.value)
        if form == "offset":
            c = rng.randint(1, 3)
            return f"{i} + {c}", ax.value + c
        if form == "reverse":
            top = ax.text if _is_param(ax.text) else f"({ax.text})"
            return f"{top} - 1 - {i}", ax.value
        # shuffle: c * 2 + h % 2 style, two indices
        others = [j for j in pool if j != i]
        if not others:
            return f"{i} / 2", (ax.value - 1) // 2 + 1
        j = rng.choice(others)
        d = rng.choice((2, 4))
        return f"{i} * {d} + {j} % {d}", d * (ax.value - 1) + min(d, ctx.idx_axes[j].value)

    # --- values -------------------------------------------------------------------------------
    def lit(self, dtype):
        if is_float(dtype):
            v = self.rng.choice((0.5, 1.5, 0.25, 2.0, 3.0, 0.125, 1, 2, 0, 0.75))
            return E("lit", "real" if isinstance(v, float) else "int", text=str(v), bound=abs(v))
        hi = 5 if dtype != "i32" else 100
        v = self.rng.randint(0 if dtype == "u8" else -3, hi)
        text = str(v) if v >= 0 else f"({v})"
        return E("lit", "int", text=text, bound=abs(v))

    def value(self, ctx, dtype, depth, exact=False):
        """A typed expression of `dtype`."""
        rng = self.rng
        if depth <= 0 or rng.random() < 0.25:
            return self.leaf(ctx, dtype, exact)
        choice = rng.choices(
            ("bin", "div", "mod", "minmax", "unary", "cast", "select", "indexval", "param"),
            weights=(30, 8, 4, 8, 14, 10, 8, 4, 3))[0]
        f = getattr(self, "v_" + choice)
        e = f(ctx, dtype, depth - 1, exact)
        if e is None:
            return self.leaf(ctx, dtype, exact)
        if is_float(dtype) and e.bound > FLOAT_LIMIT[dtype]:
            return self.leaf(ctx, dtype, exact)
        return e

    def leaf(self, ctx, dtype, exact):
        r = self.rng.random()
        if r < 0.15 and not self.row_mode:
            return self.compound_read(ctx, dtype)
        if r < 0.3 and dtype != "u8":
            src = self.pick_dtype()
            if src != dtype and (is_float(dtype) or not is_float(src) or True):
                inner = self.read(ctx, src, exact=exact or (is_float(src) and not is_float(dtype)))
                return self.cast(dtype, inner)
        return self.read(ctx, dtype, exact)

    def cast(self, dtype, inner):
        bound = inner.bound
        if not is_float(dtype):
            bound = min(bound, INT_MAX[dtype]) if is_float(inner.dt) else (bound if bound <= INT_MAX[dtype] else INT_MAX[dtype])
            if dtype == "u8" and inner.dt != "u8":
                bound = 255
        return E("cast", dtype, [inner], text=dtype, exact=inner.exact, bound=bound)

    def other(self, ctx, dtype, depth, exact):
        """The second operand: typed or a weak literal."""
        if self.rng.random() < 0.35:
            return self.lit(dtype)
        return self.value(ctx, dtype, depth, exact)

    def v_bin(self, ctx, dtype, depth, exact):
        op = self.rng.choice("+-*" if dtype != "u8" else "+*+-")
        a = self.value(ctx, dtype, depth, exact)
        b = self.other(ctx, dtype, depth, exact)
        if self.rng.random() < 0.5:
            a, b = b, a
        if a.dt in ("int", "real") and b.dt in ("int", "real"):
            return None
        if op in "+-" and (not a.exact or not b.exact) and dtype != "f32":
            op = "*"  # f16/bf16 sums of a reassociable value may cancel
        bound = a.bound * b.bound if op == "*" else a.bound + b.bound
        if not is_float(dtype):
            bound = min(bound, INT_MAX[dtype])
        return E("bin", dtype, [a, b], text=op, exact=a.exact and b.exact, bound=bound)

    def divisor(self, ctx, dtype, depth, exact):
        """An expression of `dtype` that is never 0 (nor close to it for floats)."""
        inner = self.value(ctx, dtype, max(0, depth - 1), exact=exact or not is_float(dtype))
        if dtype == "u8":
            m = E("bin", dtype, [inner, E("lit", "int", text="7", bound=7)], text="%", bound=6)
            return E("bin", dtype, [m, E("lit", "int", text="1", bound=1)], text="+", bound=7, exact=inner.exact), 1.0
        c = self.rng.choice((1, 2)) if not is_float(dtype) else self.rng.choice((0.5, 1, 0.25))
        a = E("call", dtype, [inner], text="abs", exact=inner.exact, bound=inner.bound)
        return E("bin", dtype, [a, E("lit", "real" if isinstance(c, float) else "int", text=str(c), bound=c)], text="+",
                 exact=inner.exact, bound=inner.bound + c), float(c)

    def v_div(self, ctx, dtype, depth, exact):
        a = self.value(ctx, dtype, depth, exact)
        d, c = self.divisor(ctx, dtype, depth, exact)
        return E("bin", dtype, [a, d], text="/", exact=a.exact and d.exact, bound=a.bound / c)

    def v_mod(self, ctx, dtype, depth, exact):
        a = self.value(ctx, dtype, depth, True)
        if self.rng.random() < 0.4:
            c = self.rng.choice((3, 5, 7)) if not is_float(dtype) else self.rng.choice((0.75, 1.5))
            d = E("lit", "real" if isinstance(c, float) else "int", text=str(c), bound=c)
        else:
            d, c = self.divisor(ctx, dtype, depth, True)
            d.bound = max(d.bound, 1)
        return E("bin", dtype, [a, d], text="%", exact=True, bound=min(a.bound, d.bound))

    def v_minmax(self, ctx, dtype, depth, exact):
        a = self.value(ctx, dtype, depth, exact)
        b = self.other(ctx, dtype, depth, exact)
        if self.rng.random() < 0.5:
            a, b = b, a
        if a.dt in ("int", "real") and b.dt in ("int", "real"):
            return None
        return E("minmax", dtype, [a, b], text=self.rng.choice(("min", "max")), exact=a.exact and b.exact,
                 bound=max(a.bound, b.bound))

    def v_unary(self, ctx, dtype, depth, exact):
        rng = self.rng
        if not is_float(dtype):
            if dtype == "u8":
                return None
            a = self.value(ctx, dtype, depth, exact)
            if rng.random() < 0.25:
                return E("call", dtype, [a], text="sign", exact=a.exact, bound=1)
            return E("neg" if rng.random() < 0.5 else "call", dtype, [a], text="abs", exact=a.exact, bound=a.bound)
        if rng.random() < 0.45:
            return self.v_builtin(ctx, dtype, depth, exact)
        fn = rng.choice(("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "tanh", "zsign"))
        a = self.value(ctx, dtype, depth, exact)
        if fn == "zsign" and a.exact:
            # select(a == 0, 1 / a, a): the sign of a zero made visible (+-inf), e.g. max(0, -0.0)
            zero = E("cmp", "cond", [a, E("lit", "int", text="0")], text="==")
            inv = E("bin", dtype, [E("lit", "int", text="1"), a], text="/", exact=True, bound=a.bound)
            return E("select", dtype, [zero, inv, a], text="select", exact=True, bound=a.bound)
        if fn == "zsign":
            fn = "tanh"
        if fn == "neg":
            return E("neg", dtype, [a], exact=a.exact, bound=a.bound)
        if fn == "abs":
            return E("call", dtype, [a], text="abs", exact=a.exact, bound=a.bound)
        if fn == "tanh":
            return E("call", dtype, [a], text="tanh", exact=a.exact, bound=1.0)
        if fn == "exp":
            if a.bound > 6:
                a = E("call", dtype, [a], text="tanh", exact=a.exact, bound=1.0)
            return E("call", dtype, [a], text="exp", exact=a.exact, bound=math.exp(a.bound))
        absa = E("call", dtype, [a], text="abs", exact=a.exact, bound=a.bound)
        if fn == "sqrt":
            return E("call", dtype, [absa], text="sqrt", exact=a.exact, bound=math.sqrt(a.bound))
        c = rng.choice((1, 0.5, 0.25))
        arg = E("bin", dtype, [absa, E("lit", "real" if isinstance(c, float) else "int", text=str(c), bound=c)],
                text="+", exact=a.exact, bound=a.bound + c)
        if fn == "log":
            return E("call", dtype, [arg], text="log", exact=a.exact, bound=max(abs(math.log(c)), math.log(a.bound + c)))
        return E("call", dtype, [arg], text="rsqrt", exact=a.exact, bound=1 / math.sqrt(c))

    def v_builtin(self, ctx, dtype, depth, exact):
        """The built-ins ONNX import needs (issue 34) on a float operand. floor, ceil, round and sign
        jump, so they take an exact operand and stay exact; sigmoid is the interpreter's own f32 steps
        on every target. The others are computed by each target's own library or, on the NPU, by
        compositions of vector instructions (compiler/emit_npu/compositions.h) that differ from the
        interpreter in the last bits: not exact. Arguments are brought into each function's domain
        (|x| <= 1 for asin / acos, a tanh inside tan keeps it off its poles) and magnitudes bounded."""
        rng = self.rng
        if exact:
            fn = rng.choice(("sigmoid", "floor", "ceil", "round", "sign"))
        else:
            fn = rng.choice(("erf", "sigmoid", "floor", "ceil", "round", "sign", "sin", "cos", "tan", "asin", "acos",
                             "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "pow"))
        call = lambda args, bound, ex: E("call", dtype, args, text=fn, exact=ex, bound=bound)
        lit = lambda c: E("lit", "real" if isinstance(c, float) else "int", text=str(c), bound=abs(c))
        if fn in ("floor", "ceil", "round", "sign"):
            a = self.value(ctx, dtype, depth, True)
            if fn != "sign" and rng.random() < 0.5:  # halves and fractions for the rounding to decide
                a = E("bin", dtype, [a, lit(2.5)], text="*", exact=a.exact, bound=a.bound * 2.5)
                if a.bound > FLOAT_LIMIT[dtype] / 2:
                    return None
            return call([a], 1 if fn == "sign" else a.bound + 1, a.exact)
        a = self.value(ctx, dtype, depth, exact)
        squash = lambda x: E("call", dtype, [x], text="tanh", exact=x.exact, bound=1.0)
        if fn == "erf":
            return call([a], 1.0, False)
        if fn == "sigmoid":
            return call([a], 1.0, a.exact)
        if fn in ("sin", "cos"):
            if a.bound > 1000:
                a = squash(a)
            return call([a], 1.0, False)
        if fn == "tan":
            return call([squash(a)], math.tan(1.0), False)
        if fn in ("asin", "acos"):
            return call([squash(a)], math.pi, False)
        if fn == "atanh":
            half = E("bin", dtype, [squash(a), lit(0.5)], text="*", exact=a.exact, bound=0.5)
            return call([half], math.atanh(0.5), False)
        if fn == "atan":
            return call([a], math.pi / 2, False)
        if fn == "asinh":
            return call([a], math.asinh(a.bound), False)
        if fn in ("sinh", "cosh"):
            if a.bound > 6:
                a = squash(a)
            return call([a], math.cosh(a.bound), False)
        c = rng.choice((1, 0.5))
        absa = E("call", dtype, [a], text="abs", exact=a.exact, bound=a.bound)
        shifted = E("bin", dtype, [absa, lit(c)], text="+", exact=a.exact, bound=a.bound + c)
        if fn == "acosh":
            return call([shifted] if c == 1 else [E("bin", dtype, [shifted, lit(0.5)], text="+", exact=a.exact,
                                                      bound=a.bound + 1)], math.acosh(a.bound + 1), False)
        # pow: a positive base, an exponent that is a constant or a tanh-bounded value in [-2, 2]
        if a.bound > 8:
            shifted = E("bin", dtype, [squash(a), lit(1.5)], text="+", exact=a.exact, bound=2.5)
            c = 0.5
        if rng.random() < 0.5:
            y = rng.choice((2, 3, 0.5, -1.5))
            ymax = abs(y)
            exponent = lit(y) if y >= 0 else E("neg", "real", [lit(-y)], bound=-y)
        else:
            b = self.other(ctx, dtype, depth, exact)
            if b.dt in ("int", "real"):
                return None
            ymax = 2
            exponent = E("bin", dtype, [squash(b), lit(2)], text="*", exact=b.exact, bound=2)
        bound = max(shifted.bound ** ymax, c ** -ymax)
        if bound > FLOAT_LIMIT[dtype] / 4:
            return None
        return call([shifted, exponent], bound, False)

    def v_cast(self, ctx, dtype, depth, exact):
        src = self.pick_dtype()
        if src == dtype:
            return None
        need_exact = exact or (is_float(src) and not is_float(dtype))
        inner = self.value(ctx, src, depth, need_exact)
        if not is_float(dtype) and is_float(src):
            # scale so that truncation keeps some information
            if self.rng.random() < 0.5:
                k = self.rng.choice((3, 10, 100))
                inner = E("bin", src, [inner, E("lit", "int", text=str(k), bound=k)], text="*", exact=inner.exact,
                          bound=inner.bound * k)
                if inner.bound > FLOAT_LIMIT[src]:
                    return None
        return self.cast(dtype, inner)

    def v_select(self, ctx, dtype, depth, exact):
        c = self.cond(ctx, depth)
        a = self.value(ctx, dtype, depth, exact)
        b = self.other(ctx, dtype, depth, exact)
        if self.rng.random() < 0.5:
            a, b = b, a
        if a.dt in ("int", "real") and b.dt in ("int", "real"):
            return None
        return E("select", dtype, [c, a, b], text="select", exact=a.exact and b.exact, bound=max(a.bound, b.bound))

    def v_indexval(self, ctx, dtype, depth, exact):
        pool = ctx.value_indices()
        if not pool:
            return None
        i = self.rng.choice(pool)
        ival = E("idx", "int", text=i, bound=ctx.idx_axes[i].value)
        if self.rng.random() < 0.5 or dtype == "u8":
            return self.cast(dtype, ival) if dtype != "u8" or ival.bound < 256 else None
        a = self.value(ctx, dtype, depth, exact)
        op = self.rng.choice("+-*") if ival.bound < 50 else "+"
        bound = a.bound * ival.bound if op == "*" else a.bound + ival.bound
        return E("bin", dtype, [a, ival], text=op, exact=a.exact, bound=bound)

    def v_param(self, ctx, dtype, depth, exact):
        if not self.p.params or dtype == "u8":
            return None
        name = self.rng.choice(list(self.p.params))
        v = self.p.params[name]
        pe = E("param", "int", text=name, bound=v)
        if is_float(dtype):
            a = self.value(ctx, dtype, depth, exact)
            return E("bin", dtype, [a, self.cast(dtype, pe)], text="/", exact=a.exact, bound=a.bound / max(v, 1))
        return self.cast(dtype, pe)

    # conditions
    def cond(self, ctx, depth):
        rng = self.rng
        r = rng.random()
        if r < 0.15 and depth > 0:
            a, b = self.cond(ctx, depth - 1), self.cond(ctx, depth - 1)
            return E("and" if rng.random() < 0.5 else "or", "cond", [a, b], text="&&" if rng.random() < 0.5 else "||")
        if r < 0.2 and depth > 0:
            return E("not", "cond", [self.cond(ctx, depth - 1)])
        pool = ctx.value_indices()
        op = rng.choice(("<", "<=", ">", ">=", "==", "!="))
        if r < 0.55 and pool:
            i = rng.choice(pool)
            ival = E("idx", "int", text=i)
            form = rng.random()
            if form < 0.4 and len(pool) > 1:
                j = rng.choice([x for x in pool if x != i])
                other = E("idx", "int", text=j)
            elif form < 0.7:
                ival = E("bin", "int", [ival, E("lit", "int", text=str(rng.choice((2, 3))))], text="%")
                other = E("lit", "int", text="0")
                op = rng.choice(("==", "!="))
            else:
                other = E("lit", "int", text=str(rng.randint(0, max(0, ctx.idx_axes[i].value - 1))))
            return E("cmp", "cond", [ival, other], text=op)
        dt = self.pick_dtype()
        a = self.value(ctx, dt, min(depth, 1), exact=True)
        b = self.other(ctx, dt, min(depth, 1), exact=True)
        if a.dt in ("int", "real") and b.dt in ("int", "real"):
            b = self.read(ctx, dt, exact=True)
        return E("cmp", "cond", [a, b], text=op)

    # --- statements ---------------------------------------------------------------------------
    def choose_axes(self, lo, hi):
        if self.row_mode:
            return self.axes[:1] if self.rng.random() < 0.25 else self.axes[:2]
        k = self.rng.randint(lo, hi)
        if self.rng.random() < 0.2:  # axes may repeat (square tensors)
            return [self.rng.choice(self.axes) for _ in range(k)]
        return self.rng.sample(self.axes, min(k, len(self.axes)))

    def fresh_names(self, prefix, n):
        return [f"{prefix}{i}" for i in range(n)]

    def finish(self, ctx, out_dtype, op, rhs, exact, bound, where_extra=None, out_axes=None):
        """Wraps up a statement: where clauses for unranged indices, the written local."""
        used = {e.text for e in rhs.walk() if e.kind == "idx"}
        whole = set()  # indices some read on the right uses as a whole dimension index
        for e in rhs.walk():
            if e.kind == "read":
                for d in e.index:
                    used.update(tok for tok in _tokens(d))
                    whole.update(d for d in e.index if d in ctx.idx_axes)
        where = dict(where_extra or {})
        for i in list(ctx.lhs) + [i for i in ctx.idx_axes if i not in ctx.lhs]:
            if i in where:
                continue
            # an index that no read on the right keeps whole (the read that made it plain was dropped,
            # or it is left only inside `i % 5`) needs a range
            # (the random draw stays where it was, so that older seeds still give the same programs)
            if i not in ctx.plain or (i in ctx.lhs and i not in used) or (self.rng.random() < 0.08) or i not in whole:
                if i in ctx.lhs or i in used:
                    where[i] = ("0", ctx.idx_axes[i].text)
        # reduction indices that do not appear are not part of the statement
        axes = out_axes or [ctx.idx_axes[i] for i in ctx.lhs]
        t = self.new_local(out_dtype, axes, exact, bound)
        s = Stmt(t, ctx.lhs, op, rhs, where, ctx.idx_axes)
        self.p.stmts.append(s)
        return t

    def s_map(self):
        axes = self.choose_axes(0 if self.rng.random() < 0.08 else 1, 3)
        lhs = self.fresh_names("i", len(axes))
        ctx = Ctx(lhs, dict(zip(lhs, axes)), reduce=False)
        dt = self.pick_dtype()
        rhs = self.value(ctx, dt, self.rng.randint(1, 4))
        if rhs.dt != dt:
            rhs = self.read(ctx, dt)
        self.p.notes.append("map")
        return self.finish(ctx, dt, "=", rhs, rhs.exact, rhs.bound)

    def reduction_ctx(self, n_out, n_red):
        if self.row_mode:
            ctx = Ctx(["i0"], {"i0": self.axes[0], "r0": self.axes[1]}, reduce=True)
            return ctx, ["r0"]
        out_axes = [self.rng.choice(self.axes) for _ in range(n_out)] if self.rng.random() < 0.2 else \
            self.rng.sample(self.axes, min(n_out, len(self.axes)))
        red_axes = [self.rng.choice(self.axes) for _ in range(n_red)]
        lhs = self.fresh_names("i", len(out_axes))
        red = self.fresh_names("r", len(red_axes))
        ctx = Ctx(lhs, dict(zip(lhs + red, out_axes + red_axes)), reduce=True)
        return ctx, red

    def covering_read(self, ctx, red, dtype, exclude=None):
        """A read that uses every reduction index (and some output indices), in a random order."""
        names = list(red) + [i for i in ctx.lhs if self.rng.random() < 0.7]
        self.rng.shuffle(names)
        cands = [t for t in self.p.tensors if t.dtype == dtype and len(t.axes) == len(names) and t is not exclude
                 and [a.text for a in t.axes] == [ctx.idx_axes[i].text for i in names]]
        if cands and self.rng.random() < 0.5:
            t = self.rng.choice(cands)
        else:
            t = self.new_input(dtype, [ctx.idx_axes[i] for i in names])
        ctx.plain.update(names)
        return E("read", dtype, tensor=t, index=names, exact=t.exact, bound=t.bound)

    def s_reduce(self):
        rng = self.rng
        ctx, red = self.reduction_ctx(rng.choice((0, 1, 1, 2, 2, 3)), rng.choice((1, 1, 1, 2, 2, 3)))
        points = math.prod(a.value for a in ctx.idx_axes.values())
        if points > self.points_limit:
            return self.s_map()
        op = rng.choice(("+=!", "+=!", "max=!", "min=!", "*=!"))
        in_dt = self.pick_dtype()
        n_red = math.prod(ctx.idx_axes[r].value for r in red)
        if op == "+=!" and in_dt in ("f16", "bf16") and (n_red > 8 or rng.random() < 0.7):
            acc = "f32"
        elif op == "+=!" and in_dt in ("i8", "u8") and rng.random() < 0.7:
            acc = "i32"
        else:
            acc = in_dt
        core = self.covering_read(ctx, red, in_dt)
        if rng.random() < 0.6:
            other = self.value(ctx, in_dt, rng.randint(0, 2))
            if other.dt == in_dt:
                kind = rng.choice(("*", "+", "max", "select"))
                if kind in "*+":
                    if kind == "+" and in_dt != "f32" and not (core.exact and other.exact):
                        kind = "*"
                    b = core.bound * other.bound if kind == "*" else core.bound + other.bound
                    if is_float(in_dt) and b > FLOAT_LIMIT[in_dt] / max(n_red, 1):
                        kind = "max"
                if kind in "*+":
                    core = E("bin", in_dt, [core, other], text=kind, exact=core.exact and other.exact, bound=b)
                elif kind == "max":
                    core = E("minmax", in_dt, [core, other], text=rng.choice(("min", "max")),
                             exact=core.exact and other.exact, bound=max(core.bound, other.bound))
                else:
                    c = self.cond(ctx, 1)
                    core = E("select", in_dt, [c, core, self.lit(in_dt)], text="select", exact=core.exact,
                             bound=max(core.bound, 8))
        rhs = self.cast(acc, core) if acc != in_dt else core
        if op == "*=!":  # every partial product within bound^n_red, in any order (integers wrap)
            bound = math.exp(min(700.0, n_red * math.log(max(rhs.bound, 1.0))))
        else:
            bound = rhs.bound * (n_red if op == "+=!" else 1)
        if is_float(acc) and bound > FLOAT_LIMIT[acc]:
            op = "max=!"
            bound = rhs.bound
        exact = rhs.exact and not (op in ("+=!", "*=!") and is_float(acc))
        if not is_float(acc):
            bound = min(bound, INT_MAX[acc])
        self.p.notes.append(f"reduce{op}")
        return self.finish(ctx, acc, op, rhs, exact, bound)

    def s_contract(self):
        """C(out) +=! acc(A(...)) * acc(B(...)): batched, any majorness, one or two K indices, or an
        outer product with '='."""
        rng = self.rng
        dt, acc = rng.choice((("f16", "f32"), ("f16", "f32"), ("f32", "f32"), ("bf16", "f32"), ("i8", "i32"),
                              ("u8", "i32"), ("f16", "f16")))
        nb, nk = rng.choice((0, 0, 0, 1, 1, 2)), rng.choice((1, 1, 1, 2, 0))
        M, N = rng.choice(self.axes), rng.choice(self.axes)
        B = [rng.choice(self.axes) for _ in range(nb)]
        K = [rng.choice(self.axes) for _ in range(nk)]
        if dt == "f16" and acc == "f16" and math.prod(k.value for k in K) > 8:
            acc = "f32"
        b_names = [f"b{i}" for i in range(nb)]
        k_names = [f"k{i}" for i in range(nk)]
        out = b_names + ["m", "n"]
        order = out[:]
        if rng.random() < 0.3:
            rng.shuffle(order)
        idx_axes = dict(zip(b_names, B)) | {"m": M, "n": N} | dict(zip(k_names, K))
        points = math.prod(a.value for a in idx_axes.values())
        if points > self.points_limit:
            return self.s_map()
        ctx = Ctx(order, idx_axes, reduce=True)
        a_names = b_names + ["m"] + k_names
        b_names2 = b_names + k_names + ["n"]
        for names in (a_names, b_names2):
            if rng.random() < 0.5:
                rng.shuffle(names)
        A = self.new_input(dt, [idx_axes[i] for i in a_names])
        Bt = self.new_input(dt, [idx_axes[i] for i in b_names2])
        ctx.plain.update(a_names + b_names2)
        ra = E("read", dt, tensor=A, index=a_names, bound=2 if is_float(dt) else 8)
        rb = E("read", dt, tensor=Bt, index=b_names2, bound=2 if is_float(dt) else 8)
        if acc != dt:
            ra, rb = self.cast(acc, ra), self.cast(acc, rb)
        rhs = E("bin", acc, [ra, rb], text="*", bound=ra.bound * rb.bound)
        n_k = math.prod(k.value for k in K)
        op = "+=!" if nk else "="
        self.p.notes.append(f"contract b{nb}k{nk}")
        return self.finish(ctx, acc, op, rhs, exact=not (is_float(acc) and nk), bound=rhs.bound * n_k)

    def s_epilogue(self, c):
        """An element-wise statement over a contraction's result (bias, activation, cast): what the
        cube / TensorCore paths fuse into their epilogue."""
        rng = self.rng
        lhs = [f"i{d}" for d in range(len(c.axes))]
        ctx = Ctx(lhs, dict(zip(lhs, c.axes)), reduce=False)
        ctx.plain.update(lhs)
        e = E("read", c.dtype, tensor=c, index=list(lhs), exact=c.exact, bound=c.bound)
        if rng.random() < 0.7 and lhs:  # a bias over one output axis
            j = rng.randrange(len(lhs))
            bias = self.new_input(c.dtype, [c.axes[j]])
            e = E("bin", c.dtype, [e, E("read", c.dtype, tensor=bias, index=[lhs[j]], bound=INPUT_BOUND[c.dtype])],
                  text="+", exact=c.exact, bound=e.bound + INPUT_BOUND[c.dtype])
        act = rng.choice(("relu", "clip", "scale", "none"))
        if act == "relu":
            e = E("minmax", c.dtype, [e, E("lit", "int", text="0")], text="max", exact=e.exact, bound=e.bound)
        elif act == "clip":
            e = E("minmax", c.dtype, [E("minmax", c.dtype, [e, E("lit", "int", text="0")], text="max", exact=e.exact,
                                        bound=e.bound), E("lit", "int", text="6")], text="min", exact=e.exact, bound=6)
        elif act == "scale" and is_float(c.dtype):
            e = E("bin", c.dtype, [e, E("lit", "real", text="0.5")], text="*", exact=e.exact, bound=e.bound / 2)
        out = c.dtype
        if c.dtype == "f32" and rng.random() < 0.5 and e.bound < FLOAT_LIMIT["f16"]:
            out = "f16"
            e = self.cast("f16", e)
        self.p.notes.append("epilogue")
        return self.finish(ctx, out, "=", e, e.exact, e.bound)

    def s_pad(self, src):
        """Xp = select(h >= a && h < H + a, T(h - a), 0) where h in 0:H + 2a (one or two dims)."""
        rng = self.rng
        nd = len(src.axes)
        pads = sorted(rng.sample(range(nd), rng.randint(1, min(2, nd))))
        lhs = [f"i{d}" for d in range(nd)]
        ctx = Ctx(lhs, {}, reduce=False)
        index, conds, where, axes = [], [], {}, []
        for d, a in enumerate(src.axes):
            i = lhs[d]
            if d in pads:
                p = rng.choice((1, 1, 2))
                hi = f"{a.text} + {2 * p}" if _is_param(a.text) else f"({a.text}) + {2 * p}"
                ax = Axis(hi, a.value + 2 * p)
                index.append(f"{i} - {p}")
                conds.append(f"{i} >= {p} && {i} < {a.text} + {p}" if _is_param(a.text) else f"{i} >= {p} && {i} < ({a.text}) + {p}")
                where[i] = ("0", hi)
            else:
                ax = a
                index.append(i)
                ctx.plain.add(i)
            ctx.idx_axes[i] = ax
            axes.append(ax)
        read = E("read", src.dtype, tensor=src, index=index, exact=src.exact, bound=src.bound)
        cond = E("lit", "cond", text=" && ".join(conds))
        rhs = E("select", src.dtype, [cond, read, E("lit", "int", text="0")], text="select", exact=src.exact,
                bound=src.bound)
        self.p.notes.append("pad")
        return self.finish(ctx, src.dtype, "=", rhs, src.exact, src.bound, where_extra=where, out_axes=axes)

    def s_window(self):
        """Pooling / convolution windows with a stride and dilation: Y(p) op=! X(p * s + r * d) ...,
        the output size either a given parameter or `(H - R) / s + 1` in a where clause."""
        rng = self.rng
        s, d = rng.choice(((1, 1), (2, 1), (2, 1), (1, 2), (3, 1), (2, 2)))
        R = rng.choice((1, 2, 3, 3))
        dt = self.pick_dtype()
        op = rng.choice(("+=!", "max=!", "min=!", "+=!"))
        acc = "f32" if dt in ("f16", "bf16") and op == "+=!" else ("i32" if dt in ("i8", "u8") and op == "+=!" else dt)
        other = [rng.choice(self.axes) for _ in range(rng.randint(0, 2))]
        onames = [f"c{i}" for i in range(len(other))]
        quasi = rng.random() < 0.5
        if quasi:
            H = self.param(rng.randint(d * (R - 1) + 1, 30))
            hi = f"({H.text} - {d * (R - 1) + 1}) / {s} + 1" if s > 1 else f"{H.text} - {d * (R - 1)}"
            P = Axis(hi, (H.value - (d * (R - 1) + 1)) // s + 1)
            where = {"p": ("0", hi)}
        else:
            P = rng.choice(self.axes)
            H = self.param(s * (P.value - 1) + d * (R - 1) + 1 + rng.choice((0, 0, 1)), "D")
            where = {}
        where["r"] = ("0", str(R))
        lhs = ["p"] + onames
        rng.shuffle(lhs)
        idx_axes = {"p": P, "r": Axis(str(R), R)} | dict(zip(onames, other))
        ctx = Ctx(lhs, idx_axes, reduce=True)
        pe = "p" if s == 1 else f"p * {s}"
        re_ = "r" if d == 1 else f"r * {d}"
        xi = [f"{pe} + {re_}"] + onames
        rng.shuffle(xi)
        xaxes = [H if x.startswith(pe) else idx_axes[x] for x in xi]
        X = self.new_input(dt, xaxes)
        ctx.plain.update(onames)
        read = E("read", dt, tensor=X, index=xi, bound=INPUT_BOUND[dt])
        if op == "+=!" and rng.random() < 0.5:  # a convolution: times a filter over r (and a channel)
            wn = ["r"] + [o for o in onames if rng.random() < 0.5]
            W = self.new_input(dt, [idx_axes[i] for i in wn])
            w = E("read", dt, tensor=W, index=wn, bound=INPUT_BOUND[dt])
            read = E("bin", dt, [read, w], text="*", bound=read.bound * w.bound)
        rhs = self.cast(acc, read) if acc != dt else read
        exact = not (op == "+=!" and is_float(acc))
        self.p.notes.append(f"window s{s}d{d}{'q' if quasi else ''}")
        t = self.finish(ctx, acc, op, rhs, exact, rhs.bound * R, where_extra=where)
        t.window_quasi = quasi
        return t

    def s_conv2d(self):
        """A 2-D convolution in NHWC or NCHW with a stride, a dilation and an image that may be larger
        than the windows reach (the cube's img2col path): Y(n, p, q, k) +=! X(n, p*s + r*d, ...) * W(...)."""
        rng = self.rng
        dt, acc = rng.choice((("f16", "f32"), ("f16", "f32"), ("i8", "i32"), ("f32", "f32")))
        s, d = rng.choice(((1, 1), (2, 1), (2, 1), (1, 2), (3, 1)))
        R, S = rng.choice(((1, 1), (3, 3), (3, 3), (1, 3), (2, 2)))
        N = self.param(rng.choice((1, 1, 2)))
        P, Q = self.param(rng.randint(1, 8)), self.param(rng.randint(1, 8))
        C, K = self.param(rng.choice((3, 5, 16, 16, 32))), self.param(rng.choice((2, 7, 16, 16, 32)))
        Ra, Sa = self.param(R), self.param(S)
        H = self.param(s * (P.value - 1) + d * (R - 1) + 1 + rng.choice((0, 0, 1, s)), "D")
        W = self.param(s * (Q.value - 1) + d * (S - 1) + 1 + rng.choice((0, 0, 1, s)), "D")
        pe = lambda o, w: (f"{o} * {s}" if s > 1 else o) + " + " + (f"{w} * {d}" if d > 1 else w)  # noqa: E731
        nchw = rng.random() < 0.3
        if nchw:
            X = self.new_input(dt, [N, C, H, W])
            xi = ["n", "c", pe("p", "r"), pe("q", "t")]
            Wt = self.new_input(dt, [K, C, Ra, Sa])
            wi = ["k", "c", "r", "t"]
            lhs, axes = ["n", "k", "p", "q"], [N, K, P, Q]
        else:
            X = self.new_input(dt, [N, H, W, C])
            xi = ["n", pe("p", "r"), pe("q", "t"), "c"]
            Wt = self.new_input(dt, [Ra, Sa, C, K])
            wi = ["r", "t", "c", "k"]
            lhs, axes = ["n", "p", "q", "k"], [N, P, Q, K]
        idx_axes = dict(zip(lhs, axes)) | {"r": Ra, "t": Sa, "c": C}
        if math.prod(a.value for a in idx_axes.values()) > self.points_limit:
            return self.s_map()
        ctx = Ctx(lhs, idx_axes, reduce=True)
        ctx.plain.update(["n", "c", "k", "r", "t"])
        rx = self.cast(acc, E("read", dt, tensor=X, index=xi, bound=INPUT_BOUND[dt]))
        rw = self.cast(acc, E("read", dt, tensor=Wt, index=wi, bound=INPUT_BOUND[dt])) if acc != dt else \
            E("read", dt, tensor=Wt, index=wi, bound=INPUT_BOUND[dt])
        if acc == dt:
            rx = rx.children[0] if rx.kind == "cast" else rx
        rhs = E("bin", acc, [rx, rw], text="*", bound=rx.bound * rw.bound)
        self.p.notes.append(f"conv2d {'nchw' if nchw else 'nhwc'} s{s}d{d} {R}x{S}")
        return self.finish(ctx, acc, "+=!", rhs, exact=not is_float(acc), bound=rhs.bound * R * S * C.value)

    def s_accumulate(self, t):
        """`T(..) += expr` onto a tensor written earlier (one statement later)."""
        rng = self.rng
        lhs = [f"i{d}" for d in range(len(t.axes))]
        red_ax = rng.choice(self.axes)
        ctx = Ctx(lhs, dict(zip(lhs, t.axes)) | {"r0": red_ax}, reduce=True)
        op = rng.choice(("+=", "max=", "min="))
        core = self.covering_read(ctx, ["r0"], t.dtype, exclude=t)  # never its own output (KNOWN_ISSUES)
        if op == "+=" and is_float(t.dtype):
            n = red_ax.value
            if core.bound * n + t.bound > FLOAT_LIMIT[t.dtype] or t.dtype != "f32":
                op = "max="
        where = {i: ("0", t.axes[k].text) for k, i in enumerate(lhs) if i not in ctx.plain}
        s = Stmt(t, lhs, op, core, where, ctx.idx_axes)
        self.p.stmts.append(s)
        if op == "+=" and is_float(t.dtype):
            t.exact = False
            t.bound += core.bound * red_ax.value
        self.p.notes.append(f"accumulate{op}")
        return t

    def s_attention(self):
        """Attention as a user writes it (compiler/poly/online_softmax.h): scores over a head axis,
        optional steps (scale, an additive bias, a causal-style mask with a random offset, written as
        a statement or inline in the maximum and the exponent), the row maximum, exponentials
        (rounded to f16 or not), their sum, then the context divided afterwards or the probabilities
        normalised first, and an optional epilogue. Layouts are random permutations; K and V may
        drop a batch axis (multi-query). Whether the core fuses it or keeps it unfused, every target
        must agree with the interpreter."""
        rng = self.rng
        dt = rng.choice(("f16", "f16", "f32", "bf16"))
        wide = (lambda e: e) if dt == "f32" else (lambda e: self.cast("f32", e))
        nb = rng.choice((0, 1, 1, 2))
        B = [rng.choice(self.axes) for _ in range(nb)]
        S, T, D = self.param(rng.choice((1, 3, 16, 17, 33))), self.param(rng.choice((1, 5, 16, 31, 64, 70))), \
            self.param(rng.choice((4, 8, 16, 24)))
        Dv = D if rng.random() < 0.6 else self.param(rng.choice((4, 8, 12)))
        if math.prod(a.value for a in B) * S.value * T.value * (D.value + Dv.value) > self.points_limit:
            return self.s_map()
        b = [f"b{k}" for k in range(nb)]
        ax = dict(zip(b, B)) | {"i": S, "j": T, "d": D, "e": Dv}

        def operand(names, drop):
            names = [n for n in names if not (drop and n in b and rng.random() < 0.3)]
            rng.shuffle(names)
            t = self.new_input(dt, [ax[n] for n in names])
            return E("read", dt, tensor=t, index=names, bound=2.0)

        q = operand(b + ["i", "d"], False)
        k = operand(b + ["j", "d"], True)
        v = operand(b + ["j", "e"], True)
        row = b + ["i"]
        s_lhs = row + ["j"]
        if rng.random() < 0.3:
            rng.shuffle(s_lhs)

        def stmt(out_dtype, lhs, op, rhs, exact=False, bound=1.0):
            t = self.new_local(out_dtype, [ax[n] for n in lhs], exact, bound)
            self.p.stmts.append(Stmt(t, lhs, op, rhs, {}, {n: ax[n] for n in ax}))
            return t

        def rd(t, names):
            return E("read", t.dtype, tensor=t, index=list(names), exact=t.exact, bound=t.bound)

        sc = stmt("f32", s_lhs, "+=!", E("bin", "f32", [wide(q), wide(k)], text="*", bound=4.0), bound=4.0 * D.value)
        x = rd(sc, s_lhs)
        step = rng.choice(("none", "scale", "bias", "mask", "mask"))
        if step in ("scale", "mask"):
            x = E("bin", "f32", [x, E("lit", "real", text=rng.choice(("0.125", "0.25", "0.5")))], text="*", bound=x.bound)
        if step == "bias":
            bias = self.new_input("f32", [S, T])
            x = E("bin", "f32", [x, E("read", "f32", tensor=bias, index=["i", "j"], bound=2.0)], text="+", bound=x.bound + 2)
        if step == "mask":
            c = rng.choice((-1, 0, 0, 1, 3))
            rhs = "i" if c == 0 else (f"i + {c}" if c > 0 else f"i - {-c}")
            cond = E("cmp", "cond", [E("idx", "int", text="j"), E("idx", "int", text=rhs)], text=rng.choice(("<=", "<=", "<")))
            x = E("select", "f32", [cond, x, E("lit", "real", text="-1.0e30")], text="select", bound=1e30)
        if step != "none" and rng.random() < 0.6:  # the step as a statement of its own
            lt = stmt("f32", s_lhs, "=", x, bound=x.bound)
            x = rd(lt, s_lhs)
        mx = stmt("f32", row, "max=!", x, bound=x.bound)
        ex = E("call", "f32", [E("bin", "f32", [x, rd(mx, row)], text="-", bound=2 * x.bound)], text="exp", bound=1.0)
        e_dt = "f32"
        if dt != "f32" and rng.random() < 0.5:
            e_dt = "f16"
            ex = self.cast("f16", ex)
        et = stmt(e_dt, s_lhs, "=", ex)
        z = stmt("f32", row, "+=!", wide(rd(et, s_lhs)) if e_dt != "f32" else rd(et, s_lhs), bound=T.value)
        o_lhs = row + ["e"]
        if rng.random() < 0.3:
            rng.shuffle(o_lhs)
        out_dt = rng.choice((dt, "f32"))
        if rng.random() < 0.5:  # divide after the context
            p_e = wide(rd(et, s_lhs)) if e_dt != "f32" else rd(et, s_lhs)
            o = stmt("f32", o_lhs, "+=!", E("bin", "f32", [p_e, wide(v)], text="*", bound=2.0 * T.value), bound=2.0 * T.value)
            y = E("bin", "f32", [rd(o, o_lhs), rd(z, row)], text="/", bound=2.0)
            if out_dt != "f32":
                y = self.cast(out_dt, y)
            stmt(out_dt, o_lhs, "=", y, bound=2.0)
            self.p.notes.append("attention divide-after " + step)
        else:  # normalise first
            pe = E("bin", "f32", [rd(et, s_lhs) if e_dt == "f32" else wide(rd(et, s_lhs)), rd(z, row)], text="/", bound=1.0)
            p_dt = "f32"
            if dt != "f32" and rng.random() < 0.6:
                p_dt = "f16"
                pe = self.cast("f16", pe)
            pt = stmt(p_dt, s_lhs, "=", pe)
            p_r = rd(pt, s_lhs) if p_dt == "f32" else wide(rd(pt, s_lhs))
            o = stmt("f32", o_lhs, "+=!", E("bin", "f32", [p_r, wide(v)], text="*", bound=2.0), bound=2.0)
            if out_dt != "f32":
                stmt(out_dt, o_lhs, "=", self.cast(out_dt, rd(o, o_lhs)), bound=2.0)
            self.p.notes.append("attention normalise-first " + step)
        return None

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


def _is_param(text):
    return text.isidentifier()


def _tokens(text):
    import re
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)


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
