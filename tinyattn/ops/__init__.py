"""Ops layer: the primitive Functions, each with its forward and backward side by side.

This package is the only home of derivative math. Imports `autograd`, `backend` and `kernels`
(the array-level speed tricks) only; backward rules use the Tensor methods of the tensors they
are given, never the `tensor` module itself.
"""

from .attention import BlockwiseAttention, HeadsAttention, OnceDifferentiable
from .elementwise import (
    Abs,
    Add,
    AddScalar,
    Cast,
    Clip,
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
    Neg,
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
    Where,
)
from .fused import LayerNorm, Linear
from .indexing import GetItem, IndexAdd
from .reductions import (
    BroadcastTo,
    Max,
    Mean,
    Min,
    Norm,
    Prod,
    Sum,
    SumTo,
    normalize_axes,
    normalize_dim,
    sum_array,
)
from .shape import (
    Concat,
    MatMul,
    Permute,
    Reshape,
    Split,
    ToDevice,
    broadcast_shapes,
    check_reshape,
    matmul_shape,
)
from .softmax import LogSoftmax, SavedLogSoftmax, Softmax
from .special import Erf, Gelu

__all__ = [
    "AddScalar",
    "DivScalar",
    "MulScalar",
    "PowScalar",
    "RDivScalar",
    "RPowScalar",
    "RSubScalar",
    "Abs",
    "Add",
    "BlockwiseAttention",
    "HeadsAttention",
    "BroadcastTo",
    "Cast",
    "Clip",
    "Concat",
    "Split",
    "Div",
    "Erf",
    "Gelu",
    "Exp",
    "GetItem",
    "IndexAdd",
    "LayerNorm",
    "Linear",
    "Log",
    "LogSoftmax",
    "SavedLogSoftmax",
    "MatMul",
    "Max",
    "Maximum",
    "Mean",
    "Norm",
    "Min",
    "Minimum",
    "Mul",
    "Neg",
    "OnceDifferentiable",
    "Permute",
    "Pow",
    "Relu",
    "Reshape",
    "Sigmoid",
    "Prod",
    "Softmax",
    "Sqrt",
    "Sub",
    "Sum",
    "SumTo",
    "Tanh",
    "ToDevice",
    "Where",
    "broadcast_shapes",
    "check_reshape",
    "matmul_shape",
    "normalize_axes",
    "normalize_dim",
    "sum_array",
]

# Functions added for PyTorch's names, one idea per file (registered in ops/table.py).
from .computed import Computed, array_call, computed  # noqa: E402
from .losses import BinaryCrossEntropy, CrossEntropy, NegLogLikelihood  # noqa: E402
from .movement import Clone, Diagonal, DiagonalEmbed, Flip  # noqa: E402
from .rounding import Ceil, Floor, FloorDivide, Remainder, Round, Sign, Trunc  # noqa: E402
from .scan import Cumsum  # noqa: E402
from .targets import ClassWeights, Dropout, KeptCount, bad_targets  # noqa: E402
from .trig import Acos, Acosh, Asin, Asinh, Atan, Atan2, Atanh, Cos, Cosh, Sin, Sinh, Tan  # noqa: E402

__all__ += [
    "Ceil",
    "Clone",
    "Cos",
    "Cumsum",
    "Diagonal",
    "DiagonalEmbed",
    "Flip",
    "Floor",
    "FloorDivide",
    "Remainder",
]
__all__ += ["Atan2", "Expm1", "Log1p", "Round", "Sign", "Sin", "Trunc"]
__all__ += ["Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cosh", "Sinh", "Tan"]
__all__ += ["Exp2", "Log2", "Log10"]
__all__ += ["BinaryCrossEntropy", "CrossEntropy", "NegLogLikelihood"]
__all__ += [
    "ClassWeights",
    "Computed",
    "Dropout",
    "KeptCount",
    "array_call",
    "bad_targets",
    "computed",
]

from .conv import Fold, Unfold  # noqa: E402

__all__ += ["Fold", "Unfold"]
