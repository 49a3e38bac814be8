"""Every text viz writes into a page or a picture is shown as text, whatever it holds.

Tensor names, op names and op docstrings come from the program, and a program may hold any
string: markup (``<img onerror=...>``, ``</script>``, ``<!--``), quotes, entities, and the page
template's own placeholders (``__DATA__``, ``__SCRIPT__``, ``__SVG__``). A page built from such
names is opened in Chromium (through Playwright, as in test_viz_backward.py): no script of a name
runs, nothing is fetched, and every name is on the page exactly as written. The notebook frame
and Graphviz's pictures of ``to_dot`` are checked the same way.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import viz
from tinyattn.viz import animate_backward

RAN = "window.hostile = (window.hostile || 0) + 1"  # what a name's script would do
HOSTILE = [
    f"<img src=x onerror='{RAN}'>",
    f"</script><script>{RAN}</script>",
    "\"quotes\" 'single' & &amp; &lt;b&gt; <b>bold</b>",
    "__DATA__",
    "__SCRIPT__",
    "__SVG__",
    f"<!--<script>{RAN}</script>-->",
    f"]]><svg onload='{RAN}'>",
    f"</text></svg><iframe srcdoc='<script>parent.{RAN}</script>'>",
    "\u2028 line and paragraph separators \u2029",
]


def hostile_op(name: str, doc: str):
    """A Function class whose name and docstring (the page's formula) are hostile too."""

    def forward(self, x):
        return x * 2.0

    def backward(self, grad):
        return grad * 2.0

    return type(name, (ta.Function,), {"__doc__": doc, "forward": forward, "backward": backward})


def hostile_graph() -> tuple[ta.Tensor, dict[str, ta.Tensor]]:
    """Leaves and op outputs named with every hostile name; one op of a hostile class."""
    leaves = [ta.tensor(float(i + 1), dtype="float64", requires_grad=True) for i in range(5)]
    total = leaves[0]
    outputs = []
    for leaf in leaves[1:]:
        total = total * leaf
        outputs.append(total)
    doubled = hostile_op(HOSTILE[0], HOSTILE[1] + " " + HOSTILE[3]).apply(total)
    root = doubled.sum()
    names = dict(zip(HOSTILE, leaves + outputs + [doubled]))
    assert len(names) == 10 == len(HOSTILE)
    return root, names


def test_the_page_text_holds_no_markup_from_a_name():
    root, names = hostile_graph()
    page = animate_backward(root, names).page()
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the page's own
    assert page.count("<svg") == 1 and "<img" not in page and "<iframe" not in page
    assert "<!--" not in page and page.count('"use strict"') == 1  # the script, pasted once
    for placeholder in ("__DATA__", "__SCRIPT__", "__SVG__"):
        assert placeholder in page  # left as text where the name is shown


# ------------------------------------------------------------------ in a real browser
# The `browser` fixture (system Chromium through Playwright) is in conftest.py.
def open_page(browser, path: Path):
    """The file in a new tab, noting every request, console error and dialog it makes."""
    page = browser.new_page()
    page.requests, page.errors, page.dialogs = [], [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(path.as_uri())
    return page


def assert_nothing_ran(page, path: Path) -> None:
    for frame in page.frames:
        assert frame.evaluate("window.hostile === undefined"), frame.url
    assert page.dialogs == [] and page.errors == []
    assert page.requests == [path.as_uri()]  # no <img src=x>, no other fetch


def test_no_script_of_a_name_runs_and_every_name_shows_as_text(browser, tmp_path):
    root, names = hostile_graph()
    animation = animate_backward(root, names)
    path = animation.save(tmp_path / "hostile.html")
    page = open_page(browser, path)
    counts = page.evaluate(
        "['script', 'svg', 'img', 'iframe'].map(t => document.getElementsByTagName(t).length)"
    )
    assert counts == [2, 1, 0, 0]
    shown = page.evaluate("[...document.querySelectorAll('svg tspan')].map(t => t.textContent)")
    for name in HOSTILE:
        assert name in shown, name  # a line of its node in the picture, exactly as written
    assert HOSTILE[0] in shown  # the hostile class's name heads its op's node
    # The data the script reads is the data Python wrote, every string unchanged.
    data = page.evaluate("JSON.parse(document.getElementById('steps-data').textContent)")
    expected = json.loads(json.dumps([(s.rule, s.formula) for s in animation.steps]))
    assert [[step["rule"], step["formula"]] for step in data["steps"]] == expected
    # Step through: the panel names each op's tensor as written, and the leaves' table too.
    panels = []
    for _ in animation.steps:
        panels.append(page.inner_text("#panel"))
        page.click("#next")
    assert f"{HOSTILE[0]}.backward" in panels[1]  # after the root's Sum, the hostile op
    assert HOSTILE[1] + " " + HOSTILE[3] in panels[1]  # its docstring, shown as its formula
    leaf_names = page.evaluate("[...document.querySelectorAll('#leaves tr td:first-child')]"
                               ".map(td => td.textContent)")  # fmt: skip
    assert sorted(leaf_names) == sorted(HOSTILE[:5])
    assert_nothing_ran(page, path)
    page.close()


def test_the_notebook_frame_shows_the_page_and_runs_nothing_of_a_name(browser, tmp_path):
    root, names = hostile_graph()
    frame_html = animate_backward(root, names)._repr_html_()
    assert 'sandbox="allow-scripts"' in frame_html  # the page's script never gets our origin
    path = tmp_path / "notebook.html"
    path.write_text(f"<!DOCTYPE html><html><body>{frame_html}</body></html>", encoding="utf-8")
    page = open_page(browser, path)
    page.wait_for_function("window.frames.length === 1")
    (inner,) = page.frames[1:]
    inner.wait_for_selector("#panel h2")
    shown = inner.evaluate("[...document.querySelectorAll('svg tspan')].map(t => t.textContent)")
    assert all(name in shown for name in HOSTILE)
    assert inner.evaluate("document.getElementsByTagName('script').length") == 2
    assert page.evaluate("document.getElementsByTagName('iframe').length") == 1
    assert_nothing_ran(page, path)
    page.close()


# ------------------------------------------------------------------ to_dot and Graphviz
def test_to_dot_writes_every_name_inside_its_quoted_label():
    root, names = hostile_graph()
    text = viz.to_dot(root, names)
    node_lines = [line for line in text.split("\n") if "shape=" in line]  # not splitlines: U+2028
    assert len(node_lines) == 11  # one line each: a newline in a name would be DOT's "\n"
    for line in node_lines:
        label = line.split('[label="', 1)[1].rsplit('", shape=', 1)[0]
        unescaped = label.replace('\\"', "")
        assert '"' not in unescaped  # every quote in a label is escaped
    assert "&amp;amp;" in text and "&amp;lt;b&amp;gt;" in text  # entities shown, not decoded
    leaf = ta.tensor(1.0, requires_grad=True)
    assert '[label="a\\nb\\\\\\n' in viz.to_dot(leaf, {"a\nb\\": leaf})  # a\nb\\ then \n


def test_graphviz_pictures_show_every_name_as_text(browser, tmp_path):
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed")
    root, names = hostile_graph()
    svg = viz.render(root, tmp_path / "hostile.svg", names=names)
    path = tmp_path / "picture.html"  # the SVG inside a page, as a browser would show it
    path.write_text(
        "<!DOCTYPE html><html><body>" + svg.read_text(encoding="utf-8").split("?>", 1)[-1],
        encoding="utf-8",
    )
    for shown_file in (svg, path):
        page = open_page(browser, shown_file)
        shown = page.evaluate("[...document.querySelectorAll('svg text')].map(t => t.textContent)")
        assert all(name.strip() in [text.strip() for text in shown] for name in HOSTILE[:9])
        assert page.evaluate("document.querySelectorAll('img, iframe, script').length") == 0
        assert_nothing_ran(page, shown_file)
        page.close()


def test_names_with_control_characters_are_drawn_not_dropped():
    """A name may hold characters no page can show (NUL, a lone surrogate): each becomes U+FFFD
    in the picture; the page still saves as UTF-8."""
    x = ta.tensor(np.float64(2.0), requires_grad=True)
    animation = animate_backward((x * x).sum(), {"a\x00b\ud800c": x})
    assert "a\ufffdb\ufffdc" in animation.page()
    assert "a\ufffdb\ufffdc" in viz.to_dot(x * x, {"a\x00b\ud800c": x})
    animation.page().encode("utf-8")
