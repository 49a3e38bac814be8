"""Run under the launcher on n ranks: DistributedDataParallel training ends with the parameters
that one process reaches on the whole batch (float64), for SGD with momentum and AdamW, with and
without no_sync gradient accumulation. Rank 0 trains the one-process reference itself and
prints the largest difference; any rank exits non-zero on a mismatch."""

import sys

import tinyattn as ta
import tinyattn.distributed as dist
from tinyattn import nn, optim
from tinyattn.nn.parallel import DistributedDataParallel as DDP  # noqa: N817  (nanoGPT's name)

STEPS, LOCAL_BATCH, ACCUMULATE = 3, 4, 2


def model(seed: int) -> nn.Module:
    ta.manual_seed(seed)
    net = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))
    return net.to(ta.float64)


def optimizer(kind: str, params) -> optim.Optimizer:
    if kind == "sgd":
        return optim.SGD(params, lr=0.1, momentum=0.9)
    return optim.AdamW(params, lr=0.01, weight_decay=0.1)


def batches(world: int):
    """The whole batch of each micro-step: (x, y), LOCAL_BATCH rows per rank."""
    ta.manual_seed(1234)
    for _ in range(STEPS * ACCUMULATE):
        x = ta.randn(world * LOCAL_BATCH, 5, dtype=ta.float64)
        yield x, ta.randint(0, 3, (world * LOCAL_BATCH,))


def train(net, kind: str, accumulate: int, world: int, rank: int | None, wrap=None) -> nn.Module:
    step_model = wrap(net) if wrap else net
    opt = optimizer(kind, net.parameters())
    data = list(batches(world))
    for step in range(STEPS):
        for micro in range(accumulate):
            x, y = data[step * accumulate + micro]
            if rank is not None:  # this rank's share of the batch
                x, y = (
                    x[rank * LOCAL_BATCH : (rank + 1) * LOCAL_BATCH],
                    y[rank * LOCAL_BATCH : (rank + 1) * LOCAL_BATCH],
                )
            last = micro == accumulate - 1
            context = step_model.no_sync() if wrap and not last else ta.enable_grad()
            with context:
                loss = nn.functional.cross_entropy(step_model(x), y) / accumulate
                loss.backward()
        opt.step()
        opt.zero_grad()
    return net


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    worst = 0.0
    for kind in ("sgd", "adamw"):
        for accumulate in (1, ACCUMULATE):
            # Ranks other than 0 start from other weights: DDP must broadcast rank 0's.
            net = train(model(0 if rank == 0 else 99), kind, accumulate, world, rank, DDP)
            reference = train(model(0), kind, accumulate, world, None)
            for (name, p), q in zip(net.named_parameters(), reference.parameters()):
                difference = float((p - q).abs().max())
                worst = max(worst, difference)
                if difference > 1e-10:
                    print(
                        f"rank {rank}: {kind} accumulate={accumulate} {name} "
                        f"differs by {difference:.3e}"
                    )
                    return 1
    if rank == 0:
        print(f"DDP on {world} ranks equals one process: largest difference {worst:.3e}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
