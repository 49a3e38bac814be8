"""PyTorch's ``torch.device``: a device name that also answers ``.type`` and ``.index``.

At the bottom of the layers with `backend` (imports nothing of tinyattn). Invariant: a `device`
IS its name, a ``str`` (``"cpu"``, ``"cuda:1"``, ``"strict:device1"``), so every function that
takes a device name takes a `device`, and ``x.device == "cpu"`` keeps working. The form of the
name is checked here; whether that device exists, when a tensor is made on it.
"""

from __future__ import annotations

import functools
from typing import Any

_TYPES = ("cpu", "cuda", "meta", "strict")


class device(str):  # noqa: N801  (PyTorch's name)
    """``ta.device("cuda:1")``, ``ta.device("cuda", 1)``, ``ta.device(0)`` (``"cuda:0"``).

    ``.type`` is the part before the colon; ``.index`` the device number (None when absent).
    Equal to another device, and to a string, when the names are equal (``"cuda"`` is not
    ``"cuda:0"``, as in PyTorch). Printed and repr'd as its name (``'cpu'``), so error messages
    that name a device read the same whether they got a `device` or a string.
    """

    __slots__ = ()

    def __new__(cls, type_or_name: Any, index: int | None = None) -> device:
        if isinstance(type_or_name, device) and index is None:
            return type_or_name
        if isinstance(type_or_name, int) and not isinstance(type_or_name, bool):
            type_or_name, index = "cuda", type_or_name  # PyTorch reads a bare int as a GPU
        if not isinstance(type_or_name, str):
            raise TypeError(
                f"device: expected a device name such as 'cpu' or 'cuda:0', got "
                f"{type(type_or_name).__name__}"
            )
        name = type_or_name
        if index is not None:
            if ":" in name or isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise RuntimeError(
                    f"device: cannot combine {name!r} with index {index!r}; give a type such "
                    "as 'cuda' and a non-negative int"
                )
            name = f"{name}:{index}"
        kind, colon, number = name.partition(":")
        if kind not in _TYPES or (colon and not number):
            raise RuntimeError(
                f"device: expected one of {', '.join(_TYPES)} at the start of the device "
                f"string, optionally ':N', got {name!r}"
            )
        if kind == "cuda" and colon and not number.isdigit():
            raise RuntimeError(f"device: invalid device index in {name!r}")
        return super().__new__(cls, name)

    @property
    def type(self) -> str:
        """``'cpu'``, ``'cuda'``, ``'meta'`` or ``'strict'``."""
        return str(self).partition(":")[0]

    @property
    def index(self) -> int | None:
        """The number after ``'cuda:'``; None for ``'cpu'`` and a bare ``'cuda'``."""
        number = str(self).partition(":")[2]
        return int(number) if number.isdigit() else None

    def __reduce__(self) -> tuple:  # copy and pickle rebuild it from its name
        return (device, (str(self),))


@functools.cache
def of_name(name: str) -> device:
    """The `device` of a name the backend made (``x.device``): built once per name, because
    every op that checks devices asks for it."""
    return device(name)


__all__ = ["device"]
