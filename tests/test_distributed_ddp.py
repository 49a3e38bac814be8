"""DistributedDataParallel: post-accumulate-grad hooks in the engine, DDP on 2 and 3 processes
equal to one process on the whole batch (float64, SGD with momentum and AdamW, with and without
no_sync), its PyTorch-shaped API in a one-process world, and nanoGPT's train.py under the
launcher on 2 processes. The multi-process tests skip, saying why, without the engine."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import tinyattn as ta
import tinyattn.distributed as dist
from tinyattn import nn
from tinyattn.nn.parallel import DistributedDataParallel as DDP  # noqa: N817  (nanoGPT's name)

HERE = Path(__file__).parent
needs_engine = pytest.mark.skipif(
    not dist.is_available(),
    reason="the distributed engine is not installed (pip install 'tinyattn[distributed]')",
)


def launch(ranks: int, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tinyattn.distributed.run", "--standalone"]
    command += [f"--nproc_per_node={ranks}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)


# ------------------------------------------------------------------ the engine's hook


def three_layers() -> nn.Module:
    ta.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))


def test_post_accumulate_hooks_run_during_backward_last_layer_first():
    model = three_layers()
    seen = []

    def hook(param):
        # The first layer's gradient is not there yet when a later layer's hook runs.
        seen.append((param.shape, model[0].weight.grad is None))

    for param in model.parameters():
        param.register_post_accumulate_grad_hook(hook)
    model(ta.randn(5, 3)).sum().backward()
    assert [shape for shape, _ in seen[:2]] == [(2,), (2, 4)]
    assert all(first_missing for _, first_missing in seen[:4])
    assert len(seen) == 6


def test_post_accumulate_hooks_leave_the_gradients_unchanged():
    plain, hooked = three_layers(), three_layers()
    handles = [p.register_post_accumulate_grad_hook(lambda p: None) for p in hooked.parameters()]
    x = ta.randn(5, 3)
    for model in (plain, hooked):
        (model(x) ** 2).sum().backward()
    for p, q in zip(plain.parameters(), hooked.parameters()):
        assert bool((p.grad == q.grad).all())
    for handle in handles:
        handle.remove()


def test_post_accumulate_hook_refuses_a_non_leaf_as_pytorch():
    x = ta.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf tensors"):
        (x * 2).register_post_accumulate_grad_hook(lambda t: None)


# ------------------------------------------------------------------ DDP on several processes


@needs_engine
@pytest.mark.parametrize("ranks", [2, 3])
def test_ddp_equals_one_process_on_the_whole_batch(ranks):
    done = launch(ranks, str(HERE / "distributed_workers" / "ddp_equivalence.py"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    line = done.stdout.strip().splitlines()[-1]
    assert line.startswith(f"DDP on {ranks} ranks equals one process: largest difference")
    assert float(line.rsplit(" ", 1)[1]) <= 1e-10


# ------------------------------------------------------------------ the API in a one-process world


@pytest.fixture
def one_process_world(monkeypatch):
    if not dist.is_available():
        pytest.skip("the distributed engine is not installed (pip install 'tinyattn[distributed]')")
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_without_a_process_group_raises_pytorchs_error():
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        DDP(nn.Linear(2, 2))


def test_ddp_keys_module_and_parameters_are_pytorchs(one_process_world):
    model = three_layers()
    ddp = DDP(model, device_ids=None)
    assert ddp.module is model
    assert list(ddp.state_dict()) == [f"module.{key}" for key in model.state_dict()]
    assert [id(p) for p in ddp.parameters()] == [id(p) for p in model.parameters()]


def test_buckets_launch_during_backward(one_process_world):
    model = three_layers()
    ddp = DDP(model, bucket_cap_mb=1e-5)  # one parameter per bucket
    ddp._timeline = []
    launched_before_first_layer = []
    model[0].weight.register_post_accumulate_grad_hook(
        lambda p: launched_before_first_layer.append(
            sum(event == "launch" for event, *_ in ddp._timeline)
        )
    )
    ddp(ta.randn(4, 3)).sum().backward()
    assert len(ddp._bucket_list) == 6
    assert launched_before_first_layer[0] >= 4  # the later layers' buckets went out first
    assert sum(event == "launch" for event, *_ in ddp._timeline) == 6


def test_unused_parameter_needs_find_unused_parameters(one_process_world):
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            return self.used(x)

    ddp = DDP(TwoHeads())
    ddp(ta.ones(1, 2)).sum().backward()
    with pytest.raises(RuntimeError, match=r"unused\.weight"):
        ddp(ta.ones(1, 2))
    model = TwoHeads()
    ddp = DDP(model, find_unused_parameters=True)
    for _ in range(2):
        ddp(ta.ones(1, 2)).sum().backward()
    assert model.unused.weight.grad is None and model.used.weight.grad is not None


def test_no_sync_accumulates_without_reducing(one_process_world):
    model = three_layers()
    ddp = DDP(model)
    with ddp.no_sync():
        assert ddp.require_backward_grad_sync is False
        ddp(ta.randn(2, 3)).sum().backward()
    assert ddp.require_backward_grad_sync is True


def test_ddp_refuses_a_compiled_module_by_name(one_process_world):
    with pytest.raises(NotImplementedError, match="DistributedDataParallel: wrapping a ta.compile"):
        DDP(ta.compile(three_layers()))


# ------------------------------------------------------------------ nanoGPT's train.py

NANOGPT_ARGS = [
    "--dataset=syn",
    "--device=cpu",
    "--dtype=float32",
    "--compile=False",
    "--backend=gloo",
    "--n_layer=2",
    "--n_head=2",
    "--n_embd=32",
    "--block_size=16",
    "--batch_size=4",
    "--gradient_accumulation_steps=2",
    "--max_iters=6",
    "--eval_interval=1000",
    "--eval_iters=2",
    "--learning_rate=1e-2",
    "--warmup_iters=0",
    "--decay_lr=False",
]


def nanogpt_folder(tmp_path: Path) -> Path:
    """nanoGPT's train.py (imports swapped), model.py and configurator.py, and a small dataset:
    a period-16 token stream, so every block holds the same tokens in another rotation.
    nanoGPT's DDP branch hard-codes ``device = f'cuda:{ddp_local_rank}'`` (and set_device);
    on the CPU, as with PyTorch's gloo, that line names the CPU: the one change beyond imports."""
    source = HERE / "programs" / "nanogpt"
    for name in ("model.py", "configurator.py"):
        (tmp_path / name).write_text((source / name).read_text())
    train = (source / "train.py").read_text()
    cuda_lines = "    device = f'cuda:{ddp_local_rank}'\n    torch.cuda.set_device(device)\n"
    assert cuda_lines in train
    (tmp_path / "train.py").write_text(train.replace(cuda_lines, "    device = 'cpu'\n"))
    data = tmp_path / "data" / "syn"
    data.mkdir(parents=True)
    period = [(7 * k + 3) % 32 for k in range(16)]
    tokens = ta.tensor(period * 300, dtype=ta.int32).numpy().astype("uint16")
    tokens.tofile(data / "train.bin")
    tokens.tofile(data / "val.bin")
    (data / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 32}))
    return tmp_path


def losses(output: str) -> tuple[str, list[float]]:
    lines = output.splitlines()
    evaluation = next(line for line in lines if line.startswith("step 0:"))
    return evaluation, [
        float(line.split("loss ")[1].split(",")[0]) for line in lines if line.startswith("iter ")
    ]


@needs_engine
def test_nanogpt_trains_under_the_launcher_as_in_one_process(tmp_path):
    folder = nanogpt_folder(tmp_path)
    args = [*NANOGPT_ARGS, f"--out_dir={tmp_path / 'out'}"]
    single = subprocess.run(
        [sys.executable, "train.py", *args], capture_output=True, text=True, timeout=120, cwd=folder
    )
    assert single.returncode == 0, single.stderr[-3000:]
    # Two ranks, each one micro-step of the two: the same tokens per step.
    double = launch(2, "train.py", *args, cwd=folder)
    assert double.returncode == 0, double.stderr[-3000:]
    assert (
        "tokens per iteration will be: 128" in single.stdout
        and "tokens per iteration will be: 128" in double.stdout
    )
    single_eval, single_losses = losses(single.stdout)
    double_eval, double_losses = losses(double.stdout)
    assert single_eval == double_eval  # the same start: rank 0's weights, broadcast
    assert len(single_losses) == len(double_losses) == 7
    for one, two in zip(single_losses, double_losses):
        assert abs(one - two) < 0.1 * one, (single_losses, double_losses)
    assert double_losses[-1] < 0.7 * double_losses[0]
