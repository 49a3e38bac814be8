"""The CPU code generator of fusion: a `fusion.Group` as the source of one Numba kernel.

Imports nothing of tinyattn's but the group's description; Numba is imported only when a kernel
is compiled (``tinyattn[fast]``), never by ``import tinyattn``. The source is plain Python loops
over the group's loops, one statement per item, so it reads as what fusion is: every value of
the run computed at one index while it is in a register, each buffer read or written once.
Each source is written once to a cache directory (TINYATTN_CACHE_DIR, else the user's cache
folder) and compiled by Numba with ``cache=True``: a later process loads the machine code.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# One line of numba-flavoured Python per elementwise op; {0}, {1}, {2} are the operands.
EXPRESSIONS = {
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "maximum": "np.maximum({0}, {1})",
    "minimum": "np.minimum({0}, {1})",
    "neg": "-{0}",
    "exp": "{exp}({0})",
    "log": "np.log({0})",
    "tanh": "np.tanh({0})",
    "sqrt": "np.sqrt({0})",
    "relu": "np.maximum({0}, {zero})",
    "where": "{1} if {0} else {2}",
    "add_scalar": "{0} + {c}",
    "mul_scalar": "{0} * {c}",
    "div_scalar": "{0} / {c}",
    "rsub_scalar": "{c} - {0}",
}
# Written in a fixed order: the source's text is its cache key.
FASTMATH = '{"arcp", "contract", "nsz", "reassoc"}'
_loaded: dict[str, Callable] = {}


def available() -> bool:
    """Whether Numba can be imported (found without importing it)."""
    return importlib.util.find_spec("numba") is not None


# --------------------------------------------------------------------------------- source
def source(group: Any) -> str:
    """The kernel's whole source: a header naming the recorded ops, then the function."""
    params = ", ".join(b.name for b in group.buffers())
    full = next(b for b in group.outputs if not b.per_row and b.stored)
    counts = ", ".join(f"n{k}" for k in range(len(group.loops)))
    lines = [f"# fused: {', '.join(group.labels)}"]
    lines += [f"#   {item}" for item in group.items]
    lines += ["import numpy as np", "from numba import njit", ""]
    lines[-1:-1] = ["from tinyattn.compiler.numba_math import exp32"]
    # error_model="numpy": x / 0 is inf or NaN, as in NumPy, not a ZeroDivisionError. The
    # fastmath flags let sums and maxima along a row run on 8 lanes at once (reassociation);
    # NaN and inf keep their meaning (no "nnan", "ninf").
    lines += [f'@njit(cache=True, error_model="numpy", fastmath={FASTMATH})']
    lines += [f"def kernel({params}):"]
    lines.append(f"    {counts}{',' if len(group.loops) == 1 else ''} = {full.name}.shape")
    if group.kind == "pointwise":
        lines += _pointwise_body(group)
    else:
        lines += _rows_body(group)
    return "\n".join(lines) + "\n"


def _element(buffer: Any, names: list[str]) -> str:
    """The buffer's element at the loops' indices `names`: only the loops it walks."""
    return f"{buffer.name}[{', '.join(names[k] for k in buffer.walks) or '()'}]"


def _typed(dtype: str, value: Any) -> str:
    """A constant in the group's dtype: ``np.float32(0.25)`` stays float32 in arithmetic."""
    return f"np.{dtype}({value!r})"


def _exp(dtype: str) -> str:
    """The exp a kernel calls: `numba_math.exp32` for float32 (it vectorizes), else NumPy's."""
    return "exp32" if dtype == "float32" else "np.exp"


def _nest(loops: range, depth: int) -> tuple[list[str], str]:
    """The `for` lines of loops `loops` from indentation `depth`, and the body's indentation."""
    lines = []
    for k in loops:
        lines.append("    " * (depth + k - loops.start) + f"for i{k} in range(n{k}):")
    return lines, "    " * (depth + len(loops))


def _statements(
    group: Any, items: list, names: list[str], pad: str, loaded: tuple = ()
) -> list[str]:
    """Load each input the items read (but those `loaded` already), compute every item, store
    every output."""
    read = {name for item in items for name in item.inputs} - set(loaded)
    lines = [f"{pad}{b.value} = {_element(b, names)}" for b in group.inputs if b.value in read]
    for item in items:
        lines += [pad + line for line in _item_lines(group, item)]
    made = {name for item in items for name in item.outputs}
    stored = [b for b in group.outputs if b.value in made and b.stored]
    lines += [f"{pad}{_element(b, names)} = {b.value}" for b in stored]
    return lines


def _item_lines(group: Any, item: Any) -> list[str]:
    """An elementwise item as statements on values."""
    dtype = group.dtype
    if item.op == "gelu":
        return _gelu_lines(item, dtype)
    operands = [
        name
        if group.dtype_of(name) == dtype or (item.op == "where" and k == 0)
        else f"np.{dtype}({name})"
        for k, name in enumerate(item.inputs)
    ]
    constants = {"zero": _typed(dtype, 0.0), "exp": _exp(dtype)}
    if item.op.endswith("_scalar"):
        constants["c"] = _typed(dtype, item.param("c"))
    return [f"{item.outputs[0]} = " + EXPRESSIONS[item.op].format(*operands, **constants)]


def _gelu_lines(item: Any, dtype: str) -> list[str]:
    """y = x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2 by Abramowitz and Stegun's 7.1.26:
    erfc(z) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2), t = 1 / (1 + p z), for z >= 0
    (within 2.5e-7 of Phi, against the 20 NumPy calls and 4 table lookups of eager's forward)."""
    (x,), (y, cdf) = item.inputs, item.outputs
    c = lambda value: _typed(dtype, value)  # noqa: E731
    return [
        f"z = abs({x}) * {c(0.7071067811865476)}",
        f"t = {c(1.0)} / ({c(1.0)} + {c(0.3275911)} * z)",
        f"p = {c(1.061405429)} * t + {c(-1.453152027)}",
        f"p = (p * t + {c(1.421413741)}) * t + {c(-0.284496736)}",
        f"tail = (p * t + {c(0.254829592)}) * t * {c(0.5)} * {_exp(dtype)}(-z * z)",
        f"{cdf} = tail if {x} < {c(0.0)} else {c(1.0)} - tail",
        f"{y} = {x} * {cdf}",
    ]


def _pointwise_body(group: Any) -> list[str]:
    """The loops, each input read in the loop of the last index it depends on (a per-row value
    once per row, outside the loop along the row), then every item in the innermost loop."""
    count = len(group.loops)
    names = [f"i{k}" for k in range(count)]
    lines, loaded = [], []
    for k in range(count):
        pad = "    " * (k + 1)
        for b in group.inputs:
            if (max(b.walks) + 1 if b.walks else 0) == k:
                lines.append(f"{pad}{b.value} = {_element(b, names)}")
                loaded.append(b.value)
        lines.append(f"{pad}for i{k} in range(n{k}):")
    pad = "    " * (count + 1)
    return lines + _statements(group, group.items, names, pad, tuple(loaded))


def _rows_body(group: Any) -> list[str]:
    """Leading loops over the rows; in each row, the prologue's loop along it, then the
    row-wise item's passes."""
    rows = len(group.loops) - 1
    lines, pad = _nest(range(rows), 1)
    *prologue, last = group.items
    names = [f"i{k}" for k in range(rows)] + ["j"]
    if prologue:
        lines.append(f"{pad}for j in range(n{rows}):")
        lines += _statements(group, prologue, names, pad + "    ")
    buffers = {b.value: b for b in (*group.inputs, *group.outputs)}

    def at(value: str) -> str:  # a value's element in memory at (row, j)
        return _element(buffers[value], names)

    t = f"np.{group.dtype}"
    body = ROW_BODIES[last.op](group, last, at, f"n{rows}", t)
    before, after = ROW_EDGES.get(last.op, lambda *_: ([], []))(group, last, at, t)
    return (
        ["    " + s for s in before] + lines + [pad + s for s in body] + ["    " + s for s in after]
    )


def _shifted_sum(group: Any, x: str, n: str, t: str, into: str | None = None) -> list[str]:
    """m = the row's max (0 for a fully masked row, whose exps are then 0), and total = the
    sum of exp(x - m), each exp also stored `into` (softmax's numerators)."""
    e = f"{_exp(group.dtype)}({x} - m)"
    lines = [f"m = {t}(-np.inf)", f"for j in range({n}):", f"    m = max(m, {x})"]
    lines += ["if m == -np.inf:  # a fully masked row: exp(-inf) = 0", f"    m = {t}(0.0)"]
    lines += [f"total = {t}(0.0)", f"for j in range({n}):"]
    lines += (
        [f"    e = {e}", f"    {into} = e", "    total += e"] if into else [f"    total += {e}"]
    )
    return lines + ["if total == 0.0:", f"    total = {t}(1.0)"]


def _softmax(group: Any, item: Any, at: Callable, n: str, t: str) -> list[str]:
    """exp of the shifted values over their sum (or, for log-softmax, the shifted values less
    the log of the sum). A NaN in the row makes its sum and so every result NaN, as in eager."""
    x, y = at(item.inputs[0]), at(item.outputs[0])
    if item.op == "softmax":
        lines = _shifted_sum(group, x, n, t, into=y)
        return lines + [f"for j in range({n}):", f"    {y} = {y} / total"]
    lines = _shifted_sum(group, x, n, t) + ["log_total = np.log(total)"]
    return lines + [f"for j in range({n}):", f"    {y} = ({x} - m) - log_total"]


def _layer_norm(group: Any, item: Any, at: Callable, n: str, t: str) -> list[str]:
    """The row's mean and variance, rstd = 1 / sqrt(var + eps), then x_hat and the affine."""
    x, weight, *bias = (at(v) for v in item.inputs)
    y, x_hat, rstd = (at(v) for v in item.outputs)
    affine = f"h * {weight}" + (f" + {bias[0]}" if bias else "")
    eps = _typed(group.dtype, item.param("eps"))
    return [
        f"total = {t}(0.0)",
        f"for j in range({n}):",
        f"    total += {x}",
        f"mean = total / {t}({n})",
        f"squares = {t}(0.0)",
        f"for j in range({n}):",
        f"    d = {x} - mean",
        "    squares += d * d",
        f"r = {t}(1.0) / np.sqrt(squares / {t}({n}) + {eps})",
        f"{rstd} = r",
        f"for j in range({n}):",
        f"    h = ({x} - mean) * r",
        f"    {x_hat} = h",
        f"    {y} = {affine}",
    ]


def _cross_entropy(group: Any, item: Any, at: Callable, n: str, t: str) -> list[str]:
    """log p = x - max - log(sum exp(x - max)) along the row, the target's row of weights
    (its smoothed one-hot; zeros for an ignored target), and the row's loss -sum w log p
    (a term whose weight is 0 counts 0, even where log p is -inf) added to the total."""
    x, target = at(item.inputs[0]), at(item.inputs[1])
    _, log_probs, weights, *_ = (at(v) for v in item.outputs)
    ignore, smoothing = item.param("ignore_index"), item.param("smoothing")
    classes = item.param("classes")
    expected = f"0..{classes - 1}" + ("" if ignore is None else f" or ignore_index={ignore}")
    message = (
        f"cross_entropy: a target value is out of range for {classes} classes (expected "
        f"{expected}) in a replay of a compiled step"
    )
    kept = "True" if ignore is None else f"target != {ignore}"
    hit, spread = _typed(group.dtype, 1.0 - smoothing), _typed(group.dtype, smoothing / classes)
    share = f" + {spread}" if smoothing else ""
    lines = _shifted_sum(group, x, n, t) + ["log_total = np.log(total)"]
    return lines + [
        f"target = {target}",
        f"kept = {kept}",
        f"if kept and (target < 0 or target >= {n}):",
        f'    raise IndexError("{message}")',
        "row_loss = 0.0",
        f"for j in range({n}):",
        f"    lp = ({x} - m) - log_total",
        f"    {log_probs} = lp",
        f"    w = ({t}(j == target) * {hit}{share}) if kept else {t}(0.0)",
        f"    {weights} = w",
        "    if w != 0:",
        "        row_loss -= w * lp",
        "total_loss += row_loss",
        "kept_count += kept",
    ]


def _cross_entropy_edges(group: Any, item: Any, at: Callable, t: str) -> tuple[list, list]:
    """Before the rows: the sums start at 0; after them: the loss, over the kept targets for
    a mean (at least 1, as eager counts them)."""
    loss, *_, count = (at(v) for v in item.outputs)
    before = ["total_loss = 0.0", "kept_count = 0"]
    if item.param("reduction") == "sum":
        return before, [f"{loss} = {t}(total_loss)"]
    after = [f"{count} = {t}(max(kept_count, 1))", f"{loss} = {t}(total_loss) / {count}"]
    return before, after


ROW_BODIES = {"softmax": _softmax, "log_softmax": _softmax, "layer_norm": _layer_norm}
ROW_BODIES["cross_entropy"] = _cross_entropy
ROW_EDGES = {"cross_entropy": _cross_entropy_edges}


# ------------------------------------------------------------------------------- compiling
def cache_dir() -> Path:
    """Where kernel sources (and Numba's machine code beside them) are kept."""
    given = os.environ.get("TINYATTN_CACHE_DIR")
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "tinyattn" / "fused"


def compile_kernel(group: Any, arguments: list) -> Callable | None:
    """The group's kernel compiled for `arguments`' types (loaded from the cache when an
    earlier process compiled it), or None without Numba or when compiling fails."""
    if not available():
        return None
    text = source(group)
    try:
        kernel = _load(text)
        import numba

        kernel.compile(tuple(numba.typeof(a) for a in arguments))
    except Exception:  # a kernel that does not compile: the run replays unfused
        return None
    return kernel


def _load(text: str) -> Callable:
    """The `kernel` of a source, written once to the cache directory under its hash."""
    import numba

    key = hashlib.sha256((text + numba.__version__).encode()).hexdigest()[:24]
    kernel = _loaded.get(key)
    if kernel is not None:
        return kernel
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"fused_{key}.py"
    if not path.exists():  # written whole, then renamed: another process may read it
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)
    name = f"tinyattn_fused_{key}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    kernel = _loaded[key] = module.kernel
    return kernel
