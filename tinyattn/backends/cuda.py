"""``torch.backends.cuda``: the ``matmul`` flags (``allow_tf32`` and the reduced-precision
reductions), stored without effect (see the package's docstring)."""

from __future__ import annotations


class _MatmulSettings:
    """``torch.backends.cuda.matmul``: PyTorch's flags, with PyTorch's defaults."""

    def __init__(self) -> None:
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulSettings()

__all__ = ["matmul"]
