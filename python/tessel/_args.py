"""The public functions' arguments checked and turned into the CLI's flags (issue 31 item 6).

Every check runs before a child process starts or a file is written, and a bad argument raises
tessel.UsageError whose message starts with the argument's name ("shape['M']: expected a positive
integer, got 'x'"); a file argument that does not exist raises tessel.UserError naming it, as the
CLI does for a missing file. Input names must be identifiers, as in .tsl, so an input's temporary
file (DIR/NAME.npy) can never lie outside DIR."""
import math
import numbers
import os
import re
from collections.abc import Mapping

import numpy as np

from . import _tessel
from ._errors import UsageError, UserError

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# numpy dtypes the CLI's .npy reader takes (tessel's f16, f32, i8, u8, i32)
INPUT_DTYPES = (np.float16, np.float32, np.int8, np.uint8, np.int32)

UINT64_MAX = 2**64 - 1


def _shown(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def fail(name, what, value):
    raise UsageError(f"{name}: expected {what}, got {_shown(value)}")


def text(name, value, optional=True):
    """A string flag value (tile, sync, def_, space, ...): str without NUL."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        fail(name, "a string", value)
    if "\0" in value:
        raise UsageError(f"{name}: contains a NUL character")
    return value


def flag(name, value):
    """A boolean switch (no_tuned, timing_only, race_check)."""
    if not isinstance(value, (bool, np.bool_)):
        fail(name, "True or False", value)
    return bool(value)


def integer(name, value, low, high=None, optional=True):
    """An int in [low, high] (bool is not an int here); numpy integers are taken."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        fail(name, "an integer", value)
    value = int(value)
    if value < low or (high is not None and value > high):
        bound = f"in {low}..{high}" if high is not None else f">= {low}"
        raise UsageError(f"{name}: expected an integer {bound}, got {value}")
    return value


def seconds(name, value, optional=True):
    """A positive, finite number of seconds (timeout, measure_timeout); None: no limit."""
    if value is None and optional:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        fail(name, "a number of seconds", value)
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name}: expected a positive, finite number of seconds, got {value!r}")
    return float(value)


def path(name, value, must_exist=True, optional=False):
    """A file argument: str or os.PathLike; UserError naming `name` when it must exist and does not."""
    if value is None and optional:
        return None
    if not isinstance(value, (str, os.PathLike)):
        fail(name, "a path (str or os.PathLike)", value)
    p = os.fspath(value)
    if not isinstance(p, str):
        fail(name, "a path as str, not bytes", value)
    if not p or "\0" in p:
        raise UsageError(f"{name}: {_shown(p)} is not a path")
    if must_exist and not os.path.exists(p):
        raise UserError(f"{name}: {p}: no such file")
    if must_exist and os.path.isdir(p):
        raise UserError(f"{name}: {p}: is a directory, not a file")
    return p


def target(value, name="target"):
    """'c', a hierarchy description's path, or a shipped description's name ('sm90': the CLI
    resolves it to isa/targets/sm90.yaml, or names the shipped ones)."""
    if value is None:
        raise UsageError(f"{name}: required: 'c', a hierarchy description (isa/targets/*.yaml) or its name")
    if value == "c":
        return "c"
    if (isinstance(value, str) and value and "/" not in value and "\0" not in value
            and not value.endswith((".yaml", ".yml")) and not os.path.exists(value)):
        return value
    return path(name, value)


def shape(value):
    """{"M": 128, ...} or the --shape text "M=128,..." as the --shape text; None: none."""
    if value is None:
        return None
    if isinstance(value, str):
        return text("shape", value)
    if not isinstance(value, Mapping):
        fail("shape", 'a dict such as {"M": 128} or the text "M=128"', value)
    parts = []
    for key, size in value.items():
        if not isinstance(key, str) or not IDENTIFIER.match(key):
            raise UsageError(f"shape: {_shown(key)} is not a dimension name (an identifier such as 'M')")
        parts.append(f"{key}={integer(f'shape[{key!r}]', size, 1, UINT64_MAX, optional=False)}")
    return ",".join(parts)


def _override_value(key, value):
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return repr(float(value))
    if isinstance(value, str):
        return text(f"set[{key!r}]", value)
    fail(f"set[{key!r}]", "a number or a string such as '512KiB'", value)


def override_pairs(value):
    """`set` as (key, value) pairs: a dict {"L1.capacity_bytes": "1MiB"}, a list of (key, value)
    pairs, or the --set text "KEY=VALUE,..."; None: none."""
    if value is None:
        return []
    if isinstance(value, str):
        return _tessel.parse_overrides_text(text("set", value))
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, (list, tuple)):
        items = value
        for item in items:
            if isinstance(item, str) or not isinstance(item, (list, tuple)) or len(item) != 2:
                fail("set", "(key, value) pairs", item)
    else:
        fail("set", 'a dict {"KEY": VALUE}, a list of (KEY, VALUE) pairs or the text "KEY=VALUE,..."', value)
    pairs = []
    for key, v in items:
        if not isinstance(key, str) or not key or "\0" in key:
            raise UsageError(f"set: {_shown(key)} is not a description key (such as 'L1.capacity_bytes')")
        pairs.append((key, _override_value(key, v)))
    return pairs


def input_arrays(value):
    """`inputs` as {name: C-contiguous ndarray}; names are identifiers, arrays of a dtype the CLI reads."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        fail("inputs", 'a dict {"NAME": numpy array}', value)
    arrays = {}
    for name, array in value.items():
        if not isinstance(name, str) or not IDENTIFIER.match(name):
            raise UsageError(f"inputs: {_shown(name)} is not an input name (an identifier of the operator, such as 'A')")
        try:
            a = np.ascontiguousarray(np.asarray(array))
        except (TypeError, ValueError) as e:
            raise UsageError(f"inputs[{name!r}]: not an array ({e})") from None
        if a.dtype.type not in INPUT_DTYPES:
            allowed = ", ".join(np.dtype(t).name for t in INPUT_DTYPES)
            raise UsageError(f"inputs[{name!r}]: dtype {a.dtype} is not one tessel reads ({allowed})")
        arrays[name] = a
    return arrays


def extra_args(value):
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        fail("extra_args", "a list of strings (CLI flags)", value)
    return [text("extra_args[]", v, optional=False) for v in value]
