"""Autograd, functions of functions: PyTorch's ``torch.autograd.functional``.

Each is the engine's `grad` applied to a function of tensors: `vjp` (v^T J), `jvp` (J v, by the
double-vjp trick: the vjp of ``u -> J^T u`` along v, so no forward rule is needed), `jacobian`
(one vjp per output element, or with ``strategy="forward-mode"`` one forward-mode jvp per input
element on dual tensors), `hessian` (the Jacobian of the gradient, optionally forward over
reverse), `vhp` and `hvp`. Results are detached unless ``create_graph=True``; ``strict=True``
refuses an output that does not depend on an input, as PyTorch does.
Part of `autograd`: it imports nothing above it and makes new tensors with the Tensor methods
of the tensors it is given (the engine tells a Tensor by its ``_ctx``, as here).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import recording
from .engine import grad as engine_grad
from .grad_mode import enable_grad


def _is_tensor(value: Any) -> bool:
    return hasattr(value, "_ctx")


def _as_tuple(name: str, what: str, values: Any) -> tuple[bool, tuple]:
    single = _is_tensor(values)
    values = (values,) if single else values
    if not isinstance(values, tuple | list) or not all(_is_tensor(v) for v in values):
        raise TypeError(
            f"The {what} given to {name} must be either a Tensor or a tuple of Tensors but the "
            f"value at index 0 has type {type(values).__name__}."
        )
    return not single, tuple(values)


def _fresh(inputs: tuple, create_graph: bool) -> tuple:
    return tuple(
        x.view_as(x) if create_graph and x.requires_grad else x.detach().requires_grad_()
        for x in inputs
    )


def _outputs(name: str, func: Callable, inputs: tuple) -> tuple[bool, tuple]:
    with enable_grad():
        return _as_tuple(name, "outputs of the user-provided function", func(*inputs))


def _grads(outputs: tuple, inputs: tuple, seeds: tuple, create_graph: bool) -> list:
    """The engine's sum_k seeds_k^T d outputs_k / d inputs (None where an input is unused)."""
    pairs = [(o, s) for o, s in zip(outputs, seeds) if o.requires_grad and s is not None]
    if not pairs:
        return [None] * len(inputs)
    with enable_grad():
        return list(
            engine_grad(
                [o for o, _ in pairs],
                list(inputs),
                [s for _, s in pairs],
                retain_graph=True,
                create_graph=create_graph,
                allow_unused=True,
            )
        )


def _filled(name: str, grads: list, inputs: tuple, strict: bool, what: str) -> tuple:
    results = []
    for i, (g, x) in enumerate(zip(grads, inputs)):
        if g is None:
            if strict:
                raise RuntimeError(
                    f"The {what} of the user-provided function is independent of input {i}. "
                    "This is not allowed in strict mode."
                )
            g = x.detach() * 0
        results.append(g)
    return tuple(results)


def _seeds(name: str, outputs: tuple, v: Any) -> tuple:
    if v is None:
        if len(outputs) != 1 or outputs[0].numel() != 1:
            raise RuntimeError(
                f"The vector v can only be None if the user-provided function returns a single "
                f"Tensor with a single element ({name})."
            )
        return (outputs[0].detach() * 0 + 1,)
    _, v = _as_tuple(name, "v", v)
    if len(v) != len(outputs):
        raise RuntimeError(
            f"v has invalid size: should be {len(outputs)} but got {len(v)} ({name})."
        )
    for k, (a, b) in enumerate(zip(v, outputs)):
        if tuple(a.shape) != tuple(b.shape):
            raise RuntimeError(
                f"Mismatch in shape: entry {k} in v has shape {tuple(a.shape)} but the "
                f"function's output {k} has shape {tuple(b.shape)} ({name})."
            )
    return v


def _finish(values: tuple, several: bool, create_graph: bool) -> Any:
    values = values if create_graph else tuple(t.detach() for t in values)
    return values if several else values[0]


def vjp(
    func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False
) -> tuple:
    """``torch.autograd.functional.vjp``: (func(inputs), v^T J). Shapes: v as the outputs, the
    result as the inputs."""
    recording.note_transform("autograd.functional.vjp")
    several_in, inputs = _as_tuple("vjp", "inputs", inputs)
    inputs = _fresh(inputs, create_graph)
    several_out, outputs = _outputs("vjp", func, inputs)
    grads = _grads(outputs, inputs, _seeds("vjp", outputs, v), create_graph)
    grads = _filled("vjp", grads, inputs, strict, "output")
    return (
        _finish(outputs, several_out, create_graph),
        _finish(grads, several_in, create_graph),
    )


def jvp(
    func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False
) -> tuple:
    """``torch.autograd.functional.jvp``: (func(inputs), J v), by differentiating the vjp
    ``u -> J^T u`` (linear in u) along v. Shapes: v as the inputs, the result as the outputs."""
    recording.note_transform("autograd.functional.jvp")
    several_in, inputs = _as_tuple("jvp", "inputs", inputs)
    inputs = _fresh(inputs, create_graph)
    several_out, outputs = _outputs("jvp", func, inputs)
    if v is None:
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError(
                "The vector v can only be None if the input to the user-provided function is a "
                "single Tensor with a single element."
            )
        v = (inputs[0].detach() * 0 + 1,)
    _, v = _as_tuple("jvp", "v", v)
    if len(v) != len(inputs):
        raise RuntimeError(f"v has invalid size: should be {len(inputs)} but got {len(v)} (jvp).")
    dummies = tuple((o.detach() * 0).requires_grad_() for o in outputs)
    transposed = _grads(outputs, inputs, dummies, create_graph=True)  # J^T u, linear in u
    if strict and any(g is None for g in transposed):
        position = next(i for i, g in enumerate(transposed) if g is None)
        raise RuntimeError(
            f"The output of the user-provided function is independent of input {position}. "
            "This is not allowed in strict mode."
        )
    used = [(g, w) for g, w in zip(transposed, v) if g is not None and g.requires_grad]
    changes = _grads(tuple(g for g, _ in used), dummies, tuple(w for _, w in used), create_graph)
    changes = _filled("jvp", changes, outputs, strict, "gradient")
    return (
        _finish(outputs, several_out, create_graph),
        _finish(changes, several_out, create_graph),
    )


def _jacobian_rows(func: Callable, inputs: tuple, create_graph: bool, strict: bool) -> tuple:
    """Reverse mode: one vjp per output element. Returns (several_out, outputs, J[k][i])."""
    several_out, outputs = _outputs("jacobian", func, inputs)
    table = []
    for k, out in enumerate(outputs):
        rows: list = [[] for _ in inputs]
        flat = out.reshape(-1)
        for j in range(flat.shape[0]):
            one = (out.detach() * 0).reshape(-1)
            one[j] = 1
            grads = _grads((flat,), inputs, (one,), create_graph)
            for i, g in enumerate(grads):
                if g is None and strict:
                    raise RuntimeError(
                        f"Output {k} of the user-provided function is independent of input {i}. "
                        "This is not allowed in strict mode."
                    )
                rows[i].append(inputs[i].detach() * 0 if g is None else g)
        table.append(
            tuple(_stacked(r, tuple(out.shape), tuple(x.shape), x) for r, x in zip(rows, inputs))
        )
    return several_out, outputs, table


def _stacked(rows: list, leading: tuple, trailing: tuple, like: Any) -> Any:
    """The rows (each of shape `trailing`) as one tensor of shape leading + trailing: written
    into zeros one by one (in place, so a graph of the rows is kept with create_graph)."""
    result = like.detach().new_zeros((len(rows), *trailing))
    for j, row in enumerate(rows):
        result[j] = row
    return result.reshape(leading + trailing)


def _jacobian_columns(func: Callable, inputs: tuple) -> tuple:
    """Forward mode: one jvp per input element, on dual tensors. Returns (several_out, outputs,
    J[k][i])."""
    from . import forward_ad

    columns: list = []  # per input: per element, the outputs' tangents
    several_out, outputs = False, ()
    for i, x in enumerate(inputs):
        per_element = []
        for j in range(x.numel()):
            with forward_ad.dual_level():
                duals = []
                for m, y in enumerate(inputs):
                    tangent = (y.detach() * 0).reshape(-1)
                    if m == i:
                        tangent[j] = 1
                    duals.append(forward_ad.make_dual(y.detach(), tangent.reshape(tuple(y.shape))))
                several_out, outputs = _as_tuple("jacobian", "outputs", func(*duals))
                unpacked = [forward_ad.unpack_dual(o) for o in outputs]
                outputs = tuple(u.primal for u in unpacked)
                per_element.append(
                    [(p.primal * 0).detach() if p.tangent is None else p.tangent for p in unpacked]
                )
        columns.append(per_element)
    if not outputs:
        several_out, outputs = _outputs("jacobian", func, inputs)
    table = []
    for k, out in enumerate(outputs):
        row = []
        for i, x in enumerate(inputs):
            cols = [c[k] for c in columns[i]]
            stacked = _stacked(cols, tuple(x.shape), tuple(out.shape), out)
            order = tuple(range(x.ndim, stacked.ndim)) + tuple(range(x.ndim))
            row.append(stacked.permute(*order))
        table.append(tuple(row))
    return several_out, outputs, table


def jacobian(
    func: Callable,
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
) -> Any:
    """``torch.autograd.functional.jacobian``: d outputs / d inputs. Shapes: output k (*o),
    input i (*i) -> `J[k][i]` (*o, *i); a Tensor when both are single Tensors, else tuples."""
    recording.note_transform("autograd.functional.jacobian")
    if strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
            'function has more outputs than inputs, "forward-mode" tends to be more performant. '
            'Otherwise, prefer to use "reverse-mode".'
        )
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                "torch.autograd.functional.jacobian: `create_graph=True` and "
                '`strategy="forward-mode"` are not supported together (yet). Please either set '
                '`create_graph=False` or `strategy="reverse-mode"`.'
            )
        if not vectorize:
            raise NotImplementedError(
                'torch.autograd.functional.jacobian: `strategy="forward-mode"` only works '
                "when `vectorize=True`."
            )
        if strict:
            raise RuntimeError(
                "torch.autograd.functional.jacobian: `strict=True` and `vectorize=True` are "
                "not supported together. Please either set `strict=False` or `vectorize=False`."
            )
    elif strict and vectorize:
        raise RuntimeError(
            "torch.autograd.functional.jacobian: `strict=True` and `vectorize=True` are not "
            "supported together. Please either set `strict=False` or `vectorize=False`."
        )
    several_in, inputs = _as_tuple("jacobian", "inputs", inputs)
    if strategy == "forward-mode":
        several_out, _, table = _jacobian_columns(func, inputs)
    else:
        inputs = _fresh(inputs, create_graph)
        several_out, _, table = _jacobian_rows(func, inputs, create_graph, strict)
    table = [tuple(t if create_graph else t.detach() for t in row) for row in table]
    rows = [row if several_in else row[0] for row in table]
    return tuple(rows) if several_out else rows[0]


def hessian(
    func: Callable,
    inputs: Any,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
) -> Any:
    """``torch.autograd.functional.hessian``: the Jacobian of the gradient of a scalar func;
    ``outer_jacobian_strategy="forward-mode"`` is forward over reverse. Shapes: input i (*i),
    input j (*j) -> `H[i][j]` (*i, *j)."""
    recording.note_transform("autograd.functional.hessian")
    several_in, inputs = _as_tuple("hessian", "inputs", inputs)
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise ValueError(
            'Expected strategy to be either "forward-mode" or "reverse-mode", got '
            f"{outer_jacobian_strategy!r}"
        )

    def gradient(*values: Any) -> Any:
        values = tuple(_differentiable(v) for v in values)
        several_out, outputs = _outputs("hessian", func, values)
        if several_out or outputs[0].numel() != 1:
            raise RuntimeError(
                "The function given to hessian should return a single element Tensor"
            )
        grads = _grads(outputs, values, (outputs[0].detach() * 0 + 1,), create_graph=True)
        grads = _filled("hessian", grads, values, strict, "output")
        return grads if several_in else grads[0]

    return jacobian(
        gradient,
        inputs if several_in else inputs[0],
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )


def _differentiable(value: Any) -> Any:
    """`value` as a tensor the engine can differentiate with respect to: itself if it requires
    grad, else a new leaf, given `value`'s tangent again if it carries one (forward over
    reverse: the outer forward-mode Jacobian's tangents must reach the inner gradient)."""
    if value.requires_grad:
        return value
    from . import forward_ad

    fresh = value.detach().requires_grad_()
    tangent = forward_ad.tangent_of(value) if forward_ad.is_active() else None
    return fresh if tangent is None else forward_ad.make_dual(fresh, tangent)


def vhp(
    func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False
) -> tuple:
    """``torch.autograd.functional.vhp``: (func(inputs), v^T H) for a scalar func."""
    recording.note_transform("autograd.functional.vhp")
    several_in, inputs = _as_tuple("vhp", "inputs", inputs)
    inputs = _fresh(inputs, create_graph)
    _, outputs = _outputs("vhp", func, inputs)
    if len(outputs) != 1 or outputs[0].numel() != 1:
        raise RuntimeError("The function given to vhp should return a single element Tensor")
    grads = _grads(outputs, inputs, (outputs[0].detach() * 0 + 1,), create_graph=True)
    grads = _filled("vhp", grads, inputs, strict, "output")
    v = _seeds("vhp", grads, v)
    second = _grads(tuple(grads), inputs, v, create_graph)
    second = _filled("vhp", second, inputs, strict, "gradient")
    return _finish(outputs, False, create_graph), _finish(second, several_in, create_graph)


def hvp(
    func: Callable, inputs: Any, v: Any = None, create_graph: bool = False, strict: bool = False
) -> tuple:
    """``torch.autograd.functional.hvp``: (func(inputs), H v). H is symmetric for a twice
    differentiable func, so H v = (v^T H)^T: the same double backward as `vhp`."""
    recording.note_transform("autograd.functional.hvp")
    return vhp(func, inputs, v, create_graph, strict)
