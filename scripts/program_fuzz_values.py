"""The program fuzzer's generator, values (scripts/program_fuzz_gen.py): expression trees of a dtype
(literals, reads, casts, arithmetic, divisions kept away from 0, min/max, every built-in with its
argument brought into its domain, selects, indices and parameters as values) and conditions."""
import math

from program_fuzz_ir import FLOAT_LIMIT, INT_MAX, E, is_float
from program_fuzz_reads import ReadGen


class ValueGen(ReadGen):
    """Expressions of a given dtype, with their exactness and magnitude bound, and conditions."""

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

    def operands(self, ctx, dtype, depth, exact):
        """Two operands of `dtype`, a typed value and other(), in either order; None when both are
        literals (nothing of the program in them)."""
        a = self.value(ctx, dtype, depth, exact)
        b = self.other(ctx, dtype, depth, exact)
        if self.rng.random() < 0.5:
            a, b = b, a
        if a.dt in ("int", "real") and b.dt in ("int", "real"):
            return None
        return a, b

    def v_bin(self, ctx, dtype, depth, exact):
        op = self.rng.choice("+-*" if dtype != "u8" else "+*+-")
        ab = self.operands(ctx, dtype, depth, exact)
        if ab is None:
            return None
        a, b = ab
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
        ab = self.operands(ctx, dtype, depth, exact)
        if ab is None:
            return None
        a, b = ab
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
        ab = self.operands(ctx, dtype, depth, exact)
        if ab is None:
            return None
        a, b = ab
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
