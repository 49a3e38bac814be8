"""PyTorch's ``torch.inference_mode``, here the same as ``no_grad``.

Sits on `grad_mode` and wraps its ``no_grad``: PyTorch's inference mode is no-grad plus tensors
that can never join a graph later, a speed-up tinyattn does not make. Tensors made inside are
ordinary tensors without a graph.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .grad_mode import no_grad


class inference_mode(contextlib.ContextDecorator):  # noqa: N801  (PyTorch's name)
    """``with ta.inference_mode():``, ``@ta.inference_mode()`` or ``@ta.inference_mode``: ops
    inside record no graph (this thread), as under ``no_grad``. ``inference_mode(False)``
    changes nothing."""

    def __new__(cls, mode: Any = True) -> Any:
        if callable(mode):  # the bare decorator: @ta.inference_mode
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode
        self._context: Any = None

    def __enter__(self) -> None:
        self._context = no_grad() if self.mode else contextlib.nullcontext()
        self._context.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)

    def _recreate_cm(self) -> inference_mode:  # one decorated function may run in two threads
        return type(self)(self.mode)


__all__ = ["inference_mode"]
