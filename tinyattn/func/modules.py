"""Functional transforms, modules as functions: `functional_call` and `stack_module_state`.

``functional_call(model, params, x)`` runs the model with the tensors of `params` in place of
its own parameters and buffers (by their dotted names), then puts its own back: the model
becomes a function of its parameters, which ``grad`` and ``vmap`` can transform.
`stack_module_state` stacks the parameters of several models of one architecture (an ensemble)
for ``vmap(functional_call)``. Imports `nn` (above the tensor layer).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from ..methods.common import stack
from ..nn.module import Module


def _merged(dicts: Any) -> dict:
    if isinstance(dicts, dict):
        return dict(dicts)
    if not isinstance(dicts, tuple | list) or not all(isinstance(d, dict) for d in dicts):
        raise TypeError(
            "functional_call: parameter_and_buffer_dicts must be a dict or a tuple of dicts, got "
            f"{type(dicts).__name__}"
        )
    merged: dict = {}
    repeated = set()
    for d in dicts:
        repeated |= set(d) & set(merged)
        merged.update(d)
    if repeated:
        raise ValueError(
            f"functional_call got multiple values for keys {sorted(repeated)}, which are used"
        )
    return merged


def _slots(module: Module) -> dict[str, tuple[Module, str, str]]:
    """Each parameter's and buffer's dotted name (tied ones under every name): its owner, its
    local name and which store holds it."""
    found = {}
    for prefix, owner in module.named_modules(remove_duplicate=False):
        for store in ("_parameters", "_buffers"):
            for name, value in getattr(owner, store).items():
                if value is not None:
                    found[f"{prefix}.{name}" if prefix else name] = (owner, name, store)
    return found


def _tied_values(module: Module, slots: dict, given: dict, tie_weights: bool) -> dict:
    """`given`, plus, with tie_weights, the same tensor under every other name of a tied one."""
    if not tie_weights:
        return given
    names_of: dict[int, list[str]] = {}
    for name, (owner, local, store) in slots.items():
        names_of.setdefault(id(getattr(owner, store)[local]), []).append(name)
    values = dict(given)
    for names in names_of.values():
        chosen = [n for n in names if n in given]
        if len({id(given[n]) for n in chosen}) > 1:
            raise ValueError(
                f"functional_call got values for both {chosen[0]} and {chosen[1]}, which are "
                "tied. Consider using tie_weights=False"
            )
        for n in names:
            if chosen and n not in values:
                values[n] = given[chosen[0]]
    return values


@contextlib.contextmanager
def _swapped(slots: dict, values: dict) -> Iterator[None]:
    saved = []
    try:
        for name, value in values.items():
            owner, local, store = slots[name]
            saved.append((owner, local, store, getattr(owner, store)[local]))
            getattr(owner, store)[local] = value
        yield
    finally:
        for owner, local, store, value in reversed(saved):
            getattr(owner, store)[local] = value


def functional_call(
    module: Module,
    parameter_and_buffer_dicts: Any,
    args: Any = None,
    kwargs: dict | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
) -> Any:
    """``torch.func.functional_call``: ``module(*args, **kwargs)`` with the tensors of the
    dict(s) (dotted names, as ``named_parameters``) in place of its parameters and buffers."""
    given = _merged(parameter_and_buffer_dicts)
    slots = _slots(module)
    unexpected = sorted(set(given) - set(slots))
    values = _tied_values(module, slots, given, tie_weights)
    if strict:
        missing = sorted(set(slots) - set(values))
        if missing or unexpected:
            parts = [f"Missing key(s): {', '.join(map(repr, missing))}."] if missing else []
            if unexpected:
                parts.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
            raise RuntimeError(
                f"Error(s) in reparametrizing for {type(module).__name__}:\n\t" + "\n\t".join(parts)
            )
    elif unexpected:
        raise ValueError(
            f"functional_call: unexpected key(s) {unexpected}: {type(module).__name__} has no "
            "parameter or buffer of that name"
        )
    args = () if args is None else args if isinstance(args, tuple) else (args,)
    with _swapped(slots, {k: v for k, v in values.items() if k in slots}):
        return module(*args, **(kwargs or {}))


def stack_module_state(models: Sequence[Module]) -> tuple[dict, dict]:
    """``torch.func.stack_module_state``: (params, buffers) of the models stacked on a new
    dim 0, by name. Shapes: each of M models' (*s) -> (M, *s). The stacked parameters are new
    leaves that require grad."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if any(m.training != models[0].training for m in models):
        raise RuntimeError(
            "stack_module_state: Expected all models to have the same training/eval mode."
        )
    first = type(models[0])
    if any(type(m) is not first for m in models):
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")
    params = {
        name: stack([dict(m.named_parameters())[name].detach() for m in models], 0)
        for name, _ in models[0].named_parameters()
    }
    for value in params.values():
        value.requires_grad_()
    buffers = {
        name: stack([dict(m.named_buffers())[name] for m in models], 0)
        for name, _ in models[0].named_buffers()
    }
    return params, buffers
