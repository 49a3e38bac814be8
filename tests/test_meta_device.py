"""The meta device: tensors with a shape and a dtype but no values, as PyTorch's ``device="meta"``.

Each op in the table runs once with tinyattn and once with torch (the same code: the names mean
the same), and the results' shapes, dtypes and devices must agree. The torch-free tests pin the
same facts without torch: shapes, no memory, refusals, modules moved to and from meta.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn as tnn
import tinyattn.nn.functional as tF
from tinyattn import backend

try:
    import torch
except ImportError:  # the torch-free tests below still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="compares with PyTorch")


def _library(name: str) -> tuple:
    """(top-level module, nn, nn.functional) of tinyattn or torch."""
    if name == "torch":
        return torch, torch.nn, torch.nn.functional
    return ta, tnn, tF


def _described(tensor: object) -> tuple:
    """(shape, dtype name, device name) of a tinyattn or torch tensor."""
    dtype = str(tensor.dtype).removeprefix("torch.")
    if not isinstance(tensor.dtype, str) and not str(tensor.dtype).startswith("torch."):
        dtype = backend.dtype_name(tensor.dtype)
    return tuple(tensor.shape), dtype, str(tensor.device)


# Each case builds its inputs on meta with the library it is given: (lib, nn, F) -> tensor.
def _x(m):
    return m.zeros(2, 3, device="meta")


def _i(m):
    return m.arange(5, device="meta")


CASES = {
    # factories
    "empty": lambda m, nn, F: m.empty(2, 3, device="meta"),
    "zeros int": lambda m, nn, F: m.zeros(4, dtype=m.int64, device="meta"),
    "ones": lambda m, nn, F: m.ones((2, 1), device="meta"),
    "randn": lambda m, nn, F: m.randn(3, 4, device="meta"),
    "rand float64": lambda m, nn, F: m.rand(3, dtype=m.float64, device="meta"),
    "full int": lambda m, nn, F: m.full((2,), 3, device="meta"),
    "full float": lambda m, nn, F: m.full((2, 2), 1.5, device="meta"),
    "arange": lambda m, nn, F: m.arange(1, 10, 2, device="meta"),
    "arange float": lambda m, nn, F: m.arange(0, 1, 0.25, device="meta"),
    "tensor": lambda m, nn, F: m.tensor([[1, 2, 3]], device="meta"),
    "tensor float": lambda m, nn, F: m.tensor([1.0, 2.0], device="meta"),
    "to meta": lambda m, nn, F: m.ones(2, 3).to("meta"),
    # arithmetic, broadcasting and promotion
    "add": lambda m, nn, F: _x(m) + _x(m),
    "broadcast": lambda m, nn, F: _x(m) * m.ones(4, 1, 1, device="meta"),
    "float32 + float64": lambda m, nn, F: _x(m) + m.zeros(3, dtype=m.float64, device="meta"),
    "int + float number": lambda m, nn, F: _i(m) + 1.5,
    "int / int": lambda m, nn, F: _i(m) / _i(m),
    "int * bool": lambda m, nn, F: _i(m) * (_i(m) > 2),
    "int8 + int64": lambda m, nn, F: m.zeros(3, dtype=m.int8, device="meta") + _i(m)[:3],
    "comparison": lambda m, nn, F: _x(m) < 1.0,
    "pow": lambda m, nn, F: _x(m) ** 2,
    "neg": lambda m, nn, F: -_x(m),
    "exp of int": lambda m, nn, F: _i(m).exp(),
    "where": lambda m, nn, F: m.where(_x(m) > 0, _x(m), 0.0),
    "clamp": lambda m, nn, F: _x(m).clamp(-1, 1),
    "cast": lambda m, nn, F: _x(m).to(m.float64),
    "long": lambda m, nn, F: _x(m).long(),
    # matrix products
    "matmul": lambda m, nn, F: _x(m) @ m.zeros(3, 4, device="meta"),
    "batched matmul": lambda m, nn, F: (
        m.zeros(5, 1, 2, 3, device="meta") @ m.zeros(4, 3, 7, device="meta")
    ),
    "vector @ matrix": lambda m, nn, F: m.zeros(3, device="meta") @ m.zeros(3, 4, device="meta"),
    "matrix @ vector": lambda m, nn, F: _x(m) @ m.zeros(3, device="meta"),
    # views and indexing
    "reshape": lambda m, nn, F: _x(m).reshape(3, -1),
    "view": lambda m, nn, F: _x(m).view(-1),
    "transpose": lambda m, nn, F: m.zeros(2, 3, 4, device="meta").transpose(0, 2),
    "permute": lambda m, nn, F: m.zeros(2, 3, 4, device="meta").permute(2, 0, 1),
    "expand": lambda m, nn, F: m.zeros(1, 3, device="meta").expand(4, 3),
    "T": lambda m, nn, F: _x(m).T,
    "slice": lambda m, nn, F: _x(m)[:, 1:],
    "int index": lambda m, nn, F: _x(m)[1],
    "None and step": lambda m, nn, F: _x(m)[None, :, ::2],
    "index tensor": lambda m, nn, F: m.zeros(4, 5, 6, device="meta")[
        m.zeros(2, 3, dtype=m.int64, device="meta")
    ],
    "index tensor, axis 1": lambda m, nn, F: m.zeros(4, 5, 6, device="meta")[
        :, m.zeros(2, 3, dtype=m.int64, device="meta")
    ],
    "unsqueeze": lambda m, nn, F: _x(m).unsqueeze(1),
    "flatten": lambda m, nn, F: m.zeros(2, 3, 4, device="meta").flatten(1),
    # reductions
    "sum": lambda m, nn, F: _x(m).sum(),
    "sum dim keepdim": lambda m, nn, F: _x(m).sum(dim=1, keepdim=True),
    "sum of int": lambda m, nn, F: _i(m).sum(),
    "sum of bool": lambda m, nn, F: (_x(m) > 0).sum(),
    "mean": lambda m, nn, F: _x(m).mean(0),
    "max": lambda m, nn, F: _x(m).max(),
    "max dim values": lambda m, nn, F: _x(m).max(dim=1)[0],
    "max dim indices": lambda m, nn, F: _x(m).max(dim=1)[1],
    "argmax": lambda m, nn, F: _x(m).argmax(1),
    "var": lambda m, nn, F: _x(m).var(1),
    "cat": lambda m, nn, F: m.cat([_x(m), m.zeros(1, 3, device="meta")], dim=0),
    "stack": lambda m, nn, F: m.stack([_x(m), _x(m)], dim=1),
    # layers and functions
    "softmax": lambda m, nn, F: F.softmax(_x(m), dim=-1),
    "log_softmax": lambda m, nn, F: F.log_softmax(_x(m), dim=-1),
    "relu": lambda m, nn, F: F.relu(_x(m)),
    "gelu": lambda m, nn, F: F.gelu(_x(m)),
    "cross_entropy": lambda m, nn, F: F.cross_entropy(
        _x(m), m.zeros(2, dtype=m.int64, device="meta")
    ),
    "one_hot": lambda m, nn, F: F.one_hot(m.zeros(3, dtype=m.int64, device="meta"), 4),
    "Linear": lambda m, nn, F: nn.Linear(3, 4).to("meta")(_x(m)),
    "LayerNorm": lambda m, nn, F: nn.LayerNorm(3).to("meta")(_x(m)),
    "Embedding": lambda m, nn, F: nn.Embedding(10, 4).to("meta")(
        m.zeros(2, 5, dtype=m.int64, device="meta")
    ),
}


@needs_torch
@pytest.mark.parametrize("name", list(CASES))
def test_meta_results_match_torch(name: str) -> None:
    ours = CASES[name](*_library("tinyattn"))
    theirs = CASES[name](*_library("torch"))
    assert _described(ours) == _described(theirs)
    assert ours.device == "meta" and ours.is_meta


@pytest.mark.parametrize("name", list(CASES))
def test_meta_results_hold_no_values(name: str) -> None:
    result = CASES[name](*_library("tinyattn"))
    assert result.device == "meta"
    assert isinstance(result.array, backend.meta.MetaArray)
    assert result.array.shape == tuple(result.shape)


def test_device_names() -> None:
    device = ta.device("meta")
    assert device == "meta" and device.type == "meta" and device.index is None
    x = ta.zeros(2, device=device)
    assert x.device == "meta" and x.is_meta and not ta.zeros(2).is_meta


def test_a_large_meta_tensor_costs_no_memory() -> None:
    # 4 * 10**12 bytes if it held values; the ops below only compute shapes
    big = ta.zeros(10**6, 10**6, device="meta")
    result = (big @ big.T).softmax(-1).sum(0)
    assert result.shape == (10**6,) and result.is_meta


def test_randn_on_meta_draws_nothing() -> None:
    ta.manual_seed(0)
    ta.randn(1000, device="meta")
    after_meta = ta.randn(3).numpy()
    ta.manual_seed(0)
    assert np.array_equal(after_meta, ta.randn(3).numpy())


@needs_torch
def test_reads_refused_as_torch_refuses() -> None:
    for m in (ta, torch):
        x, one = m.zeros(2, 3, device="meta"), m.zeros((), device="meta")
        for read, error in (
            (lambda one=one: one.item(), RuntimeError),
            (lambda one=one: float(one), RuntimeError),
            (lambda one=one: bool(one), RuntimeError),
            (lambda x=x: x.tolist(), NotImplementedError),
            (lambda x=x: x.numpy(), TypeError),
            (lambda x=x: x.cpu(), NotImplementedError),
            (lambda x=x: x.to("cpu"), NotImplementedError),
        ):
            with pytest.raises(error, match="meta"):
                read()


def test_reads_name_the_meta_device() -> None:
    one = ta.zeros((), device="meta")
    with pytest.raises(RuntimeError, match=r"Tensor.item\(\) cannot be called on meta tensors"):
        one.item()
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        one.cpu()
    with pytest.raises(NotImplementedError, match="meta device"):
        ta.zeros(3, device="meta").nonzero()
    with pytest.raises(NotImplementedError):
        ta.zeros(3, device="meta").unique()
    with pytest.raises(NotImplementedError, match="boolean mask"):
        backend.meta.MetaArray((3,), "float32")[backend.meta.MetaArray((3,), "bool")]
    with pytest.raises(RuntimeError, match="different devices"):
        ta.zeros(3, device="meta") + ta.zeros(3)


@needs_torch
def test_repr_as_torch() -> None:
    for make in (
        lambda m: m.zeros(2, 3, device="meta"),
        lambda m: m.zeros(2, dtype=m.int64, device="meta"),
        lambda m: m.zeros((), device="meta"),
    ):
        assert repr(make(ta)).replace("tinyattn.", "") == repr(make(torch)).replace("torch.", "")


@needs_torch
def test_backward_on_meta_as_torch() -> None:
    grads = []
    for m in (ta, torch):
        w = m.zeros(3, 4, device="meta", requires_grad=True)
        x = m.zeros(2, 3, device="meta")
        (x @ w).relu().sum().backward()
        grads.append(_described(w.grad))
    assert grads[0] == grads[1] == ((3, 4), "float32", "meta")


def _mlp(nn: object) -> object:
    return nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 2))


@pytest.mark.parametrize("library", ["tinyattn", "torch"])
def test_module_to_meta_and_to_empty(library: str) -> None:
    if library == "torch" and torch is None:
        pytest.skip("compares with PyTorch")
    m, nn, _ = _library(library)
    model = _mlp(nn)
    model.to("meta")
    weight = model[0].weight  # tinyattn keeps the Parameter objects; torch swaps them here
    assert weight.is_meta and tuple(weight.shape) == (8, 3)
    assert model(m.zeros(5, 3, device="meta")).shape == (5, 2)
    with pytest.raises(NotImplementedError, match="Cannot copy out of meta tensor"):
        model.to("cpu")
    model.to_empty(device="cpu")
    weight = model[0].weight
    assert weight.device == m.device("cpu")
    assert tuple(weight.shape) == (8, 3) and weight.requires_grad
    assert model(m.ones(5, 3)).shape == (5, 2)


def test_to_empty_fills_zeros_and_keeps_dtypes() -> None:
    model = _mlp(tnn).to("meta").double()
    model.to_empty(device="cpu")
    for name, tensor in model.state_dict().items():
        assert backend.dtype_name(tensor.dtype) == "float64", name
        assert not tensor.numpy().any(), name  # tinyattn's fill (PyTorch leaves them unset)


@pytest.mark.parametrize("library", ["tinyattn", "torch"])
def test_ensemble_built_on_meta(library: str) -> None:
    """Stack the states of N models, run a copy on meta for the shapes, then materialise each
    member from the stacked state with load_state_dict(assign=True)."""
    if library == "torch" and torch is None:
        pytest.skip("compares with PyTorch")
    m, nn, _ = _library(library)
    m.manual_seed(0)
    models = [_mlp(nn) for _ in range(3)]
    states = [model.state_dict() for model in models]
    stacked = {key: m.stack([state[key] for state in states]) for key in states[0]}
    assert tuple(stacked["0.weight"].shape) == (3, 8, 3)

    base = copy.deepcopy(models[0]).to("meta")
    x = m.randn(4, 3)
    assert base(x.to("meta")).shape == (4, 2) and base(x.to("meta")).is_meta

    # The ensemble's first layer as one batched product, on meta then for real.
    weights = stacked["0.weight"]
    assert (x.to("meta") @ weights.to("meta").mT).shape == (3, 4, 8)
    first = x @ weights.mT + stacked["0.bias"][:, None, :]
    for index, model in enumerate(models):
        member = copy.deepcopy(base)
        member.load_state_dict({k: v[index] for k, v in stacked.items()}, assign=True)
        assert not member[0].weight.is_meta and member[0].weight.requires_grad
        assert m.allclose(member(x), model(x))
        assert m.allclose(first[index], model[0](x))


def test_load_state_dict_assign_keeps_the_values_storage() -> None:
    model = tnn.Linear(3, 2).to("meta")
    state = {"weight": ta.ones(2, 3, dtype="float64"), "bias": ta.zeros(2, dtype="float64")}
    keys = list(model.state_dict())
    model.load_state_dict(state, assign=True)
    assert isinstance(model.weight, tnn.Parameter) and model.weight.requires_grad
    assert backend.dtype_name(model.weight.dtype) == "float64"  # the value's dtype, as PyTorch
    assert list(model.state_dict()) == keys
    with ta.no_grad():
        state["weight"].mul_(3.0)
    assert model.weight.numpy(force=True)[0, 0] == 3.0  # shares the value's storage
    with pytest.raises(RuntimeError, match="shape"):
        model.load_state_dict({"weight": ta.ones(5, 3), "bias": ta.ones(2)}, assign=True)


def test_parameter_of_a_meta_tensor() -> None:
    param = tnn.Parameter(ta.empty(3, 4, device="meta"))
    assert param.is_meta and param.requires_grad and param.shape == (3, 4)
