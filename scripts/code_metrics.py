#!/usr/bin/python3
"""Code-health figures for the kernel-IR contract issue, over the C++ sources outside tests/.

  longest   the N longest functions (lines from the signature's line to the closing brace)
  literals  numeric literals that look like hardware numbers outside isa/ (and outside tests/):
            powers of two >= 16, the shared-memory budgets, and `N * 1024` products. Comments and
            the text of string literals are stripped first, so CUDA text the emitter prints from a
            machine-model value does not count, but a literal inside a printed string does count
            when it is printed verbatim as a number (we count those separately as 'in strings').

Counting rule (stated so the before/after figures can be reproduced): a token is a decimal or hex
integer literal whose value is a power of two between 16 and 2^30, or one of 99/163/227/228 followed
by `* 1024`; `1 << n` and sizeof-like uses are not counted. Lines marked `// not hardware:` are
skipped, as are lines after a `// not hardware:` comment line (loop-unrolling factors, bit widths of
the host's integers, exactness bounds of arithmetic). `--under DIR` restricts the count to folders.
"""
import argparse, os, re, sys

ROOTS = ["compiler", "npu_sim", "gpu_backend", "isa"]


def sources(top):
    for root in ROOTS:
        for d, _, files in os.walk(os.path.join(top, root)):
            for f in sorted(files):
                if f.endswith((".cc", ".h")):
                    yield os.path.join(d, f)


def strip(text, keep_strings=False):
    """Remove comments; blank out string contents unless keep_strings (line structure kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            seg = text[i:(n if j < 0 else j + 2)]
            out.append("\n" * seg.count("\n"))
            i = n if j < 0 else j + 2
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            if not m:
                out.append(c); i += 1; continue
            end = text.find(")" + m.group(1) + '"', i)
            seg = text[i:end + len(m.group(1)) + 2]
            out.append(seg if keep_strings else '""' + "\n" * seg.count("\n"))
            i = end + len(m.group(1)) + 2
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            seg = text[i:j + 1]
            out.append(seg if keep_strings else c + c)
            i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


HW = re.compile(r"(?<![\w.])(0x[0-9a-fA-F]+|\d+)(?![\w.])")
BUDGET = re.compile(r"\b(99|163|227|228|96|64|48)\s*\*\s*1024\b")


def is_hw(tok):
    try:
        v = int(tok, 16) if tok.lower().startswith("0x") else int(tok, 10)
    except ValueError:
        return False
    return v >= 16 and v <= (1 << 30) and (v & (v - 1)) == 0


def literals(top, in_strings, under=()):
    hits = []
    for path in sources(top):
        rel = os.path.relpath(path, top)
        if rel.startswith("isa/") or (under and not any(rel.startswith(u.rstrip("/") + "/") for u in under)):
            continue
        raw = open(path, encoding="utf-8", errors="replace").read()
        code = strip(raw, keep_strings=in_strings)
        rawlines = raw.split("\n")
        for ln, (line, rawline) in enumerate(zip(code.split("\n"), rawlines), 1):
            previous = rawlines[ln - 2] if ln > 1 else ""
            if "not hardware:" in rawline or previous.strip().startswith("// not hardware:") or "<<" in line:
                continue
            if in_strings:
                # only what sits inside quotes
                line = " ".join(re.findall(r'"((?:[^"\\]|\\.)*)"', line))
            for m in BUDGET.finditer(line):
                hits.append((rel, ln, m.group(0)))
            line = BUDGET.sub("", line)
            for m in HW.finditer(line):
                if is_hw(m.group(1)):
                    hits.append((rel, ln, m.group(1)))
    return hits


def functions(top):
    """(lines, file, line, name) for each function-like body at namespace scope or in a class."""
    res = []
    for path in sources(top):
        rel = os.path.relpath(path, top)
        code = strip(open(path, encoding="utf-8", errors="replace").read())
        lines = code.split("\n")
        depth, start, name, ns_depths = 0, None, None, []
        stmt = ""
        for ln, line in enumerate(lines, 1):
            for ch in line:
                if ch == "{":
                    head = stmt.strip()
                    is_scope = re.search(r"\b(namespace|struct|class|union|enum)\b[^()]*$", head) or head.endswith("=") or head.startswith("extern")
                    if start is None and not is_scope and re.search(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>,\s*&]+)?$", head):
                        m = re.search(r"([\w:~]+)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->[^{]*)?$", head)
                        start, name, fdepth = ln - head.count("\n") if False else ln, (m.group(1) if m else head[-40:]), depth
                        sig_lines = stmt.count("\n")
                        start = ln - sig_lines
                    depth += 1
                    stmt = ""
                elif ch == "}":
                    depth -= 1
                    if start is not None and depth == fdepth:
                        res.append((ln - start + 1, rel, start, name))
                        start = None
                    stmt = ""
                elif ch == ";":
                    stmt = ""
                else:
                    stmt += ch
            stmt += "\n"
    return sorted(res, reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["longest", "literals"])
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--list", action="store_true", help="print every literal with its place")
    ap.add_argument("--under", action="append", default=[], help="only files below this folder (repeatable)")
    ap.add_argument("--top", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    a = ap.parse_args()
    if a.what == "longest":
        for n, f, l, name in functions(a.top)[:a.n]:
            print(f"{n:5d}  {f}:{l}  {name}")
    else:
        code = literals(a.top, False, a.under)
        strs = literals(a.top, True, a.under)
        if a.list:
            for f, l, t in code:
                print(f"{f}:{l}: {t}")
            for f, l, t in strs:
                print(f"{f}:{l}: \"{t}\" (in a string)")
        print(f"hardware-looking literals outside isa/: {len(code)} in code, {len(strs)} in strings")


if __name__ == "__main__":
    sys.exit(main())
