"""PyTorch's ``torch.utils.tensorboard.SummaryWriter``, for scalars, on the tensorboard package.

Imports `tensor` and the optional `tensorboard` package (``pip install tinyattn[tensorboard]``);
without it, importing this module raises ImportError, as PyTorch's does. The event files are the
ones PyTorch writes for ``add_scalar`` (TensorBoard's ``simple_value`` summaries), so
``tensorboard --logdir`` shows them the same way. Only scalars are written: other ``add_*``
methods do not exist here.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime
from typing import Any

from ..tensor import Tensor

try:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
except ImportError as exc:  # the message PyTorch gives, and how to get the package
    raise ImportError(
        "TensorBoard logging requires TensorBoard version 1.15 or above "
        "(pip install tinyattn[tensorboard])"
    ) from exc


class SummaryWriter:
    """``SummaryWriter(log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120,
    filename_suffix="")``: PyTorch's arguments; `log_dir` defaults to
    ``runs/<date>_<host><comment>``, as PyTorch's. `purge_step` is refused (not supported)."""

    def __init__(
        self,
        log_dir: str | None = None,
        comment: str = "",
        purge_step: int | None = None,
        max_queue: int = 10,
        flush_secs: int = 120,
        filename_suffix: str = "",
    ) -> None:
        if purge_step is not None:
            raise NotImplementedError("SummaryWriter: purge_step is not supported")
        if not log_dir:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = log_dir
        self._writer = EventFileWriter(log_dir, max_queue, flush_secs, filename_suffix)

    def get_logdir(self) -> str:
        return self.log_dir

    def add_scalar(
        self,
        tag: str,
        scalar_value: float | Tensor,
        global_step: int | None = None,
        walltime: float | None = None,
        new_style: bool = False,
        double_precision: bool = False,
    ) -> None:
        """One scalar event: `scalar_value` (a number or a one-element tensor) at `global_step`."""
        if new_style or double_precision:
            raise NotImplementedError("SummaryWriter.add_scalar: new_style is not supported")
        value = scalar_value.item() if isinstance(scalar_value, Tensor) else float(scalar_value)
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
        event = Event(summary=summary, wall_time=time.time() if walltime is None else walltime)
        if global_step is not None:
            event.step = int(global_step)
        self._writer.add_event(event)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


__all__ = ["SummaryWriter"]
