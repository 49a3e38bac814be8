"""PyTorch's ``torch.nn.parallel.DistributedDataParallel``: one model replica per process.

Imports `module`, `hooks`, `tensor` and `distributed`. Each rank runs the model on its own share
of the batch; backward averages the gradients over the ranks, so after it every rank holds

    grad = (1/n) * sum over ranks r of grad_r,

which is the gradient of the mean loss over the whole batch when each rank's loss is the mean
over an equal share. Every rank then takes the same optimizer step from the same parameters
(broadcast from rank 0 when the wrapper is made), so the replicas stay equal.

Overlap: the parameters are grouped into buckets (about ``bucket_cap_mb`` each, the last layers
first, since backward reaches them first). Each parameter has a post-accumulate-grad hook; when
every gradient of a bucket has arrived, the bucket's gradients are copied into one flat tensor
and its all-reduce starts (asynchronously) while backward goes on with earlier layers. The hook
of the last gradient waits for every bucket and writes the averages back into ``.grad``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from .. import distributed as dist
from ..autograd import hooks
from ..autograd.grad_mode import is_grad_enabled, no_grad
from ..creation import zeros
from ..tensor import Tensor
from .module import Module

FIRST_BUCKET_MB = 1.0  # PyTorch's first bucket is small, so communication starts early


class _Bucket:
    """Parameters whose gradients are averaged by one all-reduce of one flat tensor."""

    def __init__(self, params: list[Any]) -> None:
        self.params = params
        self.offsets = []
        total = 0
        for param in params:
            self.offsets.append(total)
            total += param.numel()
        self.flat = zeros(total, dtype=params[0].dtype, device=params[0].device)
        self.waiting, self.work, self.done_noted = 0, None, False

    def reset(self) -> None:
        self.waiting, self.work, self.done_noted = len(self.params), None, False

    def launch(self, group: Any) -> None:
        """Copy the gradients into the flat tensor and start its all-reduce (AVG)."""
        with no_grad():
            for param, offset in zip(self.params, self.offsets):
                part = self.flat[offset : offset + param.numel()]
                if param.grad is None:  # unused here (find_unused_parameters): adds zero
                    part.zero_()
                else:
                    part.copy_(param.grad.reshape(-1))
        self.work = dist.all_reduce(self.flat, dist.ReduceOp.AVG, group=group, async_op=True)

    def write_back(self, used: list[bool] | None) -> None:
        """Each parameter's ``.grad`` = its slice of the averaged flat tensor."""
        with no_grad():
            for k, (param, offset) in enumerate(zip(self.params, self.offsets)):
                if used is not None and not used[k]:
                    continue  # no rank used it: its .grad stays as it is, as PyTorch's
                average = self.flat[offset : offset + param.numel()].reshape(param.shape)
                if param.grad is None:
                    param.grad = average.clone()
                else:
                    param.grad.copy_(average)


def _buckets(params: list[Any], cap_mb: float) -> list[_Bucket]:
    """Buckets in reverse parameter order (backward's order), one dtype and device each, the
    first at most FIRST_BUCKET_MB (or `cap_mb` when smaller), the others at most `cap_mb`."""
    buckets, current, size, limit = [], [], 0, min(FIRST_BUCKET_MB, cap_mb) * 2**20
    for param in reversed(params):
        nbytes = param.numel() * getattr(param.dtype, "itemsize", 4)
        alike = not current or (param.dtype, param.device) == (current[0].dtype, current[0].device)
        if current and (size + nbytes > limit or not alike):
            buckets.append(_Bucket(current))
            current, size, limit = [], 0, cap_mb * 2**20
        current.append(param)
        size += nbytes
    if current:
        buckets.append(_Bucket(current))
    return buckets


def _tensors_in(value: Any) -> Iterator[Tensor]:
    """The tensors in a forward's output (nested tuples, lists and dicts)."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


class DistributedDataParallel(Module):
    """Wrap `module` so that backward averages its gradients over the ranks of the group.

    ``ddp.module`` is the wrapped module, and state-dict keys start ``module.`` as PyTorch's.
    `device_ids`, `output_device`, `dim`, `check_reduction`, `gradient_as_bucket_view` and
    `static_graph` are accepted for PyTorch's programs and change nothing here."""

    def __init__(
        self,
        module: Module,
        device_ids: list | None = None,
        output_device: Any = None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group: Any = None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
    ) -> None:
        super().__init__()
        _refuse_compiled(module)
        self.module = module
        self.process_group = process_group
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = True
        group = process_group or dist.group.WORLD
        if group is None:
            raise ValueError(
                "DistributedDataParallel: Default process group has not been initialized, "
                "please make sure to call init_process_group."
            )
        self._world_size = dist.get_world_size(group)
        self._params = [p for p in module.parameters() if p.requires_grad]
        self._sync_module_states()
        self._bucket_list = _buckets(self._params, 25.0 if bucket_cap_mb is None else bucket_cap_mb)
        self._bucket_of = {}
        for bucket in self._bucket_list:
            for param in bucket.params:
                self._bucket_of[id(param)] = bucket
        self._handles = [
            p.register_post_accumulate_grad_hook(self._grad_ready) for p in self._params
        ]
        self._syncing = False  # a forward with sync on has run; its backward reduces
        self._used: set[int] | None = None
        self._timeline: list[tuple[str, int, float]] | None = None  # benchmarks set a list

    def _sync_module_states(self) -> None:
        """Every rank starts from rank 0's parameters and buffers."""
        group = self.process_group
        for tensor in [*self._params, *self.module.buffers()]:
            dist.broadcast(tensor.detach(), 0, group=group)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self._syncing and any(b.waiting for b in self._bucket_list):
            raise RuntimeError(self._unfinished_message())
        if self.broadcast_buffers and self.require_backward_grad_sync and is_grad_enabled():
            for buffer in self.module.buffers():
                dist.broadcast(buffer.detach(), 0, group=self.process_group)
        output = self.module(*inputs, **kwargs)
        self._syncing = self.require_backward_grad_sync and self._grad_enabled(output)
        if self._syncing:
            for bucket in self._bucket_list:
                bucket.reset()
            self._used = set()
            if self.find_unused_parameters:
                reached = hooks.leaves_reached(list(_tensors_in(output)))
                for param in self._params:
                    if id(param) not in reached:
                        self._ready(param, used=False)
        return output

    @staticmethod
    def _grad_enabled(output: Any) -> bool:
        return any(t.requires_grad for t in _tensors_in(output))

    def _grad_ready(self, param: Any) -> None:
        """The post-accumulate-grad hook: `param`'s gradient of this backward is in .grad."""
        if self._syncing:
            self._ready(param, used=True)

    def _ready(self, param: Any, used: bool) -> None:
        bucket = self._bucket_of[id(param)]
        if used:
            self._used.add(id(param))
        bucket.waiting -= 1
        if bucket.waiting == 0:
            bucket.launch(self.process_group)
            self._note("launch", bucket)
        for other in self._bucket_list:  # each test moves the engine's progress on
            if other.work is not None and other.work.is_completed():
                self._note("done", other)
        if all(b.work is not None for b in self._bucket_list):
            self._finish()

    def _finish(self) -> None:
        """Wait for every bucket and write the averages into .grad (the end of the reduction)."""
        started = time.perf_counter()
        for bucket in self._bucket_list:
            bucket.work.wait()
            self._note("done", bucket)
        self._note("waited", None, time.perf_counter() - started)
        used = self._globally_used() if self.find_unused_parameters else None
        for bucket in self._bucket_list:
            bucket.write_back(None if used is None else [used[id(p)] for p in bucket.params])
        self._syncing = False

    def _globally_used(self) -> dict[int, bool]:
        """Whether any rank used each parameter (an all-reduce MAX of the local flags)."""
        flags = zeros(len(self._params), dtype="float32")
        with no_grad():
            for k, param in enumerate(self._params):
                if id(param) in self._used:
                    flags[k] = 1.0
        dist.all_reduce(flags, dist.ReduceOp.MAX, group=self.process_group)
        return {id(p): bool(flags[k] > 0) for k, p in enumerate(self._params)}

    def _note(self, event: str, bucket: _Bucket | None, value: float | None = None) -> None:
        """For the benchmark's timeline: (event, bucket index, time, or seconds waited)."""
        if self._timeline is None:
            return
        if event == "done":
            if bucket.done_noted:
                return
            bucket.done_noted = True
        index = -1 if bucket is None else self._bucket_list.index(bucket)
        self._timeline.append((event, index, time.perf_counter() if value is None else value))

    def _unfinished_message(self) -> str:
        names = {id(p): n for n, p in self.module.named_parameters()}
        missing = [
            names.get(id(p), "?")
            for b in self._bucket_list
            if b.waiting
            for p in b.params
            if id(p) not in self._used
        ]
        return (
            "DistributedDataParallel: Expected to have finished reduction in the prior iteration "
            "before starting a new one. These parameters received no gradient in the last "
            f"backward: {missing}. Pass find_unused_parameters=True if the forward does not use "
            "every parameter, and make sure each forward's output is part of the loss."
        )

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Inside, backward accumulates gradients locally without averaging; the first
        backward after the block averages everything accumulated (gradient accumulation)."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous


def _refuse_compiled(module: Any) -> None:
    if type(module).__name__ == "CompiledModule":
        raise NotImplementedError(
            "DistributedDataParallel: wrapping a ta.compile(model) is not supported (its "
            "replayed backward hands over every gradient at once); wrap the module itself"
        )


__all__ = ["DistributedDataParallel"]
