"""Ops layer: the primitive Functions, each with its forward and backward side by side.

This package is the only home of derivative math. Imports `autograd` and `backend` only; backward
rules use the Tensor methods of the tensors they are given, never the `tensor` module itself.
"""

from .elementwise import (
    Abs,
    Add,
    Cast,
    Clip,
    Div,
    Exp,
    Log,
    Maximum,
    Mul,
    Neg,
    Pow,
    Relu,
    Sigmoid,
    Sqrt,
    Sub,
    Tanh,
    Where,
)
from .indexing import GetItem, IndexAdd
from .reductions import BroadcastTo, Max, Mean, Min, Sum, SumTo, normalize_axes
from .shape import (
    Concat,
    MatMul,
    Permute,
    Reshape,
    ToDevice,
    broadcast_shapes,
    check_reshape,
    matmul_shape,
)

__all__ = [
    "Abs",
    "Add",
    "BroadcastTo",
    "Cast",
    "Clip",
    "Concat",
    "Div",
    "Exp",
    "GetItem",
    "IndexAdd",
    "Log",
    "MatMul",
    "Max",
    "Maximum",
    "Mean",
    "Min",
    "Mul",
    "Neg",
    "Permute",
    "Pow",
    "Relu",
    "Reshape",
    "Sigmoid",
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
]
