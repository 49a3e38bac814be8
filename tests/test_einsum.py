"""einsum with PyTorch as the oracle: three or more operands, ``...``, repeated letters within
one operand (diagonals, traces), size-1 broadcasting and the sublist form; values and gradients.
The PyTorch half skips cleanly without torch."""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.testing import check_grads, tensors

# (equation, operand shapes)
CASES = [
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ij,jk,kl", [(2, 3), (3, 4), (4, 2)]),
    ("bi,bj,bk->bijk", [(2, 3), (2, 4), (2, 2)]),
    ("i,i,i", [(4,), (4,), (4,)]),
    ("ab,bc,cd,da->", [(2, 3), (3, 4), (4, 2), (2, 2)]),
    ("ij,ik,il->jkl", [(3, 2), (3, 4), (3, 2)]),
    ("...ij->...ji", [(2, 3, 4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("b...d,b...d->b...", [(2, 3, 4), (2, 3, 4)]),
    ("ij...->ij", [(2, 3, 4, 5)]),
    ("...,...", [(3, 4), (4,)]),
    ("ab...,b", [(2, 3, 4), (3,)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(4, 4)]),
    ("iji->j", [(3, 2, 3)]),
    ("bii->bi", [(2, 3, 3)]),
    ("ii,ij->j", [(3, 3), (3, 4)]),
    ("ij,ij->ij", [(1, 3), (2, 3)]),
    ("bhtd,bhsd->bhts", [(2, 2, 3, 4), (2, 2, 5, 4)]),
]


def _values(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape) for shape in shapes]


@pytest.mark.parametrize("equation, shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum_values_and_gradients_match_pytorch(device, equation, shapes):
    torch = pytest.importorskip("torch")
    values = _values(shapes)
    ours = [ta.tensor(v, device=device, requires_grad=True) for v in values]
    theirs = [torch.tensor(v, requires_grad=True) for v in values]
    out, expected = ta.einsum(equation, *ours), torch.einsum(equation, *theirs)
    assert out.shape == tuple(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    weights = np.random.default_rng(9).normal(size=out.shape)
    (out * ta.tensor(weights, device=device)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(
            mine.grad.numpy(), reference.grad.numpy(), rtol=1e-10, atol=1e-12
        )


def test_sublist_form_matches_pytorch(device):
    torch = pytest.importorskip("torch")
    a, b = _values([(2, 3, 4), (4, 5)])
    out = ta.einsum(
        ta.tensor(a, device=device), [0, 1, 2], ta.tensor(b, device=device), [2, 3], [0, 3]
    )
    expected = torch.einsum(torch.tensor(a), [0, 1, 2], torch.tensor(b), [2, 3], [0, 3])
    np.testing.assert_allclose(out.numpy(), expected.numpy())
    out = ta.einsum(ta.tensor(a, device=device), [Ellipsis, 2], ta.tensor(b, device=device), [2, 3])
    expected = torch.einsum(torch.tensor(a), [Ellipsis, 2], torch.tensor(b), [2, 3])
    np.testing.assert_allclose(out.numpy(), expected.numpy())


def test_three_operands_and_a_diagonal_pass_check_grads():
    check_grads(
        lambda a, b, c: ta.einsum("ii,ij,jk->k", a, b, c),
        tensors((3, 3)),
        tensors((3, 2)),
        tensors((2, 4)),
        max_examples=10,
        order=2,
    )
    check_grads(lambda x: ta.einsum("...ii->...i", x), tensors((2, 3, 3)), max_examples=10)


@pytest.mark.parametrize(
    "equation, shapes, message",
    [
        ("ii->ii", [(3, 3)], "repeat"),
        ("ij,jk->il", [(2, 3), (3, 4)], "appear in no operand"),
        ("ij,jk", [(2, 3), (4, 5)], "sizes 3 and 4"),
        ("ij", [(2, 3, 4)], "has shape"),
        ("i...j,jk", [(2,), (2, 2)], "has shape"),
        ("ij,jk", [(2, 3)], "names 2 operand"),
        ("i1", [(2, 3)], "not letters"),
    ],
)
def test_bad_equations_are_clear_errors(equation, shapes, message):
    with pytest.raises(RuntimeError, match=message):
        ta.einsum(equation, *[ta.ones(*shape) for shape in shapes])
