"""Convolution, pooling and batch norm modules against PyTorch's, on the same weights.

Each module is built with the same arguments in both libraries; tinyattn's weights are loaded
into torch's (and the other way round), and the forward, the gradient of every parameter and of
the input, and batch norm's running statistics over several training steps and in eval mode
must agree to 1e-5. Error cases name the op and the shapes. A compiled training step of a small
CNN equals the eager one bit for bit, on every backend.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import backend, nn, ops, optim

torch = pytest.importorskip("torch")

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def _copy_weights(ours: nn.Module, theirs) -> None:
    """tinyattn's state into torch's module, checking the keys are PyTorch's, in order."""
    state = ours.state_dict()
    assert list(state) == list(theirs.state_dict())
    theirs.load_state_dict({key: torch.tensor(value.numpy()) for key, value in state.items()})


def _compare(ours: nn.Module, theirs, shape: tuple, seed: int = 0) -> None:
    """Forward and every gradient (input and parameters) of ours and theirs agree."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    x_ours, x_theirs = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    if isinstance(y_theirs, tuple):  # return_indices: the same indices, then compare values
        np.testing.assert_array_equal(y_ours[1].numpy(), y_theirs[1].numpy())
        y_ours, y_theirs = y_ours[0], y_theirs[0]
    np.testing.assert_allclose(y_ours.detach().numpy(), y_theirs.detach().numpy(), **TOLERANCE)
    g = rng.standard_normal(y_ours.shape).astype(np.float32)
    (y_ours * ta.tensor(g)).sum().backward()
    (y_theirs * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(x_ours.grad.numpy(), x_theirs.grad.numpy(), **TOLERANCE)
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(
            p.grad.numpy(), theirs_params[name].grad.numpy(), err_msg=name, **TOLERANCE
        )


# ------------------------------------------------------------------------------- convolution
CONV2D = [  # (kwargs, input shape)
    ({}, (2, 4, 7, 6)),
    ({"stride": 2}, (2, 4, 7, 6)),
    ({"stride": (2, 1), "padding": (1, 2)}, (2, 4, 7, 6)),
    ({"padding": 1, "dilation": 2}, (1, 4, 7, 8)),
    ({"groups": 2, "padding": "same"}, (2, 4, 6, 6)),
    ({"groups": 4, "bias": False}, (2, 4, 5, 5)),
    ({"padding": "valid", "dilation": (2, 1)}, (2, 4, 7, 6)),
    ({"padding": 2, "padding_mode": "reflect"}, (2, 4, 6, 5)),
    ({"padding": (1, 2), "padding_mode": "replicate", "stride": 2}, (2, 4, 6, 5)),
    ({"padding": "same", "padding_mode": "circular", "dilation": 2}, (2, 4, 6, 7)),
    ({}, (4, 5, 5)),  # unbatched
]


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")  # PyTorch's note
@pytest.mark.parametrize("kwargs, shape", CONV2D, ids=[str(k) for k, _ in CONV2D])
def test_conv2d_equals_pytorch(kwargs, shape):
    kernel = (3, 2) if kwargs.get("padding") != "same" else (3, 4)
    ta.manual_seed(0)
    ours = nn.Conv2d(4, 8, kernel, **kwargs)
    theirs = torch.nn.Conv2d(4, 8, kernel, **kwargs)
    _copy_weights(ours, theirs)
    _compare(ours, theirs, shape)


CONV1D = [
    ({}, (2, 4, 9)),
    ({"stride": 3, "padding": 2, "dilation": 2}, (2, 4, 11)),
    ({"groups": 2, "padding": "same"}, (3, 4, 8)),
    ({"padding": 2, "padding_mode": "circular", "bias": False}, (2, 4, 6)),
    ({"padding": 1, "padding_mode": "reflect"}, (4, 7)),
]


@pytest.mark.parametrize("kwargs, shape", CONV1D, ids=[str(k) for k, _ in CONV1D])
def test_conv1d_equals_pytorch(kwargs, shape):
    ta.manual_seed(0)
    ours, theirs = nn.Conv1d(4, 6, 3, **kwargs), torch.nn.Conv1d(4, 6, 3, **kwargs)
    _copy_weights(ours, theirs)
    _compare(ours, theirs, shape)


TRANSPOSED = [
    ({}, (2, 4, 3, 4)),
    ({"stride": 2, "padding": 1, "output_padding": 1}, (2, 4, 3, 4)),
    ({"stride": (2, 3), "groups": 2, "dilation": 2, "bias": False}, (1, 4, 3, 3)),
]


@pytest.mark.parametrize("kwargs, shape", TRANSPOSED, ids=[str(k) for k, _ in TRANSPOSED])
def test_conv_transpose2d_equals_pytorch(kwargs, shape):
    ta.manual_seed(0)
    ours = nn.ConvTranspose2d(4, 6, (3, 2), **kwargs)
    theirs = torch.nn.ConvTranspose2d(4, 6, (3, 2), **kwargs)
    _copy_weights(ours, theirs)
    _compare(ours, theirs, shape)


THREE_D = [  # (ours, theirs, args, kwargs, input shape)
    (nn.Conv3d, torch.nn.Conv3d, (4, 6, (2, 3, 2)),
     {"stride": (1, 2, 1), "padding": (1, 0, 1), "dilation": (1, 1, 2), "groups": 2},
     (2, 4, 5, 6, 7)),
    (nn.Conv3d, torch.nn.Conv3d, (4, 2, 3), {"padding": "same", "padding_mode": "reflect"},
     (4, 4, 5, 6)),
    (nn.ConvTranspose3d, torch.nn.ConvTranspose3d, (4, 2, 2),
     {"stride": 2, "padding": (0, 1, 0), "output_padding": (1, 0, 1)}, (2, 4, 3, 4, 3)),
    (nn.MaxPool3d, torch.nn.MaxPool3d, (2,),
     {"stride": (1, 2, 2), "padding": 1, "ceil_mode": True, "return_indices": True},
     (2, 3, 5, 6, 7)),
    (nn.AvgPool3d, torch.nn.AvgPool3d, ((2, 3, 2),),
     {"stride": 1, "padding": (1, 1, 0), "count_include_pad": False}, (2, 3, 5, 6, 7)),
    (nn.AdaptiveAvgPool3d, torch.nn.AdaptiveAvgPool3d, ((2, None, 3),), {}, (2, 3, 5, 6, 7)),
]  # fmt: skip


@pytest.mark.parametrize(
    "ours, theirs, args, kwargs, shape", THREE_D, ids=[f"{c[0].__name__}-{c[3]}" for c in THREE_D]
)
def test_three_d_modules_equal_pytorch(ours, theirs, args, kwargs, shape):
    ta.manual_seed(0)
    ours, theirs = ours(*args, **kwargs), theirs(*args, **kwargs)
    if list(theirs.state_dict()):
        _copy_weights(ours, theirs)
    _compare(ours, theirs, shape)


def test_batch_norm3d_equals_pytorch_over_training_steps():
    ours, theirs = nn.BatchNorm3d(3, momentum=0.2), torch.nn.BatchNorm3d(3, momentum=0.2)
    _copy_weights(ours, theirs)
    for step in range(3):
        _compare(ours, theirs, (2, 3, 2, 3, 2), seed=step)
        np.testing.assert_allclose(
            ours.running_var.numpy(), theirs.running_var.numpy(), **TOLERANCE
        )
        ours.zero_grad()
        theirs.zero_grad()


def test_conv_transpose1d_equals_pytorch():
    ta.manual_seed(0)
    ours = nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1)
    theirs = torch.nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1, output_padding=1)
    _copy_weights(ours, theirs)
    _compare(ours, theirs, (2, 3, 5))


def test_weights_load_from_pytorch_and_initialise_as_pytorch():
    """torch -> tinyattn loads; the init bound is PyTorch's 1 / sqrt(fan_in)."""
    theirs = torch.nn.Conv2d(6, 8, 3, groups=2)
    ours = nn.Conv2d(6, 8, 3, groups=2)
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    _compare(ours, theirs, (2, 6, 5, 5))
    ta.manual_seed(0)
    big = nn.Conv2d(16, 64, 3, groups=4)
    bound = 1 / np.sqrt(16 // 4 * 9)  # fan_in = in_channels / groups * kernel elements
    for p in (big.weight, big.bias):
        values = np.abs(p.detach().numpy())
        assert values.max() <= bound and values.max() > 0.95 * bound
    assert big.weight.shape == (64, 4, 3, 3) and big.weight.dtype == ta.float32


# ----------------------------------------------------------------------------------- pooling
POOLS = [
    (nn.MaxPool2d, torch.nn.MaxPool2d, {"kernel_size": 2}, (2, 3, 6, 7)),
    (nn.MaxPool2d, torch.nn.MaxPool2d, {"kernel_size": 3, "stride": 2, "padding": 1}, (2, 3, 7, 6)),
    (nn.MaxPool2d, torch.nn.MaxPool2d, {"kernel_size": (3, 2), "stride": (2, 1), "ceil_mode": True,
                                        "return_indices": True}, (2, 3, 8, 7)),
    (nn.MaxPool2d, torch.nn.MaxPool2d, {"kernel_size": 2, "dilation": 2, "padding": 1,
                                        "return_indices": True, "ceil_mode": True}, (3, 7, 6)),
    (nn.MaxPool1d, torch.nn.MaxPool1d, {"kernel_size": 3, "stride": 2, "padding": 1,
                                        "ceil_mode": True, "return_indices": True}, (2, 3, 8)),
    (nn.AvgPool2d, torch.nn.AvgPool2d, {"kernel_size": 2}, (2, 3, 6, 7)),
    (nn.AvgPool2d, torch.nn.AvgPool2d, {"kernel_size": 3, "stride": 2, "padding": 1,
                                        "ceil_mode": True}, (2, 3, 8, 7)),
    (nn.AvgPool2d, torch.nn.AvgPool2d, {"kernel_size": 3, "stride": 2, "padding": 1,
                                        "ceil_mode": True, "count_include_pad": False},
     (2, 3, 8, 7)),
    (nn.AvgPool2d, torch.nn.AvgPool2d, {"kernel_size": (2, 3), "divisor_override": 5},
     (2, 3, 6, 7)),
    (nn.AvgPool1d, torch.nn.AvgPool1d, {"kernel_size": 4, "stride": 3, "padding": 2,
                                        "count_include_pad": False, "ceil_mode": True}, (2, 3, 9)),
    (nn.AdaptiveAvgPool2d, torch.nn.AdaptiveAvgPool2d, {"output_size": (3, 2)}, (2, 3, 7, 5)),
    (nn.AdaptiveAvgPool2d, torch.nn.AdaptiveAvgPool2d, {"output_size": (None, 4)}, (2, 3, 7, 5)),
    (nn.AdaptiveAvgPool2d, torch.nn.AdaptiveAvgPool2d, {"output_size": 1}, (3, 6, 6)),
    (nn.AdaptiveAvgPool1d, torch.nn.AdaptiveAvgPool1d, {"output_size": 4}, (2, 3, 9)),
]  # fmt: skip


@pytest.mark.parametrize(
    "ours, theirs, kwargs, shape", POOLS, ids=[f"{p[0].__name__}-{p[2]}" for p in POOLS]
)
def test_pooling_equals_pytorch(ours, theirs, kwargs, shape):
    _compare(ours(**kwargs), theirs(**kwargs), shape)


UNPOOLS = [  # (spatial, kernel, stride, padding, input shape, output_size)
    (1, 3, 2, 1, (2, 3, 9), None),
    (2, 2, None, 0, (2, 3, 6, 8), None),
    (2, 3, 1, 1, (2, 3, 6, 8), None),  # overlapping windows: one place chosen twice
    (2, 3, 2, 1, (3, 6, 8), (6, 8)),  # unbatched, the pooled input's own size back
    (3, 2, (1, 2, 2), 0, (1, 2, 4, 6, 6), None),
]


@pytest.mark.parametrize("spatial, kernel, stride, padding, shape, size", UNPOOLS)
def test_max_unpool_equals_pytorch(spatial, kernel, stride, padding, shape, size):
    """Values back at max_pool's indices, zeros elsewhere, and each pooled value's gradient
    gathered from its place, as PyTorch's MaxUnpool; the module and the function alike."""
    pool = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)[spatial - 1]
    unpool = (nn.MaxUnpool1d, nn.MaxUnpool2d, nn.MaxUnpool3d)[spatial - 1]
    their_pool = getattr(torch.nn, pool.__name__)(kernel, stride, padding, return_indices=True)
    their_unpool = getattr(torch.nn, unpool.__name__)(kernel, stride, padding)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    x_ours, x_theirs = ta.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    values, indices = pool(kernel, stride, padding, return_indices=True)(x_ours)
    expected = their_unpool(*their_pool(x_theirs), output_size=size)
    y = unpool(kernel, stride, padding)(values, indices, output_size=size)
    np.testing.assert_array_equal(y.detach().numpy(), expected.detach().numpy())
    g = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    (y * ta.tensor(g)).sum().backward()
    (expected * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(x_ours.grad.numpy(), x_theirs.grad.numpy(), **TOLERANCE)


def test_max_unpool_gradient_checks_and_refuses_bad_indices_and_sizes():
    values = ta.tensor(np.random.default_rng(2).standard_normal((1, 2, 2, 3)), requires_grad=True)
    _, indices = F.max_pool2d(ta.randn(1, 2, 4, 6, dtype="float64"), 2, return_indices=True)
    assert ta.gradcheck(lambda v: F.max_unpool2d(v, indices, 2), [values])
    with pytest.raises(RuntimeError, match="max_unpool2d: found an index out of the output plane"):
        F.max_unpool2d(values, indices + 100, 2)
    with pytest.raises(ValueError, match=r"max_unpool2d: output_size \(9, 6\) must be 2 sizes"):
        F.max_unpool2d(values, indices, 2, output_size=(9, 6))
    with pytest.raises(RuntimeError, match="indices must be an integer tensor"):
        F.max_unpool2d(values, indices.float(), 2)


def test_max_pool_gradient_goes_to_the_first_largest_value():
    """PyTorch routes a tie's gradient to one element, the first in the window."""
    x = ta.tensor([[[1.0, 3.0, 3.0, 0.0]]], requires_grad=True)
    F.max_pool1d(x, 2, stride=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[[0.0, 2.0, 1.0, 0.0]]])


# -------------------------------------------------------------------------------- batch norm
BATCH_NORMS = [
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, {}, (4, 3, 5, 4)),
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, {"momentum": None}, (4, 3, 5, 4)),
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, {"affine": False, "momentum": 0.3}, (4, 3, 2, 2)),
    (nn.BatchNorm2d, torch.nn.BatchNorm2d, {"track_running_stats": False}, (4, 3, 2, 2)),
    (nn.BatchNorm1d, torch.nn.BatchNorm1d, {"eps": 1e-3}, (6, 3)),
    (nn.BatchNorm1d, torch.nn.BatchNorm1d, {"momentum": None}, (4, 3, 5)),
]


@pytest.mark.parametrize(
    "ours, theirs, kwargs, shape", BATCH_NORMS, ids=[f"{b[0].__name__}-{b[2]}" for b in BATCH_NORMS]
)
def test_batch_norm_equals_pytorch_in_training_and_eval(ours, theirs, kwargs, shape):
    ours, theirs = ours(3, **kwargs), theirs(3, **kwargs)
    if ours.weight is not None:  # not the default ones and zeros, so scale and shift show
        with ta.no_grad():
            ours.weight.copy_(ta.tensor([0.5, 2.0, -1.0]))
            ours.bias.copy_(ta.tensor([0.1, 0.0, -0.3]))
    _copy_weights(ours, theirs)
    for step in range(4):
        _compare(ours, theirs, shape, seed=step)
        for name, buffer in theirs.named_buffers():
            np.testing.assert_allclose(
                getattr(ours, name).numpy(), buffer.numpy(), err_msg=name, **TOLERANCE
            )
        ours.zero_grad()
        theirs.zero_grad()
    ours.eval()
    theirs.eval()
    _compare(ours, theirs, shape, seed=10)


def test_batch_norm_buffers_are_pytorch_state_dict_entries():
    ours = nn.BatchNorm2d(5)
    assert list(ours.state_dict()) == list(torch.nn.BatchNorm2d(5).state_dict())
    assert backend.dtype_name(ours.num_batches_tracked.dtype) == "int64"
    ours.train()
    ours(ta.randn(2, 5, 3, 3))
    assert int(ours.num_batches_tracked.item()) == 1
    ours.to("float64")  # the count stays an integer
    assert backend.dtype_name(ours.num_batches_tracked.dtype) == "int64"
    assert list(nn.BatchNorm1d(3, track_running_stats=False).state_dict()) == ["weight", "bias"]


# ------------------------------------------------------------------------------------ errors
ERRORS = [
    (lambda: F.conv2d(ta.ones(2, 3, 5), ta.ones(4, 3, 4)),
     RuntimeError, r"conv2d: weight must be 4-d .* got shape \(4, 3, 4\)"),
    (lambda: F.conv2d(ta.ones(2, 3, 5, 5, 5), ta.ones(4, 3, 2, 2)), RuntimeError,
     r"conv2d: expected a 3-d \(unbatched\) or 4-d \(batched\) input, got shape \(2, 3, 5, 5, 5\)"),
    (lambda: F.conv2d(ta.ones(2, 3, 5, 5), ta.ones(4, 2, 2, 2)), RuntimeError,
     r"conv2d: input of shape \(2, 3, 5, 5\) has 3 channels, but weight of shape \(4, 2, 2, 2\)"),
    (lambda: F.conv2d(ta.ones(2, 4, 5, 5), ta.ones(3, 2, 2, 2), groups=2), RuntimeError,
     r"conv2d: out_channels 3 .* not divisible by groups=2"),
    (lambda: F.conv1d(ta.ones(1, 2, 3), ta.ones(1, 2, 5)), RuntimeError,
     r"conv1d: the padded input of spatial size \(3,\) is smaller than the dilated kernel \(5,\)"),
    (lambda: F.conv2d(ta.ones(1, 1, 5, 5), ta.ones(1, 1, 3, 3), stride=2, padding="same"),
     ValueError, "conv2d: padding='same' is not supported for strided convolutions"),
    (lambda: F.conv2d(ta.ones(1, 1, 5, 5), ta.ones(1, 1, 3, 3), stride=(1, 0)), ValueError,
     r"conv2d: stride must be an int >= 1 or 2 of them, got \(1, 0\)"),
    (lambda: F.conv2d(ta.ones(1, 1, 3, 3), ta.ones(1, 1, 2, 2, dtype="float64")), RuntimeError,
     r"conv2d: input \(float32\) and weight \(float64\) must have the same dtype"),
    (lambda: F.conv1d(ta.ones(1, 1, 3, dtype="int64"), ta.ones(1, 1, 2)), TypeError,
     "conv1d: expected a floating-point tensor, got dtype int64"),
    (lambda: nn.Conv2d(3, 4, 3, groups=2), ValueError,
     "Conv2d: in_channels 3 and out_channels 4 must be divisible by groups=2"),
    (lambda: nn.Conv1d(2, 2, 3, padding_mode="mirror"), ValueError, "Conv1d: padding_mode must"),
    (lambda: F.max_pool2d(ta.ones(1, 1, 4, 4), 2, padding=2), ValueError,
     r"max_pool2d: padding \(2, 2\) should be at most half of the kernel size \(2, 2\)"),
    (lambda: F.avg_pool1d(ta.ones(1, 1, 2), 3), RuntimeError,
     r"avg_pool1d: input of spatial size \(2,\) padded by \(0,\) is smaller than the kernel"),
    (lambda: nn.BatchNorm2d(3)(ta.ones(2, 3, 4)), ValueError,
     r"BatchNorm2d: expected a 4-d input, got shape \(2, 3, 4\)"),
    (lambda: nn.BatchNorm1d(3)(ta.ones(1, 3)), ValueError,
     r"batch_norm: expected more than 1 value per channel when training, got input of shape"),
    (lambda: F.batch_norm(ta.ones(2, 3), ta.zeros(4), ta.ones(4)), RuntimeError,
     r"batch_norm: running_mean must have shape \(3,\) for input \(2, 3\), got \(4,\)"),
    (lambda: F.fold(ta.ones(1, 8, 5), (3, 3), 2), RuntimeError,
     r"fold: input of shape \(1, 8, 5\) does not hold columns of kernel \(2, 2\) for \(2, 2\)"),
    (lambda: F.conv_transpose2d(ta.ones(1, 2, 3, 3), ta.ones(2, 1, 2, 2), stride=2,
                                output_padding=2), ValueError,
     r"conv_transpose2d: output_padding \(2, 2\) must be smaller than stride or dilation"),
    (lambda: nn.ConvTranspose2d(2, 2, 3)(ta.ones(1, 2, 3, 3), output_size=(5, 5)),
     NotImplementedError, "ConvTranspose2d: output_size= is not supported; set output_padding"),
]  # fmt: skip


@pytest.mark.parametrize("call, error, message", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_bad_arguments_name_the_op_and_the_shapes(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---------------------------------------------------------------------- the window view itself
def test_windows_are_a_strided_view_on_numpy_and_slices_elsewhere(device):
    """NumPy gets a view (no copy); the strict stand-in a stack of slices: the same values."""
    x = ta.arange(60, dtype="float32").reshape(3, 4, 5)
    windows = backend.sliding_windows(x.array, (2, 3), (1, 2), (2, 1))
    assert windows.shape == (3, 2, 2, 2, 3)  # (lead, counts, window)
    assert np.shares_memory(windows, x.array) and not windows.flags.writeable
    moved = ta.tensor(x.numpy(), device=device).array
    stacked = backend.sliding_windows(moved, (2, 3), (1, 2), (2, 1))
    np.testing.assert_array_equal(backend.to_numpy(stacked), windows)
    # window (o1, o2), offset (k1, k2) holds x[..., o1 + 2 k1, 2 o2 + k2]
    np.testing.assert_array_equal(windows[:, 1, 0, 1, 2], x.numpy()[:, 1 + 2, 0 + 2])


def test_unfold_puts_offsets_before_windows_and_fold_is_its_adjoint(device):
    """Unfold's (lead, window, counts) layout, PyTorch's im2col order; <Unfold(x), g> equals
    <x, Fold(g)>, the adjoint identity each op's gradient rests on."""
    x = ta.tensor(np.arange(60.0).reshape(3, 4, 5), device=device)
    geometry = {"window": (2, 3), "step": (1, 2), "dilation": (2, 1)}
    windows = ops.Unfold.apply(x, **geometry)
    assert windows.shape == (3, 2, 3, 2, 2)  # (lead, window, counts)
    # offset (k1, k2), window (o1, o2) holds x[..., o1 + 2 k1, 2 o2 + k2]
    assert windows.numpy()[1, 1, 2, 0, 1] == x.numpy()[1, 0 + 2, 2 + 2]
    g = ta.tensor(np.random.default_rng(0).standard_normal(windows.shape), device=device)
    folded = ops.Fold.apply(g, size=(4, 5), **geometry)
    np.testing.assert_allclose((windows * g).sum().item(), (x * folded).sum().item(), rtol=1e-12)


@pytest.mark.parametrize("call", [F.conv1d, F.conv2d, F.conv_transpose2d], ids=lambda f: f.__name__)
def test_convolution_output_is_row_major(call):
    """(N, C_out, *out) in row-major order, PyTorch's layout: a batch norm after it sums over
    contiguous memory (pairwise in NumPy; one element at a time where channels vary fastest)."""
    spatial = 1 if call is F.conv1d else 2
    x, w = ta.randn(2, 4, *(6,) * spatial), ta.randn(4, 2, *(3,) * spatial)
    assert call(x, w, groups=2).is_contiguous()


# ------------------------------------------------------------------------- compiled training
def _cnn(device: str):
    ta.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, padding=1, groups=2, padding_mode="reflect"),
        nn.AvgPool2d(2, ceil_mode=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, 3),
    ).to(device)
    return model, optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def test_a_compiled_cnn_training_step_equals_the_eager_one(device):
    rng = np.random.default_rng(0)
    batches = [
        (
            ta.tensor(rng.standard_normal((5, 1, 8, 8)).astype("float32"), device=device),
            ta.tensor(rng.integers(0, 3, 5), device=device),
        )
        for _ in range(4)
    ]
    runs = []
    for compiled in (False, True):
        model, optimizer = _cnn(device)

        def step(x, y, model=model, optimizer=optimizer):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss

        step = ta.compile(step) if compiled else step
        runs.append(([float(step(*batch).detach().numpy()) for batch in batches], model, step))
    (eager_losses, eager, _), (compiled_losses, compiled, step) = runs
    assert compiled_losses == eager_losses
    for (name, a), b in zip(eager.state_dict().items(), compiled.state_dict().values()):
        np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=name)  # running stats too
    assert len(step.tapes) == 1, "the replays must have run"
