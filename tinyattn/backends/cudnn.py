"""``torch.backends.cudnn``: the flags programs set, with PyTorch's defaults, stored without
effect (tinyattn has no cuDNN; see the package's docstring). ``is_available()`` is False."""

from __future__ import annotations

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: tinyattn does not use cuDNN."""
    return False


__all__ = ["allow_tf32", "benchmark", "deterministic", "enabled", "is_available"]
