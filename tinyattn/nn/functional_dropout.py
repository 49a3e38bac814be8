"""nn.functional, dropout part: channel dropout (dropout1d/2d/3d) and alpha dropout
(alpha_dropout, feature_alpha_dropout), with PyTorch's signatures and meanings (re-exported by
`tinyattn.nn.functional`; the elementwise `dropout` is in `tinyattn.functional`).

Channel ("feature") dropout zeroes whole channels: one keep-mask value per (sample, channel),
broadcast over the spatial axes. Alpha dropout keeps SELU's zero mean and unit variance: a
dropped value becomes SELU's negative saturation, and an affine map restores the moments. The
output is the input times a constant mask (plus a constant shift), so the gradient comes from
the product: dL/dx = dL/dy * mask * scale. Masks come from the host RNG (`ta.manual_seed`).
``inplace=True`` is accepted and computes out of place (use the result). Imports `tensor`,
`creation`, `backend`.
"""

# PyTorch's parameter names (input, ...) are kept so keyword callers port unchanged.
# ruff: noqa: A002

from __future__ import annotations

import math
import warnings

from ..backend import check_floating
from ..creation import rand
from ..errors import TinyattnError
from ..tensor import Tensor

# SELU's alpha * scale: the value SELU saturates to is -SELU_ALPHA_SCALE.
SELU_ALPHA_SCALE = 1.7580993408473766


def _checked(op: str, input: Tensor, p: float) -> Tensor:
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: expected a Tensor input, got {type(input).__name__}")
    check_floating(op, input.array)  # an integer tensor cannot be scaled
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise TinyattnError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")
    return input


def _keep_mask(op: str, x: Tensor, p: float, per_channel: bool) -> Tensor:
    """1 where a value (or, per_channel, a whole channel) is kept, with probability 1 - p.
    Shapes: x (N, C, *) -> (N, C, 1, ...) per channel, else x's shape; x's dtype."""
    if per_channel and x.ndim < 2:
        raise TinyattnError(
            f"{op}: channel dropout needs an input of at least 2 dimensions (N, C, ...), got "
            f"shape {x.shape}"
        )
    shape = (*x.shape[:2], *(1,) * (x.ndim - 2)) if per_channel else x.shape
    # Drawn in float64 and compared, as the elementwise dropout's mask is.
    return (rand(*shape, dtype="float64", device=x.device) < 1.0 - p).to(x.dtype)


def _feature_dropout(op: str, x: Tensor, p: float, training: bool) -> Tensor:
    """y = x * m / (1 - p), m ~ Bernoulli(1 - p) per (sample, channel).
    Shapes: (N, C, *) -> (N, C, *)."""
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        return x * 0.0
    return x * (_keep_mask(op, x, p, per_channel=True) * (1.0 / (1.0 - p)))


def _alpha_dropout(op: str, x: Tensor, p: float, training: bool, per_channel: bool) -> Tensor:
    """y = a * (x * m + alpha' * (1 - m)) + b with m ~ Bernoulli(1 - p), alpha' = -1.758...
    (SELU's saturation), a = 1 / sqrt((alpha'^2 p + 1)(1 - p)) and b = -a alpha' p, so an input
    of mean 0 and variance 1 keeps them. dL/dx = dL/dy * a * m.
    Shapes: x (...) -> the same."""
    if not training or p == 0.0 or x.numel() == 0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = _keep_mask(op, x, p, per_channel)
    a = 1.0 / math.sqrt((SELU_ALPHA_SCALE**2 * p + 1.0) * (1.0 - p))
    # PyTorch's order of operations: b = (m - 1) * alpha a + alpha a p, then x * (m a) + b.
    shift = (keep - 1.0) * (SELU_ALPHA_SCALE * a) + SELU_ALPHA_SCALE * a * p
    return x * (keep * a) + shift


# ------------------------------------------------------------------------------ channel dropout
def dropout1d(
    input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> Tensor:
    """Zero whole channels with probability p, scaling the rest by 1 / (1 - p):
    y = x * m / (1 - p), m ~ Bernoulli(1 - p) per (n, c). The identity when not training.
    Shapes: (N, C, L) or (C, L) -> the same."""
    op = "dropout1d"
    x = _checked(op, input, p)
    if x.ndim not in (2, 3):
        raise TinyattnError(
            f"dropout1d: expected a 2-d (C, L) or 3-d (N, C, L) input, got shape {x.shape}"
        )
    if x.ndim == 2:
        return _feature_dropout(op, x.unsqueeze(0), p, training).squeeze(0)
    return _feature_dropout(op, x, p, training)


def dropout2d(
    input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> Tensor:
    """Zero whole channels with probability p, scaling the rest by 1 / (1 - p), as dropout1d.
    As in PyTorch, a 3-d input is read as (N, C, L) (with a warning), not as an unbatched
    (C, H, W): use dropout1d for that meaning.
    Shapes: (N, C, H, W) -> the same."""
    op = "dropout2d"
    x = _checked(op, input, p)
    if x.ndim not in (3, 4):
        warnings.warn(
            f"dropout2d: received a {x.ndim}-d input, which PyTorch deprecates; channel "
            "dropout exists for (N, C, H, W) inputs (use dropout for others)",
            stacklevel=2,
        )
    if x.ndim == 3:
        warnings.warn(
            "dropout2d: received a 3-d input, read as (N, C, L) (channel-wise 1-d dropout), "
            "as PyTorch does; use dropout1d to say so",
            stacklevel=2,
        )
    return _feature_dropout(op, x, p, training)


def dropout3d(
    input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
) -> Tensor:
    """Zero whole channels with probability p, scaling the rest by 1 / (1 - p), as dropout1d.
    Shapes: (N, C, D, H, W) or (C, D, H, W) -> the same."""
    op = "dropout3d"
    x = _checked(op, input, p)
    if x.ndim not in (4, 5):
        warnings.warn(
            f"dropout3d: received a {x.ndim}-d input, which PyTorch deprecates; channel "
            "dropout exists for (N, C, D, H, W) or (C, D, H, W) inputs (use dropout for others)",
            stacklevel=2,
        )
    if x.ndim != 5:  # read as unbatched, as PyTorch does
        return _feature_dropout(op, x.unsqueeze(0), p, training).squeeze(0)
    return _feature_dropout(op, x, p, training)


# -------------------------------------------------------------------------------- alpha dropout
def alpha_dropout(
    input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
) -> Tensor:
    """Alpha dropout for SELU networks: each value is dropped with probability p to SELU's
    saturation value, then an affine map restores mean 0 and variance 1 (see `_alpha_dropout`).
    training defaults to False, as in PyTorch. Shapes: any -> the same."""
    op = "alpha_dropout"
    return _alpha_dropout(op, _checked(op, input, p), p, training, per_channel=False)


def feature_alpha_dropout(
    input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
) -> Tensor:
    """Alpha dropout of whole channels: one mask value per (n, c), as in dropout2d.
    training defaults to False, as in PyTorch. Shapes: (N, C, *) -> the same."""
    op = "feature_alpha_dropout"
    return _alpha_dropout(op, _checked(op, input, p), p, training, per_channel=True)


__all__ = ["alpha_dropout", "dropout1d", "dropout2d", "dropout3d", "feature_alpha_dropout"]
