"""The registration table of the elementwise ops: one line per PyTorch-named op.

Each entry names an op once. `tinyattn.tensor` reads these tables to give Tensor its methods
(``x.sin()``, ``x.add(y)``), its operators (``x + y``, ``2.0 - x``, ``x < y``, ``x & y``) and the
free functions (``tinyattn.sin(x)``); the op-table tests read them to check every entry's forward
against NumPy's function named in ``reference`` and its gradients with gradcheck. So adding a
built-in elementwise op is: write its Function (in this package), add one line here.

- `Unary`: a float -> float op, ``x.name()``.
- `Binary`: a differentiable op of two operands with broadcasting, ``x.name(y)``, optionally a
  Python operator (``dunder``) and scalar Functions for a Python-number operand of a float tensor.
- `Logical`: a comparison or bitwise op; a bool (or integer) result that carries no gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

from .elementwise import (
    Abs,
    Add,
    AddScalar,
    Div,
    DivScalar,
    Exp,
    Exp2,
    Expm1,
    Log,
    Log1p,
    Log2,
    Log10,
    Maximum,
    Minimum,
    Mul,
    MulScalar,
    Pow,
    PowScalar,
    RDivScalar,
    Relu,
    RPowScalar,
    RSubScalar,
    Sigmoid,
    Sqrt,
    Sub,
    Tanh,
)
from .rounding import Ceil, Floor, FloorDivide, Remainder, Round, Trunc
from .special import Erf
from .trig import Acos, Acosh, Asin, Asinh, Atan, Atan2, Atanh, Cos, Cosh, Sin, Sinh, Tan


@dataclass(frozen=True)
class Unary:
    """``x.name()`` and ``tinyattn.name(x)``: `function` applied to a tensor."""

    name: str
    function: type
    reference: str | None  # the NumPy function with the same meaning (None: tested by hand)
    # Where the tests draw inputs: normal, positive, distinct, nonzero, unit (|x| < 1, for asin,
    # acos and atanh), above_one (acosh) or moderate (|x| < 1.3, away from tan's poles).
    domain: str = "normal"
    # What an integer or bool input does, as in PyTorch: "float" is computed in the default
    # float32; "keep" (the roundings) returns the integers unchanged; "same" computes in the
    # input's dtype (abs, relu). "keep" and "same" refuse bool with `bool_error`.
    integers: str = "float"
    bool_error: type = NotImplementedError


@dataclass(frozen=True)
class Binary:
    """``x.name(y)``, ``tinyattn.name(x, y)`` and, with `dunder`, ``x op y`` and ``y op x``."""

    name: str
    function: type
    reference: str
    dunder: str | None = None  # "add" gives __add__ and __radd__
    scalar: type | None = None  # x op c for a float x and a Python number c (no constant tensor)
    reflected_scalar: type | None = None  # c op x
    negate_scalar: bool = False  # the scalar Function takes -c (x - c is x + (-c))
    domain: str = "normal"
    differentiable: bool = True  # False: backward raises, as in PyTorch


@dataclass(frozen=True)
class Logical:
    """``x.name(y)`` (and ``x op y``): the array API function `reference`, no gradient."""

    name: str
    reference: str  # the array API (and NumPy) function
    dunder: str | None = None
    reflected: bool = False  # also define the reflected operator (__rand__ for "and")
    integral: bool | str = False  # bitwise: bool and integer tensors only; "int": integers


# fmt: off
UNARY = (
    Unary("exp",     Exp,     "exp"),
    Unary("log",     Log,     "log",  domain="positive"),
    Unary("log1p",   Log1p,   "log1p", domain="positive"),
    Unary("log2",    Log2,    "log2",  domain="positive"),
    Unary("log10",   Log10,   "log10", domain="positive"),
    Unary("exp2",    Exp2,    "exp2"),
    Unary("expm1",   Expm1,   "expm1"),
    Unary("sqrt",    Sqrt,    "sqrt", domain="positive"),
    Unary("tanh",    Tanh,    "tanh"),
    Unary("sigmoid", Sigmoid, None),
    Unary("relu",    Relu,    None, integers="same", bool_error=RuntimeError),
    Unary("abs",     Abs,     "abs",  domain="distinct", integers="same"),
    Unary("sin",     Sin,     "sin"),
    Unary("cos",     Cos,     "cos"),
    Unary("tan",     Tan,     "tan",     domain="moderate"),
    Unary("asin",    Asin,    "arcsin",  domain="unit"),
    Unary("acos",    Acos,    "arccos",  domain="unit"),
    Unary("atan",    Atan,    "arctan"),
    Unary("sinh",    Sinh,    "sinh"),
    Unary("cosh",    Cosh,    "cosh"),
    Unary("asinh",   Asinh,   "arcsinh"),
    Unary("acosh",   Acosh,   "arccosh", domain="above_one"),
    Unary("atanh",   Atanh,   "arctanh", domain="unit"),
    Unary("floor",   Floor,   "floor", integers="keep"),
    Unary("ceil",    Ceil,    "ceil", integers="keep"),
    Unary("round",   Round,   "round", integers="keep"),
    Unary("trunc",   Trunc,   "trunc", integers="keep"),
    Unary("erf",     Erf,     None),  # NumPy has no erf: tests/test_erf.py checks it
)

BINARY = (
    Binary("add", Add, "add",      "add",     AddScalar, AddScalar),
    Binary("sub", Sub, "subtract", "sub",     AddScalar, RSubScalar, negate_scalar=True),
    Binary("mul", Mul, "multiply", "mul",     MulScalar, MulScalar),
    Binary("div", Div, "divide",   "truediv", DivScalar, RDivScalar, domain="nonzero"),
    Binary("pow", Pow, "pow",      "pow",     PowScalar, RPowScalar, domain="positive"),
    Binary("floor_divide", FloorDivide, "floor_divide", "floordiv", domain="positive",
           differentiable=False),
    Binary("remainder", Remainder, "remainder", "mod", domain="positive"),
    Binary("maximum", Maximum, "maximum", domain="distinct"),
    Binary("minimum", Minimum, "minimum", domain="distinct"),
    Binary("atan2", Atan2, "arctan2", domain="nonzero"),  # off the origin and the cut (a = 0)
)

LOGICAL = (
    Logical("lt", "less",          "lt"),
    Logical("le", "less_equal",    "le"),
    Logical("gt", "greater",       "gt"),
    Logical("ge", "greater_equal", "ge"),
    Logical("eq", "equal",         "eq"),
    Logical("ne", "not_equal",     "ne"),
    Logical("bitwise_and", "bitwise_and", "and", reflected=True, integral=True),
    Logical("bitwise_or",  "bitwise_or",  "or",  reflected=True, integral=True),
    Logical("bitwise_xor", "bitwise_xor", "xor", reflected=True, integral=True),
    Logical("bitwise_left_shift",  "bitwise_left_shift",  "lshift", reflected=True,
            integral="int"),
    Logical("bitwise_right_shift", "bitwise_right_shift", "rshift", reflected=True,
            integral="int"),
)
# fmt: on
