"""PyTorch's ``torch.amp``: `autocast` (float16 by op) and `GradScaler` (dynamic loss scaling).

A tool on top of `tensor` and `autograd`; asks `backend` whether there is a GPU.
`autocast` runs chosen ops in float16 as PyTorch's does: inside the region, an op of the lower
precision list (matrix products, linear, convolution, attention) casts its floating inputs to
float16 first, and on CUDA an op of the float32 list (exp, log, pow, softmax, log-softmax, layer
norm, norms, sums, products, cumulative sums, the losses) casts them to float32; every other op
runs in its inputs' dtypes (two dtypes promote as usual). The casts are ops of the graph, so
gradients reach float32 parameters in float32. On the CPU the float32 list is PyTorch's CPU one
(products and the losses). A parameter used twice in a region is cast once (the cache PyTorch
keeps, emptied when the outermost region closes). Regions belong to their thread. The casts
attach to the engine through its one seam (`autograd.listeners`): outside a region nothing is
consulted. bfloat16, PyTorch's CPU default, has no NumPy or CuPy dtype: it is refused on entry,
naming float16.

`GradScaler` is PyTorch's algorithm: the loss is multiplied by a scale, the gradients divided
by it before the step, a step with an inf or NaN gradient is skipped and the scale shrinks, and
after `growth_interval` clean steps it grows.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from . import backend, ops
from .autograd import listeners, no_grad
from .creation import tensor
from .errors import TinyattnError
from .tensor import Tensor

# PyTorch's autocast op lists, as tinyattn's Functions: a convolution is Unfold and a MatMul,
# scaled_dot_product_attention and MultiheadAttention are HeadsAttention or BlockwiseAttention.
_LOWER = (ops.MatMul, ops.Linear, ops.HeadsAttention, ops.BlockwiseAttention)
_FLOAT32 = {
    "cuda": (
        ops.Exp, ops.Log, ops.Log2, ops.Log10, ops.Log1p, ops.Expm1, ops.Pow, ops.PowScalar,
        ops.RPowScalar, ops.Tan, ops.Sinh, ops.Cosh, ops.Asin, ops.Acos, ops.Softmax,
        ops.LogSoftmax, ops.LayerNorm, ops.Norm, ops.Sum, ops.Prod, ops.Cumsum, ops.CrossEntropy,
        ops.NegLogLikelihood, ops.BinaryCrossEntropy,
    ),
    "cpu": (ops.Prod, ops.CrossEntropy, ops.NegLogLikelihood, ops.BinaryCrossEntropy),
}  # fmt: skip
_LISTED = _LOWER + _FLOAT32["cuda"] + _FLOAT32["cpu"]
_DEVICES = ("cuda", "cpu")


class _Regions(threading.local):
    """This thread's open autocast regions (device type, dtype or None when disabled, innermost
    last) and its cache of cast parameters."""

    def __init__(self) -> None:
        self.stack: list[tuple[str, str | None]] = []
        self.cache: dict[int, tuple] = {}


_regions = _Regions()
_open = [0, None]  # regions open in the whole process, and the listener's handle while some are
_lock = threading.Lock()


class _Casts(listeners.Listener):
    """The listener of open regions: an op's inputs as its autocast policy wants them."""

    def inputs(self, fn: Any, inputs: tuple, kwargs: dict) -> tuple:
        stack = _regions.stack
        if not stack or not isinstance(fn, _LISTED):  # another thread's region, or not listed
            return inputs
        on = dict(stack)  # device type -> the dtype of its innermost region (None: disabled)
        lower = isinstance(fn, _LOWER)
        return tuple([_cast(fn, t, on, lower) for t in inputs])


def _cast(fn: Any, t: Any, on: dict, lower: bool) -> Any:
    """`t` as op `fn` takes it in a region: cast if it is a floating tensor (not float64, which
    PyTorch leaves alone) on a device whose region is enabled and fn's list there asks for
    another dtype. A leaf that requires grad (a parameter) is cast once per region."""
    if not isinstance(t, Tensor):
        return t
    device = t.device.type
    fast = on.get(device)
    if fast is None or not backend.is_float_array(t.array):
        return t
    wanted = fast if lower else "float32" if isinstance(fn, _FLOAT32[device]) else None
    name = backend.dtype_name(t.dtype)
    if wanted is None or name == wanted or name == "float64":
        return t
    if t._ctx is not None or not t.requires_grad:
        return t.to(wanted)
    key = (id(t), wanted)
    kept = _regions.cache.get(key)
    if kept is None or kept[0] is not t or kept[1] != t._version:
        kept = _regions.cache[key] = (t, t._version, t.to(wanted))
    return kept[2]


class autocast:  # noqa: N801  (PyTorch's name)
    """``with torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None):``.

    ``device_type`` "cuda" (float16 by default) or "cpu" (bfloat16 by default, which tinyattn
    refuses: pass ``dtype=torch.float16``). "cuda" without a usable GPU warns and disables
    itself, as PyTorch's. ``enabled=False`` inside an enabled region turns it off for the block.
    Also a decorator.
    """

    def __init__(
        self,
        device_type: str,
        dtype: Any = None,
        enabled: bool = True,
        cache_enabled: bool | None = None,
    ) -> None:
        if not isinstance(device_type, str):
            raise ValueError(
                f"autocast: expected `device_type` of type `str`, got {type(device_type)}"
            )
        if enabled and device_type not in _DEVICES:
            raise RuntimeError(
                f"User specified an unsupported autocast device_type '{device_type}'; tinyattn's "
                "autocast takes 'cuda' or 'cpu'"
            )
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        if enabled and device_type == "cuda" and backend.cupy_status()[0] is None:
            warnings.warn(
                "CUDA is not available or torch_xla is imported. Disabling autocast.",
                UserWarning,
                stacklevel=2,
            )
            self._enabled = False
        wanted = dtype if dtype is not None else ("float16" if device_type == "cuda" else None)
        self._dtype = None if wanted is None else backend.dtype_name(wanted)

    def __enter__(self) -> autocast:
        if self._enabled and self._dtype != "float16":
            shown = self._dtype or "bfloat16, the CPU's default"
            raise NotImplementedError(
                f"autocast(device_type={self.device!r}, dtype={self.fast_dtype!r}): autocast to "
                f"{shown} is not supported (NumPy and CuPy have no bfloat16): pass "
                "dtype=torch.float16, or enabled=False (or contextlib.nullcontext()) to run in the "
                "tensors' own dtypes"
            )
        _regions.stack.append((self.device, self._dtype if self._enabled else None))
        with _lock:
            _open[0] += 1
            if _open[1] is None:
                _open[1] = listeners.listen(_Casts())
        return self

    def __exit__(self, *exc_info: Any) -> None:
        _regions.stack.pop()
        if not _regions.stack:  # the outermost region: its cast parameters go
            _regions.cache.clear()
        with _lock:
            _open[0] -= 1
            if _open[0] == 0:
                _open[1].remove()
                _open[1] = None

    def __call__(self, function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self:
                return function(*args, **kwargs)

        return wrapped


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether this thread is inside an enabled autocast region for `device_type` ("cuda" when
    not given, as PyTorch's ``torch.is_autocast_enabled()``)."""
    return dict(_regions.stack).get(device_type or "cuda") is not None


def get_autocast_dtype(device_type: str) -> str:
    """The dtype autocast casts to on `device_type` in this thread: its innermost region's, else
    PyTorch's default there (float16 on CUDA, bfloat16 on the CPU, which regions refuse)."""
    for device, dtype in reversed(_regions.stack):
        if device == device_type and dtype is not None:
            return dtype
    return "float16" if device_type == "cuda" else "bfloat16"


# The per-optimizer stages of one iteration, as PyTorch's OptState.
_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"


class GradScaler:
    """``torch.amp.GradScaler(device="cuda", init_scale=2.0**16, growth_factor=2.0,
    backoff_factor=0.5, growth_interval=2000, enabled=True)``.

    Enabled for ``device="cuda"`` without a usable GPU, it warns and disables itself, as
    PyTorch does. Disabled: `scale` returns its argument, `step` calls ``optimizer.step()``,
    `unscale_` and `update` do nothing, `get_scale` is 1.0 and `state_dict` is empty.
    Enabled: ``scale(loss) = loss * s``; `unscale_` multiplies every gradient by 1/s (float32)
    and records whether any is inf or NaN; `step` skips ``optimizer.step()`` when one was;
    `update` sets ``s *= backoff_factor`` after a skipped step, ``s *= growth_factor`` after
    `growth_interval` steps in a row without one.
    """

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        self._device = str(device)
        if enabled and self._device.startswith("cuda") and backend.cupy_status()[0] is None:
            warnings.warn(
                f"{self._owner()} is enabled, but CUDA is not available.  Disabling.",
                stacklevel=2,
            )
            enabled = False
        self._enabled = bool(enabled)
        if not self._enabled:
            return
        if growth_factor <= 1.0:
            raise TinyattnError(f"GradScaler: growth_factor must be > 1.0, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise TinyattnError(f"GradScaler: backoff_factor must be < 1.0, got {backoff_factor}")
        self._scale = tensor(float(init_scale), dtype="float32")
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict[str, Any]] = {}

    def _owner(self) -> str:
        return "torch.amp.GradScaler"

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        """The current scale as a Python float (1.0 when disabled)."""
        return self._scale.item() if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    # ---------------------------------------------------------------------------- the iteration
    def scale(self, outputs: Any) -> Any:
        """`outputs` times the scale: a tensor, or tensors inside lists and tuples."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale.to(outputs.device)
        if isinstance(outputs, list | tuple):
            return type(outputs)(self.scale(output) for output in outputs)
        raise ValueError("GradScaler.scale: outputs must be a Tensor or an iterable of Tensors")

    def _state(self, optimizer: Any) -> dict[str, Any]:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": None})

    def unscale_(self, optimizer: Any) -> None:
        """Divide `optimizer`'s gradients by the scale, in place, once per iteration."""
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] == _UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        state["found_inf"] = _unscale_grads(_grads_of(optimizer), self._inverse_scale())
        state["stage"] = _UNSCALED

    def _inverse_scale(self) -> float:
        # PyTorch takes the reciprocal in float64, then rounds it to float32.
        return (1.0 / self._scale.double()).float().item()

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """``optimizer.step(*args, **kwargs)`` unless a gradient is inf or NaN; returns its result
        (None when skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._state(optimizer)
        if state["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Back off or grow the scale from this iteration's steps (or set `new_scale`)."""
        if not self._enabled:
            return
        if new_scale is not None:
            value = new_scale.item() if isinstance(new_scale, Tensor) else float(new_scale)
            self._scale = tensor(value, dtype="float32")
        else:
            found = [
                s["found_inf"] for s in self._per_optimizer.values() if s["found_inf"] is not None
            ]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            self._update_scale(any(found))
        self._per_optimizer = {}

    def _update_scale(self, found_inf: bool) -> None:
        """PyTorch's rule: back off and restart the count after an inf; grow (if the result is
        finite) after `growth_interval` clean steps in a row."""
        if found_inf:
            self._scale = self._scale * self._backoff_factor
            self._growth_tracker = 0
            return
        self._growth_tracker += 1
        if self._growth_tracker == self._growth_interval:
            grown = self._scale * self._growth_factor
            if grown.isfinite().item():
                self._scale = grown
            self._growth_tracker = 0

    # ---------------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's keys (scale, growth_factor, backoff_factor, growth_interval,
        _growth_tracker); empty when disabled."""
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved "
                "from a disabled instance of GradScaler."
            )
        self._scale = tensor(float(state_dict["scale"]), dtype="float32")
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])


def _grads_of(optimizer: Any) -> Iterable[Tensor]:
    for group in optimizer.param_groups:
        for param in group["params"]:
            if param.grad is not None:
                yield param.grad


def _unscale_grads(grads: Iterable[Tensor], inverse_scale: float) -> bool:
    """Multiply each gradient by `inverse_scale` in place; True if any holds an inf or NaN."""
    found_inf = False
    with no_grad():
        for grad in grads:
            if str(grad.dtype) == "float16":
                raise ValueError("Attempting to unscale FP16 gradients.")
            grad.mul_(inverse_scale)
            found_inf = found_inf or not grad.isfinite().all().item()
    return found_inf


__all__ = ["GradScaler", "autocast", "get_autocast_dtype", "is_autocast_enabled"]
