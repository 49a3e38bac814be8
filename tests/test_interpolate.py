"""F.interpolate and nn.Upsample against PyTorch: values and gradients for every mode, float32
and float64, integer and non-integer scale factors, align_corners both ways, and PyTorch's
errors; plus a finite-difference gradient check that needs no PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn

RESIZES = [
    {"scale_factor": 2},
    {"scale_factor": 1.5},
    {"scale_factor": 0.7},
    {"scale_factor": 2.1},
    {"scale_factor": 1.1},
    {"scale_factor": 1.5, "recompute_scale_factor": True},
    {"scale_factor": 0.7, "recompute_scale_factor": True},
    {"size": 5},
    {"size": 1},
    {"size": 11},
]
# mode -> the spatial axes it runs on
MODE_DIMS = [
    ("nearest", 1),
    ("nearest", 2),
    ("nearest", 3),
    ("nearest-exact", 1),
    ("nearest-exact", 2),
    ("nearest-exact", 3),
    ("linear", 1),
    ("bilinear", 2),
    ("trilinear", 3),
    ("bicubic", 2),
]
SPATIAL = {1: (7,), 2: (5, 7), 3: (4, 5, 3)}


def _torch_backward_differs(mode: str, dims: int, kwargs: dict) -> bool:
    """Where PyTorch's backward disagrees with its own forward (its gradcheck fails): with a
    scale factor whose output size is the input's (or twice it, for nearest), the 1-d and 3-d
    nearest and the bicubic backward kernels read the indices of scale in / out, the forward
    kernels those of 1 / scale_factor. There the gradient is checked by finite differences."""
    factor = kwargs.get("scale_factor")
    if factor is None or kwargs.get("recompute_scale_factor"):
        return False
    sizes = [int(n * factor) for n in SPATIAL[dims]]
    if mode == "nearest" and dims != 2:
        return factor not in (1, 2) and any(
            m in (n, 2 * n) for n, m in zip(SPATIAL[dims], sizes, strict=True)
        )
    if mode == "bicubic":
        return factor != 1 and any(m == n for n, m in zip(SPATIAL[dims], sizes, strict=True))
    return False


def _both(mode: str, dims: int, dtype: str, kwargs: dict, align_corners: bool | None):
    """(tinyattn output, input grad), (torch output, input grad) for the same random input."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(dims)
    x = rng.standard_normal((2, 3, *SPATIAL[dims])).astype(dtype)
    ours = ta.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    out = F.interpolate(ours, mode=mode, align_corners=align_corners, **kwargs)
    ref = torch.nn.functional.interpolate(theirs, mode=mode, align_corners=align_corners, **kwargs)
    g = rng.standard_normal(tuple(ref.shape)).astype(dtype)
    out.backward(ta.tensor(g))
    ref.backward(torch.tensor(g))
    return (out.detach().numpy(), ours.grad.numpy()), (ref.detach().numpy(), theirs.grad.numpy())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kwargs", RESIZES, ids=str)
@pytest.mark.parametrize(("mode", "dims"), MODE_DIMS)
def test_matches_torch(mode: str, dims: int, dtype: str, kwargs: dict) -> None:
    corner_choices = (
        [False, True] if mode in ("linear", "bilinear", "trilinear", "bicubic") else [None]
    )
    tol = 1e-5 if dtype == "float32" else 1e-12
    for align_corners in corner_choices:
        (out, grad), (ref, ref_grad) = _both(mode, dims, dtype, kwargs, align_corners)
        assert out.shape == ref.shape and out.dtype == ref.dtype
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
        if not _torch_backward_differs(mode, dims, kwargs):
            np.testing.assert_allclose(grad, ref_grad, rtol=tol, atol=tol)
        elif dtype == "float64":
            x = ta.tensor(np.random.default_rng(3).standard_normal((1, 2, *SPATIAL[dims])))
            fn = lambda t, ac=align_corners: F.interpolate(t, mode=mode, align_corners=ac, **kwargs)  # noqa: E731
            assert ta.gradcheck(fn, (x.requires_grad_(),))


@pytest.mark.parametrize(
    "kwargs",
    [{"size": (3, 9)}, {"scale_factor": (2.3, 1.1)}, {"scale_factor": (0.5, 1.7)}],
    ids=str,
)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "bilinear", "bicubic"])
def test_per_axis_sizes_match_torch(mode: str, kwargs: dict) -> None:
    align_corners = None if mode.startswith("nearest") else False
    (out, grad), (ref, ref_grad) = _both(mode, 2, "float64", kwargs, align_corners)
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12, atol=1e-12)


def test_upsample_module_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 6)).astype("float32")
    for kwargs in [
        {"scale_factor": 2},
        {"size": (5, 3), "mode": "bilinear", "align_corners": True},
        {"scale_factor": 1.5, "mode": "bicubic"},
    ]:
        ours = nn.Upsample(**kwargs)(ta.tensor(x)).numpy()
        ref = torch.nn.Upsample(**kwargs)(torch.tensor(x)).numpy()
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-5)
    assert list(nn.Upsample(scale_factor=2).parameters()) == []
    for kwargs in [
        {"scale_factor": 2},
        {"scale_factor": (2, 1.5)},
        {"size": (3, 4), "mode": "bilinear"},
    ]:
        assert repr(nn.Upsample(**kwargs)) == repr(torch.nn.Upsample(**kwargs))


@pytest.mark.parametrize(
    ("mode", "align_corners"), [("bilinear", False), ("bilinear", True), ("bicubic", False)]
)
def test_gradcheck_float64(mode: str, align_corners: bool) -> None:
    x = ta.tensor(np.random.default_rng(1).standard_normal((1, 2, 3, 4)), requires_grad=True)
    fn = lambda t: F.interpolate(t, scale_factor=1.7, mode=mode, align_corners=align_corners)  # noqa: E731
    assert ta.gradcheck(fn, (x,))


def test_gradcheck_nearest_and_linear_float64() -> None:
    x = ta.tensor(np.random.default_rng(2).standard_normal((2, 1, 5)), requires_grad=True)
    assert ta.gradcheck(lambda t: F.interpolate(t, size=8, mode="linear"), (x,))
    assert ta.gradcheck(lambda t: F.interpolate(t, scale_factor=0.7), (x,))


def test_nearest_keeps_integer_dtype() -> None:
    x = ta.tensor(np.arange(6).reshape(1, 1, 6))
    out = F.interpolate(x, scale_factor=0.5)
    assert out.numpy().tolist() == [[[0, 2, 4]]]
    with pytest.raises(TypeError, match="floating"):
        F.interpolate(x.reshape(1, 1, 6), scale_factor=2, mode="linear")


def test_errors_match_torch() -> None:
    x = ta.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="either size or scale_factor"):
        F.interpolate(x)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.interpolate(x, size=2, align_corners=True)
    with pytest.raises(ValueError, match="recompute_scale_factor is not meaningful"):
        F.interpolate(x, size=2, recompute_scale_factor=True)
    with pytest.raises(ValueError, match="same number of spatial dimensions"):
        F.interpolate(x, size=(2, 2, 2))
    with pytest.raises(ValueError, match="same number of spatial dimensions"):
        F.interpolate(x, scale_factor=(2.0,))
    with pytest.raises(NotImplementedError, match="needs 3D input"):
        F.interpolate(x, size=2, mode="linear")
    with pytest.raises(NotImplementedError, match="needs 5D input"):
        F.interpolate(x, size=2, mode="trilinear")
    with pytest.raises(NotImplementedError, match="got 2D"):
        F.interpolate(ta.zeros(4, 4), size=2)
    with pytest.raises(NotImplementedError, match="'area'"):
        F.interpolate(x, size=2, mode="area")
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(x, size=2, mode="bilinear", antialias=True)
    with pytest.raises(RuntimeError, match="greater than 0"):
        F.interpolate(x, scale_factor=0.1)


def test_error_types_agree_with_torch() -> None:
    torch = pytest.importorskip("torch")
    cases = [
        {"size": 2, "scale_factor": 2},
        {},
        {"size": 2, "align_corners": True},
        {"size": 2, "recompute_scale_factor": True},
        {"size": (2, 2, 2)},
        {"size": 2, "mode": "linear"},
        {"scale_factor": 0.1},
    ]
    for kwargs in cases:
        with pytest.raises(Exception) as ref:
            torch.nn.functional.interpolate(torch.zeros(1, 1, 4, 4), **kwargs)
        with pytest.raises(Exception) as ours:
            F.interpolate(ta.zeros(1, 1, 4, 4), **kwargs)
        assert isinstance(ours.value, type(ref.value)), (kwargs, ours.value, ref.value)


@pytest.mark.parametrize(
    ("mode", "shape", "kwargs"),
    [
        ("nearest", (1, 2, 5, 4), {"scale_factor": 1.5}),
        ("nearest-exact", (1, 2, 6), {"size": 4}),
        ("bilinear", (1, 2, 3, 4), {"scale_factor": 1.7, "align_corners": False}),
        ("bicubic", (1, 1, 3, 4), {"size": (5, 2), "align_corners": True}),
        ("trilinear", (1, 1, 2, 3, 2), {"scale_factor": 2.0, "align_corners": False}),
    ],
)
def test_every_backend_agrees_and_gradchecks(device: str, mode: str, shape: tuple, kwargs: dict):
    data = np.random.default_rng(4).standard_normal(shape)
    on_cpu = F.interpolate(ta.tensor(data), mode=mode, **kwargs).numpy()
    x = ta.tensor(data, device=device, requires_grad=True)
    out = F.interpolate(x, mode=mode, **kwargs)
    assert out.device == x.device
    np.testing.assert_allclose(out.detach().numpy(), on_cpu, rtol=1e-12, atol=1e-12)
    assert ta.gradcheck(lambda t: F.interpolate(t, mode=mode, **kwargs), (x,))
