"""Functional transforms, nested arguments: tuples, lists and dicts of tensors as flat lists.

The transforms take and return such nests (PyTorch's pytrees): a flat list of leaves and a
spec to rebuild the nest from them. A leaf is anything that is not a tuple, list or dict
(named tuples are tuples that keep their type). Imports nothing of tinyattn.
"""

from __future__ import annotations

from typing import Any


def tree_flatten(tree: Any) -> tuple[list, Any]:
    """The leaves of `tree` in order, and a spec that `tree_unflatten` rebuilds it from."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree: Any, leaves: list) -> Any:
    if isinstance(tree, tuple | list):
        return (type(tree), [_flatten(item, leaves) for item in tree])
    if isinstance(tree, dict):
        return (dict, list(tree), [_flatten(item, leaves) for item in tree.values()])
    leaves.append(tree)
    return None


def tree_unflatten(leaves: list, spec: Any) -> Any:
    """The nest of `spec` with `leaves` in its places (the inverse of `tree_flatten`)."""
    return _unflatten(iter(leaves), spec)


def _unflatten(leaves: Any, spec: Any) -> Any:
    if spec is None:
        return next(leaves)
    if spec[0] is dict:
        return {key: _unflatten(leaves, child) for key, child in zip(spec[1], spec[2])}
    kind, children = spec
    items = [_unflatten(leaves, child) for child in children]
    if kind is tuple or kind is list:
        return kind(items)
    return kind(*items)  # a named tuple


def tree_map(function: Any, tree: Any) -> Any:
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([function(leaf) for leaf in leaves], spec)


def broadcast_prefix(prefix: Any, tree: Any, what: str) -> list:
    """Per leaf of `tree`, its entry of `prefix`: a nest that matches `tree` down to some depth
    (an int or None there stands for the whole subtree), as vmap's in_dims and out_dims."""
    if prefix is None or isinstance(prefix, int):
        return [prefix] * len(tree_flatten(tree)[0])
    if isinstance(prefix, tuple | list) and isinstance(tree, tuple | list):
        if len(prefix) != len(tree):
            raise ValueError(
                f"{what}: has {len(prefix)} entries but the structure it describes has "
                f"{len(tree)}; give one per entry, or one int or None for all"
            )
        return [d for p, t in zip(prefix, tree) for d in broadcast_prefix(p, t, what)]
    if isinstance(prefix, dict) and isinstance(tree, dict):
        if set(prefix) != set(tree):
            raise ValueError(f"{what}: keys {sorted(prefix)} do not match {sorted(tree)}")
        return [d for key in tree for d in broadcast_prefix(prefix[key], tree[key], what)]
    raise ValueError(
        f"{what}: expected an int, None or a (nested) tuple matching the structure of the "
        f"values, got {type(prefix).__name__} for a {type(tree).__name__}"
    )
