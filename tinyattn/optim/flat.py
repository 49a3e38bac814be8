"""Optim layer, part 2: the flat layout of the multi-tensor optimizer step.

Imports `backend` and `tensor`. A parameter group's parameters, gradients and each state key are
laid end to end in one buffer, so an optimizer's rule runs as a handful of whole-buffer array
calls instead of a dozen calls per parameter (each NumPy or CuPy call costs microseconds of
dispatch, whatever its size). `Optimizer` (optimizer.py) decides when the layout is used.
"""

from __future__ import annotations

import math
import operator
from typing import Any

from .. import autograd, backend
from ..tensor import Tensor


def write_param(param: Tensor, array: Any, name: str) -> None:
    """Give `param` its new values in place, as PyTorch does: the Parameter object and its array
    stay the same (models, optimizers and state-dict snapshots keep seeing it), and its version
    goes up, so a graph that saved the old values refuses to backward through them."""
    param._store(f"{name}.step", array)


_OPERATORS = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "divide": operator.truediv,
}


def into(out: Any, name: str, *operands: Any) -> Any:
    """The elementwise `name` (add, subtract, multiply, divide or sqrt) of `operands`, written
    into `out` and returned: with ``out=`` on NumPy and CuPy (no new array), else computed with
    the same operator and copied in. The operator is the one the per-tensor path uses, so both
    give the same bits."""
    if backend.has_out(out):
        return getattr(backend.ufuncs_of(out), name)(*operands, out=out)
    xp = backend.namespace(out)
    out[...] = xp.sqrt(*operands) if name == "sqrt" else _OPERATORS[name](*operands)
    return out


def same_kind(first: Any, arrays: list[Any]) -> bool:
    """Whether the arrays share the array type, dtype and device of `first`."""
    kind, dtype = type(first), first.dtype
    if not all(type(array) is kind and array.dtype == dtype for array in arrays):
        return False
    return backend.is_host_array(first) or all(array.device == first.device for array in arrays)


class FlatGroup:
    """A group's parameters laid end to end in one flat layout: the gathered gradients and
    parameter values in two reused buffers, and each optimizer state key in one buffer whose
    slices, shaped like the parameters, are the entries of ``optimizer.state[p]``.

    The layout is only valid while the parameters are the same objects with the same arrays, and
    their state entries are still its views; `fits` checks that on every step, and the optimizer
    rebuilds the layout (copying the state values) when it fails."""

    def __init__(self, params: list[Tensor]) -> None:
        self.params = params
        self.arrays = [p.array for p in params]  # the objects the layout was built for
        self.shapes = [array.shape for array in self.arrays]
        first = self.arrays[0]
        self.xp = backend.namespace(first)
        self.bounds, size = [], 0
        for array in self.arrays:
            self.bounds.append((size, size + math.prod(array.shape)))
            size = self.bounds[-1][1]
        self.size, self.dtype, self.device = size, first.dtype, first.device
        self.grads, self.values = self._buffer(), self._buffer()
        self.grad_views, self.value_views = self._views(self.grads), self._views(self.values)
        self.scratch, self.spare = self._buffer(), self._buffer()  # temporaries of the update
        self.state: dict[str, Any] = {}  # state key -> flat buffer
        self.views: dict[str, list[Any]] = {}  # state key -> the per-parameter views of it

    def _buffer(self) -> Any:
        return self.xp.zeros((self.size,), dtype=self.dtype, device=self.device)

    def _views(self, buffer: Any) -> list[Any]:
        return [
            self.xp.reshape(buffer[start:stop], shape)
            for (start, stop), shape in zip(self.bounds, self.shapes, strict=True)
        ]

    @classmethod
    def build(cls, params: list[Tensor], states: list[dict], keys: tuple[str, ...]) -> Any:
        """A layout holding the parameters' current state arrays for `keys` (a key none of them
        has yet gets no buffer), or None where the per-tensor loop must run instead: the
        parameters mix array types, dtypes or devices, two of them hold one array (the loop
        updates it twice, the second time from the first's result), a key is held by only some
        of them, or a state array does not match its parameter."""
        arrays = [p.array for p in params]
        if not same_kind(arrays[0], arrays) or len({id(a) for a in arrays}) < len(arrays):
            return None
        flat = cls(params)
        for key in keys:
            entries = [state.get(key) for state in states]
            if all(entry is None for entry in entries):
                continue
            for entry, array in zip(entries, flat.arrays, strict=True):
                if entry is None or type(entry) is not type(array):
                    return None
                if entry.shape != array.shape or entry.dtype != array.dtype:
                    return None
            parts = [flat.xp.reshape(entry, (-1,)) for entry in entries]
            flat.adopt(key, flat.xp.concat(parts), states)
        return flat

    def adopt(self, key: str, buffer: Any, states: list[dict]) -> None:
        """Make `buffer` (owned by the layout from now on) the flat state of `key`."""
        self.state[key] = buffer
        self.views[key] = self._views(buffer)
        for state, view in zip(states, self.views[key], strict=True):
            state[key] = view

    def fits(self, params: list[Tensor], states: list[dict], keys: tuple[str, ...]) -> bool:
        """Whether the layout still describes these parameters and their state: the same
        Parameter objects holding the same array objects of the same shapes (a ``module.to()``
        or a rebinding load changes them), and state entries that are still this layout's views
        (``load_state_dict``, a per-tensor step or an assignment by hand replaces them)."""
        same = operator.is_
        if len(params) != len(self.params) or not all(map(same, params, self.params)):
            return False
        arrays = [p.array for p in params]
        if not all(map(same, arrays, self.arrays)) or [a.shape for a in arrays] != self.shapes:
            return False
        for key in keys:
            entries = [state.get(key) for state in states]
            views = self.views.get(key)
            if views is None:
                if any(entry is not None for entry in entries):
                    return False
            elif not all(map(same, entries, views)):
                return False
        return True

    def accepts(self, grads: list[Any]) -> bool:
        """Whether the gradients can be laid out here: each of its parameter's shape, all of the
        parameters' array type, dtype and device. (Where not, the per-tensor loop runs, which
        reports a mismatched gradient.)"""
        return [grad.shape for grad in grads] == self.shapes and same_kind(self.arrays[0], grads)

    def gather(self, grads: list[Any]) -> None:
        """Copy the gradients and the parameters' current values into the flat buffers."""
        for view, grad in zip(self.grad_views, grads, strict=True):
            view[...] = grad
        for view, array in zip(self.value_views, self.arrays, strict=True):
            view[...] = array

    def scatter(self, name: str) -> None:
        """Write the new values back into each parameter, in place (see `write_param`)."""
        if autograd.active_recorder() is not None or not backend.has_out(self.values):
            for p, view in zip(self.params, self.value_views, strict=True):
                write_param(p, view, name)
            return
        # What `write_param` does, without its checks, which the layout has made already (one
        # array type and dtype, the parameters' own arrays): about half the time of the loop.
        for p, view in zip(self.params, self.value_views, strict=True):
            try:
                p.array[...] = view
            except (TypeError, ValueError):  # a NumPy scalar, or read-only: write_param's case
                write_param(p, view, name)
                continue
            p._version_counter[0] += 1
