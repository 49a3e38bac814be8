"""Attention as one node: the same softmax(q k^T * scale) @ v as the reference
`functional.scaled_dot_product_attention`, fused for speed or for memory.

These are optimisations, not new ideas: read the reference first.
- `HeadsAttention` is the reference for all heads of `nn.MultiHeadAttention` at once, on the
  projections as they are (heads side by side): one node where the reference records a dozen
  (each head split and merge, the products, the scale, the mask, the softmax), and on the host
  no copy of a permuted array. The same array calls as the reference, so the same values; and
  a backward of Tensor ops, so it is differentiable twice. `nn.MultiHeadAttention` decides when
  it is taken; in self-attention it passes the three projections as one packed input.
- `BlockwiseAttention` exists because the reference holds the whole (Tq, Tk) score matrix (and
  its gradient), which for long sequences is most of a training step's memory. It computes one
  tile of queries against keys at a time; its backward runs on arrays (recomputing each tile),
  so it is differentiable once only: `OnceDifferentiable` makes a second differentiation raise.
  The tile sizes and threads are set in `kernels`; `functional` decides when this path is taken.
"""

from __future__ import annotations

import math
from typing import Any

from .. import kernels
from ..autograd import Function, is_grad_enabled
from ..backend import is_host_array, namespace, to_numpy
from ..errors import TinyattnError
from .shape import Concat
from .softmax import Softmax

# How far a score may exceed its row's shift in BlockwiseAttention's forward: exp(20) ~ 5e8, so
# sums over a million keys of values up to 1e20 stay finite even in float32 (max ~3e38).
SHIFT_SLACK = 20.0


class HeadsAttention(Function):
    """out = softmax(q k^T * scale, masked over keys) @ v for each of `heads` heads, the heads
    side by side in the last axis of q, k, v and out (the layout of the projections around it).
    Backward, per head, with P the weights and dO the gradient of the output:
        dV = P^T dO,   dS = P * (dP - sum(dP * P)) * scale with dP = dO v^T,
        dQ = dS k,     dK = dS^T q.
    Forward mode, per head, with tangents dq, dk, dv:
        dS = (dq k^T + q dk^T) * scale,   dP = P * (dS - sum(dS * P)),   dout = dP v + P dv.
    The optional last input is a bool mask, True where a query may attend (the reference's
    `where(allowed, scores, -inf)`); a query with no allowed key gets output 0 and gradient 0.
    With ``packed=True`` the first input is one projection [q | k | v] (self-attention's three
    projections as one matrix product) and its gradient is [dQ | dK | dV], written in place;
    its tangent holds [dq | dk | dv] the same way.
    Shapes: q (B, Tq, H * D), k (B, Tk, H * D), v (B, Tk, H * Dv) or packed (B, T, 3 * H * D),
    allowed broadcastable to (B, H, Tq, Tk) -> out (B, Tq, H * Dv).
    """

    __slots__ = ("heads", "scale", "packed")
    backward_reads = ("inputs",)

    def forward(
        self, *arrays: Any, heads: int = 1, scale: float = 1.0, packed: bool = False
    ) -> Any:
        self.heads, self.scale, self.packed = heads, scale, packed
        q, k, v, allowed = _unpacked(arrays, packed)
        _check_heads(q, k, v, heads)
        xp = namespace(q)
        q_h, k_h, v_h = (kernels.split_heads(t, heads) for t in (q, k, v))  # (B, H, T, D) views
        scores = kernels.matmul_array(q_h, xp.matrix_transpose(k_h))  # (B, H, Tq, Tk)
        scores *= scale  # in place: the array is new, and the values are the reference's
        if allowed:
            scores = xp.where(allowed[0], scores, -math.inf)
        weights = kernels.softmax_in_place(xp, scores)  # the scores' array is this op's own
        self.save_for_backward(weights)
        return kernels.merged_heads_product(weights, v_h)  # (B, H, Tq, Dv) -> (B, Tq, H * Dv)

    # The array form runs whenever no graph is built: eagerly, and in a recording for
    # ta.compile, which then replays this rule as one call (its products write each head in
    # place, where the Tensor ops' merges copy).
    arrays_in_recordings = True

    def backward(self, grad: Any) -> tuple:
        mask = (None,) * (len(self.inputs) - (1 if self.packed else 3))  # none for the mask
        q, k, v, _ = _unpacked(self.inputs, self.packed)
        wanted = [t.requires_grad for t in self.inputs[: 1 if self.packed else 3]] * (
            3 if self.packed else 1
        )  # a packed input wants all three blocks' gradients
        q_h, k_h, v_h, grad_h = (self._split(t) for t in (q, k, v, grad))
        if is_grad_enabled():  # create_graph: the weights must carry their dependence on q, k
            weights = self._weights(q_h, k_h)
        else:
            (weights,) = self.saved_tensors
        grad_q = grad_k = grad_v = None  # each (B, H, T, D) until merged
        if wanted[2]:
            grad_v = weights.mT @ grad_h
        if wanted[0] or wanted[1]:
            grad_weights = grad_h @ v_h.mT
            grad_scores = weights * (
                grad_weights - (grad_weights * weights).sum(axis=3, keepdims=True)
            )
            grad_scores = grad_scores * self.scale
            if wanted[0]:
                grad_q = grad_scores @ k_h
            if wanted[1]:
                grad_k = grad_scores.mT @ q_h
        if self.packed:  # [dQ | dK | dV]: the 3H heads side by side, merged by one copy
            return (self._merge(Concat.apply(grad_q, grad_k, grad_v, axis=1)),) + mask
        return tuple(None if g is None else self._merge(g) for g in (grad_q, grad_k, grad_v)) + mask

    def backward_arrays(self, grad: Any) -> tuple | None:
        """The rule on arrays: `kernels.heads_attention_grads`, which writes a packed input's
        gradient straight into the blocks of one new array on the host (no concatenation)."""
        mask = (None,) * (len(self.inputs) - (1 if self.packed else 3))  # none for the mask
        grads = self._array_grads(grad, self.saved_arrays[0])
        return None if grads is None else tuple(grads) + mask

    def _array_grads(self, grad: Any, weights: Any) -> tuple | None:
        arrays = [t.array for t in self.inputs]
        q, k, v, _ = _unpacked(arrays, self.packed)
        if not self.packed:
            wanted = tuple(t.requires_grad for t in self.inputs[:3])
            return kernels.heads_attention_grads(
                grad, q, k, v, weights, self.heads, self.scale, wanted
            )
        xp, into = namespace(grad), (None, None, None)
        packed = None
        if is_host_array(grad):
            packed = xp.empty(arrays[0].shape, dtype=grad.dtype)
            into = kernels.packed_head_parts(packed, self.heads)
        grads = kernels.heads_attention_grads(
            grad, q, k, v, weights, self.heads, self.scale, (True,) * 3, into
        )
        if grads is None:  # declined (another dtype): the Tensor ops run
            return None
        if packed is not None:  # the three blocks were written in place
            return (packed,)
        return (xp.concat(grads, axis=-1),)  # off the host: [dQ | dK | dV] joined

    def jvp(self, *tangents: Any) -> Any:
        q, k, v, _ = _unpacked(self.inputs, self.packed)
        if not self.packed:
            tangent_q, tangent_k, tangent_v = tangents[:3]
        elif tangents[0] is None:  # only the mask could have one, and it is bool: none
            return None
        else:
            tangent_q, tangent_k, tangent_v, _ = _unpacked(tangents, True)
        q_h, k_h, v_h = (self._split(t) for t in (q, k, v))  # (B, H, T, D)
        # The weights again as Tensor ops of q and k (the saved ones are constants), so that
        # the tangent differentiates again, in either mode.
        weights = self._weights(q_h, k_h)  # (B, H, Tq, Tk)
        tangent_out = None
        if tangent_q is not None or tangent_k is not None:
            tangent_scores = None  # (dq k^T + q dk^T): (B, H, Tq, Tk)
            if tangent_q is not None:
                tangent_scores = self._split(tangent_q) @ k_h.mT
            if tangent_k is not None:
                product = q_h @ self._split(tangent_k).mT
                tangent_scores = product if tangent_scores is None else tangent_scores + product
            tangent_scores = tangent_scores * self.scale
            tangent_weights = weights * (
                tangent_scores - (tangent_scores * weights).sum(axis=3, keepdims=True)
            )  # 0 wherever a key is masked, as the weight there
            tangent_out = tangent_weights @ v_h  # (B, H, Tq, Tk) @ (B, H, Tk, Dv)
        if tangent_v is not None:
            carried = weights @ self._split(tangent_v)  # (B, H, Tq, Dv)
            tangent_out = carried if tangent_out is None else tangent_out + carried
        return self._merge(tangent_out)  # (B, H, Tq, Dv) -> (B, Tq, H * Dv)

    def _split(self, x: Any) -> Any:
        """(B, T, H * D) -> (B, H, T, D), as Tensor ops."""
        batch, length, width = x.shape
        return x.reshape(batch, length, self.heads, width // self.heads).permute(0, 2, 1, 3)

    def _merge(self, x: Any) -> Any:
        """(B, H, T, D) -> (B, T, H * D), as Tensor ops."""
        batch, heads, length, width = x.shape
        return x.permute(0, 2, 1, 3).reshape(batch, length, heads * width)

    def _weights(self, q_h: Any, k_h: Any) -> Any:
        """The weights as Tensor ops of q and k (a disallowed score adds -inf)."""
        scores = (q_h @ k_h.mT) * self.scale
        allowed = _unpacked(self.inputs, self.packed)[3]
        if allowed:
            allowed = allowed[0].array
            xp = namespace(allowed)
            blocked = xp.full(
                allowed.shape, -math.inf, dtype=scores.array.dtype, device=allowed.device
            )
            scores = scores + scores.constant(xp.where(allowed, xp.zeros_like(blocked), blocked))
        return Softmax.apply(scores, axis=3)


def _unpacked(inputs: Any, packed: bool) -> tuple:
    """(q, k, v, the mask inputs) of HeadsAttention's inputs (arrays or Tensors): three inputs,
    or with `packed` the three column blocks of the first."""
    if not packed:
        return inputs[0], inputs[1], inputs[2], tuple(inputs[3:])
    if len(inputs[0].shape) != 3 or inputs[0].shape[-1] % 3:
        raise TinyattnError(
            f"HeadsAttention: a packed projection must be (B, T, 3 * C), got {inputs[0].shape}"
        )
    return (*kernels.packed_thirds(inputs[0]), tuple(inputs[1:]))


def _check_heads(q: Any, k: Any, v: Any, heads: int) -> None:
    """HeadsAttention's inputs: (B, T, H * D) arrays of one batch, q and k of one width, k and v
    of one length, every width a multiple of `heads` (nn.MultiHeadAttention checks its own
    arguments before; this names a direct caller's mistake)."""
    shapes = (q.shape, k.shape, v.shape)
    if (
        not isinstance(heads, int)
        or heads < 1
        or any(len(shape) != 3 or shape[-1] % heads for shape in shapes)
        or len({q.shape[0], k.shape[0], v.shape[0]}) != 1
        or q.shape[-1] != k.shape[-1]
        or k.shape[1] != v.shape[1]
    ):
        raise TinyattnError(
            f"HeadsAttention: q {q.shape}, k {k.shape} and v {v.shape} must be (B, Tq, H * D), "
            f"(B, Tk, H * D) and (B, Tk, H * Dv) with heads={heads!r} dividing each width"
        )


class BlockwiseAttention(Function):
    """out = softmax(q k^T * scale, masked over keys) @ v, computed one tile (a block of queries
    against a block of keys) at a time, so the (Tq, Tk) score matrix never exists.

    Forward, an online softmax: each query row keeps a shift c and, over its key blocks b, sums
        acc += exp(S_b - c) [v_b, 1]   with S_b = q k_b^T * scale (disallowed scores -inf).
    The ones column makes the last column of acc the normaliser l = sum_j exp(S_j - c); then
    out = acc[:, :Dv] / l and lse = c + log l (one number per query) is saved. Any shift gives
    the same out and lse as long as no exp overflows: see _fast_tiles for when c moves.
    Backward recomputes the weights tile by tile, P = exp(S - lse), and with D_i = sum_c dO_ic O_ic
        dV_b += P^T dO,   dS = P * (dO v_b^T - D),   dQ += dS k_b * scale,   dK_b += dS^T q * scale.
    Memory is O(T): q, k, v, out, lse and one tile. A query with no allowed key has l = 0: out 0
    and gradient 0. Forward mode, tile by tile as backward (memory O(T) too), with
    dS = (dq k^T + q dk^T) * scale and dP = P * (dS - sum_j P dS):
        dout = dP v + P dv = sum_b P (dS_b v_b + dv_b) - out * sum_b sum_j P dS_b.
    First-order only (backward and jvp run on arrays): see OnceDifferentiable.
    Shapes: q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv) with equal batch axes, allowed bool
    broadcastable to (..., Tq, Tk) with at least 2 axes -> out (..., Tq, Dv).
    """

    __slots__ = ("is_causal", "scale", "block_q", "block_k")

    def reads_host(self) -> bool:
        return True  # which tiles may keep their shift: one read per forward

    def forward(
        self,
        q: Any,
        k: Any,
        v: Any,
        allowed: Any = None,
        is_causal: bool = False,
        scale: float = 1.0,
        block_q: int = 1,
        block_k: int = 1,
    ) -> Any:
        self.is_causal, self.scale, self.block_q, self.block_k = is_causal, scale, block_q, block_k
        xp = namespace(q)
        q_scaled = q * scale  # scaling the (Tq, D) queries once, not every tile's scores
        keys = (
            k,
            kernels.append_ones(xp, k),  # (..., Tk, D + 1): [q, -c] @ [k, 1]^T = S - c
            xp.sqrt(xp.sum(k * k, axis=-1))[..., None, :],  # |k_j|: (..., Tk) -> (..., 1, Tk)
            kernels.append_ones(xp, v),  # (..., Tk, Dv + 1): P @ [v, 1] also sums P
        )
        q_norms = xp.sqrt(xp.sum(q_scaled * q_scaled, axis=-1, keepdims=True))  # (..., Tq, 1)
        row_blocks = kernels.blocks(q.shape[-2], block_q)
        # Each query block's first tile sets its shift; then one host read says which later tiles
        # may keep it (see _fast_tiles); then the remaining tiles. No other host read.
        states = kernels.parallel_map(
            lambda rows: self._first_tile(xp, rows, q_scaled[..., rows, :], keys, allowed),
            row_blocks,
        )
        fast = self._fast_tiles(xp, row_blocks, q_norms, keys[2], states)
        results = kernels.parallel_map(
            lambda item: self._later_tiles(xp, *item, q_scaled[..., item[0], :], keys, allowed),
            list(zip(row_blocks, states, fast, strict=True)),
        )
        out = xp.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
        lse = xp.empty((*q.shape[:-1], 1), dtype=q.dtype, device=q.device)
        for rows, (out_rows, lse_rows) in zip(row_blocks, results, strict=True):
            out[..., rows, :], lse[..., rows, :] = out_rows, lse_rows
        self.save_for_backward(lse, allowed)
        return out

    def _first_tile(
        self, xp: Any, rows: slice, q_rows: Any, keys: tuple, allowed: Any
    ) -> tuple[Any, Any, Any]:
        """(acc, m, c) of one query block after its first key block: the shift c is that tile's
        row max m (0 for a row with no allowed key yet, m = -inf)."""
        k, _, _, v_ones = keys
        new = {"dtype": q_rows.dtype, "device": q_rows.device}
        running_max = xp.full((*q_rows.shape[:-1], 1), -math.inf, **new)  # m: (..., Bq, 1)
        acc = xp.zeros((*q_rows.shape[:-1], v_ones.shape[-1]), **new)  # (..., Bq, Dv + 1)
        key_blocks = self._key_blocks(k.shape[-2], rows)
        if not key_blocks:  # no keys at all: every row is empty
            return acc, running_max, xp.zeros_like(running_max)
        return self._moving_tile(xp, rows, key_blocks[0], q_rows, keys, allowed, acc, running_max)

    def _fast_tiles(
        self, xp: Any, row_blocks: list, q_norms: Any, k_norms: Any, states: list
    ) -> list[list[bool]]:
        """For each query block, whether each later key block may keep the first tile's shift.

        A tile may when no score in it can exceed m + SLACK, m being the first tile's row max:
        |S_ij| <= |q_i| max_j |k_j| (Cauchy-Schwarz) is checked for every (query block, key
        block) pair at once, and the answer comes to the host in one read. Since c only grows
        from m (the other tiles move it up), a tile that passes against m passes against c.
        """
        blocks_of = [self._key_blocks(k_norms.shape[-1], rows)[1:] for rows in row_blocks]
        if not any(blocks_of):
            return [[] for _ in row_blocks]
        all_blocks = kernels.blocks(k_norms.shape[-1], self.block_k)
        # max_j |k_j| per key block: (..., 1, Tk) -> (..., 1, number of key blocks)
        block_norms = xp.concat(
            [xp.max(k_norms[..., cols], axis=-1, keepdims=True) for cols in all_blocks], axis=-1
        )
        verdicts = []
        for rows, (_, running_max, _), later in zip(row_blocks, states, blocks_of, strict=True):
            if not later:  # a causal block that sees one key block only
                continue
            largest = q_norms[..., rows, :] * block_norms[..., 1 : 1 + len(later)]  # >= S_ij
            fits = largest - running_max <= SHIFT_SLACK  # false while m is -inf
            verdicts.append(xp.all(xp.reshape(fits, (-1, len(later))), axis=0))  # (blocks,)
        on_host = to_numpy(xp.concat(verdicts)).tolist()  # the forward's one host read
        starts = [sum(len(later) for later in blocks_of[:i]) for i in range(len(blocks_of))]
        return [on_host[start : start + len(b)] for start, b in zip(starts, blocks_of, strict=True)]

    def _later_tiles(
        self,
        xp: Any,
        rows: slice,
        state: tuple,
        fast: list[bool],
        q_rows: Any,
        keys: tuple,
        allowed: Any,
    ) -> tuple[Any, Any]:
        """One query block's online softmax over its key blocks after the first: (out, lse).

        A fast tile keeps c, so S - c comes straight out of [q, -c] @ [k, 1]^T (no max, no
        subtraction, no rescaling); any other tile moves c to its new row max (_moving_tile).
        """
        k, k_ones, _, v_ones = keys
        acc, running_max, shift = state
        q_shifted = xp.concat([q_rows, -shift], axis=-1)  # [q * scale, -c]: (..., Bq, D + 1)
        later = self._key_blocks(k.shape[-2], rows)[1:]
        for cols, keeps_shift in zip(later, fast, strict=True):
            if not keeps_shift:
                acc, running_max, shift = self._moving_tile(
                    xp, rows, cols, q_rows, keys, allowed, acc, running_max
                )
                q_shifted = xp.concat([q_rows, -shift], axis=-1)
                continue
            # S - c: (..., Bq, D + 1) @ (..., D + 1, Bk) -> (..., Bq, Bk)
            scores = q_shifted @ k_ones[..., cols, :].mT
            tile = self._tile_mask(xp, allowed, rows, cols, q_rows.device)
            if tile is not None:
                scores = xp.where(tile, scores, -math.inf)
            acc = acc + xp.exp(scores) @ v_ones[..., cols, :]  # (.., Bq, Bk) @ (.., Bk, Dv + 1)
        total = acc[..., -1:]  # l_i = sum_j exp(S_ij - c_i), the ones column's row
        found = total > 0.0  # False for a query that may attend to nothing
        total = xp.where(found, total, 1.0)
        # lse of an empty row is -inf; 0 keeps it finite (backward masks that whole row anyway).
        return acc[..., :-1] / total, xp.where(found, shift + xp.log(total), 0.0)

    def _moving_tile(
        self,
        xp: Any,
        rows: slice,
        cols: slice,
        q_rows: Any,
        keys: tuple,
        allowed: Any,
        acc: Any,
        running_max: Any,
    ) -> tuple[Any, Any, Any]:
        """One tile that moves the shift c to the new row max m: returns (acc, m, c)."""
        k, _, _, v_ones = keys
        scores = q_rows @ k[..., cols, :].mT  # S: (..., Bq, D) @ (..., D, Bk) -> (..., Bq, Bk)
        tile = self._tile_mask(xp, allowed, rows, cols, q_rows.device)
        if tile is not None:
            scores = xp.where(tile, scores, -math.inf)
        new_max = xp.maximum(running_max, xp.max(scores, axis=-1, keepdims=True))
        # A row with no allowed key yet keeps c = 0: exp(-inf - 0) = 0, where a shift of -inf
        # would give -inf - -inf = NaN. exp(m - c) rescales the old sums; it is 0 while m was
        # -inf, when those sums are 0 anyway.
        new_shift = xp.where(xp.isfinite(new_max), new_max, 0.0)
        weighted = xp.exp(scores - new_shift) @ v_ones[..., cols, :]  # (..., Bq, Dv + 1)
        return acc * xp.exp(running_max - new_shift) + weighted, new_max, new_shift

    def _key_blocks(self, tk: int, rows: slice) -> list[slice]:
        """Key blocks a query block sees: under is_causal query i sees keys j <= i only, so the
        blocks past the block's last query are skipped (half the work of a square causal layer)."""
        return kernels.blocks(min(tk, rows.stop) if self.is_causal else tk, self.block_k)

    def _tile_mask(self, xp: Any, allowed: Any, rows: slice, cols: slice, device: Any) -> Any:
        """The bool mask of one tile, or None when every score in it is allowed.

        The user mask keeps its broadcast axes of size 1 (slicing those would empty them). The
        causal part, key <= query, is built for the tile only and only where the tile crosses
        the diagonal (a key past the tile's first query).
        """
        tile = None
        if allowed is not None:
            row_part = rows if allowed.shape[-2] != 1 else slice(None)
            col_part = cols if allowed.shape[-1] != 1 else slice(None)
            tile = allowed[..., row_part, col_part]
        if self.is_causal and cols.stop - 1 > rows.start:
            query = xp.arange(rows.start, rows.stop, device=device)[:, None]  # (Bq, 1)
            key = xp.arange(cols.start, cols.stop, device=device)[None, :]  # (1, Bk)
            tile = key <= query if tile is None else tile & (key <= query)
        return tile

    def backward(self, grad: Any) -> tuple:
        lse, allowed = (None if t is None else t.array for t in self.saved_tensors)
        grads = self._backward_arrays(grad.array, self.output.array, lse, allowed)
        if is_grad_enabled():  # create_graph=True: the gradients must refuse a second backward
            return tuple(OnceDifferentiable.apply(*self.inputs, grad, value=g) for g in grads)
        return tuple(t.constant(g) for t, g in zip(self.inputs, grads, strict=True))

    def _backward_arrays(self, grad: Any, out: Any, lse: Any, allowed: Any) -> tuple:
        """(dq, dk, dv) on arrays, recomputing each tile's weights from the saved lse.

        Two extra columns fold two subtractions into the matmuls that need them anyway:
        [q * scale, -lse] @ [k, 1]^T = S - lse, and [dO, -D] @ [v, 1]^T = dO v^T - D.
        """
        q, k, v = (t.array for t in self.inputs)
        xp = namespace(q)
        q_scaled = q * self.scale
        row_dots = xp.sum(grad * out, axis=-1, keepdims=True)  # D_i: (..., Tq, 1)
        arrays = (
            q_scaled,
            xp.concat([q_scaled, -lse], axis=-1),  # (..., Tq, D + 1)
            k,
            kernels.append_ones(xp, k),  # (..., Tk, D + 1)
            grad,
            xp.concat([grad, -row_dots], axis=-1),  # (..., Tq, Dv + 1)
            v,
            kernels.append_ones(xp, v),  # (..., Tk, Dv + 1)
        )
        grad_q = xp.empty_like(q)
        row_blocks = kernels.blocks(q.shape[-2], self.block_q)
        threads = max(1, min(kernels.ATTENTION_THREADS, len(row_blocks)))
        # Thread t takes query blocks t, t + threads, ... (causal blocks differ in cost), writes
        # its rows of dq and returns its own sums for dk and dv, which are added up here.
        parts = kernels.parallel_map(
            lambda blocks: self._backward_rows(xp, blocks, arrays, allowed, grad_q),
            [row_blocks[start::threads] for start in range(threads)],
        )
        grad_k, grad_v = parts[0]
        for part_k, part_v in parts[1:]:
            grad_k, grad_v = grad_k + part_k, grad_v + part_v
        return grad_q, grad_k, grad_v

    def _backward_rows(
        self, xp: Any, row_blocks: list, arrays: tuple, allowed: Any, grad_q: Any
    ) -> tuple[Any, Any]:
        """Writes dq for the query blocks `row_blocks`; returns their share of (dk, dv)."""
        q_scaled, q_shifted, k, k_ones, grad, grad_shifted, v, v_ones = arrays
        grad_k, grad_v = xp.zeros_like(k), xp.zeros_like(v)
        for rows in row_blocks:
            grad_q_rows = xp.zeros_like(q_scaled[..., rows, :])
            for cols in self._key_blocks(k.shape[-2], rows):
                # P = exp(S - lse): (..., Bq, D + 1) @ (..., D + 1, Bk) -> (..., Bq, Bk)
                scores = q_shifted[..., rows, :] @ k_ones[..., cols, :].mT
                tile = self._tile_mask(xp, allowed, rows, cols, k.device)
                if tile is not None:
                    scores = xp.where(tile, scores, -math.inf)
                weights = xp.exp(scores)
                # (..., Bk, Bq) @ (..., Bq, Dv) -> (..., Bk, Dv)
                grad_v[..., cols, :] += weights.mT @ grad[..., rows, :]
                # dS = P * (dP - D): (..., Bq, Dv + 1) @ (..., Dv + 1, Bk) -> (..., Bq, Bk)
                grad_scores = weights * (grad_shifted[..., rows, :] @ v_ones[..., cols, :].mT)
                grad_q_rows = grad_q_rows + grad_scores @ k[..., cols, :]  # (.., Bq, D)
                grad_k[..., cols, :] += grad_scores.mT @ q_scaled[..., rows, :]  # (.., Bk, D)
            grad_q[..., rows, :] = grad_q_rows * self.scale
        return grad_k, grad_v

    def jvp(self, *tangents: Any) -> Any:
        (lse, allowed), out = self.saved_arrays, self.output
        arrays = [None if t is None else t.array for t in tangents]
        tangent_out = self._jvp_arrays(*arrays, out.array, lse, allowed)
        # A tangent of this tangent, or a gradient through it, raises (first order only).
        given = [t for t in tangents if t is not None]
        return OnceDifferentiable.apply(*self.inputs, *given, value=tangent_out)

    def _jvp_arrays(
        self, tangent_q: Any, tangent_k: Any, tangent_v: Any, out: Any, lse: Any, allowed: Any
    ) -> Any:
        """dout on arrays, the weights recomputed in each tile from the saved lse (None: a zero
        tangent). Per query block: acc = sum P (dS v + dv) and c = sum P dS; dout = acc - c out."""
        q, k, v = (t.array for t in self.inputs)
        xp = namespace(q)
        q_shifted = xp.concat([q * self.scale, -lse], axis=-1)  # [q * scale, -lse]: (.., Tq, D + 1)
        k_ones = kernels.append_ones(xp, k)  # (..., Tk, D + 1)
        tangent_out = xp.zeros_like(out)
        for rows in kernels.blocks(q.shape[-2], self.block_q):
            acc = xp.zeros_like(out[..., rows, :])  # (..., Bq, Dv)
            moved = xp.zeros_like(lse[..., rows, :])  # c: (..., Bq, 1)
            for cols in self._key_blocks(k.shape[-2], rows):
                # P = exp(S - lse): (..., Bq, D + 1) @ (..., D + 1, Bk) -> (..., Bq, Bk)
                scores = q_shifted[..., rows, :] @ k_ones[..., cols, :].mT
                tile = self._tile_mask(xp, allowed, rows, cols, q.device)
                if tile is not None:
                    scores = xp.where(tile, scores, -math.inf)
                weights = xp.exp(scores)
                if tangent_q is not None or tangent_k is not None:
                    tangent_scores = xp.zeros_like(weights)  # dS: (..., Bq, Bk)
                    if tangent_q is not None:
                        tangent_scores += tangent_q[..., rows, :] @ k[..., cols, :].mT
                    if tangent_k is not None:
                        tangent_scores += q[..., rows, :] @ tangent_k[..., cols, :].mT
                    weighted = weights * (tangent_scores * self.scale)  # P dS: (..., Bq, Bk)
                    moved = moved + xp.sum(weighted, axis=-1, keepdims=True)
                    acc = acc + weighted @ v[..., cols, :]  # (..., Bq, Bk) @ (..., Bk, Dv)
                if tangent_v is not None:
                    acc = acc + weights @ tangent_v[..., cols, :]
            tangent_out[..., rows, :] = acc - moved * out[..., rows, :]
        return tangent_out


class OnceDifferentiable(Function):
    """y = value (a gradient or tangent BlockwiseAttention computed on arrays);  dL/d(inputs)
    and dy: raise.

    Recorded under create_graph=True with the attention's inputs and cotangent as its inputs
    (or, for a tangent, its inputs and their tangents), so that differentiating the result
    again, in either mode, raises instead of silently returning 0 (PyTorch's
    `once_differentiable`). Shapes: value any; the inputs only link the graph.
    """

    __slots__ = ()

    def forward(self, *arrays: Any, value: Any = None) -> Any:
        return value

    def backward(self, grad: Any) -> None:
        raise NotImplementedError(
            "double backward through block-wise attention is not supported: use the plain path "
            "(set tinyattn.functional.BLOCKWISE_MIN_SCORES = math.inf)"
        )

    def jvp(self, *tangents: Any) -> None:
        raise NotImplementedError(
            "a second derivative through block-wise attention (a tangent of its gradient or "
            "tangent) is not supported: use the plain path "
            "(set tinyattn.functional.BLOCKWISE_MIN_SCORES = math.inf)"
        )
