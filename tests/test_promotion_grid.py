"""Result dtypes and values against PyTorch over the whole grid, and the rule pinned without it.

The grid: every dtype pair tinyattn has, and each dtype with the Python numbers True, 3, -2 and
2.5 (on either side), for every binary op of the op table (ops/table.py) and its operator, the
comparisons and bitwise ops, the unary ops and the reductions. For each call either both
libraries raise, or both give the same dtype and the same values; the one exception is a Python
number given to a named function that PyTorch types as tensor-only (``torch.maximum(x, 3)`` is
a TypeError there, a promoted operand here; docs/from-pytorch.md says so). The second half
pins the promotion rule itself and the cases that were once answered wrongly, with their values
written out: it runs without PyTorch, on every backend.
"""

from __future__ import annotations

import itertools
import operator
import warnings

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.backend import promotion
from tinyattn.ops.table import BINARY, LOGICAL, UNARY

DTYPES = ("float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool")
NUMBERS = (True, 3, -2, 2.5)

OPERATORS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "eq": operator.eq,
    "ne": operator.ne,
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
    "lshift": operator.lshift,
    "rshift": operator.rshift,
}
# Named binary functions: the op table's, and the ones that compose them.
NAMED_BINARY = sorted({spec.name for spec in BINARY + LOGICAL} | {"fmod", "copysign", "logaddexp"})
UNARY_NAMES = sorted(
    {spec.name for spec in UNARY}
    | {"neg", "sign", "square", "reciprocal", "rsqrt", "frac", "isnan", "isinf", "isfinite"}
    | {"logical_not", "bitwise_not", "nan_to_num", "sigmoid"}
)
REDUCTIONS = (
    "sum", "mean", "prod", "amax", "amin", "std", "var", "max", "min", "argmax", "argmin",
    "all", "any", "logsumexp", "norm", "cumsum", "cumprod", "count_nonzero",
)  # fmt: skip
NEEDS_DIM = {"logsumexp", "cumsum", "cumprod"}


def _values(dtype: str, divisor: bool = False) -> np.ndarray:
    """A 2x3 block with zeros, negatives and (as a divisor) no zero."""
    base = np.array([[1, -1, 3], [3, -3, 5]]) if divisor else np.array([[0, 1, 2], [3, -2, 5]])
    if dtype == "bool":
        return base % 2 == 1
    if dtype == "uint8":
        return np.abs(base).astype(dtype)
    return (base * 1.5).astype(dtype) if dtype.startswith("float") else base.astype(dtype)


def _outcome(call):
    """('raises', type name) or ('gives', dtype name, float64 values)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = call()
    except Exception as exc:  # both libraries' refusals count alike; the type is reported
        return ("raises", type(exc).__name__)
    if isinstance(result, tuple):
        result = result[0]
    name = str(result.dtype).rsplit(".", 1)[-1]
    array = result.detach().numpy() if hasattr(result, "detach") else np.asarray(result)
    return ("gives", name, np.asarray(array, dtype=np.float64))


def _mismatch(label, theirs, ours):
    """A line saying how the outcomes differ, or None when they agree."""
    if theirs[0] == "raises" and ours[0] == "raises":
        return None
    if theirs[0] != ours[0]:
        return f"{label}: PyTorch {theirs[:2]}, tinyattn {ours[:2]}"
    if theirs[1] != ours[1]:
        return f"{label}: dtype {theirs[1]} (PyTorch) != {ours[1]}"
    same = theirs[2].shape == ours[2].shape and np.allclose(
        theirs[2], ours[2], rtol=1e-3, atol=1e-3, equal_nan=True
    )
    return None if same else f"{label}: values {theirs[2].ravel()} != {ours[2].ravel()}"


def _compare(torch, cases, takes_numbers=False):
    """Run each (label, call taking a module and its tensor maker) in both libraries."""
    problems = []
    for label, call in cases:
        theirs = _outcome(lambda call=call: call(torch, torch.tensor))
        ours = _outcome(lambda call=call: call(ta, ta.tensor))
        problem = _mismatch(label, theirs, ours)
        if takes_numbers and theirs[0] == "raises" and theirs[1] == "TypeError":
            continue
        if problem:
            problems.append(problem)
    return problems


def _binary_call(name, first, second, swap=False):
    function = OPERATORS.get(name)

    def call(module, make):
        a, b = make(first) if isinstance(first, np.ndarray) else first, second
        b = make(b) if isinstance(b, np.ndarray) else b
        a, b = (b, a) if swap else (a, b)
        return function(a, b) if function else getattr(module, name)(a, b)

    return call


@pytest.mark.parametrize("name", sorted(OPERATORS) + NAMED_BINARY)
def test_binary_dtype_pairs_match_pytorch(name):
    torch = pytest.importorskip("torch")
    cases = [
        (f"{name}({a}, {b})", _binary_call(name, _values(a), _values(b, divisor=True)))
        for a, b in itertools.product(DTYPES, DTYPES)
    ]
    cases += [
        (
            f"{name}({a}, 0-d {b})",
            _binary_call(name, _values(a), np.asarray(_values(b, True)[0, 0])),
        )
        for a, b in itertools.product(DTYPES, DTYPES)
    ]
    assert not _compare(torch, cases), "\n".join(_compare(torch, cases))


@pytest.mark.parametrize("name", sorted(OPERATORS) + NAMED_BINARY)
def test_binary_with_python_numbers_matches_pytorch(name):
    torch = pytest.importorskip("torch")
    cases = []
    for dtype, number in itertools.product(DTYPES, NUMBERS):
        cases.append((f"{name}({dtype}, {number!r})", _binary_call(name, _values(dtype), number)))
        if name in OPERATORS:  # reflected: number op tensor
            cases.append(
                (f"{name}({number!r}, {dtype})", _binary_call(name, _values(dtype), number, True))
            )
    # PyTorch's atan2, logaddexp, maximum ... take only tensors (a TypeError from its argument
    # parser); tinyattn also takes a number there, promoted as an operator's would be.
    problems = _compare(torch, cases, takes_numbers=name not in OPERATORS)
    assert not problems, "\n".join(problems)


def test_unary_ops_match_pytorch():
    torch = pytest.importorskip("torch")
    cases = [
        (f"{name}({dtype})", lambda m, make, n=name, d=dtype: getattr(m, n)(make(_values(d))))
        for name, dtype in itertools.product(UNARY_NAMES, DTYPES)
    ]
    problems = _compare(torch, cases)
    assert not problems, "\n".join(problems)


def test_reductions_match_pytorch():
    torch = pytest.importorskip("torch")
    cases = []
    for name, dtype in itertools.product(REDUCTIONS, DTYPES):
        if name not in NEEDS_DIM:
            cases.append(
                (
                    f"{name}({dtype})",
                    lambda m, make, n=name, d=dtype: getattr(m, n)(make(_values(d))),
                )
            )
        if name != "norm":
            cases.append(
                (
                    f"{name}({dtype}, dim=1)",
                    lambda m, make, n=name, d=dtype: getattr(m, n)(make(_values(d)), 1),
                )
            )
    problems = _compare(torch, cases)
    assert not problems, "\n".join(problems)


FILLS = [
    "x.masked_fill(x > 0, 2.7)",
    "x.masked_fill(x > 0, -1)",
    "x.masked_fill(x > 0, float('nan'))",
    "x.clone().fill_(2.7)",
    "x.clone().fill_(-1)",
    "x.clone().fill_(300)",
    "x.clone().fill_(float('nan'))",
    "x.clone().add_(1)",
    "x.clone().add_(2.5)",
    "x.clone().mul_(True)",
    "t.full_like(x, 2.7)",
    "t.full_like(x, -1)",
    "t.full_like(x, 1e10)",
    "t.where(x > 0, x, 2.5)",
    "t.where(x > 0, x, 2)",
    "t.where(x > 0, 1, 0)",
    "t.where(x > 0, 1.0, 0)",
    "t.where(x > 0, True, False)",
    "t.clamp(x, 0.5)",
    "t.clamp(x, 0, 1)",
    "t.clamp(x, -1, 3)",
    "x.clamp(max=t.tensor(2.5))",
]


@pytest.mark.parametrize("expression", FILLS)
def test_fills_where_and_clamp_match_pytorch(expression):
    torch = pytest.importorskip("torch")
    cases = [
        (
            f"{expression.split('(')[0].replace('t.', '')}({dtype}) {expression}",
            lambda m, make, d=dtype: eval(expression, {"t": m, "x": make(_values(d))}),
        )
        for dtype in DTYPES
    ]
    problems = _compare(torch, cases)
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------- the rule, without torch
@pytest.mark.parametrize(
    "a,b,expected",
    [
        ("bool", "int8", "int8"),
        ("uint8", "int8", "int16"),
        ("uint8", "int32", "int32"),
        ("int32", "float16", "float16"),
        ("int64", "float32", "float32"),
        ("float16", "float64", "float64"),
        ("int16", "int64", "int64"),
        ("bool", "bool", "bool"),
    ],
)
def test_promote_types_is_pytorchs(a, b, expected):
    assert promotion.promote_types(a, b) == expected
    assert promotion.promote_types(b, a) == expected


@pytest.mark.parametrize(
    "operands,expected",
    [
        ((("bool", 1), 3), "int64"),
        ((("uint8", 1), -2), "uint8"),
        ((("int8", 1), 2.5), "float32"),
        ((("float16", 1), 2.5), "float16"),
        ((("float32", 1), ("float64", 0)), "float32"),
        ((("int8", 1), ("float64", 0)), "float64"),
        ((("int64", 0), 2.5), "float32"),
        ((("float64", 0), 2.5), "float64"),
        ((True, False), "bool"),
        ((1, 0), "int64"),
        ((1.0, 0), "float32"),
    ],
)
def test_result_type_is_pytorchs(operands, expected):
    class Operand:
        def __init__(self, dtype, ndim):
            self.dtype, self.ndim = dtype, ndim

    built = [Operand(*o) if isinstance(o, tuple) else o for o in operands]
    assert promotion.result_type(*built) == expected


def _dtype(x):
    return ta.backend.dtype_name(x.dtype)


def test_a_mask_times_a_number_is_int64(device):
    mask = ta.tensor([True, False, True], device=device)
    x = ta.tensor([1.0, 2.0, 3.0], device=device)
    assert _dtype(mask * 3) == "int64" and (mask * 3).tolist() == [3, 0, 3]
    assert (mask + 1).tolist() == [2, 1, 2] and _dtype(mask * 0 + 5) == "int64"
    assert (x * (mask * 10)).tolist() == [10.0, 0.0, 30.0]  # a masked loss, not 10x too small
    assert ((mask > 0) * 2 - 1).tolist() == [1, -1, 1]
    assert (mask == 3).tolist() == [False] * 3 and (mask != -2).tolist() == [True] * 3
    assert (mask / 3).tolist() == pytest.approx([1 / 3, 0.0, 1 / 3])
    assert _dtype(mask // 2) == "int64" and (mask**2).tolist() == [1, 0, 1]
    assert (mask % 3).tolist() == [1, 0, 1] and (mask ^ 3).tolist() == [2, 3, 2]


def test_integers_wrap_and_divide_as_pytorch(device):
    u8 = ta.tensor([1, 200], dtype="uint8", device=device)
    assert (u8 + 300).tolist() == [45, 244] and (u8 * -1).tolist() == [255, 56]
    assert (u8 / -2).tolist() == [-0.5, -100.0]  # a float division by -2, not by 254
    assert (ta.tensor([1, 2], dtype="int32", device=device) + 2**40).tolist() == [1, 2]
    ints = ta.tensor([0, 1, 2, -1, -2, 3], device=device)
    assert (ints ** ta.tensor(-1, device=device)).tolist() == [0, 1, 0, -1, 0, 0]
    assert (2 ** ta.tensor([-1, 3], device=device)).tolist() == [0, 8]
    with pytest.raises(RuntimeError, match="negative integer powers"):
        ints**-1
    for divide in (operator.floordiv, operator.mod, ta.remainder, ta.floor_divide, ta.fmod):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            divide(ints, 0)


def test_float_ops_of_integers_are_float32(device):
    ints = ta.tensor([1, 4], device=device)
    assert _dtype(ints.sqrt()) == "float32" and ints.sqrt().tolist() == [1.0, 2.0]
    assert _dtype(ta.tensor([True, False], device=device).sigmoid()) == "float32"
    assert _dtype(ints.floor()) == "int64" and ints.round().tolist() == [1, 4]
    assert _dtype(ta.tensor([True], device=device).square()) == "int64"
    with pytest.raises(NotImplementedError):
        ta.tensor([True], device=device).floor()


def test_values_written_into_a_tensor_are_checked(device):
    ints = ta.tensor([0, 1, 2], device=device)
    assert _dtype(ints.masked_fill(ints > 0, 2.7)) == "int64"
    assert ints.masked_fill(ints > 0, 2.7).tolist() == [0, 2, 2]
    assert _dtype(ta.where(ints > 0, 1, 0)) == "int64"
    assert ta.full_like(ints, 2.7).tolist() == [2, 2, 2]
    for write in (lambda x: x.fill_(float("nan")), lambda x: x.__setitem__(0, float("nan"))):
        with pytest.raises(RuntimeError, match="cannot be converted to type int64"):
            write(ints.clone())
    with pytest.raises(RuntimeError, match="can't be cast"):
        ta.tensor([True], device=device).add_(1)


def test_constructors_refuse_what_pytorch_refuses():
    with pytest.raises(ValueError, match="overflows int64"):
        ta.tensor(2**63)
    with pytest.raises(ValueError, match="step must be nonzero"):
        ta.arange(0, 3, 0.5, dtype=ta.int64)
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        ta.arange(0, 5, -1)
    assert ta.arange(0, 2.5, dtype=ta.int64).tolist() == [0, 1]


def test_the_legacy_constructor_is_pytorchs(device):
    """``Tensor(...)`` is PyTorch's legacy constructor: sizes, or data made float32."""
    assert ta.Tensor(2, 3).shape == (2, 3) and _dtype(ta.Tensor(2, 3)) == "float32"
    assert ta.Tensor().shape == (0,)
    assert _dtype(ta.Tensor([1, 0])) == "float32" and ta.Tensor([1, 0]).tolist() == [1.0, 0.0]
    assert _dtype(ta.Tensor(np.array([True]))) == "float32"
    assert _dtype(ta.Tensor([1, 0], dtype="int64", device=device)) == "int64"
    ints = ta.tensor([1, 0], device=device)
    assert _dtype(ta.Tensor(ints)) == "int64"  # a tensor's copy keeps its dtype
    assert _dtype(ta.tensor(np.array([1], dtype=np.int16))) == "int16"  # tensor() keeps it


@pytest.mark.parametrize("name", ["add_", "sub_", "mul_", "div_", "clamp_", "pow_"])
def test_in_place_ops_cast_as_pytorch(name):
    """In place, the result must fit the tensor's dtype: PyTorch refuses a float result in an
    integer tensor and any number result in a bool one."""
    torch = pytest.importorskip("torch")
    cases = [
        (
            f"{name}({a}, {b})",
            lambda m, make, a=a, b=b: getattr(make(_values(a)).clone(), name)(
                make(_values(b, divisor=True))
            ),
        )
        for a, b in itertools.product(DTYPES, DTYPES)
    ]
    cases += [
        (
            f"{name}({a}, {number!r})",
            lambda m, make, a=a, number=number: getattr(make(_values(a)).clone(), name)(number),
        )
        for a, number in itertools.product(DTYPES, NUMBERS)
    ]
    problems = _compare(torch, cases)
    assert not problems, "\n".join(problems)
