"""Advanced indexing with PyTorch's rules, PyTorch as the oracle.

Ints select first (so they do not separate index arrays), None and slices do; index arrays that
are apart put their broadcast dims in front; lists and tuples inside a key index; bool masks mix
with slices. Each key is checked for ``x[key]``'s values and gradient and for ``x[key] = v``
(outside and inside the graph). The PyTorch half skips cleanly without torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.testing import check_grads, tensors

SHAPE = (2, 3, 4, 5)


def _torch():
    return pytest.importorskip("torch")


# (name, key built from a module `m` (ta or torch) and a device); arrays of distinct lengths
# make a wrong dim order visible in the shape.
KEYS = [
    ("apart arrays", lambda m, d: (m.tensor([0, 1, 1], device=d), slice(None), [1, 2, 0])),
    ("int then slice then array", lambda m, d: (0, slice(None), m.tensor([2, 0], device=d))),
    ("slice int array", lambda m, d: (slice(None), 0, slice(None), [3, 1, 1])),
    ("arrays around an int", lambda m, d: ([0, 1, 1], 0, [1, 2, 3])),
    ("arrays around None", lambda m, d: (slice(None), [0, 1, 2], None, [3, 2, 1])),
    ("None then array", lambda m, d: (None, m.tensor([1, 0, 1], device=d))),
    ("None slice array", lambda m, d: (slice(None), None, [2, 1])),
    ("tuple inside a key", lambda m, d: ((0, 1), slice(None))),
    ("list as the key", lambda m, d: [1, 0]),
    ("nested list", lambda m, d: [[1, 0], [0, 0]]),
    ("adjacent arrays", lambda m, d: ([0, 1, 1], [1, 2, 0])),
    ("arrays beside slices", lambda m, d: (slice(None), [0, 2], slice(None), [4, 1])),
    ("ellipsis between arrays", lambda m, d: ([1, 0, 1], Ellipsis, [0, 4, 2])),
    ("2-d array apart", lambda m, d: ([[0], [1]], slice(None), [0, 3, 2])),
    ("mask after a slice", lambda m, d: (slice(None), m.tensor([True, False, True], device=d))),
    (
        "mask between slices",
        lambda m, d: (slice(None), m.tensor([True, False, True], device=d), slice(1, 3)),
    ),
    (
        "2-d mask after a slice",
        lambda m, d: (slice(None), m.tensor([[True, False, True, True]] * 3, device=d)),
    ),
    ("array and mask", lambda m, d: ([0, 1], slice(None), m.tensor([False, True, True, False]))),
    ("Python True beside an array", lambda m, d: (slice(None), [2, 0, 1], True)),
    ("0-d int tensor then array", lambda m, d: (m.tensor(1, device=d), slice(None), [3, 0])),
    ("0-d bool tensor", lambda m, d: (m.tensor(True, device=d), 1)),
    ("negative indices", lambda m, d: ([-1, 0], slice(None), [-2, -4])),
    ("slice with step then arrays", lambda m, d: (slice(0, None, 2), [0, 2], 1, [4, 0])),
]
STRICT_REFUSES = {"mask after a slice", "mask between slices", "2-d mask after a slice"}
STRICT_REFUSES |= {"array and mask"}


def _values():
    return np.random.default_rng(0).normal(size=SHAPE)


def _skip_strict_masks(name, device):
    if device == "strict" and name in STRICT_REFUSES:
        pytest.skip("the strict backend refuses data-dependent shapes (a mask's nonzero)")


@pytest.mark.parametrize("name, key", KEYS, ids=[name for name, _ in KEYS])
def test_getitem_values_and_gradient_match_pytorch(device, name, key):
    torch = _torch()
    _skip_strict_masks(name, device)
    x = ta.tensor(_values(), device=device, requires_grad=True)
    expected_x = torch.tensor(_values(), requires_grad=True)
    out, expected = x[key(ta, device)], expected_x[key(torch, "cpu")]
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy())
    weights = np.random.default_rng(1).normal(size=out.shape)
    (out * ta.tensor(weights, device=device)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected_x.grad.numpy())


@pytest.mark.parametrize("name, key", KEYS, ids=[name for name, _ in KEYS])
def test_setitem_matches_pytorch_outside_the_graph(device, name, key):
    torch = _torch()
    _skip_strict_masks(name, device)
    if device == "cuda" and name == "slice int array":  # the key names places twice
        pytest.skip("CuPy, as PyTorch on CUDA, leaves undefined which of two writes wins")
    x, expected = ta.tensor(_values(), device=device), torch.tensor(_values())
    shape = tuple(expected[key(torch, "cpu")].shape)
    value = np.arange(float(np.prod(shape[-1:]))) + 100  # broadcast over the selection
    x[key(ta, device)] = ta.tensor(value, device=device)
    expected[key(torch, "cpu")] = torch.tensor(value)
    np.testing.assert_allclose(x.numpy(), expected.numpy())


ADVANCED_ONLY = [k for k in KEYS if k[0] not in {"tuple inside a key", "list as the key"}]


@pytest.mark.parametrize("name, key", ADVANCED_ONLY, ids=[name for name, _ in ADVANCED_ONLY])
def test_setitem_in_the_graph_matches_pytorch(device, name, key):
    """``h[key] = v`` on a tensor in the graph: both h's history and v get PyTorch's gradient;
    where a key names a place twice the last write wins, and each write gets its place's
    gradient, as PyTorch does on the CPU."""
    torch = _torch()
    _skip_strict_masks(name, device)
    x = ta.tensor(_values(), device=device, requires_grad=True)
    expected_x = torch.tensor(_values(), requires_grad=True)
    shape = tuple(expected_x[key(torch, "cpu")].shape)
    value = np.random.default_rng(2).normal(size=shape)
    v = ta.tensor(value, device=device, requires_grad=True)
    expected_v = torch.tensor(value, requires_grad=True)
    h, expected_h = x * 2, expected_x * 2
    h[key(ta, device)] = v
    expected_h[key(torch, "cpu")] = expected_v
    np.testing.assert_allclose(h.detach().numpy(), expected_h.detach().numpy())
    weights = np.random.default_rng(3).normal(size=SHAPE)
    (h * ta.tensor(weights, device=device)).sum().backward()
    (expected_h * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected_x.grad.numpy())
    np.testing.assert_allclose(v.grad.numpy(), expected_v.grad.numpy())


def test_float_tensor_index_is_an_index_error_as_in_pytorch(device):
    x = ta.ones(3, 2, device=device)
    with pytest.raises(IndexError, match="long, int, byte or bool"):
        x[ta.tensor(1.5, device=device)]
    with pytest.raises(IndexError, match="long, int, byte or bool"):
        x[ta.tensor([0.0, 1.0], device=device)]
    with pytest.raises(IndexError, match="got float"):
        x[1.5]
    assert x[ta.tensor(1, device=device)].shape == (2,)


def test_index_arrays_that_do_not_broadcast_are_an_index_error(device):
    x = ta.ones(2, 3, 4, device=device)
    with pytest.raises(
        IndexError, match=r"could not be broadcast together with shapes \[2\], \[3\]"
    ):
        x[[0, 1], :, [0, 1, 2]]
    with pytest.raises(IndexError, match="out of range for axis 1"):
        x[[0, 1], [1, 3]]


def test_mask_of_the_wrong_shape_is_an_index_error(device):
    with pytest.raises(IndexError, match=r"mask \(2,\)"):
        ta.ones(2, 3, device=device)[:, ta.tensor([True, False], device=device)]


def test_gradient_of_apart_index_arrays_passes_check_grads():
    index = ta.tensor([0, 2, 2])  # repeats: the gradient adds up

    def fn(x):
        return x[index, :, [1, 0, 1]] * x[0, :, [2, 1]].sum()

    check_grads(fn, tensors((3, 2, 3)), max_examples=15, order=2)


def test_cpu_index_tensors_index_a_tensor_on_any_device(device):
    """As PyTorch: an index or mask on the CPU is moved to the indexed tensor's device (for
    reading, for writing and in the graph); the other way round is refused."""
    x = ta.tensor(_values(), device=device, requires_grad=True)
    rows = ta.tensor([1, 0, 1])
    out = x[rows, 2]
    np.testing.assert_array_equal(out.detach().numpy(), _values()[[1, 0, 1], 2])
    out.sum().backward()
    expected = np.zeros(SHAPE)
    np.add.at(expected, ([1, 0, 1], 2), 1.0)
    np.testing.assert_array_equal(x.grad.numpy(), expected)
    y = ta.tensor(_values(), device=device)
    y[ta.tensor([0]), 1] = 7.0
    assert (y.numpy()[0, 1] == 7.0).all()
    if device != "cpu":
        with pytest.raises(RuntimeError, match="different devices"):
            ta.zeros(3)[ta.tensor([0], device=device)]
