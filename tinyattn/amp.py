"""PyTorch's ``torch.amp``: `autocast` and `GradScaler` (dynamic loss scaling).

A tool on top of `tensor` and `autograd`; asks `backend` whether there is a GPU.
`autocast` with ``enabled=False`` is a context manager (and decorator) that changes nothing, as
PyTorch's; enabled, it raises NotImplementedError on entry: tinyattn runs every op in the dtype
of its inputs and has no per-op casting policy. `GradScaler` is PyTorch's algorithm: the loss is
multiplied by a scale, the gradients divided by it before the step, a step with an inf or NaN
gradient is skipped and the scale shrinks, and after `growth_interval` clean steps it grows.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from . import backend
from .autograd import no_grad
from .creation import tensor
from .errors import TinyattnError
from .tensor import Tensor


class autocast:  # noqa: N801  (PyTorch's name)
    """``with torch.autocast(device_type, dtype=None, enabled=True):`` PyTorch's signature.

    Disabled (``enabled=False``) it runs the block unchanged, as PyTorch does. Enabled, entering
    raises NotImplementedError: mixed precision by op is not supported; run in float32, or
    convert the model and inputs to float16 with ``.half()`` yourself.
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
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)

    def __enter__(self) -> autocast:
        if self._enabled:
            raise NotImplementedError(
                f"autocast(device_type={self.device!r}, dtype={self.fast_dtype!r}): per-op "
                "mixed precision is not supported; pass enabled=False (or use "
                "contextlib.nullcontext()) to run in the tensors' own dtypes"
            )
        return self

    def __exit__(self, *exc_info: Any) -> None:
        return None

    def __call__(self, function: Callable) -> Callable:
        @functools.wraps(function)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self:
                return function(*args, **kwargs)

        return wrapped


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


__all__ = ["GradScaler", "autocast"]
