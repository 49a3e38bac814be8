"""Watching backward run: a page that steps through the engine's walk, one rule at a time.

``viz.to_dot`` draws a graph once backward has finished. ``animate_backward(root)`` shows how
the gradients got there: it runs the backward pass itself, with the engine reporting each step
(``run_backward``'s `observer`), and returns a `BackwardAnimation`: the steps in the engine's own
order, and a self-contained HTML page (inline SVG and JavaScript, nothing from the network) with
Next and Previous buttons (or the arrow keys). Step k highlights the op whose backward rule ran
k-th, with the gradient it received (and the parts it was summed from, for a tensor used more
than once), the rule's name and math, and the gradients it sent to its inputs; the last step
shows every leaf's ``.grad``. Nothing here computes a gradient: every number on the page is one
the engine handed to the observer, or a leaf's ``.grad``.

A tool on top of `viz`: it imports `viz` and the layers below, and nothing imports it.
"""

from __future__ import annotations

import html
import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..autograd import RETAIN_GRAD, ReleasedConstant, default_root_grad, listeners, run_backward
from ..tensor import Tensor
from . import graph as viz

SEED = -1  # the `source` of the gradient backward starts from (dL/dL = 1 at the root)


@dataclass
class Sent:
    """One gradient the engine sent along one edge: from the rule of node `source` (or the seed)
    to its input number `position`, node `target`."""

    source: int
    position: int
    target: int
    grad: Tensor


@dataclass
class Step:
    """One backward rule, as the engine ran it: the node of its op, the Function, the complete
    gradient the rule received (`received`, summed from `parts`, then passed through the
    tensor's hooks when `hooked`), and the gradients it sent to its inputs."""

    node: int
    fn: Any
    received: Tensor
    parts: list[Sent]
    hooked: bool
    sent: list[Sent] = field(default_factory=list)

    @property
    def rule(self) -> str:
        return f"{self.fn.name}.backward"

    @property
    def formula(self) -> str:
        """The first paragraph of the op's docstring, where every op keeps its math."""
        doc = type(self.fn).__doc__ or ""
        return " ".join(doc.strip().split("\n\n")[0].split())


@dataclass
class LeafGradient:
    """A leaf the gradient reached: its ``.grad`` after backward, the parts this backward sent
    it, the ``.grad`` it had before (gradients accumulate across backward calls), and whether
    it has hooks (they run on the sum of the parts before it is added to ``.grad``)."""

    node: int
    tensor: Tensor
    grad: Tensor
    parts: list[Sent]
    before: Tensor | None
    hooked: bool


class _Watcher(listeners.Listener):
    """The engine's listener for one backward pass: it notes each rule and what it sends, as
    node numbers."""

    def __init__(self, node_of: dict[int, int], seed: Tensor) -> None:
        self.node_of = node_of  # id(Function) for an op node, id(tensor) for a leaf -> number
        self.thread = threading.get_ident()  # the pass it watches (another thread's is not)
        self.steps: list[Step] = []
        # node -> the gradients sent to it so far; the root (node 0) starts with the seed.
        self.arrived: dict[int, list[Sent]] = {0: [Sent(SEED, 0, 0, seed)]}

    def rule(self, fn: Any, output: Any, grad: Any, run: Callable[[], tuple]) -> tuple:
        if threading.get_ident() != self.thread or id(fn) not in self.node_of:
            return run()
        node = self.node_of[id(fn)]
        parts = self.arrived[node]  # a rule runs only on a gradient that arrived
        several = type(output) is tuple  # one step per output, the rule's sends on the last
        for tensor, received in zip(*((output, grad) if several else ((output,), (grad,)))):
            hooked = tensor is not None and _has_hooks(tensor)
            self.steps.append(Step(node, fn, received, parts, hooked))
        grads = run()
        for position, sent in enumerate(grads):
            parent = fn.inputs[position]
            if sent is None or not parent.requires_grad:
                continue
            if not isinstance(sent, Tensor):
                sent = Tensor._from_op(sent, None)
            target = self.node_of[id(parent._ctx if parent._ctx is not None else parent)]
            part = Sent(node, position, target, sent)
            self.steps[-1].sent.append(part)
            self.arrived.setdefault(target, []).append(part)
        return grads


def _has_hooks(tensor: Tensor) -> bool:
    """Whether a hook may have changed the tensor's gradient (retain_grad's mark changes none)."""
    return any(hook is not RETAIN_GRAD for hook in tensor._hooks or ())


def animate_backward(
    root: Tensor, names: dict[str, Tensor] | None = None, retain_graph: bool = False
) -> BackwardAnimation:
    """Run ``root.backward()`` with the engine reporting each step; return the steps and a page.

    This *is* the backward call: the leaves' ``.grad`` is filled (added to, as always) exactly as
    ``root.backward(retain_graph=retain_graph)`` would, so do not call backward again. `root`
    must have one element. `names` labels tensors as in ``viz.to_dot``, e.g.
    ``dict(model.named_parameters())``. ``.save(path)`` writes the page; in Jupyter the object
    shows itself.
    """
    if not isinstance(root, Tensor):
        raise TypeError(f"animate_backward: expected a Tensor, got {type(root).__name__}")
    seed = default_root_grad(root, None, "animate_backward")
    graph = _Graph(root, names)  # before backward: every node's value is still there
    before = {node: leaf.grad for node, leaf in graph.leaves()}
    watcher = _Watcher(graph.node_of, seed)
    listening = listeners.listen(watcher)
    try:
        run_backward([root], [seed], retain_graph, False)
    finally:
        listening.remove()
    leaves = [
        LeafGradient(node, leaf, leaf.grad, watcher.arrived[node], before[node], _has_hooks(leaf))
        for node, leaf in graph.leaves()
        if node in watcher.arrived  # a leaf the gradient reached
    ]
    return BackwardAnimation(graph, watcher.steps, leaves)


class _Graph:
    """The picture's content, numbered as in ``viz.to_dot``: each node's label lines, shape and
    colour, the edges, and which node each Function (op) or leaf tensor is."""

    def __init__(self, root: Tensor, names: dict[str, Tensor] | None) -> None:
        self.nodes, self.edges = viz._walk(root)
        label_of = viz._names_by_id(names)
        self.names = [viz._name_of(label_of, fn, tensor) for fn, tensor in self.nodes]
        self.parts = []
        for index, (fn, tensor) in enumerate(self.nodes):
            lines, shape, colour = viz._node_parts(
                fn, tensor, self.names[index], index == 0, False, None
            )
            if isinstance(tensor, ReleasedConstant):  # a graph backward already freed
                lines.append("data freed by backward")  # (the engine will refuse to run it)
            elif tensor is not None:  # the value, as to_dot(values=True) shows it
                lines.append(f"data {viz.summary(tensor)}")
            self.parts.append((lines, shape, colour))
        self.node_of = {id(fn if fn is not None else t): i for i, (fn, t) in enumerate(self.nodes)}

    def leaves(self) -> list[tuple[int, Tensor]]:
        return [(i, t) for i, (fn, t) in enumerate(self.nodes) if fn is None and t.requires_grad]

    def short_name(self, node: int) -> str:
        """How the panel names a node: "Mul (e)", "a", "leaf 5"."""
        fn, _ = self.nodes[node]
        name = self.names[node]
        if fn is None:
            return name or f"leaf {node}"
        return f"{fn.name} ({name})" if name else f"{fn.name} [n{node}]"


def _show(tensor: Tensor) -> str:
    """A gradient as the page writes it: its numbers when small, else its shape and summary."""
    text = viz.summary(tensor)
    return text if tensor.numel() <= viz.SMALL else f"{tuple(tensor.shape)}: {text}"


def _sent_data(graph: _Graph, sent: Sent) -> dict:
    source = "the seed dL/dL" if sent.source == SEED else graph.short_name(sent.source)
    return {
        "source": sent.source,
        "position": sent.position,
        "target": sent.target,
        "from": source,
        "to": graph.short_name(sent.target),
        "value": _show(sent.grad),
    }


def _page_data(graph: _Graph, steps: list[Step], leaves: list[LeafGradient]) -> dict:
    """Everything the page's script shows, as text: the numbers are formatted here, once."""
    return {
        "steps": [
            {
                "node": step.node,
                "name": graph.short_name(step.node),
                "rule": step.rule,
                "formula": step.formula,
                "received": _show(step.received),
                "hooked": step.hooked,
                "parts": [_sent_data(graph, part) for part in step.parts],
                "sent": [_sent_data(graph, sent) for sent in step.sent],
            }
            for step in steps
        ],
        "leaves": [
            {
                "node": leaf.node,
                "name": graph.short_name(leaf.node),
                "grad": _show(leaf.grad),
                "before": None if leaf.before is None else _show(leaf.before),
                "hooked": leaf.hooked,
                "parts": [_sent_data(graph, part) for part in leaf.parts],
            }
            for leaf in leaves
        ],
    }


# ------------------------------------------------------------------ escaping
# Every text on the page comes from the program (tensor names, op names, docstrings, numbers), so
# each is escaped for the place it goes: HTML text in the SVG, JSON inside a <script> element, an
# attribute value for the notebook's frame; and the template is filled in one pass, so that no
# inserted text is ever read again as a placeholder.
_PLACEHOLDER = re.compile(r"__([A-Z]+)__")
# Not allowed in an HTML page, or not encodable in UTF-8 (a lone surrogate): shown as U+FFFD.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


def _svg_text(text: str) -> str:
    """`text` as the content of an SVG (or HTML) element: shown as written, never as markup."""
    return html.escape(_UNPRINTABLE.sub("\ufffd", text), quote=True)


def _script_json(data: Any) -> str:
    """`data` as JSON to place inside a <script> element. The HTML parser ends a script at
    "</script" and changes state at "<!--" before any JSON is read, so no "<", ">" or "&" may
    appear in it: JSON writes them as \\u escapes, which JSON.parse reads back unchanged."""
    text = json.dumps(data, ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _fill_page(template: str, parts: dict[str, str]) -> str:
    """`template` with each __NAME__ replaced by parts[NAME], in one pass over the template
    only: a name such as "__DATA__" inside an inserted part stays text."""
    return _PLACEHOLDER.sub(lambda match: parts[match.group(1)], template)


# ------------------------------------------------------------------ the picture (inline SVG)
# The graph is laid out here rather than by Graphviz, so that saving a page needs no program.
# Like to_dot's picture, inputs stand above the ops that use them and the output at the bottom.
CHAR_WIDTH = 7.0  # pixels per character of the page's 11.5 px monospace font (a little spare)
LINE_HEIGHT = 15
PAD = 8  # inside a node, around its text
GAP_X, GAP_Y, MARGIN = 22, 42, 16


def _ranks(count: int, edges: list[tuple[int, int, int]]) -> list[int]:
    """Each node's rank: the longest path from it down to the root (rank 0), found by visiting
    a node once all the nodes that use it are placed (no recursion: deep graphs work)."""
    users_left = [0] * count
    inputs_of: list[list[int]] = [[] for _ in range(count)]
    for parent, consumer, _ in edges:
        users_left[parent] += 1
        inputs_of[consumer].append(parent)
    rank, ready = [0] * count, [0]
    while ready:
        node = ready.pop()
        for parent in inputs_of[node]:
            rank[parent] = max(rank[parent], rank[node] + 1)
            users_left[parent] -= 1
            if users_left[parent] == 0:
                ready.append(parent)
    return rank


def _place_row(row: list[int], wanted: dict[int, float], widths: list[float], ops: set) -> dict:
    """Centres for one row: each node as near its wish as it can be without overlapping, in the
    order of the wishes; then the row shifted so that its ops (or, in a row of leaves only, its
    nodes) sit where they wished on average: a chain of ops stays straight, leaves move aside."""
    row = sorted(row, key=lambda node: (wanted[node], node))
    x: dict[int, float] = {}
    right = -float("inf")
    for node in row:
        x[node] = max(wanted[node], right + GAP_X + widths[node] / 2)
        right = x[node] + widths[node] / 2
    anchors = [node for node in row if node in ops] or row
    shift = sum(wanted[node] - x[node] for node in anchors) / len(anchors)
    return {node: centre + shift for node, centre in x.items()}


def _layout(graph: _Graph, sizes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The top-left corner of each node: rows by rank, the root's row at the bottom; a node
    wishes to stand above the ops that use it, over the slot of the input it is."""
    count = len(graph.nodes)
    rank = _ranks(count, graph.edges)
    widths = [width for width, _ in sizes]
    rows: list[list[int]] = [[] for _ in range(max(rank) + 1)]
    for node in range(count):
        rows[rank[node]].append(node)
    slots = [0] * count
    uses: list[list[tuple[int, int]]] = [[] for _ in range(count)]  # (op, slot) per node
    for parent, consumer, slot in graph.edges:
        slots[consumer] += 1
        uses[parent].append((consumer, slot))
    ops = {node for node, (fn, _) in enumerate(graph.nodes) if fn is not None}
    x: dict[int, float] = {0: 0.0}
    for row in rows[1:]:  # from the root up: the ops a node feeds are placed before it
        wanted = {}
        for node in row:
            # A leaf wishes to stand over its slot (input 0 left of input 1); an op straight
            # over the op it feeds, so that a long chain does not drift sideways.
            wishes = [
                x[op]
                + (0 if node in ops else (slot - (slots[op] - 1) / 2) * widths[op] / slots[op])
                for op, slot in uses[node]
            ]
            wanted[node] = sum(wishes) / len(wishes)
        x.update(_place_row(row, wanted, widths, ops))
    left = min(x[node] - widths[node] / 2 for node in range(count))
    heights = [max(sizes[node][1] for node in row) for row in rows]  # as tall as its tallest
    top, y = [0.0] * len(rows), MARGIN
    for level in reversed(range(len(rows))):  # the inputs' rows first, from the top
        top[level], y = y, y + heights[level] + GAP_Y
    corners = []
    for node, (width, height) in enumerate(sizes):
        row = rank[node]
        corners.append(
            (MARGIN + x[node] - width / 2 - left, top[row] + (heights[row] - height) / 2)
        )
    return corners


def _grad_texts(data: dict, count: int) -> list[list[str]]:
    """Every text a node's gradient line will show, to make the node wide enough for each."""
    texts: list[list[str]] = [[] for _ in range(count)]
    for step in data["steps"]:
        texts[step["node"]].append("grad " + step["received"])
    for leaf in data["leaves"]:
        texts[leaf["node"]].append("grad " + leaf["grad"])
    for arrived in texts:
        arrived.append("99 parts arrived")
    return texts


def _node_svg(index: int, parts: tuple, corner: tuple, size: tuple) -> str:
    lines, shape, colour = parts
    (left, top), (width, height) = corner, size
    kind = "op" if shape == "box" else "leaf"
    radius = 4 if shape == "box" else height / 2  # leaves: a rounded "ellipse", as in to_dot
    centre = left + width / 2
    spans = [
        f'<tspan x="{centre:.1f}" dy="{LINE_HEIGHT if n else 0}">{_svg_text(line)}</tspan>'
        for n, line in enumerate(lines)
    ]
    spans.append(f'<tspan x="{centre:.1f}" dy="{LINE_HEIGHT}" class="grad"></tspan>')
    baseline = top + PAD + LINE_HEIGHT * 0.75
    return (
        f'<g class="node {kind}" id="n{index}">'
        f'<rect x="{left:.1f}" y="{top:.1f}" width="{width:.1f}" height="{height:.1f}" '
        f'rx="{radius:.1f}" fill="{colour}"/>'
        f'<text x="{centre:.1f}" y="{baseline:.1f}">{"".join(spans)}</text></g>'
    )


def _edge_svg(edge: tuple, corners: list, sizes: list, slots: list[int]) -> str:
    """A curve from the bottom of the input to the top of the op, ending over the input's slot;
    its id names the edge as the gradient travels it: e<input>_<op>_<slot>."""
    parent, consumer, slot = edge
    (px, py), (pw, ph) = corners[parent], sizes[parent]
    (cx, cy), (cw, _) = corners[consumer], sizes[consumer]
    start_x, start_y = px + pw / 2, py + ph
    end_x = cx + cw / 2 + (slot - (slots[consumer] - 1) / 2) * min(18, cw / (slots[consumer] + 1))
    bend = (cy - start_y) / 2
    path = (
        f"M{start_x:.1f},{start_y:.1f} C{start_x:.1f},{start_y + bend:.1f} "
        f"{end_x:.1f},{cy - bend:.1f} {end_x:.1f},{cy - 2:.1f}"
    )
    label = ""
    if slots[consumer] > 1:  # as in to_dot: a - b is not b - a
        label = f'<text x="{end_x + 5:.1f}" y="{cy - 6:.1f}" class="slot">{slot}</text>'
    return (
        f'<g class="edge" id="e{parent}_{consumer}_{slot}"><path d="{path}" '
        f'marker-end="url(#arrow)"/>{label}</g>'
    )


def _svg(graph: _Graph, data: dict) -> tuple[str, float]:
    """The picture, and its height in pixels."""
    count = len(graph.nodes)
    grad_texts = _grad_texts(data, count)
    sizes = []
    for (lines, shape, _), texts in zip(graph.parts, grad_texts):
        longest = max(len(text) for text in [*lines, *texts])
        height = (len(lines) + 1) * LINE_HEIGHT + 2 * PAD
        rounded = shape != "box"  # a leaf's round ends take room from its text
        sizes.append((longest * CHAR_WIDTH + 2 * PAD + (0.4 * height if rounded else 0), height))
    corners = _layout(graph, sizes)
    slots = [0] * count
    for _, consumer, _ in graph.edges:
        slots[consumer] += 1
    width = max(x + w for (x, _), (w, _) in zip(corners, sizes)) + MARGIN
    height = max(y + h for (_, y), (_, h) in zip(corners, sizes)) + MARGIN
    edges = [_edge_svg(edge, corners, sizes, slots) for edge in graph.edges]
    nodes = [_node_svg(i, graph.parts[i], corners[i], sizes[i]) for i in range(count)]
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}">'
        # userSpaceOnUse: a thick, highlighted edge keeps a normal-sized arrowhead.
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" '
        'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z"/></marker></defs>' + "\n".join(edges + nodes) + "</svg>"
    )
    return svg, height


# ------------------------------------------------------------------ the page
class BackwardAnimation:
    """What ``animate_backward`` saw, and the page that shows it.

    ``steps``: one `Step` per backward rule, in the order the engine ran them. ``leaves``: one
    `LeafGradient` per leaf the gradient reached, in to_dot's numbering. ``page()`` is the HTML
    text, ``save(path)`` writes it, and Jupyter shows it inline (``_repr_html_``).
    """

    def __init__(self, graph: _Graph, steps: list[Step], leaves: list[LeafGradient]) -> None:
        self.steps = steps
        self.leaves = leaves
        data = _page_data(graph, steps, leaves)
        svg, height = _svg(graph, data)
        self._html = _fill_page(_PAGE, {"SVG": svg, "DATA": _script_json(data), "SCRIPT": _SCRIPT})
        self._height = round(height)

    def page(self) -> str:
        """The whole page: one HTML file that needs nothing else (no network, no files)."""
        return self._html

    def save(self, path: str | os.PathLike) -> Path:
        """Write the page to `path` (UTF-8); returns the path."""
        path = Path(path)
        path.write_text(self._html, encoding="utf-8")
        return path

    def _repr_html_(self) -> str:
        # In a frame of its own, the page's ids, styles and arrow keys cannot clash with the
        # notebook's or with another animation's in the same notebook; srcdoc is an attribute,
        # so the page is escaped as one (quotes included).
        height = min(self._height + 320, 900)
        # sandbox: the page's script runs in an origin of its own, never the notebook's.
        return (
            f'<iframe srcdoc="{html.escape(self._html, quote=True)}" sandbox="allow-scripts" '
            f'width="100%" height="{height}" style="border: 1px solid #ddd"></iframe>'
        )


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>backward, one rule at a time</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 10px; color: #222; }
button { font-size: 14px; padding: 2px 12px; }
#panel { min-height: 10em; border: 1px solid #ddd; border-radius: 6px; padding: 4px 12px;
         margin: 8px 0; background: #fafafa; }
#panel h2 { font-size: 15px; margin: 6px 0; }
#panel ul { margin: 2px 0; }
#panel p { margin: 4px 0; }
.formula, .received, .sent, .part, #leaves td { font-family: ui-monospace, Menlo, Consolas,
         monospace; font-size: 13px; }
.formula { color: #444; }
#leaves td { padding: 1px 10px 1px 0; vertical-align: top; }
.legend { color: #666; font-size: 12px; }
#graph { overflow: auto; }
svg text { font: 11.5px ui-monospace, Menlo, Consolas, monospace; text-anchor: middle; }
svg tspan:first-child { font-weight: bold; }
svg .grad { fill: #a83200; font-weight: bold; }
svg .slot { font-size: 9px; fill: #555; text-anchor: start; }
.node rect { stroke: #888; stroke-width: 1; }
.node.done rect { stroke: #ccc; }
.node.done text { fill: #888; }
.node.current rect { stroke: #d62728; stroke-width: 3; }
.node.waiting rect { stroke: #1f77b4; stroke-width: 2; stroke-dasharray: 5 3; }
.node.final rect { stroke: #1f77b4; stroke-width: 3; }
.edge path { fill: none; stroke: #aaa; stroke-width: 1.2; }
.edge.received path { stroke: #d62728; stroke-width: 3; }
.edge.sent path { stroke: #1f77b4; stroke-width: 3; }
marker path { fill: #999; }
</style>
</head>
<body>
<div id="controls">
<button id="prev" type="button">Previous</button>
<button id="next" type="button">Next</button>
<span class="legend">(or the arrow keys) &nbsp; Arrows point the way forward ran; gradients travel
them backwards: red, the gradient the highlighted rule received; blue, what it sent.</span>
</div>
<div id="panel"></div>
<div id="graph">__SVG__</div>
<script type="application/json" id="steps-data">__DATA__</script>
<script>
__SCRIPT__
</script>
</body>
</html>
"""

_SCRIPT = r"""
"use strict";
// Everything shown comes from the engine, formatted by Python: this script only displays it.
const data = JSON.parse(document.getElementById("steps-data").textContent);
const last = data.steps.length; // steps 0 .. last-1 run one rule each; step `last`: the leaves
let current = 0;

function nodeOf(n) { return document.getElementById("n" + n); }
// An edge's id names it as drawn, input to op: e<input>_<op>_<slot> (the seed has no edge).
function edgeOf(s) { return document.getElementById(`e${s.target}_${s.source}_${s.position}`); }

function add(parent, tag, text, className) {
  const child = document.createElement(tag);
  if (text !== undefined) child.textContent = text;
  if (className) child.className = className;
  parent.appendChild(child);
  return child;
}

function origin(part) {
  return part.source < 0 ? `${part.value} (the seed dL/dL)`
                         : `${part.value} (from ${part.from}, input ${part.position})`;
}

function showRule(panel, step, k) {
  add(panel, "h2", `Step ${k + 1} of ${last + 1}: ${step.rule}, on ${step.name}`);
  add(panel, "p", step.formula || "(this op's class has no docstring)", "formula");
  add(panel, "p", `receives g = ${step.received}`, "received");
  if (step.parts.length > 1) {
    add(panel, "p", `the sum the engine formed from the ${step.parts.length} uses of this tensor:`);
    const list = add(panel, "ul");
    step.parts.forEach((part, i) => add(list, "li", (i ? "+ " : "  ") + origin(part), "part"));
  } else if (step.parts[0].source < 0) {
    add(panel, "p", "the seed dL/dL that backward starts from", "part");
  } else {
    const part = step.parts[0];
    add(panel, "p", `sent by ${part.from} for its input ${part.position}`, "part");
  }
  if (step.hooked) add(panel, "p", "then the tensor's hooks ran on it: g is what they returned");
  if (step.sent.length === 0) {
    add(panel, "p", "sends nothing: no input needs a gradient");
    return;
  }
  add(panel, "p", "sends:");
  const list = add(panel, "ul");
  for (const s of step.sent) add(list, "li", `to input ${s.position}, ${s.to}: ${s.value}`, "sent");
}

function showLeaves(panel) {
  add(panel, "h2", `Step ${last + 1} of ${last + 1}: every leaf's .grad`);
  const table = add(panel, "table");
  table.id = "leaves";
  for (const leaf of data.leaves) {
    const row = add(table, "tr");
    row.dataset.node = "n" + leaf.node;
    add(row, "td", leaf.name);
    add(row, "td", leaf.grad, "grad-value");
    const terms = leaf.parts.map(origin);
    if (leaf.before !== null) terms.unshift(`${leaf.before} (the .grad from before)`);
    let how = terms.length > 1 ? "= " + terms.join(" + ") : "";
    if (leaf.hooked) how += " (then the leaf's hooks ran)";
    add(row, "td", how);
  }
}

function show(k) {
  current = Math.max(0, Math.min(k, last));
  for (const g of document.querySelectorAll(".node, .edge")) {
    g.classList.remove("current", "done", "waiting", "final", "received", "sent");
  }
  for (const t of document.querySelectorAll("svg .grad")) t.textContent = "";
  // Replay the walk up to this step: which rules ran, which gradients arrived where.
  const ran = new Set();
  const arrived = {};
  for (let i = 0; i < Math.min(current + 1, last); i++) {
    const step = data.steps[i];
    ran.add(step.node);
    nodeOf(step.node).classList.add(i === current ? "current" : "done");
    nodeOf(step.node).querySelector(".grad").textContent = "grad " + step.received;
    for (const s of step.sent) arrived[s.target] = (arrived[s.target] || 0) + 1;
  }
  for (const [n, count] of Object.entries(arrived)) {
    if (ran.has(Number(n))) continue;
    nodeOf(n).classList.add("waiting");
    nodeOf(n).querySelector(".grad").textContent = `${count} part${count > 1 ? "s" : ""} arrived`;
  }
  const panel = document.getElementById("panel");
  panel.replaceChildren();
  panel.dataset.step = String(current);
  if (current < last) {
    const step = data.steps[current];
    const svg = document.querySelector("#graph svg");
    for (const part of step.parts) edgeOf(part)?.classList.add("received");
    for (const s of step.sent) edgeOf(s).classList.add("sent");
    // Drawn last, so above any node a long edge passes behind (SVG paints in document order).
    for (const edge of document.querySelectorAll(".edge.received, .edge.sent")) svg.append(edge);
    showRule(panel, step, current);
  } else {
    for (const leaf of data.leaves) {
      nodeOf(leaf.node).classList.remove("waiting");
      nodeOf(leaf.node).classList.add("final");
      nodeOf(leaf.node).querySelector(".grad").textContent = "grad " + leaf.grad;
    }
    showLeaves(panel);
  }
  document.getElementById("prev").disabled = current === 0;
  document.getElementById("next").disabled = current === last;
}

document.getElementById("next").addEventListener("click", () => show(current + 1));
document.getElementById("prev").addEventListener("click", () => show(current - 1));
document.addEventListener("keydown", (event) => {
  if (event.key === "ArrowRight") show(current + 1);
  if (event.key === "ArrowLeft") show(current - 1);
});
show(0);
"""

__all__ = ["BackwardAnimation", "LeafGradient", "Sent", "Step", "animate_backward"]
