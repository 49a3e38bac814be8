"""PyTorch's ``torch.multiprocessing`` names, so that programs that import them load.

Imports the standard library and `errors` only. PyTorch's module is Python's
``multiprocessing`` whose tensors travel to child processes through shared memory, so that a
child's in-place writes reach the parent. tinyattn tensors have no shared-memory transport: a
pickled copy would change that meaning silently, so every call that starts or talks to another
process raises NotImplementedError naming the call. ``cpu_count`` and ``current_process``
answer as Python's do.
"""

from __future__ import annotations

import multiprocessing as _stdlib
from typing import Any

from .errors import refusing

cpu_count = _stdlib.cpu_count
current_process = _stdlib.current_process


_REASON = (
    "tinyattn runs in one process and cannot share tensors with other processes; call the "
    "worker function directly (for example fn(0, *args) in place of spawn(fn, args, nprocs=1))"
)


def _unsupported(name: str) -> Any:
    return refusing(f"torch.multiprocessing.{name}", _REASON)


spawn = _unsupported("spawn")
start_processes = _unsupported("start_processes")
Process = _unsupported("Process")
Pool = _unsupported("Pool")
Queue = _unsupported("Queue")
SimpleQueue = _unsupported("SimpleQueue")
Pipe = _unsupported("Pipe")
Manager = _unsupported("Manager")
get_context = _unsupported("get_context")
set_start_method = _unsupported("set_start_method")
set_sharing_strategy = _unsupported("set_sharing_strategy")
