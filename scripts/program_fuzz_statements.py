"""The program fuzzer's generator, statements (scripts/program_fuzz_gen.py): element-wise maps,
reductions, contractions and their epilogues, padding, windows, 2-d convolutions and `+=`
accumulations, each finished into a `Stmt` with its ranges."""
import math

from program_fuzz_ir import (FLOAT_LIMIT, INT_MAX, INPUT_BOUND, Axis, E, is_float, Stmt, Ctx,
                             _is_param, _tokens)
from program_fuzz_values import ValueGen


class StatementGen(ValueGen):
    """One statement of each family, appended to the program."""

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
