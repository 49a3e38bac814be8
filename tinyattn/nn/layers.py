"""nn layer, part 2: the basic layers Linear, Embedding, LayerNorm, Dropout and activations.

Imports `backend`, `tensor`, `functional` and `nn.module`, `nn.init`, `nn.functional`.
Invariants: weights are drawn from the host RNG (`ta.manual_seed`), so every backend starts from
identical numbers; layouts and initialisations are PyTorch's, so state dicts map one to one.
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from .. import functional as F
from ..creation import ones, rand, randn, zeros
from ..errors import TinyattnError
from ..tensor import Tensor
from . import functional as torch_style
from . import init
from .module import Module, Parameter


def _check_sizes(op: str, **sizes: int) -> None:
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise TinyattnError(f"{op}: {name} must be a positive int, got {value!r}")


def _place(module: Module, device: Any, dtype: Any) -> None:
    """PyTorch's factory keywords: move or cast a freshly built layer."""
    if dtype is not None:
        module.to(dtype if isinstance(dtype, str) else backend.dtype_name(dtype))
    if device is not None:
        module.to(device)


def uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    """U(-bound, bound) from the host RNG: drawn in float64, stored as float32 (the default)."""
    return ((rand(*shape, dtype="float64") * 2.0 - 1.0) * bound).to("float32")


def redraw_uniform(weight: Tensor, bias: Tensor | None, bound: float) -> None:
    """Refill weight, then bias, in place with U(-bound, bound) (the constructors' draw order)."""
    init._write(weight, uniform(tuple(weight.shape), bound))
    if bias is not None:
        init._write(bias, uniform(tuple(bias.shape), bound))


class Linear(Module):
    """y = x @ weight^T + bias, weight (out, in) and bias (out,) as in PyTorch.

    Init (PyTorch's): weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
    Shapes: x (..., in_features) -> (..., out_features).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        _check_sizes("Linear", in_features=in_features, out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(zeros(out_features, in_features))
        self.register_parameter("bias", Parameter(zeros(out_features)) if bias else None)
        self.reset_parameters()  # as PyTorch: a subclass's own reset_parameters runs here
        _place(self, device, dtype)

    def reset_parameters(self) -> None:
        """Re-initialise weight and bias in place, as the constructor does."""
        redraw_uniform(self.weight, self.bias, 1.0 / math.sqrt(self.in_features))

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        has_bias = self.bias is not None
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={has_bias}"


class NonDynamicallyQuantizableLinear(Linear):
    """PyTorch's Linear subclass for `MultiheadAttention.out_proj` (a name that keeps the layer out
    of PyTorch's dynamic quantization): the same layer, the same state_dict keys. As in PyTorch
    it lives only at ``nn.modules.linear``, where saved modules name it."""


class Embedding(Module):
    """A (V, D) table of learned vectors looked up by integer index; init N(0, 1) (PyTorch's).
    With padding_idx, that row starts at zero and gets no gradient (PyTorch's meaning).

    Shapes: indices (...) integer -> (..., D).
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        device: Any = None,
        dtype: Any = None,
        _weight: Tensor | None = None,
        _freeze: bool = False,
    ) -> None:
        super().__init__()
        _check_sizes("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise TinyattnError(
                    f"Embedding: padding_idx {padding_idx} is out of range for "
                    f"{num_embeddings} embeddings"
                )
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:  # from_pretrained: the given table as it is, padding row too
            self.weight = Parameter(_weight.detach(), requires_grad=not _freeze)
            self.weight.data = _weight.detach()  # shares the table's memory, as PyTorch does
            _place(self, device, dtype)
            return
        self.weight = Parameter(zeros(num_embeddings, embedding_dim))
        self.reset_parameters()  # as PyTorch: a subclass's own reset_parameters runs here
        _place(self, device, dtype)

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Tensor,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """An Embedding holding `embeddings` (V, D) as its weight (the padding row is kept as
        given); frozen (requires_grad=False) unless freeze=False. As PyTorch's, whose max_norm,
        scale_grad_by_freq and sparse tinyattn does not support."""
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError(
                "Embedding.from_pretrained: max_norm, scale_grad_by_freq and sparse are not "
                "supported; renormalise the table before passing it"
            )
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
            shape = getattr(embeddings, "shape", type(embeddings).__name__)
            raise TinyattnError(
                f"Embedding.from_pretrained: embeddings must be a 2-D Tensor, got {shape}"
            )
        rows, columns = embeddings.shape
        return cls(rows, columns, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze)

    def reset_parameters(self) -> None:
        """Re-initialise the table in place with N(0, 1), the padding row zero (PyTorch's; a
        from_pretrained table is redrawn too, as PyTorch's is)."""
        table = randn(*self.weight.shape, dtype="float32").numpy()
        if self.padding_idx is not None:
            table[self.padding_idx] = 0.0
        init._write(self.weight, table)

    def forward(self, indices: Any) -> Tensor:
        if self.padding_idx is None:
            return F.embedding(indices, self.weight)
        return torch_style.embedding(indices, self.weight, padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalise the trailing axes to mean 0, variance 1, then scale by weight and shift by bias
    (init ones and zeros). Shapes: x (..., *normalized_shape) -> same.
    """

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        shape = (
            (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        )
        _check_sizes("LayerNorm", **{f"normalized_shape[{i}]": n for i, n in enumerate(shape)})
        if not isinstance(eps, int | float) or isinstance(eps, bool) or not 0 < eps < math.inf:
            raise TinyattnError(f"LayerNorm: eps must be a positive finite number, got {eps!r}")
        self.normalized_shape, self.eps = shape, eps
        weight = Parameter(ones(*shape)) if elementwise_affine else None
        self.register_parameter("weight", weight)
        self.register_parameter(
            "bias", Parameter(zeros(*shape)) if elementwise_affine and bias else None
        )
        _place(self, device, dtype)

    def reset_parameters(self) -> None:
        """Weight back to ones and bias to zeros, in place."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class Dropout(Module):
    """Zero elements with probability p in training mode (scaling the rest by 1/(1-p));
    the identity in eval mode. Shapes: any."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise TinyattnError(f"Dropout: probability p must be in [0, 1], got {p!r}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLU(Module):
    """y = max(x, 0). Shapes: any. ``inplace=True`` is accepted and computes out of place."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class Tanh(Module):
    """y = tanh(x). Shapes: any."""

    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    """y = 1 / (1 + exp(-x)). Shapes: any."""

    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class SiLU(Module):
    """y = x * sigmoid(x). Shapes: any."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return x * x.sigmoid()


class Softmax(Module):
    """softmax along `dim` (required: PyTorch's implicit choice is deprecated). Shapes: any."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        if dim is None:
            raise TypeError("Softmax: pass dim= (tinyattn does not guess the dimension)")
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, axis=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    """log(softmax) along `dim`, computed stably. Shapes: any."""

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, axis=self.dim)


class LeakyReLU(Module):
    """y = x where x > 0, else negative_slope * x. Shapes: any."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return torch_style.leaky_relu(x, self.negative_slope)


class Flatten(Module):
    """Merge the axes start_dim..end_dim into one (default: all but the batch axis).
    Shapes: (N, d1, ..., dk) -> (N, d1 * ... * dk)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        start, end = self.start_dim % max(x.ndim, 1), self.end_dim % max(x.ndim, 1)
        if start > end:
            raise TinyattnError(
                f"Flatten: start_dim {self.start_dim} comes after end_dim {self.end_dim} for "
                f"input shape {x.shape}"
            )
        merged = 1
        for n in x.shape[start : end + 1]:
            merged *= n
        return x.reshape(*x.shape[:start], merged, *x.shape[end + 1 :])


class Identity(Module):
    """y = x; any constructor arguments are ignored (PyTorch's placeholder module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, x: Any) -> Any:
        return x


class GELU(Module):
    """y = x * Phi(x) (approximate="none") or its tanh approximation. Shapes: any."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


__all__ = [
    "GELU",
    "Dropout",
    "Embedding",
    "Flatten",
    "Identity",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LogSoftmax",
    "NonDynamicallyQuantizableLinear",
    "ReLU",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "redraw_uniform",
    "uniform",
]
