"""tinyattn.utils.data.dataloader: default collation and PyTorch's DataLoader.

Everything runs in the calling process. A map-style dataset with ``num_workers > 0`` gives the
batches PyTorch's workers give (the sampler runs in the main process either way), loaded here
one after another; an IterableDataset, which PyTorch copies into each worker, and a
``worker_init_fn`` are refused with workers. Default collation
follows PyTorch's: Tensors and arrays are stacked along a new first axis, Python ints become an
int64 tensor, floats float64, bools bool, strings stay a list, and tuples, lists and dicts are
collated element by element (a tuple or list gives a list, a dict a dict). Imports `tensor` and
the dataset and sampler modules beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ...creation import tensor
from ...errors import TinyattnError
from ...methods.common import stack
from ...tensor import Tensor
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler


def _is_array(value: Any) -> bool:
    """A NumPy (or other array-API) array or array scalar, recognised without importing NumPy."""
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, Tensor)


def default_convert(data: Any) -> Any:
    """Arrays to Tensors, recursively through tuples, lists and dicts (batch_size=None)."""
    if isinstance(data, Tensor):
        return data
    if _is_array(data):
        return tensor(data)
    if isinstance(data, dict):
        return {key: default_convert(value) for key, value in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # a named tuple
        return type(data)(*(default_convert(value) for value in data))
    if isinstance(data, list | tuple):
        return [default_convert(value) for value in data]
    return data


def default_collate(batch: Sequence[Any]) -> Any:
    """Merge a list of samples into a batch, PyTorch's rules (see the module docstring)."""
    if not batch:
        raise TinyattnError("default_collate: got an empty batch")
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(list(batch), axis=0)
    if _is_array(first):
        return stack([tensor(sample) for sample in batch], axis=0)
    if isinstance(first, bool):
        return Tensor(list(batch), dtype="bool")
    if isinstance(first, int):
        return Tensor(list(batch), dtype="int64")
    if isinstance(first, float):
        return Tensor(list(batch), dtype="float64")
    if isinstance(first, str | bytes):
        return list(batch)
    if isinstance(first, dict):
        return {key: default_collate([sample[key] for sample in batch]) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a named tuple keeps its type
        return type(first)(*(default_collate(list(column)) for column in zip(*batch, strict=True)))
    if isinstance(first, list | tuple):
        if any(len(sample) != len(first) for sample in batch):
            raise RuntimeError("default_collate: each element in the batch must have equal size")
        return [default_collate(list(column)) for column in zip(*batch, strict=True)]
    raise TypeError(
        f"default_collate: batch elements must be Tensors, arrays, numbers, strings, dicts, "
        f"tuples or lists; got {type(first).__name__}"
    )


# ---------------------------------------------------------------------------------- DataLoader
def _check_workers(op: str, dataset: Any, num_workers: int, worker_init_fn: Any) -> None:
    """Workers change only where batches are loaded for a map-style dataset; what they would
    change (a copy of an iterable dataset per worker, code run in each worker) is refused."""
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
        raise TinyattnError(f"{op}: num_workers option should be non-negative, got {num_workers!r}")
    if num_workers and (isinstance(dataset, IterableDataset) or worker_init_fn is not None):
        raise TinyattnError(
            f"{op}: num_workers={num_workers} with an IterableDataset or a worker_init_fn is "
            "not supported; tinyattn loads in the calling process, so use num_workers=0"
        )


class DataLoader:
    """Iterate over a dataset in batches: ``for x, y in DataLoader(ds, batch_size=32,
    shuffle=True)``. A fresh order is drawn each time iteration starts."""

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Any = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
    ) -> None:
        op = "DataLoader"
        _check_workers(op, dataset, num_workers, worker_init_fn)
        if generator is not None:
            raise NotImplementedError(
                f"{op}: generator= is not supported; shuffling draws from the host RNG seeded "
                "by ta.manual_seed"
            )
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0
        ):
            raise TinyattnError(
                f"{op}: batch_size must be a positive int or None, got {batch_size!r}"
            )
        iterable = isinstance(dataset, IterableDataset)
        if iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise TinyattnError(
                f"{op}: an IterableDataset takes no shuffle, sampler or batch_sampler"
            )
        if sampler is not None and shuffle:
            raise TinyattnError(f"{op}: sampler and shuffle=True are mutually exclusive")
        if batch_sampler is not None and (
            batch_size != 1 or shuffle or sampler is not None or drop_last
        ):
            raise TinyattnError(
                f"{op}: batch_sampler is mutually exclusive with batch_size, shuffle, sampler "
                "and drop_last"
            )
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        if batch_sampler is None and batch_size is not None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.num_workers = sampler, batch_sampler, num_workers
        self._auto_batch = batch_sampler is not None or (iterable and batch_size is not None)
        default = default_collate if self._auto_batch else default_convert
        self.collate_fn = default if collate_fn is None else collate_fn

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self.dataset, IterableDataset):
            yield from self._iterate_stream()
            return
        if self.batch_sampler is not None:
            for indices in self.batch_sampler:
                yield self.collate_fn([self.dataset[i] for i in indices])
        else:
            for index in self.sampler:
                yield self.collate_fn(self.dataset[index])

    def _iterate_stream(self) -> Iterator[Any]:
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            raise TypeError("DataLoader: the length of an IterableDataset is not known")
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)


__all__ = ["DataLoader", "default_collate", "default_convert"]
