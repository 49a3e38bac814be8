"""float32 accuracy of convolution and batch norm, measured against float64.

A small residual network (a convolution, batch norm and ReLU stem, three blocks of conv3x3, batch
norm, ReLU, conv3x3, batch norm, the skip connection and ReLU, then average pooling, a linear
layer and cross-entropy) runs in float32 and, with the same weights and images, in float64. The
float32 run's error (the activations after every layer, the loss, every parameter's gradient) is
held within a small factor of PyTorch's own float32 error when PyTorch is installed, and below
fixed bounds (about twice PyTorch's errors, as measured) in any case. The images lie in [0, 1],
as images do, so the convolutions' outputs have means of the size of their spread, and batch
norm's sums run over 16,384 values per channel: the case where the order of a sum's additions
shows. The float64 run takes the float32 run's side at every ReLU (`_replaying_relu`).

Batch norm alone is checked on x = 1000 + randn, where E[x^2] - E[x]^2 misses the variance by
about 10% and a float32 mean taken in one step moves every output by 1e-4 of the spread.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F

BATCH, WIDTH, SIZE, CLASSES = 16, 8, 32, 10
# PyTorch's float32 errors against float64 on this network, as measured (norm-wise relative
# errors, seeds 0 to 4): activations up to 6.7e-7, the loss up to 1.3e-7, the parameters'
# gradients up to 1.1e-6 median and 2.3e-5 at most. The bounds are about twice those.
BOUNDS = {"activations": 1.5e-6, "loss": 3e-7, "gradient median": 2e-6, "gradient max": 5e-5}
# The float32 errors may be this many times PyTorch's, measured on the same weights and images
# (they were 0.1 to 1.3 times PyTorch's on seeds 0 to 4).
FACTOR = 2.0


def _residual_network(lib):
    """The network in tinyattn or PyTorch (`lib` is either module). Its forward takes the
    images, a list that receives the activation after every layer, and the ReLU to use."""

    class Block(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = lib.nn.Conv2d(WIDTH, WIDTH, 3, padding=1, bias=False)
            self.bn1 = lib.nn.BatchNorm2d(WIDTH)
            self.conv2 = lib.nn.Conv2d(WIDTH, WIDTH, 3, padding=1, bias=False)
            self.bn2 = lib.nn.BatchNorm2d(WIDTH)

        def forward(self, x, seen: list, relu):
            out = self.conv1(x)
            seen.append(out)
            out = self.bn1(out)
            seen.append(out)
            out = self.bn2(self.conv2(relu(out)))
            seen.append(out)
            out = relu(out + x)
            seen.append(out)
            return out

    class Network(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = lib.nn.Conv2d(3, WIDTH, 3, padding=1, bias=False)
            self.bn = lib.nn.BatchNorm2d(WIDTH)
            self.blocks = lib.nn.ModuleList([Block() for _ in range(3)])
            self.fc = lib.nn.Linear(WIDTH, CLASSES)

        def forward(self, x, seen: list, relu):
            out = self.conv(x)
            seen.append(out)
            out = relu(self.bn(out))
            seen.append(out)
            for block in self.blocks:
                out = block(out, seen, relu)
            out = out.mean((2, 3))
            seen.append(out)
            return self.fc(out)

    return Network()


def _inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    """Images in [0, 1], labels, and the network's initial float32 parameters (tinyattn's; the
    buffers, running statistics and counts, start the same in both libraries)."""
    rng = np.random.default_rng(seed)
    images = rng.random((BATCH, 3, SIZE, SIZE)).astype(np.float32)
    labels = rng.integers(0, CLASSES, BATCH)
    ta.manual_seed(seed)
    parameters = _residual_network(ta).named_parameters()
    weights = {key: value.detach().numpy() for key, value in parameters}
    return images, labels, weights


def _recording_relu(masks: list):
    """ReLU that appends where it passes its input (x > 0) to `masks`."""

    def relu(x):
        masks.append(x.detach().numpy() > 0)
        return x.relu()

    return relu


def _replaying_relu(masks: list):
    """x times the next recorded mask: a float64 run that takes the float32 run's side of every
    ReLU's kink. An input within rounding of 0 may fall on either side in the two precisions,
    and its gradient then flips between 0 and 1: a difference of branch, not of rounding, that
    would show as an error of about 1e-3 in every gradient before it."""
    remaining = iter(masks)

    def relu(x):
        return x * ta.tensor(next(remaining).astype(np.float64))  # float64 runs only

    return relu


def _run_tinyattn(dtype: str, images, labels, weights, relu) -> tuple:
    """(activations, loss, {name: gradient}) of one training-mode forward and backward."""
    network = _residual_network(ta)
    network.load_state_dict({key: ta.tensor(value) for key, value in weights.items()}, strict=False)
    if dtype == "float64":
        network = network.double()
    seen: list = []
    logits = network(ta.tensor(images.astype(dtype)), seen, relu)
    loss = F.cross_entropy(logits, ta.tensor(labels))
    loss.backward()
    gradients = {name: p.grad.numpy() for name, p in network.named_parameters()}
    return [a.detach().numpy() for a in seen], loss.item(), gradients


def _run_torch(torch, dtype, images, labels, weights, relu) -> tuple:
    """`_run_tinyattn` with PyTorch."""
    network = _residual_network(torch)
    state = {key: torch.tensor(value) for key, value in weights.items()}
    network.load_state_dict(state, strict=False)
    network.to(dtype)
    seen: list = []
    logits = network(torch.tensor(images, dtype=dtype), seen, relu)
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor(labels))
    loss.backward()
    gradients = {name: p.grad.numpy() for name, p in network.named_parameters()}
    return [a.detach().numpy() for a in seen], loss.item(), gradients


def _relative(value, reference) -> float:
    """|value - reference| / |reference|, norm-wise, in float64."""
    difference = np.asarray(value, np.float64) - np.asarray(reference, np.float64)
    return float(np.linalg.norm(difference) / np.linalg.norm(reference))


def _errors(run: tuple, reference: tuple) -> dict:
    """A float32 run's errors against a float64 one: the worst activation, the loss, and the
    median and largest over the parameters' gradients."""
    activations, loss, gradients = run
    per_parameter = [_relative(gradients[k], g) for k, g in reference[2].items()]
    return {
        "activations": max(_relative(a, r) for a, r in zip(activations, reference[0], strict=True)),
        "loss": _relative(loss, reference[1]),
        "gradient median": float(np.median(per_parameter)),
        "gradient max": max(per_parameter),
    }


def _float32_errors(run_float32) -> dict:
    """The errors of `run_float32(relu)` against tinyattn's float64 run on its ReLU branches."""
    masks: list = []
    run = run_float32(_recording_relu(masks))
    return _errors(run, _run_tinyattn("float64", *_inputs(), _replaying_relu(masks)))


@pytest.fixture(scope="module")
def our_errors() -> dict:
    return _float32_errors(lambda relu: _run_tinyattn("float32", *_inputs(), relu))


@pytest.fixture(scope="module")
def pytorch_errors() -> dict:
    torch = pytest.importorskip("torch")
    return _float32_errors(lambda relu: _run_torch(torch, torch.float32, *_inputs(), relu))


def test_float64_is_a_reference_for_float32():
    """The float64 run is exact enough to measure float32 against: PyTorch's float64 run agrees
    with it to 1e-12 (it agrees to about 1e-14)."""
    torch = pytest.importorskip("torch")
    inputs, relu = _inputs(), lambda x: x.relu()
    ours, theirs = (
        _run_tinyattn("float64", *inputs, relu),
        _run_torch(torch, torch.float64, *inputs, relu),
    )
    assert max(_errors(ours, theirs).values()) < 1e-12


@pytest.mark.parametrize("measure", list(BOUNDS))
def test_float32_residual_network_error_is_bounded(our_errors, measure):
    assert our_errors[measure] < BOUNDS[measure], our_errors


@pytest.mark.parametrize("measure", list(BOUNDS))
def test_float32_residual_network_error_is_near_pytorchs(our_errors, pytorch_errors, measure):
    assert our_errors[measure] < FACTOR * pytorch_errors[measure], (our_errors, pytorch_errors)


# ----------------------------------------------------------------------------- batch norm
def _batch_norm_errors(x: np.ndarray, layout=lambda t: t) -> dict:
    """batch_norm's float32 errors against float64 in training: the output, the running
    statistics, and the input's and parameters' gradients for a random output gradient.
    `layout` rearranges the float32 input's memory without changing its values."""
    rng = np.random.default_rng(1)
    channels = x.shape[1]
    scale = np.linspace(0.5, 1.5, channels)
    grad = rng.standard_normal(x.shape)
    results = {}
    for dtype in ("float32", "float64"):
        leaf = ta.tensor(x.astype(dtype), requires_grad=True)
        weight = ta.tensor(scale.astype(dtype), requires_grad=True)
        bias = ta.zeros(channels, dtype=dtype, requires_grad=True)
        mean, var = ta.zeros(channels, dtype=dtype), ta.ones(channels, dtype=dtype)
        source = layout(leaf) if dtype == "float32" else leaf
        y = F.batch_norm(source, mean, var, weight, bias, training=True, momentum=1.0)
        (y * ta.tensor(grad.astype(dtype))).sum().backward()
        results[dtype] = {
            "output": y.detach().numpy(),
            "running mean": mean.numpy(),
            "running var": var.numpy(),
            "input gradient": leaf.grad.numpy(),
            "weight gradient": weight.grad.numpy(),
            "bias gradient": bias.grad.numpy(),
        }
    return {k: _relative(v, results["float64"][k]) for k, v in results["float32"].items()}


def _channels_last(t: ta.Tensor) -> ta.Tensor:
    """The same values with the channel axis varying fastest in memory."""
    return t.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)


@pytest.mark.parametrize(
    "layout", [lambda t: t, _channels_last], ids=["row-major", "channels-last"]
)
def test_batch_norm_is_accurate_at_a_large_mean(layout):
    """x = 1000 + randn, 32,768 values per channel: every error stays below 5e-7 (1.7e-7 at most
    as measured; PyTorch's output errs by 2e-5 here, about what rounding the mean to float32
    costs: its spacing at 1000 is 6e-5). Laid out channels-last and added one element at a
    time, the same sums would err by 2e-6; with the mean taken in one step, the output by 7e-5."""
    rng = np.random.default_rng(0)
    x = (1000.0 + rng.standard_normal((32, 4, 32, 32))).astype(np.float32)
    errors = _batch_norm_errors(x, layout)
    assert max(errors.values()) < 5e-7, errors


def test_one_pass_variance_fails_at_a_large_mean():
    """What the test above guards against: E[x^2] - E[x]^2 in float32 misses by percents."""
    rng = np.random.default_rng(0)
    x = ta.tensor((1000.0 + rng.standard_normal((16, 4, 16, 16))).astype(np.float32))
    axes = (0, 2, 3)
    one_pass = (x * x).mean(axes) - x.mean(axes) ** 2
    exact = np.var(x.numpy().astype(np.float64), axis=axes)
    assert _relative(one_pass.numpy(), exact) > 1e-2
    assert _relative(x.var(axes, correction=0).numpy(), exact) < 1e-6
