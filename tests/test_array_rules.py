"""One rule per op: where an op declares its rule's array form (`backward_arrays`, which the
engine runs when no graph is built), it gives the op's Tensor rule's values."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn as nn
import tinyattn.nn.functional as F
from tinyattn import ops
from tinyattn.autograd import Function


def _leaf(rng, shape, dtype, low=None):
    values = rng.standard_normal(shape) if low is None else rng.uniform(low, 2.0, shape)
    return ta.tensor(values.astype(dtype), requires_grad=True)


def _heads(rng, dtype):
    ta.manual_seed(0)
    attention = nn.MultiHeadAttention(8, 2).to(getattr(ta, np.dtype(dtype).name))
    return attention(_leaf(rng, (2, 5, 8), dtype))


def _cross_attention(rng, dtype):
    ta.manual_seed(0)
    attention = nn.MultiHeadAttention(8, 2).to(getattr(ta, np.dtype(dtype).name))
    query, memory = _leaf(rng, (2, 5, 8), dtype), _leaf(rng, (2, 3, 8), dtype)
    return attention(query, memory, memory)


# Each builder makes a graph (from a rng and a dtype) with a node of the op somewhere in it.
BUILDERS: dict[str, list[Callable]] = {
    "Add": [
        lambda r, d: _leaf(r, (2, 1, 4), d) + _leaf(r, (3, 1), d),
        lambda r, d: _leaf(r, (3, 4), d) + _leaf(r, (3, 4), d).detach(),  # one input needs none
    ],
    "Sub": [lambda r, d: _leaf(r, (2, 1, 4), d) - _leaf(r, (3, 1), d)],
    "Mul": [
        lambda r, d: _leaf(r, (2, 1, 4), d) * _leaf(r, (3, 1), d),
        lambda r, d: _leaf(r, (), d) * _leaf(r, (), d),  # 0-d: NumPy's products are scalars
        lambda r, d: _leaf(r, (3,), d) * ta.tensor(np.arange(3)),  # int operand: declines
    ],
    "Neg": [lambda r, d: -_leaf(r, (3, 4), d)],
    "Exp": [lambda r, d: _leaf(r, (3, 4), d).exp()],
    "Relu": [lambda r, d: _leaf(r, (3, 4), d).relu()],
    "Where": [
        lambda r, d: ta.where(
            ta.tensor(r.random((3, 4)) > 0.5), _leaf(r, (3, 1), d), _leaf(r, (4,), d)
        )
    ],
    "MulScalar": [lambda r, d: _leaf(r, (3, 4), d) * 1.5],
    "DivScalar": [lambda r, d: _leaf(r, (3, 4), d) / 3.0],
    "RSubScalar": [lambda r, d: 1.5 - _leaf(r, (3, 4), d)],
    "Reshape": [lambda r, d: _leaf(r, (3, 4), d).reshape(2, 6)],
    "Permute": [lambda r, d: _leaf(r, (2, 3, 4), d).permute(2, 0, 1)],
    "Concat": [lambda r, d: ta.cat([_leaf(r, (2, 3), d), _leaf(r, (1, 3), d).detach()], 0)],
    "MatMul": [
        lambda r, d: _leaf(r, (2, 3, 4), d) @ _leaf(r, (4, 5), d),
        lambda r, d: _leaf(r, (4,), d) @ _leaf(r, (2, 4, 3), d),
    ],
    "Sum": [lambda r, d: _leaf(r, (3, 4, 2), d).sum(1)],
    "Linear": [
        lambda r, d: F.linear(_leaf(r, (2, 3, 4), d), _leaf(r, (5, 4), d), _leaf(r, (5,), d))
    ],
    "LayerNorm": [
        lambda r, d: F.layer_norm(_leaf(r, (3, 5), d), (5,), _leaf(r, (5,), d), _leaf(r, (5,), d))
    ],
    "Gelu": [lambda r, d: F.gelu(_leaf(r, (3, 4), d))],
    "Softmax": [lambda r, d: F.softmax(_leaf(r, (3, 5), d), dim=-1)],
    "LogSoftmax": [lambda r, d: F.log_softmax(_leaf(r, (3, 5), d), dim=0)],
    "CrossEntropy": [
        lambda r, d: F.cross_entropy(_leaf(r, (4, 6), d), ta.tensor(r.integers(0, 6, 4))),
        lambda r, d: F.cross_entropy(
            _leaf(r, (4, 6), d), ta.tensor(r.integers(0, 6, 4)), reduction="none"
        ),
    ],
    "HeadsAttention": [_heads, _cross_attention],
}


# The cases whose array form declines (returns None), so that the engine runs the Tensor rule: a
# product of an int and a float tensor (PyTorch's promotion), a 1-D operand of a stacked product.
DECLINED = {("Mul", 2), ("MatMul", 1)}


def _declaring() -> set[type]:
    """Every Function class in tinyattn.ops that declares an array form of its rule."""
    found, todo = set(), list(Function.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("tinyattn.ops") and "backward_arrays" in vars(cls):
            found.add(cls)
    return found


def _node(output, cls):
    """The first node of class `cls` in the graph of `output`."""
    seen, todo = set(), [output._ctx]
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn) is cls:
            return fn
        todo += [t._ctx for t in fn.inputs]
    raise AssertionError(f"no {cls.__name__} node in the graph")


def test_every_declared_array_rule_has_a_case():
    assert {cls.__name__ for cls in _declaring()} == set(BUILDERS)


CASES = [(name, k) for name, builders in BUILDERS.items() for k in range(len(builders))]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("name", "k"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_array_rule_gives_the_tensor_rules_values(name, k, dtype):
    rng = np.random.default_rng(k)
    output = BUILDERS[name][k](rng, dtype)
    cls = getattr(ops, name, None) or next(c for c in _declaring() if c.__name__ == name)
    fn = _node(output, cls)
    out = output if output._ctx is fn else None
    if out is None:  # the node's own output: find it among its consumers' inputs
        out = _output_of(output, fn)
    grad = rng.standard_normal(out.shape).astype(out.array.dtype)
    fn.output = out
    with ta.no_grad():
        arrays = fn.backward_arrays(grad)
        rule = fn.backward(ta.tensor(grad))
    fn.output = None
    rule = rule if isinstance(rule, tuple) else (rule,)
    if arrays is None:  # declined: the engine runs the Tensor rule
        assert (name, k) in DECLINED
        return
    assert len(arrays) == len(rule) == len(fn.inputs)
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    for position, (array, tensor) in enumerate(zip(arrays, rule, strict=True)):
        assert (array is None) == (tensor is None), f"input {position}"
        if array is not None:
            expected = tensor.detach().numpy()
            assert array.shape == expected.shape, f"input {position}"
            np.testing.assert_allclose(np.asarray(array), expected, rtol=tolerance, atol=tolerance)


def _output_of(root, fn):
    seen, todo = set(), [root]
    while todo:
        tensor = todo.pop()
        if tensor._ctx is fn:
            return tensor
        if tensor._ctx is None or id(tensor) in seen:
            continue
        seen.add(id(tensor))
        todo += list(tensor._ctx.inputs)
    raise AssertionError("the node's output is not in the graph")


def test_a_wrong_array_rule_is_caught(monkeypatch):
    """The comparison above can fail: an array rule off by a factor shows."""
    monkeypatch.setattr(ops.Exp, "backward_arrays", lambda self, g: (2 * g * self.output.array,))
    with pytest.raises(AssertionError):
        test_array_rule_gives_the_tensor_rules_values("Exp", 0, "float64")


def test_the_engine_runs_the_array_rule_only_without_a_graph(monkeypatch):
    calls = []
    original = ops.Exp.backward_arrays

    def counting(self, g):
        calls.append(1)
        return original(self, g)

    monkeypatch.setattr(ops.Exp, "backward_arrays", counting)
    x = ta.tensor([0.5, 1.0], dtype="float64", requires_grad=True)
    x.exp().sum().backward()
    assert calls == [1]
    (first,) = ta.grad(x.exp().sum(), x, create_graph=True)  # a graph: the Tensor rule
    assert calls == [1] and first.requires_grad
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.5, 1.0]))
