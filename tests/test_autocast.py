"""amp.autocast: float16 by op, as PyTorch's autocast, checked against torch's on the CPU.

On the CPU, tinyattn's regions take ``dtype=float16`` (NumPy has no bfloat16, PyTorch's CPU
default, which is refused by name) and follow PyTorch's CPU lists: the matrix products, linear and
attention run in float16, the losses and products in float32, the rest in their inputs' dtypes.
Each case runs the same program under ``torch.autocast("cpu", dtype=torch.float16)`` and
compares every result's dtype, the values to float16's precision, and the float32 parameters'
gradients. Also: a parameter is cast once per region, regions belong to their thread, nested
``enabled=False`` turns a region off, float64 is left alone, "cuda" without a GPU warns and
disables itself, and a GradScaler loop trains under autocast.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F

RNG = np.random.default_rng(0)
X = RNG.standard_normal((6, 8)).astype(np.float32)
W = RNG.standard_normal((8, 5)).astype(np.float32) * 0.3
B = RNG.standard_normal(5).astype(np.float32) * 0.1
TARGET = np.array([0, 3, 1, 4, 2, 0])
HALF = dict(rtol=2e-2, atol=2e-2)  # float16 carries 11 significant bits


def _program(lib, x, w, b, target):
    """A linear layer, a softmax, an exp and a loss, returning each result and the loss."""
    functional = F if lib is ta else lib.nn.functional
    h = functional.linear(x, w.T, b)  # lower precision list
    p = lib.softmax(h, -1)  # CPU: the input's dtype
    e = (h * 0.1).exp()  # CPU: the input's dtype
    mixed = h + x[:, :5]  # float16 + float32 promotes to float32
    loss = functional.cross_entropy(h, target)  # float32 list
    return (h, p, e, mixed, loss), loss


def _trained(lib):
    """`_program` under lib's CPU float16 autocast, and the float32 parameters' gradients."""
    w = lib.tensor(W, requires_grad=True)
    b = lib.tensor(B, requires_grad=True)
    with lib.autocast("cpu", dtype=lib.float16):
        results, loss = _program(lib, lib.tensor(X), w, b, lib.tensor(TARGET))
    loss.backward()
    return results, (w.grad, b.grad)


def test_each_result_has_torchs_dtype_and_values():
    torch = pytest.importorskip("torch")
    ours, our_grads = _trained(ta)
    theirs, their_grads = _trained(torch)
    for mine, reference in zip(ours, theirs, strict=True):
        assert str(mine.dtype) == str(reference.dtype).removeprefix("torch."), (mine, reference)
        np.testing.assert_allclose(mine.detach().numpy(), reference.detach().numpy(), **HALF)
    for mine, reference in zip(our_grads, their_grads, strict=True):
        assert mine.dtype == np.float32  # the parameters' own dtype
        np.testing.assert_allclose(mine.numpy(), reference.numpy(), **HALF)


def test_dtypes_without_torch():
    """The policy alone (runs without PyTorch): the product in float16, the loss in float32."""
    (h, p, e, mixed, loss), (grad_w, grad_b) = _trained(ta)
    assert [str(t.dtype) for t in (h, p, e, mixed, loss)] == [
        "float16",
        "float16",
        "float16",
        "float32",
        "float32",
    ]
    assert grad_w.dtype == np.float32 and grad_b.dtype == np.float32


def test_a_parameter_is_cast_once_per_region():
    w = ta.tensor(W, requires_grad=True)
    x = ta.tensor(X)
    with ta.autocast("cpu", dtype=ta.float16):
        first, second = x @ w, (x * 2.0) @ w
        assert first._ctx.inputs[1] is second._ctx.inputs[1]  # one cast of w, in the graph
    with ta.autocast("cpu", dtype=ta.float16):
        third = x @ w  # a new region casts again
    assert third._ctx.inputs[1] is not first._ctx.inputs[1]
    (first.float().sum() + second.float().sum()).backward()
    np.testing.assert_allclose(w.grad.numpy(), 3.0 * X.sum(0)[:, None].repeat(5, 1), **HALF)


def test_outside_a_region_and_in_other_threads_nothing_is_cast():
    w = ta.tensor(W, requires_grad=True)
    seen = {}

    def elsewhere() -> None:
        seen["dtype"] = str((ta.tensor(X) @ w).dtype)

    with ta.autocast("cpu", dtype=ta.float16):
        worker = threading.Thread(target=elsewhere)
        worker.start()
        worker.join()
        inside = ta.tensor(X) @ w
    after = ta.tensor(X) @ w
    assert (str(inside.dtype), seen["dtype"], str(after.dtype)) == ("float16",) + ("float32",) * 2


def test_enabled_false_inside_a_region_and_float64_are_left_alone():
    w = ta.tensor(W, requires_grad=True)
    with ta.autocast("cpu", dtype=ta.float16):
        with ta.autocast("cpu", enabled=False):
            off = ta.tensor(X) @ w
        back_on = ta.tensor(X) @ w
        double = ta.tensor(X.astype(np.float64)) @ ta.tensor(W.astype(np.float64))
    assert (str(off.dtype), str(back_on.dtype), str(double.dtype)) == (
        "float32",
        "float16",
        "float64",
    )


def test_cuda_without_a_gpu_warns_and_disables_itself_as_torch():
    if ta.cuda.is_available():
        pytest.skip("a GPU is present: the region is enabled there")
    with pytest.warns(UserWarning, match="Disabling autocast"):
        region = ta.autocast("cuda")
    with region:
        assert str((ta.tensor(X) @ ta.tensor(W)).dtype) == "float32"


def test_bfloat16_and_unknown_devices_are_refused_by_name():
    with pytest.raises(NotImplementedError, match="dtype=torch.float16"):
        with ta.autocast("cpu"):  # PyTorch's CPU default is bfloat16
            pass
    with pytest.raises(RuntimeError, match="unsupported autocast device_type 'tpu'"):
        ta.autocast("tpu")


def test_an_unknown_device_type_raises_what_torch_raises():
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.autocast("tpu")
    with pytest.raises(RuntimeError):
        ta.autocast("tpu")


def test_decorator_and_grad_scaler_train_under_autocast():
    ta.manual_seed(0)
    model = ta.nn.Linear(8, 5)
    optimizer = ta.optim.SGD(model.parameters(), lr=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "cuda" without a GPU: the scaler disables itself
        scaler = ta.amp.GradScaler("cpu")

    @ta.autocast("cpu", dtype=ta.float16)
    def loss_of(x: ta.Tensor, target: ta.Tensor) -> ta.Tensor:
        return F.cross_entropy(model(x), target)

    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = loss_of(ta.tensor(X), ta.tensor(TARGET))
        assert str(loss.dtype) == "float32"
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    assert str(model.weight.grad.dtype) == "float32" and losses[-1] < 0.5 * losses[0]


def test_is_autocast_enabled_and_get_autocast_dtype_as_torchs():
    torch = pytest.importorskip("torch")

    def state(lib) -> tuple:
        return (
            lib.is_autocast_enabled("cpu"),
            lib.is_autocast_enabled(),  # CUDA's, as PyTorch's with no argument
            str(lib.get_autocast_dtype("cpu")).removeprefix("torch."),
            str(lib.get_autocast_dtype("cuda")).removeprefix("torch."),
        )

    seen = {}
    for name, lib in (("ours", ta), ("theirs", torch)):
        outside = state(lib)
        with lib.autocast("cpu", dtype=lib.float16):
            inside = state(lib)
            with lib.autocast("cpu", enabled=False):
                off = state(lib)[:1]
        seen[name] = (outside, inside, off)
    assert seen["ours"] == seen["theirs"]
