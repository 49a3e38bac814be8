"""Grouped-query attention's head sharing, for ``scaled_dot_product_attention(enable_gqa=True)``.

Part of the functional layer: imports `tensor` only. With fewer key/value heads than query
heads, each key/value head serves a group of consecutive query heads, as PyTorch's
``repeat_interleave`` along the heads dim does. The repeat is an expand and a reshape, so the
gradient of a shared head is the sum over its group, from those ops.
"""

from __future__ import annotations

from .tensor import Tensor


def repeat_kv_heads(query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
    """key and value with their heads (dim -3) repeated to the query's head count.

    Shapes: query (..., H, Tq, D), key (..., Hk, Tk, D), value (..., Hv, Tk, Dv) with Hk and Hv
    dividing H -> key (..., H, Tk, D), value (..., H, Tk, Dv)."""
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.ndim < 3:
            shape = getattr(t, "shape", None)
            raise IndexError(
                f"{op}: enable_gqa=True needs a heads dim (..., H, T, D); {name} has shape {shape}"
            )
    heads = query.shape[-3]
    if heads % key.shape[-3] or heads % value.shape[-3]:
        raise RuntimeError(
            f"{op}: number of heads in key and value must divide the number of heads in query "
            f"(query {query.shape}, key {key.shape}, value {value.shape})"
        )
    return _repeat_heads(key, heads // key.shape[-3]), _repeat_heads(
        value, heads // value.shape[-3]
    )


def _repeat_heads(t: Tensor, times: int) -> Tensor:
    """Each head `times` times in a row: (..., Hk, T, D) -> (..., Hk * times, T, D)."""
    if times == 1:
        return t
    *lead, heads, length, width = t.shape
    grouped = t.expand_dims(-3)  # (..., Hk, 1, T, D)
    grouped = grouped.broadcast_to((*lead, heads, times, length, width))
    return grouped.reshape((*lead, heads * times, length, width))
