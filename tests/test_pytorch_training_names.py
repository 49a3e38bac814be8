"""The names PyTorch training scripts read around the model (nanoGPT's train.py, makemore):
torch.amp (autocast, GradScaler), torch.cuda.amp, torch.backends, torch.distributed,
nn.parallel, bfloat16, accelerator, set_default_device, Tensor.to's forms, pin_memory, the
optimizers' keywords, compile of a module, and utils.tensorboard. PyTorch is the oracle where
it is installed; those tests skip without it."""

from __future__ import annotations

import inspect
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn
from tinyattn.errors import TinyattnError

HAS_GPU = ta.cuda.is_available()


def torch_or_skip():
    return pytest.importorskip("torch")


# ------------------------------------------------------------------------------------ imports
def test_import_loads_none_of_these_modules():
    """`import tinyattn` stays light: amp, backends, distributed and accelerator load on use."""
    code = (
        "import sys, tinyattn\n"
        "names = ['tinyattn.amp', 'tinyattn.backends', 'tinyattn.distributed', "
        "'tinyattn.accelerator', 'tinyattn.nn', 'torch']\n"
        "print([n for n in names if n in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_import_lines_programs_use():
    from tinyattn.cuda.amp import GradScaler as CudaScaler
    from tinyattn.distributed import destroy_process_group, init_process_group
    from tinyattn.nn.parallel import DistributedDataParallel

    assert ta.amp.GradScaler is not None and issubclass(CudaScaler, ta.amp.GradScaler)
    assert ta.autocast is ta.amp.autocast
    assert callable(init_process_group) and callable(destroy_process_group)
    assert nn.parallel.DistributedDataParallel is DistributedDataParallel


# ------------------------------------------------------------------------------------ autocast
def test_autocast_disabled_changes_nothing():
    x = ta.ones(2, 3)
    with ta.autocast(device_type="cpu", dtype=ta.bfloat16, enabled=False):
        y = x @ x.T
    assert y.dtype == x.dtype

    @ta.amp.autocast("cpu", enabled=False)
    def double(v):
        return v * 2

    assert double(x).numpy().tolist() == (x * 2).numpy().tolist()


def test_autocast_enabled_is_refused_on_entry():
    ctx = ta.amp.autocast(device_type="cpu", dtype=ta.bfloat16)  # made as nanoGPT makes it
    with pytest.raises(NotImplementedError, match="autocast"):
        with ctx:
            pass
    with pytest.raises(ValueError, match="device_type"):
        ta.amp.autocast(device_type=0)


def test_autocast_signature_is_pytorchs():
    torch = torch_or_skip()
    ours = list(inspect.signature(ta.amp.autocast).parameters)
    assert ours == list(inspect.signature(torch.amp.autocast).parameters)


# ---------------------------------------------------------------------------------- GradScaler
@pytest.mark.skipif(HAS_GPU, reason="the CUDA scaler disables itself only without a GPU")
def test_cuda_scaler_without_gpu_warns_and_disables_itself():
    with pytest.warns(UserWarning, match="CUDA is not available.  Disabling."):
        scaler = ta.amp.GradScaler()
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    with pytest.warns(FutureWarning, match="torch.cuda.amp.GradScaler"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            assert not ta.cuda.amp.GradScaler(enabled=True).is_enabled()


def test_disabled_scaler_passes_through():
    layer = nn.Linear(3, 1)
    optimizer = ta.optim.SGD(layer.parameters(), lr=0.1)
    scaler = ta.amp.GradScaler("cpu", enabled=False)
    loss = layer(ta.ones(2, 3)).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    before = layer.weight.detach().clone()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    expected = before - 0.1 * layer.weight.grad
    np.testing.assert_allclose(layer.weight.detach().numpy(), expected.numpy(), rtol=1e-6)


def _scaled_run(lib, scaler, weights, steps):
    """Train a Linear with the scaler; the loss is inf on the steps in `steps`. Returns the scale
    after each update, the weights at the end and the scaler's state dict."""
    layer = lib.nn.Linear(4, 2)
    with lib.no_grad():
        layer.weight.copy_(lib.tensor(weights[0]))
        layer.bias.copy_(lib.tensor(weights[1]))
    optimizer = lib.optim.SGD(layer.parameters(), lr=0.05, momentum=0.9)
    x = lib.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    scales = []
    for step in range(7):
        optimizer.zero_grad()
        loss = (layer(x) ** 2).mean() * (float("inf") if step in steps else 1.0)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, layer.weight.detach().numpy(), scaler.state_dict()


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_dynamic_loss_scaling_equals_pytorch():
    """Skipped steps on inf, backoff, growth after growth_interval clean steps, the unscaled
    update and the state dict, against torch.amp.GradScaler on the CPU."""
    torch = torch_or_skip()
    rng = np.random.default_rng(0)
    weights = (rng.standard_normal((2, 4)).astype(np.float32), np.zeros(2, np.float32))
    options = dict(init_scale=1024.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2)
    ours = _scaled_run(ta, ta.amp.GradScaler("cpu", **options), weights, steps={1, 4})
    theirs = _scaled_run(torch, torch.amp.GradScaler("cpu", **options), weights, steps={1, 4})
    assert ours[0] == theirs[0]
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6, atol=1e-7)
    assert ours[2] == theirs[2]


def test_scaler_state_dict_round_trip_and_misuse():
    scaler = ta.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)
    other = ta.amp.GradScaler("cpu")
    other.load_state_dict(scaler.state_dict())
    assert other.state_dict() == scaler.state_dict() and other.get_scale() == 8.0
    with pytest.raises(RuntimeError, match="state dict is empty"):
        other.load_state_dict({})
    layer = nn.Linear(2, 1)
    optimizer = ta.optim.SGD(layer.parameters(), lr=0.1)
    scaler.scale(layer(ta.ones(1, 2)).sum()).backward()
    scaler.unscale_(optimizer)
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(optimizer)
    scaler.step(optimizer)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(optimizer)
    scaler.update()
    with pytest.raises(AssertionError, match="No inf checks"):
        scaler.update()
    with pytest.raises(RuntimeError, match="Closure"):
        scaler.step(optimizer, closure=lambda: 0.0)


def test_scaler_signatures_are_pytorchs():
    torch = torch_or_skip()
    for ours, theirs in (
        (ta.amp.GradScaler, torch.amp.GradScaler),
        (ta.cuda.amp.GradScaler, torch.cuda.amp.GradScaler),
    ):
        assert list(inspect.signature(ours).parameters) == list(
            inspect.signature(theirs).parameters
        )


# --------------------------------------------------------------------- backends, distributed
def test_backend_flags_have_pytorchs_defaults_and_can_be_set():
    torch = torch_or_skip()
    assert ta.backends.cuda.matmul.allow_tf32 == torch.backends.cuda.matmul.allow_tf32
    for name in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        assert getattr(ta.backends.cudnn, name) == getattr(torch.backends.cudnn, name), name
    assert ta.backends.mps.is_available() is False
    before = ta.backends.cuda.matmul.allow_tf32
    ta.backends.cuda.matmul.allow_tf32 = True
    assert ta.backends.cuda.matmul.allow_tf32 is True
    ta.backends.cuda.matmul.allow_tf32 = before


def test_distributed_names_need_a_process_group():
    """The names work (tests/test_distributed*.py run them on several processes); before
    init_process_group they raise PyTorch's ValueError."""
    from tinyattn.nn.parallel import DistributedDataParallel

    assert ta.distributed.is_initialized() is False
    with pytest.raises(ValueError, match="Default process group has not been initialized"):
        ta.distributed.get_world_size()
    with pytest.raises(ValueError, match="DistributedDataParallel"):
        DistributedDataParallel(nn.Linear(2, 2), device_ids=[0])


# ------------------------------------------------------------------------ dtypes and devices
def test_bfloat16_exists_and_is_refused_as_a_dtype():
    assert ta.bfloat16 == "bfloat16" and ta.cuda.is_bf16_supported() is False
    with pytest.raises(TinyattnError, match="bfloat16 is not supported"):
        ta.zeros(2, dtype=ta.bfloat16)
    with pytest.raises(TinyattnError, match="bfloat16 is not supported"):
        ta.ones(2).to(ta.bfloat16)
    ptdtype = {"float32": ta.float32, "bfloat16": ta.bfloat16, "float16": ta.float16}
    assert ptdtype["float16"] == "float16"  # nanoGPT's table builds


def test_accelerator_and_default_device():
    assert ta.accelerator.is_available() == ta.cuda.is_available()
    expected = "cuda" if HAS_GPU else None
    current = ta.accelerator.current_accelerator()
    assert (current.type if current is not None else None) == expected
    ta.set_default_device("cpu")
    ta.set_default_device(ta.device("cpu"))
    assert ta.get_default_device() == "cpu" and ta.zeros(1).device == "cpu"
    with pytest.raises(NotImplementedError, match="set_default_device"):
        ta.set_default_device("cuda")


def test_tensor_to_takes_pytorchs_forms():
    torch = torch_or_skip()
    values = np.arange(3, dtype=np.float32)
    ours, theirs = ta.tensor(values), torch.tensor(values)
    other_ours, other_theirs = ta.zeros(1, dtype=ta.int64), torch.zeros(1, dtype=torch.int64)
    cases = [
        (("cpu",), {"non_blocking": True}),
        (("cpu", "float64"), {}),
        ((), {"dtype": "float64", "copy": True}),
        (("float32", False, True), {}),
        ((), {"copy": True}),
        (("other",), {}),
    ]
    for args, kwargs in cases:
        args_ours = tuple(other_ours if a == "other" else a for a in args)
        args_theirs = tuple(
            other_theirs
            if a == "other"
            else getattr(torch, a)
            if a in ("float32", "float64")
            else a
            for a in args
        )
        kwargs_theirs = {k: getattr(torch, v) if k == "dtype" else v for k, v in kwargs.items()}
        a, b = ours.to(*args_ours, **kwargs), theirs.to(*args_theirs, **kwargs_theirs)
        assert (a is ours) == (b is theirs), (args, kwargs)
        assert str(a.dtype) == str(b.dtype).removeprefix("torch."), (args, kwargs)
        assert a.numpy().tolist() == b.numpy().tolist()
    with pytest.raises(TypeError, match="expected a device"):
        ours.to(2.5)


def test_module_to_takes_device_dtype_and_non_blocking():
    layer = nn.Linear(2, 2)
    weight = layer.weight
    assert layer.to("cpu", "float64", non_blocking=True) is layer
    assert layer.weight is weight and layer.weight.dtype == "float64"
    layer.to(dtype=ta.float32)
    assert layer.bias.dtype == "float32"


@pytest.mark.skipif(HAS_GPU, reason="pinning is refused only without a GPU")
def test_pin_memory_without_gpu_is_refused_as_pytorch():
    torch = torch_or_skip()
    if torch.cuda.is_available():
        pytest.skip("PyTorch sees a GPU here")
    with pytest.raises(RuntimeError) as theirs:
        torch.zeros(2).pin_memory()
    with pytest.raises(RuntimeError, match="pin_memory"):
        ta.zeros(2).pin_memory()
    assert "accelerator" in str(theirs.value)


# ---------------------------------------------------------------------------------- optimizers
def test_optimizer_keywords_are_pytorchs():
    torch = torch_or_skip()
    for name in ("SGD", "Adam", "AdamW"):
        ours = inspect.signature(getattr(ta.optim, name)).parameters
        theirs = inspect.signature(getattr(torch.optim, name)).parameters
        assert set(ours) == set(theirs), name
        assert "fused" in ours
        positional = [p for p, v in theirs.items() if v.kind is v.POSITIONAL_OR_KEYWORD]
        assert [p for p, v in ours.items() if v.kind is v.POSITIONAL_OR_KEYWORD] == positional


def test_optimizer_kernel_hints_change_nothing_and_sgd_order():
    torch = torch_or_skip()
    start = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    results = []
    for lib in (ta, torch):
        weight = lib.tensor(start.copy(), requires_grad=True)
        # lr, momentum, dampening, weight_decay by position: PyTorch's order
        optimizer = lib.optim.SGD([weight], 0.1, 0.9, 0.0, 0.01, fused=None)
        for _ in range(3):
            optimizer.zero_grad()
            (weight**2).sum().backward()
            optimizer.step()
        results.append(weight.detach().numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)
    with pytest.raises(NotImplementedError, match="amsgrad"):
        ta.optim.Adam([ta.ones(1, requires_grad=True)], amsgrad=True)
    ta.optim.AdamW([ta.ones(1, requires_grad=True)], fused=True, foreach=False)


# ------------------------------------------------------------------------- compile of a module
def test_compiled_module_names_equal_torch_compile():
    torch = torch_or_skip()
    ours = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    compiled_ours, compiled_theirs = ta.compile(ours), torch.compile(theirs)
    assert list(compiled_ours.state_dict()) == list(compiled_theirs.state_dict())
    assert [n for n, _ in compiled_ours.named_parameters()] == [
        n for n, _ in compiled_theirs.named_parameters()
    ]
    assert compiled_ours._orig_mod is ours
    state = {k: v * 0 + 0.5 for k, v in compiled_ours.state_dict().items()}
    compiled_ours.load_state_dict(state)
    assert float(ours[0].weight.sum()) == 6.0


def test_compiled_module_equals_eager_in_training():
    """ta.compile(model) with loss, backward and step outside, as nanoGPT's train.py: the same
    losses and weights as the model run eagerly."""
    runs = []
    for compiled in (False, True):
        ta.manual_seed(0)
        model = nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.Linear(8, 3))
        optimizer = ta.optim.AdamW(model.parameters(), lr=1e-2)
        step_model = ta.compile(model) if compiled else model
        losses = []
        for step in range(6):
            x = ta.tensor(np.sin(np.arange(20, dtype=np.float32) + step).reshape(4, 5))
            loss = ta.nn.functional.cross_entropy(step_model(x), ta.tensor([0, 1, 2, 1]))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
        runs.append((losses, model[0].weight.detach().numpy()))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-6)
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-6)


# ------------------------------------------------------------------------------- tensorboard
def test_summary_writer_writes_pytorchs_scalar_events(tmp_path):
    pytest.importorskip("tensorboard")
    torch = torch_or_skip()
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto.event_pb2 import Event
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    from tinyattn.utils.tensorboard import SummaryWriter

    def write(writer_class, folder):
        with writer_class(log_dir=str(folder)) as writer:
            writer.add_scalar("Loss/train", 2.5, 0)
            writer.add_scalar("Loss/train", ta.tensor(1.25).item(), 10)
        (path,) = folder.iterdir()
        events = [Event.FromString(record) for record in RawEventFileLoader(str(path)).Load()]
        return [
            (e.step, v.tag, v.simple_value)
            for e in events
            if e.HasField("summary")
            for v in e.summary.value
        ]

    ours = write(SummaryWriter, tmp_path / "ours")
    assert ours == write(TorchWriter, tmp_path / "theirs")
    assert ours == [(0, "Loss/train", 2.5), (10, "Loss/train", 1.25)]
    del torch
