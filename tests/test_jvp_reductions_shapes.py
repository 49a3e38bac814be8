"""The jvp rules of reductions, shapes, movement and indexing against PyTorch's forward AD, at
the points where a convention decides the tangent: max and min on ties (the mean of the tied
tangents, as amax), the 2-norm at 0, prod with zeros, advanced indexing with repeated indices,
split into several dual outputs, concat and matmul with one side dual. Also: reverse mode
through a tangent, a tangent of a tangent, and a copy's tangent that is its own."""

from __future__ import annotations

import numpy as np
import pytest
from forward_functions import assert_reverse_through_tangent_matches_torch

import tinyattn as ta
from tinyattn.autograd import forward_ad as fwAD

torch = pytest.importorskip("torch")
torch_forward_ad = pytest.importorskip("torch.autograd.forward_ad")

RNG = np.random.default_rng(0)
TIES = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [-1.0, 0.0, -1.0]])
TIES_3D = np.array([[[4.0, 4.0], [4.0, 1.0]], [[0.0, 4.0], [2.0, 3.0]]])
ZERO_ROW = np.array([[0.0, 0.0, 0.0], [3.0, -4.0, 0.0]])
ZEROS = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0], [1.5, -2.0, 3.0]])
T33 = np.array([[1.0, 10.0, 100.0], [1.0, 2.0, 6.0], [0.5, -3.0, 7.0]])
T23 = T33[:2]
T222 = RNG.standard_normal((2, 2, 2))
X345, V345 = RNG.standard_normal((2, 3, 4, 5))
A34, V34, W34 = RNG.standard_normal((3, 3, 4))
B45, W45 = RNG.standard_normal((2, 4, 5))
BATCH = RNG.standard_normal((2, 3, 4))


def index(m, values):
    return m.tensor(values, dtype=m.int64)


# (name, call(lib, *inputs), primals, tangents: None where an input is not dual)
# fmt: off
CASES = [
    # max and min: the mean of the tangents over tied extremes (PyTorch's amax and max())
    ("amax ties",            lambda m, x: x.amax(dim=1), [TIES], [T33]),
    ("amax dims ties keep",  lambda m, x: x.amax(dim=(1, 2), keepdim=True), [TIES_3D], [T222]),
    ("max all ties",         lambda m, x: x.max(), [TIES], [T33]),
    ("amin ties",            lambda m, x: x.amin(dim=0), [TIES], [T33]),
    ("min all ties",         lambda m, x: x.min(), [TIES], [T33]),
    ("max dim values",       lambda m, x: x.max(dim=1).values, [TIES], [T33]),
    # the 2-norm: 0 where the norm is 0
    ("norm at 0, dim",       lambda m, x: x.norm(dim=1), [ZERO_ROW], [T23]),
    ("norm at 0, all",       lambda m, x: x.norm(), [np.zeros((2, 3))], [T23]),
    ("norm keepdim",         lambda m, x: x.norm(dim=0, keepdim=True), [ZERO_ROW], [T23]),
    # prod: the product of the others, exact at one zero and at two
    ("prod with zeros, dim", lambda m, x: x.prod(dim=1), [ZEROS], [T33]),
    ("prod with zeros keep", lambda m, x: x.prod(dim=0, keepdim=True), [ZEROS], [T33]),
    ("prod, one zero",       lambda m, x: x.prod(), [ZEROS[2:] * ZEROS[:1]], [T33[:1]]),
    ("prod, no zero",        lambda m, x: x.prod(), [ZEROS[2:]], [T33[:1]]),
    ("sum dims",             lambda m, x: x.sum(dim=(0, 2)), [X345], [V345]),
    ("mean dims keep",       lambda m, x: x.mean(dim=(2, 0), keepdim=True), [X345], [V345]),
    ("expand",               lambda m, x: x[:1].expand(3, 4), [A34], [V34]),
    # shapes and movement
    ("reshape",              lambda m, x: x.reshape(4, -1), [X345], [V345]),
    ("permute",              lambda m, x: x.permute(2, 0, 1), [X345], [V345]),
    ("transpose",            lambda m, x: x.transpose(0, 1), [A34], [V34]),
    ("flip",                 lambda m, x: x.flip(0, 2), [X345], [V345]),
    ("diagonal offset",      lambda m, x: x.diagonal(1, 1, 2), [X345], [V345]),
    ("diag of a vector",     lambda m, x: m.diag(x), [A34[0]], [V34[0]]),
    ("cat, one side dual",   lambda m, a, b: m.cat([a, b], 0), [A34, B45.T], [V34, None]),
    ("cat, other side dual", lambda m, a, b: m.cat([a, b], 1), [A34, A34], [None, W34]),
    ("stack",                lambda m, a, b: m.stack([a, b], 1), [A34, A34 * 2], [V34, W34]),
    ("split sizes",          lambda m, x: x.split([1, 3, 1], dim=2), [X345], [V345]),
    ("chunk",                lambda m, x: x.chunk(2, dim=1), [A34], [V34]),
    ("unbind",               lambda m, x: x.unbind(1), [A34], [V34]),
    ("matmul, a dual",       lambda m, a, b: a @ b, [A34, B45], [V34, None]),
    ("matmul, b dual",       lambda m, a, b: a @ b, [A34, B45], [None, W45]),
    ("matmul, both",         lambda m, a, b: a @ b, [A34, B45], [V34, W45]),
    ("matmul batched",       lambda m, a, b: a @ b, [BATCH, B45], [BATCH * 3, W45]),
    ("matmul vectors",       lambda m, a, b: a @ b, [A34[0], B45[:, 0]], [V34[0], W45[:, 0]]),
    # indexing: basic keys are views; an index array gathers (repeats included)
    ("getitem basic",        lambda m, x: x[1:, None, ::2, -1], [X345], [V345]),
    ("getitem repeated",     lambda m, x: x[index(m, [2, 0, 2])], [A34], [V34]),
    ("getitem 2-d index",    lambda m, x: x[:, index(m, [[3, 0], [3, 3]])], [A34], [V34]),
    ("getitem int and index", lambda m, x: x[0, :, index(m, [4, -1, 1])], [X345], [V345]),
    ("getitem negative",     lambda m, x: x[index(m, [-1, 0]), 1:], [A34], [V34]),
    ("getitem two arrays",   lambda m, x: x[index(m, [0, 2, 2]), index(m, [1, 1, 3])],
                             [A34], [V34]),
    ("getitem mask",         lambda m, x: x[x > 0], [A34], [V34]),
]
# fmt: on


def _ours(call, primals, tangents):
    with fwAD.dual_level():
        inputs = [
            ta.tensor(p) if t is None else fwAD.make_dual(ta.tensor(p), ta.tensor(t))
            for p, t in zip(primals, tangents)
        ]
        out = call(ta, *inputs)
        outs = tuple(out) if isinstance(out, tuple | list) else (out,)
        return [fwAD.unpack_dual(o).tangent.numpy() for o in outs]


def _theirs(call, primals, tangents):
    with torch_forward_ad.dual_level():
        inputs = [
            torch.tensor(p)
            if t is None
            else torch_forward_ad.make_dual(torch.tensor(p), torch.tensor(t))
            for p, t in zip(primals, tangents)
        ]
        out = call(torch, *inputs)
        outs = tuple(out) if isinstance(out, tuple | list) else (out,)
        return [torch_forward_ad.unpack_dual(o).tangent.numpy() for o in outs]


@pytest.mark.parametrize("name, call, primals, tangents", CASES, ids=[c[0] for c in CASES])
def test_tangent_matches_pytorchs_forward_ad(name, call, primals, tangents):
    ours, theirs = _ours(call, primals, tangents), _theirs(call, primals, tangents)
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        assert mine.shape == reference.shape and mine.dtype == reference.dtype
        np.testing.assert_allclose(mine, reference, rtol=1e-12, atol=1e-14)


def test_split_pieces_tangents_are_views_of_the_tangent():
    """As PyTorch's: a piece is a view of x, so its tangent is a view of x's tangent."""
    with fwAD.dual_level():
        tangent = ta.tensor(V34)
        pieces = fwAD.make_dual(ta.tensor(A34), tangent).split(2, dim=0)
        first = fwAD.unpack_dual(pieces[0]).tangent
        assert len(pieces) == 2 and first.shape == (2, 4)
        tangent.mul_(2.0)
        np.testing.assert_array_equal(first.numpy(), 2.0 * V34[:2])


@pytest.mark.parametrize(
    "copy",
    [
        lambda x: x.clone(),
        lambda x: x.flip(0),
        lambda x: x[1, 2].prod(),
        lambda x: x.T.contiguous(),
    ],
    ids=["clone", "flip", "prod of a 0-d tensor", "contiguous"],
)
def test_an_in_place_op_on_a_copy_leaves_the_inputs_tangent_alone(copy):
    with fwAD.dual_level():
        x = fwAD.make_dual(ta.tensor(A34), ta.tensor(V34))
        y = copy(x)
        y.mul_(2.0)
        np.testing.assert_array_equal(fwAD.unpack_dual(x).tangent.numpy(), V34)
        assert np.all(fwAD.unpack_dual(y).tangent.numpy() != 0.0)


REVERSE_THROUGH = [
    ("norm", lambda m, x: x.norm(dim=1)),
    ("prod", lambda m, x: x.prod(dim=0)),
    ("amax", lambda m, x: x.amax(dim=1) * x.sum()),
    ("getitem", lambda m, x: x[index(m, [1, 1, 0])].sin()),
    ("matmul", lambda m, x: x @ x.T),
    ("split", lambda m, x: x.split([1, 3], dim=1)[1] * x[:, :1]),
    ("erf", lambda m, x: m.erf(x).cumsum(0)),
]


@pytest.mark.parametrize("name, call", REVERSE_THROUGH, ids=[c[0] for c in REVERSE_THROUGH])
def test_reverse_mode_through_a_tangent_matches_pytorch(name, call):
    """d/dx of sum(J(x) v): the jvp rules are Tensor ops, so backward goes through them."""
    x, v = RNG.standard_normal((2, 3, 4))
    x[0, 1] = 0.0  # a zero for prod's rule
    assert_reverse_through_tangent_matches_torch(call, x, v, torch)


SECOND_ORDER = [
    ("norm", lambda x: x.norm(dim=1)),
    ("prod", lambda x: x.prod(dim=1)),
    ("gelu", lambda x: x * (1.0 + (x * 0.5**0.5).erf()) * 0.5),
    ("atan2 and mean", lambda x: x.atan2(x.flip(1) + 2.0).mean(dim=0)),
]


@pytest.mark.parametrize("name, call", SECOND_ORDER, ids=[c[0] for c in SECOND_ORDER])
def test_a_tangent_of_a_tangent_matches_pytorch(name, call):
    """func.jvp inside func.jvp: the second derivative along v, u (the rules compose)."""
    x, v, u = RNG.standard_normal((3, 3, 4))

    def second(lib, jvp):
        def inner(y):
            return jvp(call, (y,), (lib.tensor(v),))[1]

        return jvp(inner, (lib.tensor(x),), (lib.tensor(u),))[1].numpy()

    ours, theirs = second(ta, ta.func.jvp), second(torch, torch.func.jvp)
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_gelu_tangent_matches_pytorch_exact_gelu():
    x, v = RNG.standard_normal((2, 7)) * 3.0
    with fwAD.dual_level():
        dual = fwAD.make_dual(ta.tensor(x), ta.tensor(v))
        ours = fwAD.unpack_dual(ta.nn.functional.gelu(dual)).tangent.numpy()
    with torch_forward_ad.dual_level():
        dual = torch_forward_ad.make_dual(torch.tensor(x), torch.tensor(v))
        theirs = torch_forward_ad.unpack_dual(torch.nn.functional.gelu(dual)).tangent.numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)
