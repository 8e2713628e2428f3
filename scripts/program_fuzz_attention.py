"""The program fuzzer's generator, the attention family (scripts/program_fuzz_gen.py): attention as a
user writes it, so the online-softmax rewrite and its refusals run under the fuzzer."""
import math

from program_fuzz_ir import E, Stmt
from program_fuzz_statements import StatementGen


class AttentionGen(StatementGen):
    """Attention written out: scores, steps, max, exp, sum, context."""

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
