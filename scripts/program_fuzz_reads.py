"""The program fuzzer's generator, first layer (scripts/program_fuzz_gen.py): size parameters, dtypes,
new input and local tensors, and reads of them with affine and quasi-affine index expressions."""
from program_fuzz_ir import Axis, Tensor, E, _is_param


class ReadGen:
    """Sizes, dtypes, tensors and reads; the state (rng, program, counters) is set by Gen.__init__."""

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
