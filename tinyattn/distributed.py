"""PyTorch's ``torch.distributed`` names, so that programs that import them load.

Imports `errors` only. tinyattn trains in one process: ``is_available()`` and ``is_initialized()``
answer False, and every call that would start or use a process group raises
NotImplementedError naming the call. Programs that check ``is_available()`` or an environment
variable such as ``RANK`` before they call these run unchanged.
"""

from __future__ import annotations

from typing import Any

from .errors import refusing


def is_available() -> bool:
    """False: tinyattn has no distributed (multi-process) backend."""
    return False


def is_initialized() -> bool:
    """False: no process group can be started."""
    return False


_REASON = (
    "distributed training is not supported by tinyattn, which runs in one process; run the "
    "program without torchrun (no RANK variable)"
)


def _unsupported(name: str) -> Any:
    return refusing(f"torch.distributed.{name}", _REASON)


init_process_group = _unsupported("init_process_group")
destroy_process_group = _unsupported("destroy_process_group")
get_rank = _unsupported("get_rank")
get_world_size = _unsupported("get_world_size")
barrier = _unsupported("barrier")
all_reduce = _unsupported("all_reduce")
broadcast = _unsupported("broadcast")
all_gather = _unsupported("all_gather")

__all__ = [
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy_process_group",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_available",
    "is_initialized",
]
