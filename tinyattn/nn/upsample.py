"""nn.Upsample: `nn.functional.interpolate` as a module, with PyTorch's signature."""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from .functional_interp import interpolate
from .module import Module


def _as_floats(scale_factor: Any) -> Any:
    """PyTorch keeps a scale factor as a float, or a tuple of floats."""
    if isinstance(scale_factor, tuple):
        return tuple(float(f) for f in scale_factor)
    return float(scale_factor) if scale_factor else None


class Upsample(Module):
    """Resample the spatial axes to `size` or by `scale_factor` with `mode` (see
    `nn.functional.interpolate`); no parameters.
    Shapes: (N, C, *in) -> (N, C, *out)."""

    def __init__(
        self,
        size: Any = None,
        scale_factor: Any = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        super().__init__()
        self.size, self.scale_factor = size, _as_floats(scale_factor)
        self.mode, self.align_corners = mode, align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return interpolate(
            input,
            self.size,
            self.scale_factor,
            self.mode,
            self.align_corners,
            recompute_scale_factor=self.recompute_scale_factor,
        )

    def extra_repr(self) -> str:
        if self.scale_factor is not None:
            info = f"scale_factor={self.scale_factor!r}"
        else:
            info = f"size={self.size!r}"
        return f"{info}, mode={self.mode!r}"


__all__ = ["Upsample"]
