"""tinyattn.utils.data.dataset: PyTorch's Dataset, IterableDataset, TensorDataset, Subset,
ConcatDataset and random_split. Imports `backend` and `tensor`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ... import backend
from ...errors import TinyattnError
from ...tensor import Tensor


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
            raise TinyattnError("TensorDataset: needs at least one tensor")
        sizes = {t.shape[0] if t.ndim else None for t in tensors}
        if len(sizes) != 1 or None in sizes:
            shapes = [t.shape for t in tensors]
            raise TinyattnError(f"TensorDataset: tensors must share their first axis, got {shapes}")
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
        raise TinyattnError(
            f"random_split: lengths {lengths} must be non-negative and sum to the dataset's "
            f"length {n} (or be fractions summing to 1)"
        )
    order = backend.host_rng().permutation(n).tolist()
    parts, start = [], 0
    for length in lengths:
        parts.append(Subset(dataset, order[start : start + length]))
        start += length
    return parts


__all__ = [
    "ConcatDataset",
    "Dataset",
    "IterableDataset",
    "Subset",
    "TensorDataset",
    "random_split",
]
