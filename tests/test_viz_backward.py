"""tinyattn.viz.animate_backward: the page that steps through backward shows the engine's own walk.

The oracle for the order is the engine itself: a hook on every op's output fires when the engine
reaches that tensor, just before its rule runs, so the hooks see the real order and the complete
gradient each rule receives. The plain tests compare the recorded steps with that; the browser
tests (Playwright driving the system's Chromium) click and key through the saved page and compare
what it highlights and prints with the same oracle and with the leaves' ``.grad``.
"""

from __future__ import annotations

import html
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, viz
from tinyattn.viz import SEED, animate_backward


# ------------------------------------------------------------------ the examples
def micrograd_example() -> tuple[ta.Tensor, dict]:
    """A scalar expression of micrograd's size, with tensors used more than once (a: 3 times)."""
    a = ta.tensor(-1.5, dtype="float64", requires_grad=True)
    b = ta.tensor(0.5, dtype="float64", requires_grad=True)
    c = a * b + a
    d = (c * b).tanh() + c
    e = d * a
    return e, dict(a=a, b=b, c=c, d=d, e=e)


def mlp_example() -> tuple[ta.Tensor, dict]:
    """A small MLP with cross-entropy: parameters larger than viz.SMALL show a summary."""
    ta.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 3))
    x = ta.randn(5, 3)
    targets = ta.tensor([0, 2, 1, 1, 0])
    return F.cross_entropy(model(x), targets), dict(model.named_parameters())


EXAMPLES = {"micrograd": micrograd_example, "mlp": mlp_example}


def op_tensors(root: ta.Tensor) -> list[ta.Tensor]:
    """Every tensor of root's graph that an op made (the ones whose rules run)."""
    found, queue, seen = [], [root], set()
    while queue:
        tensor = queue.pop()
        if tensor._ctx is None or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        found.append(tensor)
        queue.extend(tensor._ctx.inputs)
    return found


def watch_engine(root: ta.Tensor) -> list[tuple]:
    """(Function, gradient) for each rule, appended by hooks in the order the engine runs them."""
    order: list[tuple] = []
    for tensor in op_tensors(root):
        tensor.register_hook(lambda grad, fn=tensor._ctx: order.append((fn, grad)))
    return order


def node_numbers(root: ta.Tensor) -> dict[int, int]:
    """to_dot's node numbers (n0 is the root), by the id of each op's Function and each leaf."""
    nodes, _ = viz.graph._walk(root)
    return {id(fn if fn is not None else tensor): n for n, (fn, tensor) in enumerate(nodes)}


def shown(text: str) -> list[float]:
    """The numbers of a gradient as the page writes it: every value of a small tensor, or the
    mean, min and max after a large one's shape."""
    if text.startswith("("):
        text = text.split(":", 1)[1]
    return [float(v) for v in re.findall(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", text)]


def expected(tensor: ta.Tensor) -> list[float]:
    values = tensor.numpy().astype(np.float64).reshape(-1)
    if values.size <= viz.SMALL:
        return list(values)
    return [values.mean(), values.min(), values.max()]


def assert_shows(text: str, tensor: ta.Tensor) -> None:
    # The page prints 4 significant digits (3 for a summary): that is the tolerance.
    rtol = 6e-4 if tensor.numel() <= viz.SMALL else 6e-3
    np.testing.assert_allclose(shown(text), expected(tensor), rtol=rtol, atol=1e-12)


# ------------------------------------------------------------------ the recorded steps
@pytest.mark.parametrize("example", EXAMPLES)
def test_steps_are_the_engines_order_and_gradients(example):
    root, names = EXAMPLES[example]()
    order = watch_engine(root)
    animation = animate_backward(root, names)
    assert len(animation.steps) == len(order) > 0
    for step, (fn, grad) in zip(animation.steps, order):
        assert step.fn is fn
        assert step.received is grad  # the very tensor the engine handed the rule
    numbers = node_numbers(root)
    assert [step.node for step in animation.steps] == [numbers[id(fn)] for fn, _ in order]


@pytest.mark.parametrize("example", EXAMPLES)
def test_leaves_get_the_grad_a_plain_backward_gives(example):
    root, names = EXAMPLES[example]()
    animation = animate_backward(root, names)
    plain_root, plain_names = EXAMPLES[example]()
    plain_root.backward()
    leaves = {name for name, t in names.items() if t.is_leaf}
    assert {names_of(names, leaf.tensor) for leaf in animation.leaves} == leaves
    for leaf in animation.leaves:
        name = names_of(names, leaf.tensor)
        assert leaf.grad is leaf.tensor.grad
        np.testing.assert_array_equal(leaf.grad.numpy(), plain_names[name].grad.numpy())


def names_of(names: dict, tensor: ta.Tensor) -> str:
    return next(name for name, t in names.items() if t is tensor)


def test_parts_of_a_tensor_used_twice_add_up_to_what_its_rule_receives():
    root, names = micrograd_example()
    animation = animate_backward(root, names)
    numbers = node_numbers(root)
    c_step = next(s for s in animation.steps if s.node == numbers[id(names["c"]._ctx)])
    assert len(c_step.parts) == 2  # c is used by c * b and by (...).tanh() + c
    total = sum(part.grad.item() for part in c_step.parts)
    assert total == pytest.approx(c_step.received.item(), rel=1e-12)
    a_leaf = next(leaf for leaf in animation.leaves if leaf.tensor is names["a"])
    assert len(a_leaf.parts) == 3 and a_leaf.before is None
    assert sum(p.grad.item() for p in a_leaf.parts) == pytest.approx(a_leaf.grad.item(), rel=1e-12)


def test_the_root_receives_the_seed_and_every_sent_gradient_arrives():
    root, names = micrograd_example()
    animation = animate_backward(root, names)
    first = animation.steps[0]
    assert first.node == 0 and [p.source for p in first.parts] == [SEED]
    assert first.parts[0].grad.item() == 1.0
    sent = [s for step in animation.steps for s in step.sent]
    received = [p for step in animation.steps for p in step.parts if p.source != SEED]
    received += [p for leaf in animation.leaves for p in leaf.parts]
    assert sorted(map(id, sent)) == sorted(map(id, received))


def test_a_rules_name_and_formula_come_from_its_function():
    x = ta.tensor([0.5, -1.0], dtype="float64", requires_grad=True)
    step = animate_backward(x.tanh().sum()).steps[1]
    assert step.rule == "Tanh.backward"
    assert step.formula == "y = tanh(x); dL/dx = g * (1 - y**2); dy = dx * (1 - y**2)."


def test_an_earlier_grad_is_shown_as_a_part_of_the_sum():
    x = ta.tensor(2.0, dtype="float64", requires_grad=True)
    (x * 3.0).backward()
    animation = animate_backward(x * x)
    (leaf,) = animation.leaves
    assert leaf.before.item() == 3.0 and leaf.grad.item() == 3.0 + 4.0
    assert '"before": "3"' in animation.page()  # the page adds it as a part of the sum


def test_the_graph_is_released_unless_retain_graph():
    root, names = micrograd_example()
    animate_backward(root, names)
    with pytest.raises(RuntimeError, match="second time"):
        root.backward()
    root, names = micrograd_example()
    once = animate_backward(root, names, retain_graph=True).leaves[0].grad.item()
    root.backward()
    assert names["a"].grad.item() == pytest.approx(2 * once)


def test_a_hook_that_changes_a_gradient_is_flagged():
    x = ta.tensor(1.0, dtype="float64", requires_grad=True)
    y = x * 2.0
    y.register_hook(lambda grad: grad * 10.0)
    animation = animate_backward(y * y)
    assert [step.hooked for step in animation.steps] == [False, True]
    assert animation.steps[1].received.item() == 40.0  # 2y = 4, times 10: after the hook


def test_bad_input_names_the_function():
    with pytest.raises(TypeError, match="animate_backward: expected a Tensor, got list"):
        animate_backward([1.0])
    with pytest.raises(RuntimeError, match="animate_backward"):
        animate_backward(ta.ones(2, requires_grad=True) * 2.0)  # two elements: no implicit seed


def test_the_page_is_self_contained_and_jupyter_shows_it(tmp_path):
    root, names = mlp_example()
    animation = animate_backward(root, names)
    page = animation.page()
    assert animation.save(tmp_path / "walk.html").read_text(encoding="utf-8") == page
    assert "https://" not in page and "<link" not in page and " src=" not in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    frame = animation._repr_html_()
    srcdoc = re.fullmatch(r'<iframe srcdoc="([^"]*)".*</iframe>', frame, re.S).group(1)
    assert html.unescape(srcdoc) == page
    # Large gradients show their shape and summary, as to_dot does.
    assert "(3, 4): mean " in page


# ------------------------------------------------------------------ in a real browser
# The `browser` fixture (system Chromium through Playwright) is in conftest.py.
def open_page(browser, path: Path):
    """The saved page in a new tab, with every request and console error it makes noted."""
    page = browser.new_page()
    page.requests, page.errors = [], []
    page.on("request", lambda request: page.requests.append(request.url))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.goto(path.as_uri())
    return page


def highlighted(page) -> str | None:
    return page.evaluate("document.querySelector('.node.current')?.id ?? null")


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_page_steps_through_the_engines_walk_in_a_browser(browser, example, tmp_path):
    root, names = EXAMPLES[example]()
    order = watch_engine(root)
    numbers = node_numbers(root)
    animation = animate_backward(root, names)
    path = animation.save(tmp_path / f"{example}.html")
    page = open_page(browser, path)

    seen, received_texts = [], []
    for k in range(len(order)):
        seen.append(highlighted(page))
        received_texts.append(page.inner_text("#panel .received"))
        if k % 2:  # the Next button and the right arrow key, alternately
            page.click("#next")
        else:
            page.keyboard.press("ArrowRight")
    assert seen == [f"n{numbers[id(fn)]}" for fn, _ in order]
    for text, (_, grad) in zip(received_texts, order):
        assert_shows(text.removeprefix("receives g = "), grad)

    # The last step: no op highlighted, every leaf's .grad as the engine left it.
    assert highlighted(page) is None and page.is_disabled("#next")
    rows = page.query_selector_all("#leaves tr")
    assert len(rows) == len(animation.leaves) > 0
    for leaf in animation.leaves:
        node = f"n{numbers[id(leaf.tensor)]}"
        shown_in_table = page.inner_text(f'#leaves tr[data-node="{node}"] .grad-value')
        assert_shows(shown_in_table, leaf.tensor.grad)
        assert page.text_content(f"#{node} .grad") == "grad " + shown_in_table  # and in the graph

    # And back again, with Previous and the left arrow key.
    for k in reversed(range(len(order))):
        page.keyboard.press("ArrowLeft") if k % 2 else page.click("#prev")
        assert highlighted(page) == seen[k]
    assert page.is_disabled("#prev")
    assert page.errors == []
    assert page.requests == [path.as_uri()]  # the file itself, and nothing from anywhere else
    page.close()


def test_gradients_that_accumulate_show_their_sum_in_a_browser(browser, tmp_path):
    root, names = micrograd_example()
    numbers = node_numbers(root)
    animation = animate_backward(root, names)
    page = open_page(browser, animation.save(tmp_path / "sum.html"))
    c_index = next(
        i for i, s in enumerate(animation.steps) if s.node == numbers[id(names["c"]._ctx)]
    )
    for _ in range(c_index):
        page.click("#next")
    parts = page.query_selector_all("#panel .part")
    assert len(parts) == 2 and "uses of this tensor" in page.inner_text("#panel")
    for element, part in zip(parts, animation.steps[c_index].parts):
        assert_shows(element.inner_text().lstrip("+ ").split(" (from")[0], part.grad)
    page.close()


# ------------------------------------------------------------------ the docs' saved pages
def test_the_docs_pages_are_what_their_examples_make(tmp_path, monkeypatch):
    """docs/images holds the pages start-here.md and autograd.md make: regenerate and compare
    (after a change to the page, run ``python docs/scripts/make_pictures.py walks``)."""
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "make_pictures", root / "docs" / "scripts" / "make_pictures.py"
    )
    make_pictures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_pictures)
    monkeypatch.setattr(make_pictures, "IMAGES", tmp_path)
    for made in make_pictures.walk_pages():
        saved = root / "docs" / "images" / made.name
        assert made.read_text(encoding="utf-8") == saved.read_text(encoding="utf-8"), made.name


def test_a_leaf_alone_a_freed_graph_and_a_long_chain():
    x = ta.tensor(3.0, dtype="float64", requires_grad=True)
    alone = animate_backward(x)
    assert alone.steps == [] and [leaf.grad.item() for leaf in alone.leaves] == [1.0]
    assert x.grad.item() == 1.0
    y = (x * x).sum()  # the product saves x: its graph cannot be walked twice
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        animate_backward(y)  # the engine's own refusal, not a failure of the picture
    z = ta.tensor([1.0], dtype="float64", requires_grad=True)
    chain = z
    for _ in range(3_000):  # deeper than Python's recursion limit
        chain = chain * 1.0001
    walk = animate_backward(chain.sum())
    assert len(walk.steps) == 3_001 and walk.page().count('class="node op"') == 3_001
