"""What the program fuzzer's generator builds (scripts/program_fuzz_gen.py): dtypes and their value
bounds, axes (size parameters), tensors, expression trees (`E`), statements and programs, which
render to `.tsl` text and the `--shape` binding; `Ctx`, the statement under construction."""


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


def _is_param(text):
    return text.isidentifier()


def _tokens(text):
    import re
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)
