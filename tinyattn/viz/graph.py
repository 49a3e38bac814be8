"""Looking inside the graph: Graphviz DOT text of the graph that produced a tensor.

A tool above all the layers (``tinyattn.viz``; the pages of backward are in backward.py beside it):
it imports only `backend` (for dtype names), `autograd` and `tensor`, and reads the graph the way
the engine does (``tensor._ctx`` is the Function that made a tensor, ``fn.inputs`` the tensors it
read), iteratively, so deep graphs work. After a backward without ``retain_graph`` a Function keeps
only the shape of the graph (``fn.released_inputs``: the Function that made each former input, or
the input itself if it is a leaf a gradient reaches or a small constant; a larger constant keeps
only its shape and dtype), so the picture still draws, with the leaves' values and gradients.
``trace(root)`` keeps every node's value and records its gradient with hooks, for a picture of
everything, like micrograd's. It never imports the `graphviz` package at import time: ``to_dot``
needs nothing, ``render`` looks for the ``dot`` program (or the package) only when called.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import backend
from ..autograd import ReleasedConstant
from ..errors import TinyattnError
from ..tensor import Tensor

FORMATS = ("svg", "png")

# Colours: the output, the ops, the leaves that require grad (parameters), and constants.
_ROOT_COLOUR = "#f6c28b"
_OP_COLOUR = "#e8e8e8"
_PARAM_COLOUR = "#a9d3f5"
_CONSTANT_COLOUR = "#ffffff"

# A tensor with at most this many elements shows its numbers; a larger one, a summary.
SMALL = 6

_INSTALL_HINT = (
    "render needs the Graphviz 'dot' program, which was not found on PATH. Install Graphviz "
    "(Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; conda: conda install "
    "graphviz; others: https://graphviz.org/download/), then try again. Without it, to_dot() still "
    "returns the DOT text, which any Graphviz viewer can draw."
)


class Trace:
    """What ``trace(root)`` recorded: every op node's output tensor (so its value stays alive)
    and, once a backward has run, the gradient that reached it. Keys are the op's Function."""

    def __init__(self) -> None:
        self.tensors: dict[int, Tensor] = {}  # id(Function) -> the tensor it made
        self.grads: dict[int, Tensor] = {}  # id(Function) -> that tensor's gradient

    def tensor_of(self, fn: Any) -> Tensor | None:
        return self.tensors.get(id(fn))

    def grad_of(self, fn: Any) -> Tensor | None:
        return self.grads.get(id(fn))


def _gradient_recorder(grads: dict, key: int):
    # The hook holds the dict, not the tensor or the Trace: no reference cycle through _hooks.
    def record(grad: Tensor) -> None:
        grads[key] = grad if key not in grads else grads[key] + grad

    return record


def trace(root: Tensor) -> Trace:
    """Before ``backward()``: keep every node of `root`'s graph and record its gradient.

    ``to_dot(root, trace=t)`` then shows each node's value and gradient, even after a backward
    that released the graph. Gradients add up over backward calls, like ``.grad``. Call it once
    per graph (each call adds hooks).
    """
    if not isinstance(root, Tensor):
        raise TypeError(f"trace: expected a Tensor, got {type(root).__name__}")
    recorded = Trace()
    nodes, _ = _walk(root)
    for fn, tensor in nodes:
        if fn is None or tensor is None:
            continue
        recorded.tensors[id(fn)] = tensor
        tensor.register_hook(_gradient_recorder(recorded.grads, id(fn)))
    return recorded


def _parents(fn: Any) -> tuple:
    """The inputs of `fn`: Tensors while the graph is alive; after release, leaf Tensors and the
    Functions that made the other inputs."""
    if fn.inputs is not None:
        return fn.inputs
    released = getattr(fn, "released_inputs", None)
    if released is None:
        raise RuntimeError(
            f"to_dot: the graph through {fn.name} was freed by backward(); call to_dot "
            "before backward, or pass retain_graph=True to backward"
        )
    return released


def _node_of(item: Any) -> tuple[Any, Any]:
    """(Function or None, Tensor or None) for an input: a Tensor, a released op's Function, or
    a released constant (its shape and dtype, standing in for the Tensor)."""
    if isinstance(item, Tensor | ReleasedConstant):
        return item._ctx, item
    return item, None


def _walk(root: Tensor) -> tuple[list[tuple[Any, Tensor | None]], list[tuple[int, int, int]]]:
    """Every node the root was computed from, numbered breadth-first from the root (0), as
    (Function, tensor) pairs (a leaf has no Function, a released op node may have no tensor),
    and the edges (input number, consumer number, input position)."""
    nodes = [_node_of(root)]
    # An op node is known by its Function (one per output tensor), a leaf by the tensor itself;
    # both stay alive in `nodes`, so their ids stay unique.
    number = {id(root._ctx if root._ctx is not None else root): 0}
    edges = []
    position = 0
    while position < len(nodes):  # an explicit queue: no recursion limit on deep graphs
        fn = nodes[position][0]
        if fn is not None:
            for slot, item in enumerate(_parents(fn)):
                node = _node_of(item)
                key = id(node[0] if node[0] is not None else node[1])
                if key not in number:
                    number[key] = len(nodes)
                    nodes.append(node)
                edges.append((number[key], position, slot))
        position += 1
    return nodes, edges


def _describe(tensor: Any) -> str:
    """'(2, 3) float32': the shape and dtype every node shows."""
    return f"{tensor.shape} {backend.dtype_name(tensor.dtype)}"


def summary(tensor: Tensor) -> str:
    """A tensor's numbers in one short line: all of them when small, else mean, min and max."""
    values = [float(v) for v in backend.to_numpy(tensor.detach().array).reshape(-1)]
    if len(values) == 1 and tensor.ndim == 0:
        return f"{values[0]:.4g}"
    if len(values) <= SMALL:
        return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"
    mean = sum(values) / len(values)
    return f"mean {mean:.3g}, min {min(values):.3g}, max {max(values):.3g}"


# Characters a label cannot show (controls, lone surrogates that UTF-8 cannot encode): U+FFFD.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")


def _escape(text: str) -> str:
    """`text` inside a DOT quoted string, shown as written: a backslash or a quote cannot end
    the string or start an escape, "&" is written "&amp;" (Graphviz reads entities such as
    "&lt;" in every label), and a newline is DOT's line break. Graphviz escapes "<" and the
    rest itself when it writes SVG, so no name becomes markup."""
    text = _UNPRINTABLE.sub("\ufffd", text)
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;")
    return text.replace("\n", "\\n")


def _node_parts(
    fn: Any,
    tensor: Tensor | None,
    name: str | None,
    is_root: bool,
    values: bool | None,
    recorded: Trace | None,
) -> tuple[list[str], str, str]:
    """What one node shows: its label's lines, its shape (box or ellipse) and its colour."""
    lines = []
    grad = None
    if fn is not None:  # made by an op: a box named after the op
        lines.append(fn.name)
        shape, colour = "box", _OP_COLOUR
        if recorded is not None:
            tensor = tensor if tensor is not None else recorded.tensor_of(fn)
            grad = recorded.grad_of(fn)
    elif tensor.requires_grad:  # a leaf the gradient reaches: a parameter or an input
        lines.append(name or "leaf")
        shape, colour = "ellipse", _PARAM_COLOUR
        grad = tensor.grad
    else:  # a constant: one-element constants show their value (the 2.0 of x * 2.0)
        lines.append(name or (repr(tensor.item()) if tensor.numel() == 1 else "constant"))
        shape, colour = "ellipse", _CONSTANT_COLOUR
    if name is not None and fn is not None:
        lines.append(name)
    if tensor is not None:
        lines.append(_describe(tensor))
    if fn is None and tensor.requires_grad:
        lines.append("requires_grad")
    # values=None: numbers only where a gradient is known (after backward); True: every value.
    show_value = values or (values is None and grad is not None)
    if tensor is not None and show_value:
        freed = isinstance(tensor, ReleasedConstant)
        lines.append("data freed by backward" if freed else f"data {summary(tensor)}")
    if grad is not None and values is not False:
        lines.append(f"grad {summary(grad)}")
    return lines, shape, _ROOT_COLOUR if is_root else colour


def _node_line(index: int, parts: tuple[list[str], str, str]) -> str:
    lines, shape, colour = parts
    label = "\\n".join(_escape(line) for line in lines)
    return f'  n{index} [label="{label}", shape={shape}, fillcolor="{colour}"];'


def _names_by_id(names: Mapping[str, Tensor] | None) -> dict[int, str]:
    """The label of each named tensor, by the id of the tensor and of the Function that made it
    (after release, an op node is known by its Function only)."""
    label_of = {}
    for name, named in (names or {}).items():
        label_of[id(named)] = name
        if named._ctx is not None:
            label_of[id(named._ctx)] = name
    return label_of


def _name_of(label_of: dict[int, str], fn: Any, tensor: Any) -> str | None:
    name = label_of.get(id(tensor)) if tensor is not None else None
    return name if name is not None or fn is None else label_of.get(id(fn))


def to_dot(
    tensor: Tensor,
    names: Mapping[str, Tensor] | None = None,
    values: bool | None = None,
    trace: Trace | None = None,
) -> str:
    """Graphviz DOT text of the graph that produced `tensor`, drawn from inputs down to it.

    Boxes are ops (op name, output shape and dtype); ellipses are leaves, blue when they
    require grad, white for constants. Edges carry the input's position when an op has several
    inputs (``a - b`` is not ``b - a``). `names` labels tensors, e.g.
    ``dict(model.named_parameters())``. Nodes are numbered breadth-first from the output (n0),
    so the same graph always gives the same text.

    Works before and after ``backward()``. `values`: None (default) shows the value and the
    gradient of each leaf that has a ``.grad``; True shows every kept node's value (and its
    gradient when `trace` recorded one; a given `trace` implies True); False shows the
    structure only. Small tensors show their numbers, larger ones their mean, min and max.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_dot: expected a Tensor, got {type(tensor).__name__}")
    if trace is not None and values is None:
        values = True
    label_of = _names_by_id(names)
    nodes, edges = _walk(tensor)
    lines = [
        "digraph tinyattn {",
        '  node [fontname="Helvetica", fontsize=10, style=filled];',
        "  edge [fontsize=8];",
    ]
    for index, (fn, node) in enumerate(nodes):
        parts = _node_parts(fn, node, _name_of(label_of, fn, node), index == 0, values, trace)
        lines.append(_node_line(index, parts))
    inputs_of = [0] * len(nodes)
    for _, consumer, _ in edges:
        inputs_of[consumer] += 1
    for parent, consumer, slot in edges:
        label = f' [label="{slot}"]' if inputs_of[consumer] > 1 else ""
        lines.append(f"  n{parent} -> n{consumer}{label};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _format_of(path: Path, format: str | None) -> str:  # noqa: A002  (graphviz's own name)
    chosen = format or path.suffix.lstrip(".").lower()
    if chosen not in FORMATS:
        raise TinyattnError(f"render: format must be one of {FORMATS}, got {chosen or path.name!r}")
    return chosen


def render(
    tensor: Tensor,
    path: str | os.PathLike,
    format: str | None = None,  # noqa: A002  (graphviz's own name)
    names: Mapping[str, Tensor] | None = None,
    values: bool | None = None,
    trace: Trace | None = None,
) -> Path:
    """Draw the graph of `tensor` to `path` as SVG or PNG (from the suffix unless `format` is
    given) with Graphviz (`names`, `values`, `trace`: as for ``to_dot``); returns the path.
    Raises RuntimeError saying how to install Graphviz when neither the ``dot`` program nor a
    working ``graphviz`` package is available."""
    path = Path(path)
    chosen = _format_of(path, format)
    text = to_dot(tensor, names, values, trace)
    dot = shutil.which("dot")
    if dot is not None:
        done = subprocess.run(
            [dot, f"-T{chosen}", "-o", str(path)], input=text.encode(), capture_output=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"render: dot failed: {done.stderr.decode(errors='replace')}")
        return path
    try:
        import graphviz  # noqa: PLC0415  (optional, and only needed here)
    except ImportError:
        raise RuntimeError(_INSTALL_HINT) from None
    try:  # the package wraps the same program, but may know where it lives (e.g. on Windows)
        path.write_bytes(graphviz.Source(text).pipe(format=chosen))
    except graphviz.ExecutableNotFound:
        raise RuntimeError(_INSTALL_HINT) from None
    return path


__all__ = ["Trace", "render", "summary", "to_dot", "trace"]
