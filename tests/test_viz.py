"""tinyattn.viz: the DOT text of a graph, exactly, and rendering with or without Graphviz.

The DOT text is compared line for line, so a change in numbering, labels, colours or edge order is
a visible regression, not a silent one. Rendering runs only where the `dot` program exists; the
"not installed" message is tested everywhere by hiding it.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tinyattn as ta
from tinyattn import viz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROOT = Path(__file__).resolve().parents[1]


def small_graph():
    x = ta.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    w = ta.tensor([0.5, -1.0], dtype="float64", requires_grad=True)
    one = ta.tensor(1.0, dtype="float64")  # a constant tensor (a Python 1.0 may become a scalar op)
    loss = ((x * w).tanh() - one).sum()
    return loss, x, w


def test_dot_text_of_a_small_graph_exactly():
    loss, x, w = small_graph()
    expected = r"""digraph tinyattn {
  node [fontname="Helvetica", fontsize=10, style=filled];
  edge [fontsize=8];
  n0 [label="Sum\n() float64", shape=box, fillcolor="#f6c28b"];
  n1 [label="Sub\n(2,) float64", shape=box, fillcolor="#e8e8e8"];
  n2 [label="Tanh\n(2,) float64", shape=box, fillcolor="#e8e8e8"];
  n3 [label="1.0\n() float64", shape=ellipse, fillcolor="#ffffff"];
  n4 [label="Mul\n(2,) float64", shape=box, fillcolor="#e8e8e8"];
  n5 [label="x\n(2,) float64\nrequires_grad", shape=ellipse, fillcolor="#a9d3f5"];
  n6 [label="w\n(2,) float64\nrequires_grad", shape=ellipse, fillcolor="#a9d3f5"];
  n1 -> n0;
  n2 -> n1 [label="0"];
  n3 -> n1 [label="1"];
  n4 -> n2;
  n5 -> n4 [label="0"];
  n6 -> n4 [label="1"];
}
"""
    assert viz.to_dot(loss, {"x": x, "w": w}) == expected


def test_unnamed_leaves_dtypes_and_constants():
    x = ta.ones(2, 3, requires_grad=True)  # float32 by default
    frozen = ta.zeros(2, 3)  # a leaf that does not require grad
    text = viz.to_dot(x + frozen)
    assert 'n1 [label="leaf\\n(2, 3) float32\\nrequires_grad", shape=ellipse' in text
    assert 'n2 [label="constant\\n(2, 3) float32", shape=ellipse, fillcolor="#ffffff"]' in text


def test_named_op_output_keeps_the_op_name():
    x = ta.ones(2, requires_grad=True)
    hidden = x.exp()
    text = viz.to_dot(hidden.sum(), {"hidden": hidden})
    assert 'n1 [label="Exp\\nhidden\\n(2,) float32", shape=box' in text


def test_fan_out_is_one_node_with_two_numbered_edges():
    x = ta.tensor([3.0], requires_grad=True)
    text = viz.to_dot(x * x)
    assert text.count("n1 [") == 1
    assert '  n1 -> n0 [label="0"];\n  n1 -> n0 [label="1"];' in text


def test_a_leaf_alone_is_one_root_node():
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    lines = viz.to_dot(x, {"x": x}).splitlines()
    root = '  n0 [label="x\\n(2,) float32\\nrequires_grad", shape=ellipse, fillcolor="#f6c28b"];'
    assert lines[3] == root
    assert len(lines) == 5  # header (3 lines), the node, the closing brace


def test_deep_graph_walks_without_recursion():
    x = ta.tensor([1.0], requires_grad=True)
    y = x
    for _ in range(5_000):  # far past Python's recursion limit
        y = y.tanh()
    text = viz.to_dot(y)
    assert text.count("Tanh") == 5_000 and text.count(" -> ") == 5_000


def micrograd_example():
    """micrograd's picture: L = (a * b + c) * f, every value a scalar."""
    a, b, c, f = (
        ta.tensor(v, dtype="float64", requires_grad=True) for v in (2.0, -3.0, 10.0, -2.0)
    )
    e = a * b
    d = e + c
    return d * f, dict(a=a, b=b, c=c, f=f, e=e, d=d)


def test_after_backward_the_picture_shows_leaf_values_and_gradients():
    loss, names = micrograd_example()
    loss.backward()  # releases the graph: intermediate values are gone, its shape is not
    text = viz.to_dot(loss, names)
    # dL/da = b * f = 6, dL/db = a * f = -4, dL/dc = f = -2, dL/df = a * b + c = 4
    assert 'label="a\\n() float64\\nrequires_grad\\ndata 2\\ngrad 6"' in text
    assert 'label="b\\n() float64\\nrequires_grad\\ndata -3\\ngrad -4"' in text
    assert 'label="c\\n() float64\\nrequires_grad\\ndata 10\\ngrad -2"' in text
    assert 'label="f\\n() float64\\nrequires_grad\\ndata -2\\ngrad 4"' in text
    assert 'label="Add\\nd", shape=box' in text  # released: the op and its name, no value
    assert text.count(" -> ") == 6


def test_the_released_picture_has_the_same_structure_as_before_backward():
    loss, names = micrograd_example()
    before = viz.to_dot(loss, names, values=False)
    loss.backward()
    after = viz.to_dot(loss, names, values=False)
    edges = [line for line in before.splitlines() if "->" in line]
    assert edges == [line for line in after.splitlines() if "->" in line]


def test_a_released_constant_is_drawn_by_its_shape():
    x = ta.ones(100, dtype="float64", requires_grad=True)
    mask = ta.ones(100, dtype="float64")  # more values than a released node keeps
    loss = (x * mask).sum()
    constant = 'label="constant\\n(100,) float64", shape=ellipse'
    before = viz.to_dot(loss, values=False)
    loss.backward()
    after = viz.to_dot(loss, values=False)
    assert constant in before and constant in after
    edges = [line for line in before.splitlines() if "->" in line]
    assert edges == [line for line in after.splitlines() if "->" in line]
    text = viz.to_dot(loss, values=True)
    assert 'label="constant\\n(100,) float64\\ndata freed by backward"' in text


def test_trace_shows_every_value_and_gradient_after_release():
    loss, names = micrograd_example()
    recorded = viz.trace(loss)
    loss.backward()
    text = viz.to_dot(loss, names, trace=recorded)
    assert 'n0 [label="Mul\\n() float64\\ndata -8\\ngrad 1", shape=box' in text
    assert 'label="Add\\nd\\n() float64\\ndata 4\\ngrad -2"' in text
    assert 'label="Mul\\ne\\n() float64\\ndata -6\\ngrad -2"' in text
    assert "data 2\\ngrad 6" in text


def test_traced_gradients_match_autograd_grad():
    x = ta.tensor([[0.5, -1.0, 2.0]], dtype="float64", requires_grad=True)
    hidden = x.tanh()
    loss = (hidden * hidden).sum()
    recorded = viz.trace(loss)
    loss.backward()
    expected = 2.0 * hidden.detach().numpy()  # d(sum h**2)/dh
    assert (recorded.grad_of(hidden._ctx).numpy() == expected).all()


def test_retained_graph_with_values_shows_intermediate_values():
    x = ta.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    y = (x * 3.0).sum()
    y.backward(retain_graph=True)
    text = viz.to_dot(y, {"x": x}, values=True)
    assert "MulScalar\\n(2,) float64\\ndata [3, 6]" in text
    assert "x\\n(2,) float64\\nrequires_grad\\ndata [1, 2]\\ngrad [3, 3]" in text


@pytest.mark.parametrize(
    "values, expected",
    [
        (ta.tensor(0.25), "0.25"),
        (ta.tensor([1.0, -2.0, 3.5]), "[1, -2, 3.5]"),
        (ta.arange(10).to("float64"), "mean 4.5, min 0, max 9"),
    ],
)
def test_summary_small_tensors_show_numbers_large_ones_a_summary(values, expected):
    assert viz.summary(values) == expected


def test_a_released_graph_without_its_skeleton_is_a_clear_error():
    loss, _, _ = small_graph()
    loss.backward()
    fn = loss._ctx
    fn.release(entirely=True)  # the sum saved nothing: backward kept it walkable
    fn._released_inputs = None  # as if the engine kept no structure
    with pytest.raises(RuntimeError, match="freed by backward.*retain_graph=True"):
        viz.to_dot(loss)


def test_to_dot_rejects_non_tensors():
    with pytest.raises(TypeError, match="to_dot: expected a Tensor, got list"):
        viz.to_dot([1.0])


def test_render_format_is_checked():
    loss, _, _ = small_graph()
    with pytest.raises(ValueError, match="format must be one of"):
        viz.render(loss, "graph.pdf")


def test_render_without_graphviz_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(viz.graph.shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "graphviz", None)  # makes `import graphviz` fail
    loss, _, _ = small_graph()
    with pytest.raises(RuntimeError, match="apt-get install graphviz"):
        viz.render(loss, tmp_path / "graph.svg")
    assert not (tmp_path / "graph.svg").exists()


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="the Graphviz 'dot' program is not installed"
)
def test_render_svg_and_png_with_dot(tmp_path):
    loss, x, w = small_graph()
    svg = viz.render(loss, tmp_path / "graph.svg", names={"x": x, "w": w})
    assert "<svg" in svg.read_text() and ">Tanh<" in svg.read_text()
    png = viz.render(loss, tmp_path / "graph.out", format="png")
    assert png.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.skipif(
    shutil.which("dot") is None, reason="the Graphviz 'dot' program is not installed"
)
def test_render_after_backward_draws_values_and_gradients(tmp_path):
    loss, names = micrograd_example()
    recorded = viz.trace(loss)
    loss.backward()
    svg = viz.render(loss, tmp_path / "graph.svg", names=names, trace=recorded).read_text()
    assert ">grad 6<" in svg and ">data &#45;8<" in svg


def test_importing_tinyattn_and_viz_pulls_in_no_plotting_library():
    code = (
        "import sys, tinyattn, tinyattn.viz; "
        "bad = [m for m in ('matplotlib', 'graphviz', 'tqdm') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _make_pictures():
    path = ROOT / "docs" / "scripts" / "make_pictures.py"
    spec = importlib.util.spec_from_file_location("make_pictures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_start_here_picture_shows_the_pages_own_numbers():
    """The SVG in start-here.md draws what the page's example computes (regenerate it with
    docs/scripts/make_pictures.py when the example changes)."""
    page = _make_pictures().run_page("start-here.md", "picture = viz.to_dot")
    svg = (ROOT / "docs" / "images" / "start_here_graph.svg").read_text()
    labels = re.findall(r'label="([^"]*)", shape', page["picture"])
    assert any("grad 6" in label for label in labels)  # dL/da of the micrograd example
    for label in labels:
        for line in label.split("\\n"):
            assert f">{line.replace('-', '&#45;')}<" in svg, line
    assert "images/start_here_graph.svg" in (ROOT / "docs" / "start-here.md").read_text()
