"""The one-sitting engine (tinyattn/teaching/engine.py) gives the production engine's gradients.

Every differentiable entry of the op table (tinyattn/ops/table.py: each unary op, each binary op
with broadcasting, and the Functions of its Python-number forms) and a few models (multi-head
attention with a mask, cross-entropy, layer norm, an MLP with GELU, softmax, a deep chain;
attention and layer norm also written out in primitive ops, where a tensor is used twice) are
differentiated twice in float64: by `teaching.engine.grad` and by ``loss.backward()``. The leaves'
gradients must agree to 1e-12. Each loss is a random weighted sum of the op's output, so a rule
that is wrong in a way a sum of ones hides still shows.

The comparison is shown to fail: the engine's own source with a planted bug (a fan-out gradient
that replaces instead of adding; the graph walked inputs first) fails it. And the page that
teaches the walk, docs/autograd.md, includes both engines from their files, run_backward by line
range: a test keeps that range on the whole function as the file changes.
"""

from __future__ import annotations

import ast
import inspect
import json
import operator
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from test_ops import GENERATORS

import tinyattn as ta
import tinyattn.nn as nn
import tinyattn.nn.functional as F
from tinyattn import Tensor
from tinyattn.ops import table
from tinyattn.teaching import engine

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-12
A = (3, 4)  # an elementwise op's operand shape


@dataclass(frozen=True)
class Case:
    name: str
    # seed -> (loss, the leaves to differentiate); a fresh graph on each call
    build: Callable[[int], tuple[Tensor, list[Tensor]]]
    function: type | None = None  # the op table's Function the case records


def _weighted_sum(output: Tensor, seed: int) -> Tensor:
    """sum(output * c) for a fixed random c: the loss, with a cotangent that is not all ones."""
    weights = np.random.default_rng(seed + 1).standard_normal(output.shape)
    return (output * ta.tensor(weights, dtype="float64")).sum()


def _leaves(domain: str, shapes: list[tuple], seed: int) -> list[Tensor]:
    arrays = GENERATORS[domain](np.random.default_rng(seed), shapes)
    return [ta.tensor(a, dtype="float64", requires_grad=True) for a in arrays]


def _op_case(name: str, call: Callable, function: type, domain: str, shapes: list) -> Case:
    """A case of one op: `call` on leaves drawn in `domain`, which must record `function`."""

    def build(seed: int) -> tuple[Tensor, list[Tensor]]:
        leaves = _leaves(domain, shapes, seed)
        output = call(*leaves)
        assert type(output._ctx) is function, f"{name} recorded {output._ctx.name}"
        return _weighted_sum(output, seed), leaves

    return Case(name, build, function)


def _scalar_cases(spec: table.Binary, op: Callable) -> list[Case]:
    """x op 1.5 and 1.5 op x: a Python number is no graph input; each form has its Function."""
    forms = [("scalar", spec.scalar, lambda a: op(a, 1.5))]
    forms.append(("reflected scalar", spec.reflected_scalar, lambda a: op(1.5, a)))
    return [
        _op_case(f"{spec.name} {form}", call, function, spec.domain, [A])
        for form, function, call in forms
        if function is not None  # x % 1.5 makes a constant tensor: the broadcast case covers it
    ]


def _table_cases() -> list[Case]:
    """Every differentiable row of the op table, each Function it registers once."""
    cases = []
    for spec in table.UNARY:
        call = operator.methodcaller(spec.name)
        cases.append(_op_case(spec.name, call, spec.function, spec.domain, [A]))
    for spec in (spec for spec in table.BINARY if spec.differentiable):
        call = getattr(ta, spec.name)
        shapes = [(2, 1, 4), (3, 1)]  # broadcast both ways: each rule sums its input's share
        cases.append(_op_case(f"{spec.name} broadcast", call, spec.function, spec.domain, shapes))
        if spec.dunder is not None:
            cases += _scalar_cases(spec, getattr(operator, spec.dunder))
    return cases


# ------------------------------------------------------------------------------------ models
def _attention(seed: int) -> tuple[Tensor, list[Tensor]]:
    ta.manual_seed(seed)
    attention = nn.MultiHeadAttention(8, 2).double()
    (x,) = _leaves("normal", [(2, 5, 8)], seed)  # (B, T, C)
    causal = ta.tensor(np.tril(np.ones((5, 5), dtype=bool)))  # (T, T), True = may attend
    output = attention(x, mask=causal)  # self-attention: x is the query, key and value
    return _weighted_sum(output, seed), [x, *attention.parameters()]


def _attention_by_hand(seed: int) -> tuple[Tensor, list[Tensor]]:
    """One head written out in primitive ops: x feeds the query, key and value (fan-out)."""
    x, w_query, w_key, w_value = _leaves("normal", [(2, 5, 4), (4, 4), (4, 4), (4, 4)], seed)
    query, key, value = x @ w_query, x @ w_key, x @ w_value  # each (B, T, D)
    scores = query @ key.mT / 2.0  # (B, T, D) @ (B, D, T) -> (B, T, T), over sqrt(D)
    future = ta.tensor(np.triu(np.ones((5, 5), dtype=bool), k=1))  # (T, T), True = hidden
    weights = scores.masked_fill(future, float("-inf")).softmax(-1)  # (B, T, T)
    return _weighted_sum(weights @ value, seed), [x, w_query, w_key, w_value]  # (B, T, D)


def _layer_norm_by_hand(seed: int) -> tuple[Tensor, list[Tensor]]:
    """(x - mean) / sqrt(var + eps) in primitive ops: x is read three times (fan-out)."""
    (x,) = _leaves("normal", [(3, 5)], seed)
    centred = x - x.mean(-1, keepdims=True)
    variance = (centred * centred).mean(-1, keepdims=True)
    return _weighted_sum(centred / (variance + 1e-5).sqrt(), seed), [x]


def _cross_entropy(seed: int) -> tuple[Tensor, list[Tensor]]:
    (logits,) = _leaves("normal", [(4, 6)], seed)  # (B, V)
    targets = ta.tensor(np.random.default_rng(seed).integers(0, 6, size=4))
    return F.cross_entropy(logits, targets), [logits]


def _layer_norm(seed: int) -> tuple[Tensor, list[Tensor]]:
    x, weight, bias = _leaves("normal", [(3, 5), (5,), (5,)], seed)
    return _weighted_sum(F.layer_norm(x, (5,), weight, bias), seed), [x, weight, bias]


def _mlp(seed: int) -> tuple[Tensor, list[Tensor]]:
    ta.manual_seed(seed)
    mlp = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3)).double()
    (x,) = _leaves("normal", [(5, 4)], seed)
    return _weighted_sum(mlp(x), seed), [x, *mlp.parameters()]


def _softmax(seed: int) -> tuple[Tensor, list[Tensor]]:
    (x,) = _leaves("normal", [(3, 5)], seed)
    return _weighted_sum(F.softmax(x, dim=-1), seed), [x]


def _deep_chain(seed: int) -> tuple[Tensor, list[Tensor]]:
    """5,000 ops deep: past Python's recursion limit, and x reused at every step (fan-out)."""
    (x,) = _leaves("normal", [(3,)], seed)
    h = x
    for _ in range(5_000):
        h = h * 0.999 + x * 1e-3
    return _weighted_sum(h, seed), [x]


MODEL_CASES = [
    Case("attention with a causal mask", _attention),
    Case("attention by hand", _attention_by_hand),
    Case("cross-entropy", _cross_entropy),
    Case("layer norm", _layer_norm),
    Case("layer norm by hand", _layer_norm_by_hand),
    Case("MLP with GELU", _mlp),
    Case("softmax", _softmax),
    Case("deep chain", _deep_chain),
]
TABLE_CASES = _table_cases()
CASES = TABLE_CASES + MODEL_CASES
# The cases where a tensor is used more than once: a gradient per use must be summed.
FAN_OUT = {"attention by hand", "layer norm by hand", "deep chain"}


def _largest_difference(grad: Callable, case: Case, seed: int = 0) -> float:
    """max |engine's gradient - backward()'s| over the case's leaves; inf where one is None."""
    loss, leaves = case.build(seed)
    ours = grad(loss, leaves)  # first: it leaves the graph as it found it
    loss.backward()  # frees the graph
    largest = 0.0
    for leaf, leaf_grad in zip(leaves, ours, strict=True):
        if leaf_grad is None or leaf.grad is None:
            return float("inf")
        difference = np.abs(leaf_grad.numpy() - leaf.grad.numpy()).max(initial=0.0)
        largest = max(largest, float(difference))
    return largest


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_one_sitting_engine_gives_backwards_gradients(case):
    assert _largest_difference(engine.grad, case) <= TOLERANCE


def test_every_differentiable_table_entry_is_a_case():
    registered = {spec.function for spec in table.UNARY}
    for spec in table.BINARY:
        if spec.differentiable:
            registered |= {spec.function, spec.scalar, spec.reflected_scalar} - {None}
    assert {case.function for case in TABLE_CASES} == registered
    assert len({case.name for case in CASES}) == len(CASES)  # one case a name


# ------------------------------------------------------------------------ the check can fail
def _engine_with(planted: str, replaces: str) -> Callable:
    """The engine's own source with one line changed: `replaces` becomes `planted`."""
    source = inspect.getsource(engine)
    assert source.count(replaces) == 1, f"the engine no longer reads {replaces!r}"
    namespace: dict = {"__name__": "planted_engine"}
    exec(compile(source.replace(replaces, planted), "planted_engine", "exec"), namespace)  # noqa: S102
    return namespace["grad"]


PLANTED = {
    "a second use replaces the first's gradient": (
        "grads[id(parent)] = parent_grad",
        "grads[id(parent)] = parent_grad if previous is None else previous + parent_grad",
    ),
    "inputs walked before the tensors that use them": (
        "return inputs_first",
        "return inputs_first[::-1]",
    ),
}


@pytest.mark.parametrize("bug", PLANTED)
def test_the_comparison_fails_on_a_planted_bug(bug):
    planted = _engine_with(*PLANTED[bug])
    caught = {case.name for case in CASES if _largest_difference(planted, case) > TOLERANCE}
    if bug == "a second use replaces the first's gradient":
        assert FAN_OUT <= caught, FAN_OUT - caught
    else:  # every op case: the op's rule runs before the weighted sum has sent it anything
        assert {case.name for case in TABLE_CASES} | FAN_OUT <= caught


# ------------------------------------------------------------------- the walk the docs show
def test_autograd_page_includes_run_backward_whole():
    """The page's line range of tinyattn/autograd/engine.py is exactly the walk: `run_backward`
    and `_pass_on` (what it does with a rule's gradients), which follows it."""
    path = "tinyattn/autograd/engine.py"
    page = (ROOT / "docs" / "autograd.md").read_text(encoding="utf-8")
    included = re.findall(rf'^--8<-- "{re.escape(path)}:(\d+):(\d+)"$', page, re.M)
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    names = [getattr(node, "name", None) for node in tree.body]
    walk = tree.body[names.index("run_backward")]
    sends = tree.body[names.index("run_backward") + 1]
    assert getattr(sends, "name", None) == "_pass_on", "keep _pass_on right after run_backward"
    whole = (str(walk.lineno), str(sends.end_lineno))
    assert included == [whole], f'include it as --8<-- "{path}:{whole[0]}:{whole[1]}"'
    assert '--8<-- "tinyattn/teaching/engine.py"' in page.splitlines()


# The learner's path: what `c = a * b + a; c.backward()` runs of tinyattn, traced in a fresh
# process after one warm-up call (the first may import or cache). docs/reading-the-code.md
# states the limits; the machinery nobody uses here (the compiler, the backward page, grad mode's
# per-thread bookkeeping, hooks, anomaly mode) must stay off it.
LEARNER_PATH = r"""
import json, os, sys
import tinyattn as ta
a = ta.tensor(2.0, dtype=ta.float64, requires_grad=True)
b = ta.tensor(3.0, dtype=ta.float64, requires_grad=True)
c = a * b + a
c.backward()
a.grad = None; b.grad = None
package = os.path.dirname(os.path.realpath(ta.__file__)) + os.sep
files, functions, lines = set(), set(), set()
def tracer(frame, event, arg):
    path = os.path.realpath(frame.f_code.co_filename)
    if path.startswith(package):
        name = os.path.relpath(path, package)
        files.add(name)
        functions.add((name, frame.f_code.co_firstlineno))
        if event == "line":
            lines.add((name, frame.f_lineno))
    return tracer
sys.settrace(tracer)
c = a * b + a
c.backward()
sys.settrace(None)
assert (a.grad.item(), b.grad.item()) == (4.0, 2.0)
print(json.dumps([sorted(files), len(functions), len(lines)]))
"""


def test_the_learners_path_is_short():
    """At most 6 files, 26 functions and 130 distinct lines, none of them the machinery's."""
    run = subprocess.run(
        [sys.executable, "-c", LEARNER_PATH], capture_output=True, text=True, cwd=ROOT, check=True
    )
    files, functions, lines = json.loads(run.stdout)
    assert len(files) <= 6 and functions <= 26 and lines <= 130, (files, functions, lines)
    machinery = ("compiler", "viz", "grad_mode", "hooks", "recording", "listeners", "forward_ad")
    assert not [f for f in files if any(part in f for part in machinery)], files
