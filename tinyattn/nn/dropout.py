"""nn layer, dropout part: channel dropout (Dropout1d/2d/3d) and alpha dropout (AlphaDropout,
FeatureAlphaDropout), with PyTorch's arguments and meanings. (The elementwise Dropout is in
`nn.layers`.) Each is the identity in eval mode; in training it calls its function in
`nn.functional_dropout`, whose masks come from the host RNG (`ta.manual_seed`).

Imports `errors`, `tensor`, `nn.module` and `nn.functional_dropout`.
"""

from __future__ import annotations

from ..errors import TinyattnError
from ..tensor import Tensor
from . import functional_dropout as F
from .module import Module


class _DropoutLayer(Module):
    """The probability p, checked as PyTorch checks it, and ``inplace`` (accepted; the layers
    compute out of place)."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
            raise TinyattnError(
                f"{type(self).__name__}: dropout probability has to be between 0 and 1, but got {p}"
            )
        self.p, self.inplace = p, inplace

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(_DropoutLayer):
    """Zero whole channels with probability p in training (scaling the rest by 1 / (1 - p)).
    Shapes: (N, C, L) or (C, L) -> the same."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout1d(input, self.p, self.training)


class Dropout2d(_DropoutLayer):
    """Zero whole channels with probability p in training (scaling the rest by 1 / (1 - p)).
    A 3-d input is read as (N, C, L), with a warning, as in PyTorch.
    Shapes: (N, C, H, W) -> the same."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout2d(input, self.p, self.training)


class Dropout3d(_DropoutLayer):
    """Zero whole channels with probability p in training (scaling the rest by 1 / (1 - p)).
    Shapes: (N, C, D, H, W) or (C, D, H, W) -> the same."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout3d(input, self.p, self.training)


class AlphaDropout(_DropoutLayer):
    """Dropout for SELU networks: dropped values go to SELU's saturation and an affine map keeps
    mean 0 and variance 1 (see `F.alpha_dropout`). Shapes: any -> the same."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.alpha_dropout(input, self.p, self.training)


class FeatureAlphaDropout(_DropoutLayer):
    """Alpha dropout of whole channels (see `F.feature_alpha_dropout`).
    Shapes: (N, C, *) -> the same."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.feature_alpha_dropout(input, self.p, self.training)


__all__ = ["AlphaDropout", "Dropout1d", "Dropout2d", "Dropout3d", "FeatureAlphaDropout"]
