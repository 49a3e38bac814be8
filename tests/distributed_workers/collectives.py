"""Run under the launcher on n ranks: every collective against its definition.

Rank r holds x_r = (r + 1) * [1, 2, 3] (float64, and int64 where the op allows). Each check
raises AssertionError naming the call; the program prints one line per rank when all pass."""

import sys

import tinyattn as ta
import tinyattn.distributed as dist
from tinyattn.distributed import ReduceOp


def x_of(r: int, dtype=ta.float64) -> ta.Tensor:
    return ta.tensor([1, 2, 3], dtype=dtype) * (r + 1)


def check(call: str, got: ta.Tensor, want: ta.Tensor) -> None:
    assert got.dtype == want.dtype and bool((got == want).all()), f"{call}: {got} != {want}"


def reductions(rank: int, n: int) -> None:
    everyone = [x_of(r) for r in range(n)]
    definitions = {
        ReduceOp.SUM: sum(everyone[1:], everyone[0]),
        ReduceOp.AVG: sum(everyone[1:], everyone[0]) / n,
        ReduceOp.PRODUCT: ta.stack(everyone).prod(0),
        ReduceOp.MAX: ta.stack(everyone).amax(0),
        ReduceOp.MIN: ta.stack(everyone).amin(0),
    }
    for op, want in definitions.items():
        x = x_of(rank)
        dist.all_reduce(x, op=op)
        check(f"all_reduce {op}", x, want)
        x = x_of(rank)
        dist.reduce(x, dst=n - 1, op=op)
        check(f"reduce {op}", x, want if rank == n - 1 else x_of(rank))
    x = x_of(rank, ta.int64)
    dist.all_reduce(x)
    check("all_reduce int64", x, ta.tensor([1, 2, 3], dtype=ta.int64) * (n * (n + 1) // 2))
    flags = ta.tensor([rank == 0, False, True])
    dist.all_reduce(flags)  # bool SUM is logical or
    check("all_reduce bool", flags, ta.tensor([True, False, True]))
    # reduce_scatter_tensor: rank r gets block r of the sum of every rank's (n * 3,) input.
    big = ta.arange(n * 3, dtype=ta.float64) * (rank + 1)
    out = ta.zeros(3, dtype=ta.float64)
    dist.reduce_scatter_tensor(out, big)
    check(
        "reduce_scatter_tensor",
        out,
        ta.arange(rank * 3, rank * 3 + 3, dtype=ta.float64) * (n * (n + 1) // 2),
    )


def movements(rank: int, n: int) -> None:
    x = x_of(rank)
    dist.broadcast(x, src=n - 1)
    check("broadcast", x, x_of(n - 1))
    gathered = [ta.zeros(3, dtype=ta.float64) for _ in range(n)]
    dist.all_gather(gathered, x_of(rank))
    for r in range(n):
        check("all_gather", gathered[r], x_of(r))
    flat = ta.zeros(n * 3, dtype=ta.float64)
    dist.all_gather_into_tensor(flat, x_of(rank))
    check("all_gather_into_tensor", flat, ta.cat([x_of(r) for r in range(n)]))
    lists = [ta.zeros(3, dtype=ta.float64) for _ in range(n)] if rank == 0 else None
    dist.gather(x_of(rank), lists, dst=0)
    if rank == 0:
        for r in range(n):
            check("gather", lists[r], x_of(r))
    part = ta.zeros(3, dtype=ta.float64)
    dist.scatter(part, [x_of(10 * r) for r in range(n)] if rank == 0 else None, src=0)
    check("scatter", part, x_of(10 * rank))
    # send/recv around a ring; a non-contiguous view receives in place.
    buffer = ta.zeros(3, 2, dtype=ta.float64)
    work = dist.isend(x_of(rank), dst=(rank + 1) % n)
    sender = dist.recv(buffer[:, 1], src=(rank - 1) % n)
    work.wait()
    assert sender == (rank - 1) % n, f"recv: sender {sender}"
    check("recv into a view", buffer[:, 1], x_of((rank - 1) % n))


def objects_groups_async(rank: int, n: int) -> None:
    objects = [{"from": rank}, rank] if rank == 1 else [None, None]
    dist.broadcast_object_list(objects, src=1)
    assert objects == [{"from": 1}, 1], f"broadcast_object_list: {objects}"
    everyone = [None] * n
    dist.all_gather_object(everyone, ("rank", rank))
    assert everyone == [("rank", r) for r in range(n)], f"all_gather_object: {everyone}"
    pair = dist.new_group([0, 1])
    x = x_of(rank)
    dist.all_reduce(x, group=pair)
    check("all_reduce in new_group", x, x_of(0) + x_of(1) if rank < 2 else x_of(rank))
    if rank < 2:
        assert dist.get_world_size(pair) == 2 and dist.get_rank(pair) == rank
    x = x_of(rank)
    work = dist.all_reduce(x, async_op=True)
    assert work.wait() is True
    check("all_reduce async", x, x_of(0) * (n * (n + 1) // 2))
    dist.barrier()


def main() -> int:
    dist.init_process_group(backend="gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    assert dist.is_initialized() and dist.get_backend() == "gloo"
    reductions(rank, n)
    movements(rank, n)
    objects_groups_async(rank, n)
    dist.destroy_process_group()
    assert not dist.is_initialized()
    print(f"rank {rank} of {n}: every collective matches its definition")
    return 0


if __name__ == "__main__":
    sys.exit(main())
