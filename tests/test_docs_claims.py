"""The facts the documentation states, each checked: about tinyattn on the numpy backend, and about
PyTorch against the installed PyTorch (those tests skip without it).
"""

from __future__ import annotations

import ast
import gc
import itertools
import math
import re
import weakref
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn
from tinyattn.backend import namespace

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------- fully masked attention rows
def test_fully_masked_row_gives_zero_output_and_gradient():
    q = ta.randn(4, 8, dtype="float64", requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, attn_mask=ta.zeros(4, 4, dtype="bool"))
    out.sum().backward()
    assert np.all(out.detach().numpy() == 0) and np.all(q.grad.detach().numpy() == 0)


def test_pytorch_fully_masked_rows_sdpa_zero_softmax_and_mha_nan():
    torch = pytest.importorskip("torch")
    q = torch.randn(1, 4, 8, dtype=torch.float64, requires_grad=True)
    blocked = torch.zeros(4, 4, dtype=torch.bool)  # SDPA: True = may attend, so nothing may
    out = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=blocked)
    out.sum().backward()
    assert torch.all(out == 0) and torch.all(q.grad == 0)  # 0 output, 0 gradient, no NaN

    assert torch.softmax(torch.full((3,), -math.inf), dim=-1).isnan().all()

    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 4, 8)
    every_key_blocked = torch.ones(1, 4, dtype=torch.bool)  # key_padding_mask: True = blocked
    out, _ = mha(x, x, x, key_padding_mask=every_key_blocked)
    assert out.isnan().all()


# ----------------------------------------------------------- Python numbers in expressions
SCALAR_EXPRESSIONS = [
    ("x * 2.0", lambda x: x * 2.0, "MulScalar"),
    ("2.0 * x", lambda x: 2.0 * x, "MulScalar"),
    ("x / 2.0", lambda x: x / 2.0, "DivScalar"),
    ("x + 1.0", lambda x: x + 1.0, "AddScalar"),
    ("x - 1.0", lambda x: x - 1.0, "AddScalar"),
    ("1 - x", lambda x: 1 - x, "RSubScalar"),
    ("x ** 2", lambda x: x**2, "PowScalar"),
    ("2 ** x", lambda x: 2**x, "RPowScalar"),
]


@pytest.mark.parametrize("expression", SCALAR_EXPRESSIONS, ids=lambda e: e[0])
def test_a_python_number_is_not_a_graph_input(expression):
    _, build, op = expression
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    y = build(x)
    assert y._ctx.name == op and y._ctx.inputs == (x,)
    assert y.dtype == x.dtype == "float32"
    assert (x * x)._ctx.name == "Mul"  # two tensors make a Mul


# ------------------------------------------------------------------- softmax and saturation
def test_softmax_backward_is_the_vector_jacobian_product():
    rng = np.random.default_rng(0)
    s = ta.tensor(rng.standard_normal(5), requires_grad=True)
    g = rng.standard_normal(5)
    y = F.softmax(s, dim=-1)
    (y * ta.tensor(g)).sum().backward()
    yv = y.detach().numpy().copy()
    jacobian = np.diag(yv) - np.outer(yv, yv)  # dy_i / ds_j, symmetric
    np.testing.assert_allclose(s.grad.numpy(), jacobian.T @ g, rtol=1e-12)
    np.testing.assert_allclose(s.grad.numpy(), yv * (g - np.sum(g * yv)), rtol=1e-12)


def test_unscaled_scores_saturate_and_starve_the_median_query():
    rng = np.random.default_rng(1)
    d = 768
    scores = rng.standard_normal((300, 1, d)) @ rng.standard_normal((300, d, 9))  # (300, 1, 9)
    upstream = ta.tensor(rng.standard_normal((300, 1, 9)))
    medians = {}
    for name, scale in [("unscaled", 1.0), ("scaled", 1 / math.sqrt(d))]:
        s = ta.tensor(scores * scale, requires_grad=True)
        weights = F.softmax(s, dim=-1)
        (weights * upstream).sum().backward()
        medians[name] = (
            np.median(weights.detach().numpy().max(axis=-1)),
            np.median(np.linalg.norm(s.grad.numpy(), axis=-1)),
        )
    assert medians["unscaled"][0] > 0.999 and medians["scaled"][0] < 0.5
    assert medians["scaled"][1] > 1000 * medians["unscaled"][1]


# ------------------------------------------------------------- saved arrays are constants
class SquareSavedArray(ta.Function):
    """y = x**2 with the derivative 2x saved as an array: all dependence goes through it."""

    def forward(self, x):
        self.save_for_backward(2.0 * x)
        return x * x

    def backward(self, grad):
        (two_x,) = self.saved_tensors
        return grad * two_x


class SwishSavedArray(ta.Function):
    """y = x * s, s = sigmoid(x), with s saved as an array (the custom-ops.md example)."""

    def forward(self, x):
        s = 1.0 / (1.0 + namespace(x).exp(-x))
        self.save_for_backward(s)
        return x * s

    def backward(self, grad):
        (s,) = self.saved_tensors
        (x,) = self.inputs
        return grad * (s + x * s * (1.0 - s))


def second_derivative(op, values):
    x = ta.tensor(values, dtype="float64", requires_grad=True)
    (first,) = ta.grad(op.apply(x).sum(), x, create_graph=True)
    if not first.requires_grad:  # the gradient's graph does not reach x at all
        return first.numpy(), np.zeros_like(values)
    (second,) = ta.grad(first.sum(), x)
    return first.detach().numpy(), second.detach().numpy()


def test_a_saved_array_makes_the_second_derivative_zero_only_when_all_goes_through_it():
    values = np.array([-1.5, 0.3, 2.0])
    first, second = second_derivative(SquareSavedArray, values)
    np.testing.assert_allclose(first, 2 * values)  # first order right
    np.testing.assert_array_equal(second, 0.0)  # true value: 2

    first, second = second_derivative(SwishSavedArray, values)
    s = 1 / (1 + np.exp(-values))
    np.testing.assert_allclose(first, s + values * s * (1 - s))
    true_second = s * (1 - s) * (2 + values * (1 - 2 * s))
    assert np.all(second != 0) and np.all(np.abs(second - true_second) > 1e-3)  # wrong, not 0


class ExpSavedOutput(ta.Function):
    """y = exp(x), saving the output's array for backward."""

    def forward(self, x):
        y = namespace(x).exp(x)
        self.save_for_backward(y)
        return y

    def backward(self, grad):
        (y,) = self.saved_tensors
        return grad * y


def test_saving_the_output_array_makes_no_reference_cycle():
    gc.disable()
    try:
        x = ta.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
        hidden = ExpSavedOutput.apply(x)
        probe = weakref.ref(hidden)
        result = (hidden * 3.0).sum()
        del hidden
        assert probe() is not None
        del result
        assert probe() is None  # freed by reference counting alone
    finally:
        gc.enable()


def test_every_node_is_numbered_after_the_nodes_it_consumes():
    # Why the engine needs no dependency count: the largest number left is always ready.
    a = ta.tensor([1.0, 2.0], requires_grad=True)
    b = (a * a).exp()
    c = b + a.tanh() * b
    loss = (c * a).sum()
    seen, stack = set(), [loss._ctx]
    while stack:
        fn = stack.pop()
        for parent in fn.inputs:
            if parent._ctx is not None:
                assert parent._ctx._seq < fn._seq
                if id(parent._ctx) not in seen:
                    seen.add(id(parent._ctx))
                    stack.append(parent._ctx)
    assert len(seen) >= 5


# ----------------------------------------------------------------------------- copy task
class Enumerate:
    """Stands in for the random generator: hands out every possible digit sequence once."""

    def integers(self, low, high, size):
        batch, n = size
        rows = np.array(list(itertools.product(range(low, high), repeat=n)))
        assert len(rows) == batch
        return rows


@pytest.mark.parametrize("n, vocab", [(2, 3), (3, 3), (3, 4), (4, 2)])
def test_copy_task_floor_and_cap_if_every_prediction_counted(n, vocab, copy_task):
    inputs, targets = copy_task.make_batch(vocab**n, seq_len=n, vocab=vocab, rng=Enumerate())
    sequences = np.concatenate([inputs.numpy(), targets.numpy()[:, -1:]], axis=1)  # (B, 2n + 1)
    # The best any model can do at each position is the true distribution of the next token
    # given the prefix: its mean entropy is the loss floor, its mean top probability the cap.
    entropy, top = [], []
    for p in range(2 * n):
        following = defaultdict(list)
        for row in sequences:
            following[tuple(row[: p + 1])].append(row[p + 1])
        for nexts in following.values():
            counts = np.unique(nexts, return_counts=True)[1] / len(nexts)
            entropy += [-(counts * np.log(counts)).sum()] * len(nexts)
            top += [counts.max()] * len(nexts)
    np.testing.assert_allclose(np.mean(entropy), (n - 1) / (2 * n) * math.log(vocab))
    np.testing.assert_allclose(np.mean(top), (n + 1 + (n - 1) / vocab) / (2 * n))


def test_copy_task_page_numbers():
    n, vocab = 8, 10
    assert round((n - 1) / (2 * n) * math.log(vocab), 2) == 1.01
    assert round(100 * (n + 1 + (n - 1) / vocab) / (2 * n), 1) == 60.6


# ------------------------------------------------------------------- PyTorch's attention
def test_pytorch_packs_attention_projections_differently():
    torch = pytest.importorskip("torch")
    C, H = 8, 2
    reference = torch.nn.MultiheadAttention(C, H, batch_first=True, dtype=torch.float64)
    assert list(reference.state_dict()) == [
        "in_proj_weight",
        "in_proj_bias",
        "out_proj.weight",
        "out_proj.bias",
    ]
    assert reference.in_proj_weight.shape == (3 * C, C)
    assert torch.all(reference.in_proj_bias == 0) and torch.all(reference.out_proj.bias == 0)

    ta.manual_seed(0)
    attn = nn.MultiHeadAttention(C, H).double()
    assert list(attn.state_dict())[:2] == ["q_proj.weight", "q_proj.bias"]
    assert np.abs(attn.q_proj.bias.detach().numpy()).max() > 0  # Linear's own init, not zeros
    state = {k: torch.from_numpy(v.numpy().copy()) for k, v in attn.state_dict().items()}
    packed = {
        "in_proj_weight": torch.cat([state[f"{p}_proj.weight"] for p in "qkv"]),
        "in_proj_bias": torch.cat([state[f"{p}_proj.bias"] for p in "qkv"]),
        "out_proj.weight": state["out_proj.weight"],
        "out_proj.bias": state["out_proj.bias"],
    }
    reference.load_state_dict(packed)
    x = np.random.default_rng(0).standard_normal((2, 5, C))
    expected, _ = reference(*[torch.from_numpy(x)] * 3)
    np.testing.assert_allclose(
        attn(ta.tensor(x)).detach().numpy(), expected.detach().numpy(), atol=1e-12
    )


# ------------------------------------------------------------------ the walk-through seed
PAGE_WEIGHTS = [
    [[-0.1115, 0.1204], [-0.3696, -0.2404], [-1.1969, 0.2093]],
    [[-0.9724, -0.7550], [0.3239, -0.1085], [0.2103, -0.3908]],
    [[0.2350, 0.6653], [0.3528, 0.9728], [-0.0386, -0.8861]],
]


def test_walk_through_weights_come_from_randn_not_rand():
    torch = pytest.importorskip("torch")
    torch.manual_seed(123)
    drawn = [torch.randn(3, 2).numpy() for _ in range(3)]
    np.testing.assert_allclose(drawn, PAGE_WEIGHTS, atol=5e-5)
    torch.manual_seed(123)
    uniform = [torch.rand(3, 2).numpy() for _ in range(3)]
    assert min(w.min() for w in uniform) >= 0  # rand: uniform in [0, 1)
    journey = np.array([0.55, 0.87, 0.66])
    np.testing.assert_allclose(journey @ uniform[0], [0.4306, 1.4551], atol=1e-4)


# ------------------------------------------------------------- counts and sizes the pages state
def _page(name: str) -> str:
    return " ".join((ROOT / "docs" / name).read_text(encoding="utf-8").split())


def _lines(path: str) -> int:
    return len((ROOT / path).read_text(encoding="utf-8").splitlines())


def _max_examples(test) -> int:
    """The example count a Hypothesis test's own @settings asks for (Hypothesis keeps the settings
    object on the test under this name; it has no public accessor)."""
    return test._hypothesis_internal_use_settings.max_examples


def test_errors_page_counts_are_the_tests_counts():
    import test_differential
    import test_error_catalogue
    import test_gradcheck_robustness

    page = _page("errors.md")
    assert f"| {len(test_error_catalogue.CATALOGUE)} wrong uses," in page
    mismatches = test_error_catalogue.test_any_broadcast_mismatch_names_the_op_and_both_shapes
    assert f"plus {_max_examples(mismatches)} Hypothesis-drawn" in page
    ops, examples = len(test_gradcheck_robustness.CASES), 4 * 5  # the "quick" profile's 5
    assert min(120, examples) == test_gradcheck_robustness.EXAMPLES.max_examples
    assert f"{ops} ops × {examples} Hypothesis-drawn shapes and values (120 with" in page
    programs = test_differential.test_numpy_and_strict_agree_on_values_and_gradients
    assert f"{_max_examples(programs)} random programs" in page
    assert f"over {len(test_differential.MENU)} kinds of step" in page


def test_stated_file_sizes():
    stated = re.search(r"file \(about (\d+) lines\)", _page("reading-the-code.md"))
    assert stated and abs(_lines("tinyattn/tensor.py") - int(stated[1])) <= 50
    assert "the engine (the `Function` class and the backward walk) is under a thousand" in (
        _page("index.md")
    )
    engine = {  # the file(s) defining the two, wherever the package keeps them
        path
        for path in (ROOT / "tinyattn").rglob("*.py")
        for pattern in (r"^class Function\b", r"^def run_backward\(")
        if re.search(pattern, path.read_text(encoding="utf-8"), re.M)
    }
    assert engine and sum(_lines(str(path.relative_to(ROOT))) for path in engine) < 1000


def _listed_modules() -> list[str]:
    """The top-level modules and packages of architecture.md's listing, in its order."""
    listing = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    listing = listing.split("```text\ntinyattn/\n", 1)[1].split("```", 1)[0]
    names = []
    for line in listing.splitlines():
        # "  name.py  what it is" or "  a/, b.py, c.py  what they are"; indented further: notes
        match = re.match(r"  ((?:[\w/]+(?:\.py|/), )*[\w/]+(?:\.py|/))(?:\s|$)", line)
        if match:
            names += [n.removesuffix(".py").split("/")[0] for n in match[1].split(", ")]
    return list(dict.fromkeys(names))


def _imported_modules(path: Path) -> set[str]:
    """The top-level tinyattn modules a file imports (at its top or inside a function)."""
    package = list(path.relative_to(ROOT).with_suffix("").parts)
    package = package[:-1]  # the package a relative import starts from
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = base + (node.module.split(".") if node.module else [])
            if not node.module:  # from . import a, b
                found |= {".".join(module + [alias.name]) for alias in node.names}
            found.add(".".join(module))
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name.split(".")[1] for name in found if name.startswith("tinyattn.")}


def test_each_listed_module_imports_only_the_ones_listed_before_it():
    order = _listed_modules()
    assert order[:3] == ["backend", "devices", "kernels"] and "viz" in order
    place = {name: index for index, name in enumerate(order)}
    # The upward imports the page names: Tensor.to_sparse reaches the sparse package, and
    # PyTorch's gradcheck module path inside autograd reaches the checker.
    named = {
        ("tinyattn/methods/layouts.py", "sparse"),
        ("tinyattn/autograd/gradcheck.py", "checking"),
    }
    later = []
    for path in sorted((ROOT / "tinyattn").rglob("*.py")):
        name = path.relative_to(ROOT / "tinyattn").parts[0].removesuffix(".py")
        for imported in _imported_modules(path) & place.keys():
            if place.get(name, -1) < place[imported] and name in place:
                if (path.relative_to(ROOT).as_posix(), imported) not in named:
                    later.append(f"{path.relative_to(ROOT)} imports {imported}")
    assert not later, later


# ------------------------------------------------------------------- the performance page
def test_performance_page_holds_the_targets_table_and_no_log():
    page = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    script = ast.parse((ROOT / "benchmarks" / "targets.py").read_text(encoding="utf-8"))
    columns = next(
        ast.literal_eval(node.value)
        for node in script.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "COLUMNS"
    )
    assert "| " + " | ".join(columns) + " |" in page.splitlines()
    assert page.count("Measured by `python benchmarks/targets.py`") == 1  # one table a machine
    # Earlier runs live in the repository's history, not on the page: no commit ids, no dates.
    commit = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")
    assert not commit.findall(page)
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", page)


def test_forward_mode_page_includes_mul_from_its_class_line_to_its_jvp():
    """docs/forward-mode.md shows Mul by line range: the range is the class line through the
    end of its jvp, as the file stands."""
    path = "tinyattn/ops/elementwise.py"
    page = (ROOT / "docs" / "forward-mode.md").read_text(encoding="utf-8")
    included = re.findall(rf'^--8<-- "{re.escape(path)}:(\d+):(\d+)"$', page, re.M)
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    mul = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Mul")
    jvp = next(n for n in mul.body if isinstance(n, ast.FunctionDef) and n.name == "jvp")
    whole = (str(mul.lineno), str(jvp.end_lineno))
    assert included == [whole], f'include it as --8<-- "{path}:{whole[0]}:{whole[1]}"'
