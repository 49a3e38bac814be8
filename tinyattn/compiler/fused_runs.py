"""The program item that calls a fused kernel, and its check against the items it replaces.

Imports `backend` only; `fusion` makes these items for the groups it plans. A kernel walks its
buffers through views shaped like the group's loops (`kernel_view`), made once for the buffers
the replay keeps, and on each call for a result an unfused op holds anew.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import backend


class FusionMismatchError(RuntimeError):
    """A fused group's output differs from the unfused items' by more than the tolerance."""


def over(u: Any, array: Any, shape: tuple, per_row: bool = False) -> Any:
    """`array` broadcast to the group's `shape` (read-only). A per-row value whose shape is the
    rows' alone (cross-entropy's targets) is first given the row's axis, of length 1. `u` is
    NumPy (`array` may be a NumPy scalar, which has no module of its own)."""
    if per_row and array.shape == shape[:-1]:
        array = array.reshape((*shape[:-1], 1))
    return u.broadcast_to(array, shape)


def kernel_view(u: Any, array: Any, group: Any, buffer: Any, writeable: bool) -> Any:
    """`array` as the kernel walks it: one axis per loop the buffer walks (the loops along
    which it changes; the others would have stride 0)."""
    walks = buffer.walks
    strides = over(u, array, group.shape, buffer.per_row).strides
    loop_strides = [strides[axes[-1]] if axes else 0 for axes in group.axes]
    loops = [group.loops[k] for k in walks]
    steps = [loop_strides[k] for k in walks]
    return u.lib.stride_tricks.as_strided(array, loops, steps, writeable=writeable)


def arguments(group: Any, tape: Any) -> tuple[list, list]:
    """(the kernel's arguments on the tape's buffers, the arguments to make again on each call
    for a result that an unfused op holds anew: (argument, buffer, the strides the loops were
    merged for, dtype, the view's shape where a reshape of a row-major array of the recorded
    shape makes the same view, else None))."""
    env, static = tape.env, tape.static
    u = backend.ufuncs_of(env[group.outputs[0].slot])
    args: list[Any] = []
    dynamic = []
    for buffer in group.buffers():
        array = env[buffer.slot]
        writeable = any(buffer is b for b in group.outputs)
        args.append(kernel_view(u, array, group, buffer, writeable))
        if not writeable and not static[buffer.slot]:
            expected = over(u, array, group.shape, buffer.per_row).strides
            view = args[-1]
            reshaped = _reshaped(array, view)
            dynamic.append((len(args) - 1, buffer, expected, array.dtype, reshaped))
    return args, dynamic


def _reshaped(array: Any, view: Any) -> tuple | None:
    """The view's shape if ``array.reshape(shape)`` makes this very view of it (a row-major
    array walked in its own order), else None."""
    if view.ndim == 0 or not array.flags.c_contiguous or array.size != view.size:
        return None  # (a 0-d result may come back as a NumPy scalar, which reshapes to one)
    same = array.reshape(view.shape)
    return view.shape if same.strides == view.strides else None


def fused_run(
    group: Any, kernel: Callable, args: list, dynamic: list, tape: Any, members: list[Callable]
) -> Callable[[list], None]:
    """The program item: ``kernel(*args)`` on the group's buffers. `members` are the unfused
    items; while ``tape.check_fusion[0]`` is set, each call runs both and compares them."""
    check = tape.check_fusion
    u = backend.ufuncs_of(tape.env[group.outputs[0].slot])

    def call(env: list) -> None:
        for index, buffer, expected, dtype, reshaped in dynamic:
            array = env[buffer.slot]
            if reshaped and array.shape == buffer.shape and array.dtype == dtype:
                if array.flags.c_contiguous:  # the usual case: the op's new row-major result
                    args[index] = array.reshape(reshaped)
                    continue
            args[index] = _view_now(u, array, group, buffer, expected, dtype)
        kernel(*args)

    def run(env: list) -> None:
        if check[0]:
            check_against(group, env, members, lambda: call(env))
        else:
            call(env)

    return run


def _view_now(u: Any, array: Any, group: Any, buffer: Any, expected: tuple, dtype: Any) -> Any:
    """A view of a result held anew: as planned, or of a contiguous copy where its layout is
    not the one the loops were merged for."""
    walked = over(u, array, group.shape, buffer.per_row)
    if array.dtype != dtype or walked.strides != expected:
        array = u.ascontiguousarray(walked, dtype=dtype)
    return kernel_view(u, array, group, buffer, False)


def tolerance(dtype: str) -> float:
    """The largest difference a fused output may have from eager's, relative to the largest
    magnitude among eager's values of that output: a few roundings of the dtype."""
    return 1e-6 if dtype == "float32" else 1e-13


def check_against(group: Any, env: list, members: list[Callable], fused: Callable) -> None:
    """Run the unfused items, keep their outputs, put the inputs back, run the kernel, and
    raise `FusionMismatchError` where an output differs by more than the tolerance."""
    reads = [b.slot for b in group.inputs]
    writes = [b.slot for b in group.outputs if b.stored]
    arrays = {slot: env[slot] for slot in (*reads, *writes)}
    before = {slot: backend.copied(env[slot]) for slot in reads}
    for member in members:
        member(env)
    reference = {slot: backend.copied(env[slot]) for slot in writes}
    for slot, array in arrays.items():  # an unfused op may hold a new array for its result
        env[slot] = array
    for slot in reads:  # an output may share memory with an input whose life ended
        if getattr(env[slot], "flags", None) is not None and env[slot].flags.writeable:
            backend.copy_into(env[slot], before[slot])
    fused()
    last_writer = {backend.storage_root(env[b.slot]): b for b in group.outputs if b.stored}
    for buffer in last_writer.values():  # an earlier value in reused memory is overwritten
        error = relative_error(env[buffer.slot], reference[buffer.slot])
        if error > tolerance(buffer.dtype):
            raise FusionMismatchError(
                f"the fused group ({', '.join(group.labels)}) wrote {buffer.value} "
                f"(slot {buffer.slot}) {error:.3g} away from the unfused ops, relative to its "
                f"largest value; the tolerance for {buffer.dtype} is {tolerance(buffer.dtype):g}"
            )


def relative_error(fused: Any, reference: Any) -> float:
    """max |fused - reference| / max |reference| over the finite reference values (inf where
    the non-finite values differ: a NaN or an infinity in one and not in the other)."""
    u = backend.ufuncs_of(backend.copied(reference)) if not hasattr(reference, "ndim") else None
    u = u or backend.ufuncs_of(reference)
    a, b = fused.astype(u.float64), reference.astype(u.float64)
    finite = u.isfinite(b)
    if not u.array_equal(finite, u.isfinite(a)):
        return float("inf")
    if not u.array_equal(a[~finite], b[~finite], equal_nan=True):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = float(u.abs(b[finite]).max())
    difference = float(u.abs(a[finite] - b[finite]).max())
    return difference / scale if scale > 0 else difference
