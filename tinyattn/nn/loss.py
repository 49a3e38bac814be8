"""nn layer, part 5: loss modules with PyTorch's names, arguments and meanings, each a thin
wrapper over the function of the same name in `nn.functional`.

Shapes (as PyTorch): CrossEntropyLoss / NLLLoss input (N, C), (N, C, d1, ...) or (C,) with
classes on axis 1, target (N, d1, ...) class indices; MSELoss and KLDivLoss elementwise.
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from . import functional as F
from .module import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean", size_average: Any = None, reduce: Any = None):
        super().__init__()
        # PyTorch's deprecated size_average= / reduce= are refused, never ignored: ignoring
        # reduce=False would silently give the mean where per-element losses were asked for.
        F._no_legacy(type(self).__name__, size_average, reduce)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """Softmax cross entropy with class weights, ignore_index (default -100) and
    label_smoothing."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: Any = None,
        ignore_index: int = -100,
        reduce: Any = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(reduction, size_average, reduce)
        self.register_buffer("weight", weight)  # moves with .to(), as PyTorch's
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.cross_entropy(
            input,
            target,
            weight=self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities, with class weights and ignore_index
    (default -100)."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: Any = None,
        ignore_index: int = -100,
        reduce: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(reduction, size_average, reduce)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.nll_loss(
            input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction
        )


class MSELoss(_Loss):
    """Mean squared error (reduction "mean", "sum" or "none")."""

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
        super().__init__(reduction, size_average, reduce)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """Mean absolute error (reduction "mean", "sum" or "none")."""

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
        super().__init__(reduction, size_average, reduce)

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.l1_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta; reduced."""

    def __init__(
        self,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        beta: float = 1.0,
    ) -> None:
        super().__init__(reduction, size_average, reduce)
        self.beta = beta

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """0.5 d^2 where d = |input - target| < delta, else delta (d - 0.5 delta); reduced."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class BCELoss(_Loss):
    """Binary cross entropy of probabilities (logs clamped at -100, as PyTorch)."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
    ) -> None:
        super().__init__(reduction, size_average, reduce)
        self.weight = weight

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of logits, computed stably; pos_weight scales the positive term."""

    def __init__(
        self,
        weight: Tensor | None = None,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        pos_weight: Tensor | None = None,
    ) -> None:
        super().__init__(reduction, size_average, reduce)
        self.weight, self.pos_weight = weight, pos_weight

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, reduction=self.reduction, pos_weight=self.pos_weight
        )


class KLDivLoss(_Loss):
    """KL divergence with input as log-probabilities (reduction incl. "batchmean")."""

    def __init__(
        self,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        log_target: bool = False,
    ) -> None:
        super().__init__(reduction, size_average, reduce)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "HuberLoss",
    "KLDivLoss",
    "L1Loss",
    "MSELoss",
    "NLLLoss",
    "SmoothL1Loss",
]
