"""Looking inside the graph: Graphviz DOT text of the graph that produced a tensor.

A tool above all the layers: it imports only `backend` (for dtype names) and `tensor`, and reads
the graph the way the engine does (``tensor._ctx`` is the Function that made a tensor,
``fn.inputs`` the tensors it read), iteratively, so deep graphs work. It never imports the
`graphviz` package at import time: ``to_dot`` needs nothing, ``render`` looks for the ``dot``
program (or the package) only when called.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import backend
from .tensor import Tensor

FORMATS = ("svg", "png")

# Colours: the output, the ops, the leaves that require grad (parameters), and constants.
_ROOT_COLOUR = "#f6c28b"
_OP_COLOUR = "#e8e8e8"
_PARAM_COLOUR = "#a9d3f5"
_CONSTANT_COLOUR = "#ffffff"

_INSTALL_HINT = (
    "render needs the Graphviz 'dot' program, which was not found on PATH. Install Graphviz "
    "(Debian/Ubuntu: apt-get install graphviz; macOS: brew install graphviz; conda: conda install "
    "graphviz; others: https://graphviz.org/download/), then try again. Without it, to_dot() still "
    "returns the DOT text, which any Graphviz viewer can draw."
)


def _walk(root: Tensor) -> tuple[list[Tensor], list[tuple[int, int, int]]]:
    """Every tensor the root was computed from, numbered breadth-first from the root (0), and
    the edges (input number, consumer number, input position)."""
    nodes = [root]
    number = {id(root): 0}  # the tensors stay alive in `nodes`, so their ids stay unique
    edges = []
    position = 0
    while position < len(nodes):  # an explicit queue: no recursion limit on deep graphs
        tensor = nodes[position]
        fn = tensor._ctx
        if fn is not None:
            if fn.inputs is None:
                raise RuntimeError(
                    f"to_dot: the graph through {fn.name} was freed by backward(); call to_dot "
                    "before backward, or pass retain_graph=True to backward"
                )
            for slot, parent in enumerate(fn.inputs):
                if id(parent) not in number:
                    number[id(parent)] = len(nodes)
                    nodes.append(parent)
                edges.append((number[id(parent)], position, slot))
        position += 1
    return nodes, edges


def _describe(tensor: Any) -> str:
    """'(2, 3) float32': the shape and dtype every node shows."""
    return f"{tensor.shape} {backend.dtype_name(tensor.dtype)}"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _node_line(index: int, tensor: Tensor, name: str | None, is_root: bool) -> str:
    lines = []
    if tensor._ctx is not None:  # made by an op: a box named after the op
        lines.append(tensor._ctx.name)
        shape, colour = "box", _OP_COLOUR
    elif tensor.requires_grad:  # a leaf the gradient reaches: a parameter or an input
        lines.append(name or "leaf")
        shape, colour = "ellipse", _PARAM_COLOUR
    else:  # a constant: one-element constants show their value (the 2.0 of x * 2.0)
        lines.append(name or (repr(tensor.item()) if tensor.size == 1 else "constant"))
        shape, colour = "ellipse", _CONSTANT_COLOUR
    if name is not None and tensor._ctx is not None:
        lines.append(name)
    lines.append(_describe(tensor))
    if tensor._ctx is None and tensor.requires_grad:
        lines.append("requires_grad")
    colour = _ROOT_COLOUR if is_root else colour
    label = "\\n".join(_escape(line) for line in lines)
    return f'  n{index} [label="{label}", shape={shape}, fillcolor="{colour}"];'


def to_dot(tensor: Tensor, names: Mapping[str, Tensor] | None = None) -> str:
    """Graphviz DOT text of the graph that produced `tensor`, drawn from inputs down to it.

    Boxes are ops (op name, output shape and dtype); ellipses are leaves, blue when they
    require grad, white for constants. Edges carry the input's position when an op has several
    inputs (``a - b`` is not ``b - a``). `names` labels tensors, e.g.
    ``dict(model.named_parameters())``. Nodes are numbered breadth-first from the output (n0),
    so the same graph always gives the same text.
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"to_dot: expected a Tensor, got {type(tensor).__name__}")
    label_of = {id(t): name for name, t in (names or {}).items()}
    nodes, edges = _walk(tensor)
    lines = [
        "digraph tinyattn {",
        '  node [fontname="Helvetica", fontsize=10, style=filled];',
        "  edge [fontsize=8];",
    ]
    for index, node in enumerate(nodes):
        lines.append(_node_line(index, node, label_of.get(id(node)), index == 0))
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
        raise ValueError(f"render: format must be one of {FORMATS}, got {chosen or path.name!r}")
    return chosen


def render(
    tensor: Tensor,
    path: str | os.PathLike,
    format: str | None = None,  # noqa: A002  (graphviz's own name)
    names: Mapping[str, Tensor] | None = None,
) -> Path:
    """Draw the graph of `tensor` to `path` as SVG or PNG (from the suffix unless `format` is
    given) with Graphviz; returns the path. Raises RuntimeError saying how to install Graphviz
    when neither the ``dot`` program nor a working ``graphviz`` package is available."""
    path = Path(path)
    chosen = _format_of(path, format)
    text = to_dot(tensor, names)
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


__all__ = ["render", "to_dot"]
