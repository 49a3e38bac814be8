"""tinyattn.utils.data: PyTorch's Dataset, TensorDataset, Subset, samplers and DataLoader.

Everything runs in the calling process (``num_workers > 0`` is refused). Shuffling and random
sampling draw from tinyattn's seeded host RNG (``ta.manual_seed``), so a seeded run repeats.
Default collation follows PyTorch's: Tensors and arrays are stacked along a new first axis,
Python ints become an int64 tensor, floats float64, bools bool, strings stay a list, and tuples,
lists and dicts are collated element by element (a tuple or list gives a list, a dict a dict).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .. import backend
from ..methods.common import stack
from ..tensor import Tensor


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__(index)`` and ``__len__``."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset read as a stream: subclasses define ``__iter__``."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__")


class TensorDataset(Dataset):
    """Samples are tuples (t[i] for t in tensors); all tensors share their first axis."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset: needs at least one tensor")
        sizes = {t.shape[0] if t.ndim else None for t in tensors}
        if len(sizes) != 1 or None in sizes:
            shapes = [t.shape for t in tensors]
            raise ValueError(f"TensorDataset: tensors must share their first axis, got {shapes}")
        self.tensors = tensors

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """Datasets one after another."""

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        self.cumulative_sizes, total = [], 0
        for dataset in self.datasets:
            total += len(dataset)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1] if self.cumulative_sizes else 0

    def __getitem__(self, index: int) -> Any:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"ConcatDataset: index out of range for {len(self)} samples")
        start = 0
        for dataset, end in zip(self.datasets, self.cumulative_sizes, strict=True):
            if index < end:
                return dataset[index - start]
            start = end
        raise IndexError(index)


def random_split(dataset: Dataset, lengths: Sequence[int | float], generator: Any = None) -> list:
    """Split into non-overlapping random Subsets of the given lengths, or of fractions summing
    to 1 (PyTorch's rule: the remainder goes one by one to the first parts)."""
    if generator is not None:
        raise NotImplementedError("random_split: generator= is not supported; use ta.manual_seed")
    n = len(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(x, float) for x in lengths) and abs(sum(lengths) - 1) < 1e-9:
        sizes = [int(n * fraction) for fraction in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n or any(x < 0 for x in lengths):
        raise ValueError(
            f"random_split: lengths {lengths} must be non-negative and sum to the dataset's "
            f"length {n} (or be fractions summing to 1)"
        )
    order = backend.host_rng().permutation(n).tolist()
    parts, start = [], 0
    for length in lengths:
        parts.append(Subset(dataset, order[start : start + length]))
        start += length
    return parts


# ----------------------------------------------------------------------------------- samplers
class Sampler:
    """Yields dataset indices; subclasses define ``__iter__`` (and ``__len__`` where known)."""

    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source: Any) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices (new each epoch), or with ``replacement=True``
    num_samples independent uniform draws; without replacement, num_samples beyond the
    dataset's length repeat whole permutations (PyTorch's rule)."""

    def __init__(
        self,
        data_source: Any,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: Any = None,
    ) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement must be a bool, got {replacement!r}")
        if generator is not None:
            raise NotImplementedError(
                "RandomSampler: generator= is not supported; tinyattn samples from its one "
                "host RNG, seeded by ta.manual_seed"
            )
        if num_samples is not None and (
            isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples <= 0
        ):
            raise ValueError(
                f"RandomSampler: num_samples must be a positive int, got {num_samples!r}"
            )
        self.data_source, self.replacement = data_source, replacement
        self._num_samples = num_samples
        if self.num_samples <= 0:
            raise ValueError(
                f"RandomSampler: num_samples should be a positive integer, got {self.num_samples} "
                "(is the dataset empty?)"
            )

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        n, rng = len(self.data_source), backend.host_rng()
        if self.replacement:
            # In chunks of 32, as PyTorch draws them: num_samples may be huge (minGPT's 1e10
            # makes the loader endless), and only the draws consumed are made.
            left = self.num_samples
            while left > 0:
                yield from rng.integers(0, n, size=min(32, left)).tolist()
                left -= 32
            return
        for _ in range(self.num_samples // n):
            yield from rng.permutation(n).tolist()
        yield from rng.permutation(n).tolist()[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order."""

    def __init__(self, indices: Sequence[int], generator: Any = None) -> None:
        self.indices = list(indices)

    def __iter__(self) -> Iterator[int]:
        for position in backend.host_rng().permutation(len(self.indices)).tolist():
            yield self.indices[position]

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups the indices of `sampler` into lists of batch_size (the last one shorter, or
    dropped with drop_last=True)."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"BatchSampler: batch_size must be a positive int, got {batch_size!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


# ----------------------------------------------------------------------------------- collation
def _is_array(value: Any) -> bool:
    """A NumPy (or other array-API) array or array scalar, recognised without importing NumPy."""
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, Tensor)


def default_convert(data: Any) -> Any:
    """Arrays to Tensors, recursively through tuples, lists and dicts (batch_size=None)."""
    if isinstance(data, Tensor):
        return data
    if _is_array(data):
        return Tensor(data)
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
        raise ValueError("default_collate: got an empty batch")
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(list(batch), axis=0)
    if _is_array(first):
        return stack([Tensor(sample) for sample in batch], axis=0)
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
        if num_workers != 0:
            raise ValueError(
                f"{op}: num_workers={num_workers} is not supported; tinyattn loads in the "
                "calling process, so use num_workers=0"
            )
        if generator is not None:
            raise NotImplementedError(
                f"{op}: generator= is not supported; shuffling draws from the host RNG seeded "
                "by ta.manual_seed"
            )
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0
        ):
            raise ValueError(f"{op}: batch_size must be a positive int or None, got {batch_size!r}")
        iterable = isinstance(dataset, IterableDataset)
        if iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError(f"{op}: an IterableDataset takes no shuffle, sampler or batch_sampler")
        if sampler is not None and shuffle:
            raise ValueError(f"{op}: sampler and shuffle=True are mutually exclusive")
        if batch_sampler is not None and (
            batch_size != 1 or shuffle or sampler is not None or drop_last
        ):
            raise ValueError(
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


__all__ = [
    "BatchSampler",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "default_collate",
    "default_convert",
    "random_split",
]
