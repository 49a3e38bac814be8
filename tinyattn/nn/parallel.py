"""PyTorch's ``torch.nn.parallel``: `DistributedDataParallel` as an importable name.

Imports nothing of tinyattn. tinyattn trains in one process, so wrapping a model raises
NotImplementedError naming the class; programs that wrap only under ``torchrun`` (a ``RANK``
environment variable set) run unchanged without it.
"""

from __future__ import annotations

from typing import Any


class DistributedDataParallel:
    """Raises NotImplementedError when made: tinyattn has no multi-process training."""

    def __init__(self, module: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "torch.nn.parallel.DistributedDataParallel: distributed training is not supported "
            "by tinyattn, which runs in one process; use the module itself"
        )


__all__ = ["DistributedDataParallel"]
