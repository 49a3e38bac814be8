"""PyTorch's deprecated ``torch.cuda.amp``: `GradScaler` and `autocast` with CUDA built in.

Each is `tinyattn.amp`'s class for device "cuda" and warns with FutureWarning on construction,
as PyTorch does, naming the ``torch.amp`` spelling to use instead.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import amp


class GradScaler(amp.GradScaler):
    """``torch.cuda.amp.GradScaler(init_scale, growth_factor, backoff_factor, growth_interval,
    enabled)``: ``torch.amp.GradScaler("cuda", ...)``."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        warnings.warn(
            "`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
            "`torch.amp.GradScaler('cuda', args...)` instead.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__(
            "cuda", init_scale, growth_factor, backoff_factor, growth_interval, enabled
        )

    def _owner(self) -> str:
        return "torch.cuda.amp.GradScaler"


class autocast(amp.autocast):  # noqa: N801  (PyTorch's name)
    """``torch.cuda.amp.autocast(enabled=True, dtype=float16, cache_enabled=True)``:
    ``torch.amp.autocast("cuda", ...)``."""

    def __init__(self, enabled: bool = True, dtype: Any = "float16", cache_enabled: bool = True):
        warnings.warn(
            "`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
            "`torch.amp.autocast('cuda', args...)` instead.",
            FutureWarning,
            stacklevel=2,
        )
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


__all__ = ["GradScaler", "autocast"]
