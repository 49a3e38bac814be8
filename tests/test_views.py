"""Views and copies with PyTorch's meanings: which results share memory with their input.

A view shares the input's memory and its version counter, so a write through either is seen
through both (and by backward's version checks); a copy owns new memory. Each row of the table
names an op and PyTorch's answer; the test checks tinyattn's answer on every backend, and, where
torch is importable, that the row's answer is PyTorch's own.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import backend

VIEW, COPY = True, False

# (name, the call on a (4, 6) tensor `t` of module `m`, PyTorch's answer: VIEW or COPY)
ALIASING = [
    ("view", lambda t, m: t.view(6, 4), VIEW),
    ("view -1", lambda t, m: t.view(-1), VIEW),
    ("reshape of contiguous", lambda t, m: t.reshape(2, 12), VIEW),
    ("transpose", lambda t, m: t.transpose(0, 1), VIEW),
    ("permute", lambda t, m: t.permute(1, 0), VIEW),
    ("t", lambda t, m: t.t(), VIEW),
    ("T", lambda t, m: t.T, VIEW),
    ("mT", lambda t, m: t.mT, VIEW),
    ("unsqueeze", lambda t, m: t.unsqueeze(0), VIEW),
    ("squeeze", lambda t, m: t.unsqueeze(1).squeeze(1), VIEW),
    ("flatten", lambda t, m: t.flatten(), VIEW),
    ("basic slice", lambda t, m: t[1:3, ::2], VIEW),
    ("int index", lambda t, m: t[2], VIEW),
    ("narrow", lambda t, m: t.narrow(1, 2, 3), VIEW),
    ("select", lambda t, m: t.select(1, 4), VIEW),
    ("expand", lambda t, m: t[:1].expand(3, 6), VIEW),
    ("split piece", lambda t, m: t.split(2, 1)[1], VIEW),
    ("chunk piece", lambda t, m: t.chunk(2, 0)[1], VIEW),
    ("unbind piece", lambda t, m: t.unbind(0)[3], VIEW),
    ("detach", lambda t, m: t.detach(), VIEW),
    ("data", lambda t, m: t.data, VIEW),
    ("movedim", lambda t, m: t.movedim(0, 1), VIEW),
    ("swapaxes", lambda t, m: t.swapaxes(0, 1), VIEW),
    ("contiguous of contiguous", lambda t, m: t.contiguous(), VIEW),
    ("diagonal", lambda t, m: t.diagonal(), VIEW),
    ("diagonal offset", lambda t, m: t.diagonal(1), VIEW),
    ("flip", lambda t, m: t.flip(0), COPY),
    ("flip no dims", lambda t, m: t.flip(()), COPY),
    ("roll", lambda t, m: t.roll(1, 1), COPY),
    ("roll a whole turn", lambda t, m: t.roll(6, 1), COPY),
    ("roll flat by the size", lambda t, m: t.roll(24), COPY),
    ("repeat", lambda t, m: t.repeat(2, 1), COPY),
    ("repeat ones", lambda t, m: t.repeat(1, 1), COPY),
    ("tile ones", lambda t, m: t.tile((1, 1)), COPY),
    ("pad nothing", lambda t, m: _pad(m)(t, (0, 0)), COPY),
    ("pad crop", lambda t, m: _pad(m)(t, (-1, 0)), COPY),
    ("contiguous of transposed", lambda t, m: t.t().contiguous(), COPY),
    ("reshape of transposed", lambda t, m: t.t().reshape(-1), COPY),
    ("clone", lambda t, m: t.clone(), COPY),
    ("index array", lambda t, m: t[m.tensor([0, 2], device=t.device)], COPY),
    ("bool mask", lambda t, m: t[t > 10], COPY),
    ("cat", lambda t, m: m.cat([t, t]), COPY),
    ("stack", lambda t, m: m.stack([t]), COPY),
    ("arithmetic", lambda t, m: t + 0, COPY),
]


def _name(row) -> str:
    return row.values[0] if hasattr(row, "values") else row[0]


def _pad(module):
    if module is ta:
        return ta.pad
    import torch.nn.functional as F  # noqa: PLC0415  (only reached with torch installed)

    return F.pad


def _shares_memory(a, b) -> bool:
    """Whether two tinyattn tensors' arrays are views of one allocation."""
    return backend.storage_root(a.array) == backend.storage_root(b.array)


@pytest.mark.parametrize("name, call, expected", ALIASING, ids=[_name(row) for row in ALIASING])
def test_views_share_memory_and_version_copies_do_not(device, name, call, expected):
    x = ta.arange(24.0, device=device).reshape(4, 6).contiguous()
    y = call(x, ta)
    assert _shares_memory(x, y) is expected, f"{name}: shares memory"
    before = x._version
    if expected is VIEW and name != "expand":
        with ta.no_grad():
            y.add_(1.0)
        # .data is the one unchecked escape hatch: it shares memory, not the version (PyTorch's).
        bumped = 0 if name == "data" else 1
        assert x._version == before + bumped, f"{name}: a write through the view bumps the base"
    elif expected is COPY:
        with ta.no_grad():
            y.add_(1.0)
        assert x._version == before, f"{name}: a write into the copy leaves the input's version"
        assert np.array_equal(x.numpy(), np.arange(24.0).reshape(4, 6)), f"{name}: input changed"


@pytest.mark.parametrize(
    "name, call, expected",
    [getattr(row, "values", row) for row in ALIASING],  # without the xfail marks
    ids=[_name(row) for row in ALIASING],
)
def test_the_table_is_pytorchs_answer(name, call, expected):
    torch = pytest.importorskip("torch")
    x = torch.arange(24.0).reshape(4, 6)
    y = call(x, torch)
    shares = y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert shares is expected


def test_a_write_through_a_view_lands_in_the_base(device):
    x = ta.zeros(3, 4, device=device)
    with ta.no_grad():
        x.t()[1].fill_(5.0)  # column 1 of x
        x.view(-1)[0] = 7.0
    expected = np.zeros((3, 4))
    expected[:, 1] = 5.0
    expected[0, 0] = 7.0
    assert np.array_equal(x.numpy(), expected)


def test_view_refuses_strides_it_cannot_express(device):
    x = ta.arange(6.0, device=device).reshape(2, 3)
    with pytest.raises(RuntimeError, match=r"view: .*Use \.reshape\(\.\.\.\) instead"):
        x.t().view(-1)
    assert x.t().reshape(-1).tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    assert x.t().is_contiguous() is False and x.is_contiguous() is True


def test_flip_copies_so_a_later_in_place_change_is_not_seen_by_backward(device):
    """The gradient through ``a * x.flip(0)`` is x reversed as it was at forward time."""
    a = ta.ones(3, requires_grad=True, device=device)
    x = ta.tensor([1.0, 2.0, 3.0], device=device)
    z = (a * x.flip(0)).sum()
    with ta.no_grad():
        x.mul_(10)
    z.backward()
    assert a.grad.tolist() == [3.0, 2.0, 1.0]
    flipped = x.flip(0)
    with ta.no_grad():
        flipped.fill_(0.0)
    assert x.tolist() == [10.0, 20.0, 30.0]


def test_numpy_shares_the_storage_of_a_cpu_tensor_as_pytorch():
    x = ta.zeros(3)
    array = x.numpy()
    array[0] = 5.0  # a write through the array shows in the tensor ...
    x[1] = 7.0  # ... and one into the tensor shows in the array
    assert x.tolist() == [5.0, 7.0, 0.0] and array.tolist() == [5.0, 7.0, 0.0]
    scalar = (x * 2).sum()  # a 0-d result: its array is shared too
    scalar.numpy()[...] = 1.0
    assert scalar.item() == 1.0
    torch = pytest.importorskip("torch")
    t = torch.zeros(3)
    t.numpy()[0] = 5.0
    assert t.tolist() == [5.0, 0.0, 0.0]


def test_numpy_refuses_a_tensor_that_requires_grad_with_pytorchs_message():
    w = ta.ones(2, requires_grad=True)
    message = "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy()"
    with pytest.raises(RuntimeError, match=re.escape(message)):
        w.numpy()
    with pytest.raises(RuntimeError, match=re.escape(message)):
        (w * 2).numpy()  # a non-leaf that requires grad too
    copy = w.numpy(force=True)  # detached, and always a copy
    copy[0] = 9.0
    assert w.tolist() == [1.0, 1.0] and w.detach().numpy().tolist() == [1.0, 1.0]
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match=re.escape(message)):
        torch.ones(2, requires_grad=True).numpy()


def test_numpy_of_a_device_tensor_is_a_host_copy():
    """Off the host (the strict stand-in, as CuPy) numpy() copies to the host: a write into
    the copy does not reach the tensor."""
    x = ta.zeros(3, device="strict")
    array = x.numpy()
    array[0] = 5.0
    assert x.tolist() == [0.0, 0.0, 0.0]
