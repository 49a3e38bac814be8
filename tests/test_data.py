"""tinyattn.utils.data and tinyattn.cuda: datasets, samplers, DataLoader batching and default
collation (compared with torch.utils.data where PyTorch has an answer), the refusal of worker
processes, and the CUDA queries. The torch comparisons skip cleanly without torch.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.utils import data


def test_reachable_as_attributes():
    assert ta.utils.data is data
    assert ta.cuda.is_available() in (True, False)


def test_tensor_dataset_loader_batches_and_drop_last(device):
    xs = ta.arange(10, device=device)
    ys = ta.randn(10, 3, device=device)
    dataset = data.TensorDataset(xs, ys)
    assert len(dataset) == 10 and dataset[4][0].item() == 4
    loader = data.DataLoader(dataset, batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and [b[0].shape for b in batches] == [(4,), (4,), (2,)]
    assert [int(v) for b in batches for v in b[0].numpy()] == list(range(10))
    assert batches[0][1].shape == (4, 3) and batches[0][1].device == ys.device
    dropped = data.DataLoader(dataset, batch_size=4, drop_last=True)
    assert len(dropped) == 2 and len(list(dropped)) == 2
    with pytest.raises(ValueError, match="first axis"):
        data.TensorDataset(ta.zeros(3), ta.zeros(4))


def test_shuffle_is_a_seeded_permutation():
    dataset = data.TensorDataset(ta.arange(20))
    ta.manual_seed(1)
    first = [
        int(v) for (b,) in data.DataLoader(dataset, batch_size=6, shuffle=True) for v in b.numpy()
    ]
    ta.manual_seed(1)
    again = [
        int(v) for (b,) in data.DataLoader(dataset, batch_size=6, shuffle=True) for v in b.numpy()
    ]
    assert first == again and sorted(first) == list(range(20)) and first != list(range(20))
    loader = data.DataLoader(dataset, batch_size=20, shuffle=True)
    epoch1, epoch2 = next(iter(loader))[0].numpy(), next(iter(loader))[0].numpy()
    assert not np.array_equal(epoch1, epoch2)  # a new order each epoch


def test_random_sampler_replacement_and_num_samples():
    source = list(range(5))
    ta.manual_seed(0)
    drawn = list(data.RandomSampler(source, replacement=True, num_samples=50))
    assert len(drawn) == 50 and set(drawn) <= set(source) and len(set(drawn)) == 5
    repeated = list(data.RandomSampler(source, num_samples=12))
    assert len(repeated) == 12
    assert sorted(repeated[:5]) == sorted(repeated[5:10]) == source  # whole permutations first
    assert len(data.RandomSampler(source, num_samples=7)) == 7
    assert list(data.SequentialSampler(source)) == source
    with pytest.raises(ValueError, match="num_samples"):
        data.RandomSampler(source, num_samples=0)


def test_sampler_batch_sampler_and_custom_collate():
    dataset = data.TensorDataset(ta.arange(10))
    loader = data.DataLoader(dataset, batch_size=3, sampler=data.SequentialSampler(range(7)))
    assert [b[0].numpy().tolist() for b in loader] == [[0, 1, 2], [3, 4, 5], [6]]
    batches = data.BatchSampler(range(7), 3, drop_last=True)
    assert list(batches) == [[0, 1, 2], [3, 4, 5]] and len(batches) == 2
    loader = data.DataLoader(dataset, batch_sampler=[[9, 0], [5]])
    assert [b[0].numpy().tolist() for b in loader] == [[9, 0], [5]]
    loader = data.DataLoader(list(range(5)), batch_size=2, collate_fn=lambda batch: sum(batch))
    assert list(loader) == [1, 5, 4]
    unbatched = data.DataLoader(np.arange(6.0).reshape(3, 2), batch_size=None)
    assert [t.shape for t in unbatched] == [(2,), (2,), (2,)]
    subset = data.Subset(dataset, [4, 2])
    assert [int(s[0]) for s in subset] == [4, 2]
    both = data.ConcatDataset([subset, dataset])
    assert len(both) == 12 and int(both[2][0]) == 0


Pair = namedtuple("Pair", "x y")


class Samples(data.Dataset):
    """Samples of every kind default collation handles."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        return {
            "ids": np.arange(3) + i,
            "score": float(i) / 2,
            "label": i,
            "flag": i % 2 == 0,
            "name": f"s{i}",
            "pair": (ta.ones(2) * i, [i, i + 1]),
            "named": Pair(i, np.float32(i)),
        }


def test_default_collation_follows_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader as TorchLoader

    ours = next(iter(data.DataLoader(Samples(), batch_size=4)))
    torch_samples = [
        {k: (v if k != "pair" else (torch.ones(2) * i, v[1])) for k, v in s.items()}
        for i, s in enumerate(Samples()[i] for i in range(4))
    ]
    theirs = next(iter(TorchLoader(torch_samples, batch_size=4)))
    assert list(ours) == list(theirs)
    for key in ("ids", "score", "label", "flag"):
        np.testing.assert_array_equal(ours[key].numpy(), theirs[key].numpy())
        assert str(ours[key].numpy().dtype) == str(theirs[key].numpy().dtype), key
    assert ours["name"] == theirs["name"]
    assert type(ours["pair"]) is type(theirs["pair"]) is list
    np.testing.assert_array_equal(ours["pair"][0].numpy(), theirs["pair"][0].numpy())
    assert [t.numpy().tolist() for t in ours["pair"][1]] == [t.tolist() for t in theirs["pair"][1]]
    assert type(ours["named"]) is Pair and ours["named"].x.numpy().tolist() == [0, 1, 2, 3]
    assert str(ours["named"].y.numpy().dtype) == "float32"


class Stream(data.IterableDataset):
    def __iter__(self):
        return iter(range(3))


def test_workers_give_the_batches_of_the_main_process():
    """A map-style dataset with num_workers > 0 yields PyTorch's batches (the sampler runs in
    the main process): the same as num_workers=0 from the same seed."""
    dataset = data.TensorDataset(ta.arange(10), ta.arange(10) * 2)
    batches = []
    for workers in (0, 3):
        ta.manual_seed(5)
        loader = data.DataLoader(dataset, batch_size=4, shuffle=True, num_workers=workers)
        batches.append([[t.numpy().tolist() for t in batch] for batch in loader])
    assert batches[0] == batches[1] and len(batches[0]) == 3


def test_loader_errors():
    dataset = data.TensorDataset(ta.arange(4))
    with pytest.raises(ValueError, match="num_workers=2 with an IterableDataset"):
        data.DataLoader(Stream(), num_workers=2)
    with pytest.raises(ValueError, match="worker_init_fn"):
        data.DataLoader(dataset, num_workers=1, worker_init_fn=print)
    with pytest.raises(ValueError, match="non-negative"):
        data.DataLoader(dataset, num_workers=-1)
    with pytest.raises(ValueError, match="mutually exclusive"):
        data.DataLoader(dataset, shuffle=True, sampler=data.SequentialSampler(dataset))
    with pytest.raises(ValueError, match="batch_size"):
        data.DataLoader(dataset, batch_size=0)
    with pytest.raises(TypeError, match="batch elements"):
        next(iter(data.DataLoader([object()], batch_size=1)))
    with pytest.raises(NotImplementedError, match="generator"):
        data.DataLoader(dataset, generator=object())


def test_iterable_dataset_batches():
    class Stream(data.IterableDataset):
        def __iter__(self):
            return iter(range(7))

    batches = [b.numpy().tolist() for b in data.DataLoader(Stream(), batch_size=3)]
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError, match="IterableDataset"):
        data.DataLoader(Stream(), shuffle=True)


def test_cuda_queries_follow_the_backend_probe():
    available = ta.cupy_status()[0] is not None
    assert ta.cuda.is_available() is available
    assert ta.cuda.device_count() >= 1 if available else ta.cuda.device_count() == 0
    ta.cuda.manual_seed_all(7)
    first = ta.randn(3).numpy()
    ta.manual_seed(7)
    np.testing.assert_array_equal(first, ta.randn(3).numpy())  # one host generator for all
    ta.cuda.manual_seed(7)
    np.testing.assert_array_equal(first, ta.randn(3).numpy())
    if not available:
        with pytest.raises(RuntimeError, match="no usable CUDA device"):
            ta.cuda.current_device()


def test_random_split_and_empty_shuffle():
    torch = pytest.importorskip("torch")
    dataset = data.TensorDataset(ta.arange(10))
    ta.manual_seed(0)
    parts = data.random_split(dataset, [0.5, 0.3, 0.2])
    theirs = torch.utils.data.random_split(range(10), [0.5, 0.3, 0.2])
    assert [len(p) for p in parts] == [len(p) for p in theirs] == [5, 3, 2]
    seen = sorted(int(s[0]) for part in parts for s in part)
    assert seen == list(range(10))
    assert [len(p) for p in data.random_split(dataset, [7, 3])] == [7, 3]
    odd = data.random_split(data.TensorDataset(ta.arange(7)), [0.5, 0.5])
    assert [len(p) for p in odd] == [
        len(p) for p in torch.utils.data.random_split(range(7), [0.5, 0.5])
    ]
    with pytest.raises(ValueError, match="sum to"):
        data.random_split(dataset, [4, 4])
    with pytest.raises(ValueError, match="empty"):
        data.DataLoader([], shuffle=True)
