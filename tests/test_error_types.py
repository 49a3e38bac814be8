"""A refused call raises an exception a PyTorch program catches: for each bad call, whatever
type PyTorch raises (RuntimeError, IndexError, ValueError, TypeError), tinyattn's exception is
an instance of it, with tinyattn's own message naming the op."""

from __future__ import annotations

import pytest

import tinyattn as ta
from tinyattn.errors import DimError, TinyattnError

# (name, the call on a library `lib` with lib.nn.functional as F) - the same code for both
CASES = [
    ("sum dim out of range", lambda lib, F: lib.ones(2, 3).sum(5)),
    ("softmax dim out of range", lambda lib, F: F.softmax(lib.ones(2, 3), dim=2)),
    ("transpose dim out of range", lambda lib, F: lib.ones(2, 3).transpose(0, 3)),
    ("unsqueeze dim out of range", lambda lib, F: lib.ones(2, 3).unsqueeze(4)),
    ("reshape to a wrong size", lambda lib, F: lib.ones(2, 3).reshape(7)),
    ("view of a transpose", lambda lib, F: lib.ones(2, 3).t().view(-1)),
    ("matmul shapes", lambda lib, F: lib.ones(2, 3) @ lib.ones(2, 3)),
    ("add shapes", lambda lib, F: lib.ones(2, 3) + lib.ones(4)),
    ("cat shapes", lambda lib, F: lib.cat([lib.ones(2, 3), lib.ones(2, 4)])),
    ("stack shapes", lambda lib, F: lib.stack([lib.ones(2), lib.ones(3)])),
    ("index out of range", lambda lib, F: lib.ones(2, 3)[5]),
    ("index array out of range", lambda lib, F: lib.ones(2, 3)[lib.tensor([0, 7])]),
    ("linear features", lambda lib, F: F.linear(lib.ones(2, 3), lib.ones(4, 5))),
    (
        "cross_entropy target out of range",
        lambda lib, F: F.cross_entropy(lib.ones(2, 3), lib.tensor([0, 5])),
    ),
    ("embedding index", lambda lib, F: F.embedding(lib.tensor([9]), lib.ones(3, 2))),
    ("expand to a smaller size", lambda lib, F: lib.ones(2, 3).expand(2, 2)),
    ("mse_loss shapes", lambda lib, F: F.mse_loss(lib.ones(2, 3), lib.ones(3, 2))),
    ("0-d sum over dim 1", lambda lib, F: lib.tensor(3.0).sum(1)),
    ("0-d squeeze dim 10", lambda lib, F: lib.tensor(3.0).squeeze(10)),
    ("integer to a negative power", lambda lib, F: lib.tensor([-2, 0, 2]) ** -2),
    ("linspace of bools", lambda lib, F: lib.linspace(5, 10, 3, dtype=lib.bool)),
    ("linspace of -1 steps", lambda lib, F: lib.linspace(1, 2, -1)),
]


def _raised(call, lib, F) -> BaseException:
    with pytest.raises(Exception) as info:
        call(lib, F)
    return info.value


@pytest.mark.parametrize("call", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_a_pytorch_program_catches_what_tinyattn_raises(call):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as torch_F

    import tinyattn.nn.functional as F

    theirs = _raised(call, torch, torch_F)
    ours = _raised(call, ta, F)
    assert isinstance(ours, type(theirs)), (
        f"PyTorch raises {type(theirs).__name__}, tinyattn {type(ours).__mro__}: {ours}"
    )


def test_the_error_types_are_both_python_and_pytorch_kinds():
    assert issubclass(TinyattnError, ValueError) and issubclass(TinyattnError, RuntimeError)
    assert issubclass(DimError, IndexError) and issubclass(DimError, TinyattnError)
    with pytest.raises(ValueError, match="reshape"):  # code written for tinyattn still catches
        ta.ones(2, 3).reshape(7)


@pytest.mark.parametrize("shift", [0, 1, 3, 31])
def test_shifts_and_half_are_pytorchs(shift):
    torch = pytest.importorskip("torch")
    data = [[-1, -3, 1, 7], [0, -(2**31), 2**31 - 1, -1]]
    for lib in (ta, torch):
        assert (lib.tensor(data, dtype=lib.int32) << shift).dtype == lib.int32
    ours, theirs = ta.tensor(data, dtype=ta.int32), torch.tensor(data, dtype=torch.int32)
    assert (ours << shift).tolist() == (theirs << shift).tolist()
    assert (ours >> shift).tolist() == (theirs >> shift).tolist()
    assert (3 << ta.tensor([1, 2])).tolist() == (3 << torch.tensor([1, 2])).tolist()
    assert str(ta.ones(2).half().dtype) == "float16"
