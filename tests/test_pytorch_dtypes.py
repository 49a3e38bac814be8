"""dtype promotion as PyTorch has it, with torch as the oracle (skipped without it): a 0-d
tensor does not widen a tensor with dimensions of its own kind, a higher kind wins, matmul and
linear refuse mixed float dtypes, and ``full`` infers its dtype from the fill value."""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta

# (dtype, shape) of each operand; shape () is a 0-d tensor.
PAIRS = [
    (("float32", (2,)), ("float64", ())),
    (("float16", (2,)), ("float32", ())),
    (("int64", (2,)), ("float64", ())),
    (("int32", (2,)), ("int64", ())),
    (("bool", (2,)), ("int64", ())),
    (("float64", ()), ("float32", ())),
    (("float64", (2,)), ("float32", (2,))),
    (("int32", (2,)), ("float32", (2,))),
    (("float32", ()), ("float64", (2,))),
]


def _make(module, dtype, shape):
    values = np.ones(shape) * 2
    if module is ta:
        return ta.tensor(values, dtype=dtype)
    return module.tensor(values, dtype=getattr(module, dtype))


@pytest.mark.parametrize(
    "a,b", PAIRS, ids=[f"{a[0]}{list(a[1])}-{b[0]}{list(b[1])}" for a, b in PAIRS]
)
def test_binary_ops_promote_as_pytorch(a, b):
    torch = pytest.importorskip("torch")
    for op in (lambda x, y: x * y, lambda x, y: x + y, lambda x, y: y * x):
        ours = op(_make(ta, *a), _make(ta, *b))
        theirs = op(_make(torch, *a), _make(torch, *b))
        assert ta.backend.dtype_name(ours.dtype) == str(theirs.dtype).removeprefix("torch.")


def test_the_rule_without_torch():
    """The same rule, pinned without the oracle: a 0-d float64 leaves float32 alone."""
    assert (ta.ones(3) * ta.tensor(2.0, dtype="float64")).dtype == ta.ones(1).dtype
    assert ta.backend.dtype_name((ta.ones(3, dtype="float16") + ta.tensor(2.0)).dtype) == "float16"


@pytest.mark.parametrize("value,expected", [(3, "int64"), (True, "bool"), (2.5, "float32")])
def test_full_infers_its_dtype_from_the_value(value, expected):
    assert ta.backend.dtype_name(ta.full((2,), value).dtype) == expected
    torch = pytest.importorskip("torch")
    assert str(torch.full((2,), value).dtype).removeprefix("torch.") == expected


def test_matmul_and_linear_refuse_mixed_float_dtypes():
    x, w = ta.ones(2, 3), ta.ones(4, 3, dtype="float64")
    with pytest.raises(RuntimeError, match="matmul: expected both operands to have the same"):
        x @ w.mT
    with pytest.raises(RuntimeError, match="linear: input is float32 but weight is float64"):
        ta.nn.functional.linear(x, w)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.ones(2, 3) @ torch.ones(3, 4, dtype=torch.float64)
