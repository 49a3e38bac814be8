"""nn.init: PyTorch's in-place initialisers (``nn.init.normal_(layer.weight, std=0.02)``).

Every draw comes from tinyattn's seeded host RNG (``ta.manual_seed``) in float64, then is cast to
the tensor's dtype and moved to its device, so all backends start from the same numbers. The
values are written into the tensor under ``no_grad``: the Parameter object stays the same (an
optimizer holding it stays valid). The distributions and their bounds are PyTorch's; the
numbers are not (PyTorch has its own generator).
"""

from __future__ import annotations

import math
from typing import Any

from .. import backend
from ..autograd import no_grad
from ..errors import TinyattnError
from ..tensor import Tensor


def _write(tensor: Tensor, values: Any) -> Tensor:
    """Write `values` (a host array, Tensor or number) into `tensor` in place; returns tensor."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"nn.init: expected a Tensor, got {type(tensor).__name__}")
    new = Tensor(values, dtype=backend.dtype_name(tensor.dtype), device=tensor.device).array
    with no_grad():
        # The one place init writes: in place, so shared views see it, and the version goes up.
        tensor._store("nn.init", new)
    return tensor


def _float_tensor(op: str, tensor: Any) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(tensor).__name__}")
    backend.check_floating(op, tensor.array)
    return tensor


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """PyTorch's recommended gain for a nonlinearity (relu sqrt(2), tanh 5/3, selu 3/4, ...)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "sigmoid")
    linear += ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, int | float):
            raise TinyattnError(f"calculate_gain: negative_slope {slope!r} is not a number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise TinyattnError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """fan_in = shape[1] * receptive field, fan_out = shape[0] * receptive field (PyTorch's)."""
    if tensor.ndim < 2:
        raise TinyattnError(
            f"nn.init: fan in and fan out need a tensor of at least 2 dimensions, got shape "
            f"{tensor.shape}"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise TinyattnError(f"nn.init: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    """Fill with U(a, b)."""
    _float_tensor("uniform_", tensor)
    if generator is not None:
        raise NotImplementedError("uniform_: generator= is not supported; use ta.manual_seed")
    return _write(tensor, backend.host_rng().uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    """Fill with N(mean, std^2)."""
    _float_tensor("normal_", tensor)
    if generator is not None:
        raise NotImplementedError("normal_: generator= is not supported; use ta.manual_seed")
    return _write(tensor, backend.host_rng().normal(mean, std, tensor.shape))


def trunc_normal_(
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator: Any = None,
) -> Tensor:
    """Fill with N(mean, std^2) restricted to [a, b] (out-of-range draws are redrawn)."""
    _float_tensor("trunc_normal_", tensor)
    if not a < b:
        raise TinyattnError(f"trunc_normal_: need a < b, got a={a}, b={b}")
    if generator is not None:
        raise NotImplementedError("trunc_normal_: generator= is not supported")
    rng = backend.host_rng()
    values = rng.normal(mean, std, tensor.shape)
    outside = (values < a) | (values > b)
    for _ in range(1000):  # each round keeps at least P(a <= X <= b) of the rest
        count = int(outside.sum())
        if not count:
            break
        values[outside] = rng.normal(mean, std, count)
        outside = (values < a) | (values > b)
    else:  # an interval far in a tail: clip what is left rather than loop for ever
        values = values.clip(a, b)
    return _write(tensor, values)


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with `val`."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"constant_: expected a Tensor, got {type(tensor).__name__}")
    xp = backend.namespace(tensor.array)
    device = tensor.array.device
    return _write(tensor, xp.full(tensor.shape, val, dtype=tensor.dtype, device=device))


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_float_tensor("xavier_uniform_", tensor))
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_float_tensor("xavier_normal_", tensor))
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)


def kaiming_uniform_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Any = None,
) -> Tensor:
    """U(-bound, bound), bound = gain * sqrt(3 / fan) (He et al.), gain from calculate_gain."""
    fan = _fan(_float_tensor("kaiming_uniform_", tensor), mode)
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Any = None,
) -> Tensor:
    """N(0, std^2), std = gain / sqrt(fan)."""
    fan = _fan(_float_tensor("kaiming_normal_", tensor), mode)
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


__all__ = [
    "calculate_gain",
    "constant_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]
