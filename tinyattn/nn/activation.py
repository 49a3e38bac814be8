"""nn layer, part 2b: more activation modules with PyTorch's names, each a thin wrapper over the
function of the same name in `nn.functional` (which holds the math). Shapes: any, except GLU
(halves `dim`) and Softmin (along `dim`).
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from . import functional as F
from .module import Module


class ReLU6(Module):
    """y = min(max(x, 0), 6)."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.relu6(x)


class Hardtanh(Module):
    """y = x clamped into [min_val, max_val]."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        self.min_val, self.max_val = min_val, max_val

    def forward(self, x: Tensor) -> Tensor:
        return F.hardtanh(x, self.min_val, self.max_val)


class Hardsigmoid(Module):
    """y = relu6(x + 3) / 6."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.hardsigmoid(x)


class Hardswish(Module):
    """y = x * relu6(x + 3) / 6."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.hardswish(x)


class SELU(Module):
    """y = scale * elu(x, alpha), the self-normalising constants."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.selu(x)


class Mish(Module):
    """y = x * tanh(softplus(x))."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        return F.mish(x)


class Softsign(Module):
    """y = x / (1 + |x|)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.softsign(x)


class GLU(Module):
    """y = a * sigmoid(b), a and b the halves of x along `dim`."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.glu(x, self.dim)


class Softmin(Module):
    """y = softmax(-x) along `dim` (required, as for Softmax)."""

    def __init__(self, dim: Any = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmin(x, self.dim)


__all__ = [
    "GLU",
    "SELU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "Mish",
    "ReLU6",
    "Softmin",
    "Softsign",
]
