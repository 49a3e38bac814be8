"""One table of ops: every row is a tinyattn call, a NumPy reference and the input shapes.

Each row gets a forward check against NumPy (float64 inputs built on the host, moved with
``ta.tensor(..., device=device)``) and a property-based gradient check (`check_grads`: inputs
drawn by Hypothesis over the op's domain, checked in float64 and float32, and to second order
where the op is twice differentiable), on every backend through the ``device`` fixture. An
elementwise op registered in tinyattn/ops/table.py gets its rows from the table (`TABLE_ROWS`);
any other op is a row here.

Forward inputs are drawn by a generator named in the row: ``normal``; ``positive`` (for log,
sqrt, pow); ``tails`` (|x| from 15 to 40, where cancelling formulas lose relative precision);
``distinct`` (all values of all inputs distinct, at least 0.1 apart and at least 0.1 from 0);
``unit``, ``above_one`` and ``moderate`` (inside the domains of asin, acos and atanh, of acosh,
and of tan, away from their derivatives' poles);
``nonzero`` (the same values, for ops with a pole at 0); ``untied`` (the same values, for ops
with no derivative where values tie: topk, and std where all values are equal). The generator
also names the domain the gradient check draws from (`DOMAINS`): relu, abs, clip, max, min and
maximum are checked over all of [-10, 10], kinks and ties included, where the checker accepts
any value between the one-sided derivatives; division over [-10, -0.1] and [0.1, 10]; topk and
std over tensors whose values are pairwise at least 1/8 apart. Constants that are not
differentiated (a where condition, an index array) are ``Const`` entries: they are passed as
tensors without grad.
Comparisons and factories have their own small tables at the end; max/min tie splitting is
checked against hand-computed gradients.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import conv_reference
import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st

import tinyattn as ta
import tinyattn.nn.functional as F
import tinyattn.nn.functional as nn_functional
from tinyattn import ops
from tinyattn.backend import dtype_name
from tinyattn.ops import table
from tinyattn.testing import check_grads, tensors


# --------------------------------------------------------------------------------- generators
def normal(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    return [rng.standard_normal(shape) for shape in shapes]


def positive(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    return [rng.uniform(0.5, 2.0, shape) for shape in shapes]


def distinct(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    """Values 0.1, -0.2, 0.3, -0.4, ... shuffled across all inputs: no ties, no zeros."""
    sizes = [int(np.prod(shape)) for shape in shapes]
    ranks = rng.permutation(sum(sizes)) + 1
    values = 0.1 * ranks * np.where(ranks % 2, 1.0, -1.0)
    splits = np.split(values, np.cumsum(sizes)[:-1])
    return [part.reshape(shape) for part, shape in zip(splits, shapes, strict=True)]


def _reseeded_dropout(a: ta.Tensor) -> ta.Tensor:
    ta.manual_seed(0)
    return F.dropout(a, 0.3)


def _dropout_keep(shape: tuple) -> np.ndarray:
    """The keep-mask dropout(p=0.3) draws right after manual_seed(0): uniforms below 0.7."""
    ta.manual_seed(0)
    return ta.rand(*shape, dtype="float64").numpy() < 0.7


def nonzero(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    """The `distinct` values, for ops with a pole at 0 (division)."""
    return distinct(rng, shapes)


def with_zeros(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    """`normal` values with exact zeros: one in some rows, two in others (a product's gradient
    at a zero is the product of the others, where a quotient y / x would divide by zero)."""
    arrays = normal(rng, shapes)
    for a in arrays:
        flat = a.reshape(-1)
        flat[rng.choice(flat.size, size=max(flat.size // 5, 1), replace=False)] = 0.0
    return arrays


def untied(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    """The `distinct` values, for ops with no derivative at ties (topk; std of equal values)."""
    return distinct(rng, shapes)


def tails(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    """Values far out in both tails, where a formula that cancels loses relative precision."""
    return [rng.uniform(15.0, 40.0, shape) * rng.choice([-1.0, 1.0], shape) for shape in shapes]


def unit(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    """Inside (-1, 1), away from the poles of asin's, acos's and atanh's derivatives at +-1."""
    return [rng.uniform(-0.9, 0.9, shape) for shape in shapes]


def above_one(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    """Above 1, away from the pole of acosh's derivative at 1."""
    return [rng.uniform(1.1, 3.0, shape) for shape in shapes]


def moderate(rng: np.random.Generator, shapes: list[tuple]) -> list[np.ndarray]:
    """|x| < 1.3, away from tan's poles at +-pi/2."""
    return [rng.uniform(-1.3, 1.3, shape) for shape in shapes]


@dataclass(frozen=True)
class Const:
    """An input that is not differentiated: a bool condition or an integer index array."""

    value: Any

    def array(self) -> np.ndarray:
        return np.asarray(self.value)


@dataclass
class Row:
    name: str
    call: Callable  # tinyattn tensors -> tensor
    reference: Callable  # NumPy arrays -> array
    inputs: list  # a shape (float64 input that requires grad) or a Const
    make: Callable = normal
    twice: bool = True  # run gradgradcheck
    check: dict = field(default_factory=dict)  # gradcheck keyword arguments (tolerances)
    casts: bool = False  # the row changes the dtype itself


SAME = None  # the row's expression, evaluated by NumPy on the host arrays, is the reference

CONDITION = Const(np.array([[True], [False], [True]]))  # (3, 1), broadcasts against (3, 4)
REPEATED = Const(np.array([2, 0, 2, 2, 1]))  # gather with repeats: the gradient adds them
NEGATIVE = Const(np.array([-1, 0, -1]))
INDEX_2D = Const(np.array([[0, 3], [3, 3], [1, 2]]))
INDEX_3 = Const(np.array([[0, 2, 0, 1], [2, 2, 0, 1]]))  # (2, 4) into dim 0 of (3, 4), repeats
MASK = np.array(
    [[True, False, True, True], [False, False, False, False], [True, True, False, True]]
)
CAUSAL_3_4 = Const(np.tril(np.ones((3, 4), dtype=bool)))  # query i may attend keys j <= i


def _heads_attention(q, k, v, allowed):
    """NumPy's ops.HeadsAttention (scale 0.6, 2 heads side by side in the last axis)."""

    def split(x):
        return x.reshape(*x.shape[:2], 2, -1).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) * 0.6
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    out = weights / weights.sum(axis=-1, keepdims=True) @ split(v)
    return out.transpose(0, 2, 1, 3).reshape(*q.shape[:2], -1)


A = (3, 4)  # the default operand shape
B3 = (2, 3, 4)  # a 3-d operand for axes

# fmt: off
ROWS = [
    # ------------------------------------------------------------------------------ arithmetic
    Row("add",                 lambda a, b: a + b,  SAME, [A, A]),
    Row("add broadcast",       lambda a, b: a + b,  SAME, [(2, 1, 4), (3, 1)]),
    Row("add scalar",          lambda a: a + 2.5,   SAME, [A]),
    Row("radd scalar",         lambda a: 2.5 + a,   SAME, [A]),
    Row("add 0-d",             lambda a, b: a + b,  SAME, [(), (3,)]),
    Row("sub",                 lambda a, b: a - b,  SAME, [A, A]),
    Row("sub broadcast",       lambda a, b: a - b,  SAME, [(4,), (2, 3, 1)]),
    Row("rsub scalar",         lambda a: 1.5 - a,   SAME, [A]),
    Row("mul",                 lambda a, b: a * b,  SAME, [A, A]),
    Row("mul broadcast",       lambda a, b: a * b,  SAME, [(2, 3, 1), (1, 4)]),
    Row("mul scalar",          lambda a: a * -3.0,  SAME, [A]),
    Row("rmul scalar",         lambda a: 0.5 * a,   SAME, [A]),
    Row("div",                 lambda a, b: a / b,  SAME, [A, A], make=nonzero),
    Row("div broadcast",       lambda a, b: a / b,  SAME, [(2, 3), (3,)], make=nonzero),
    Row("div scalar",          lambda a: a / 4.0,   SAME, [A]),
    Row("rdiv scalar",         lambda a: 1.5 / a,   SAME, [A], make=nonzero),
    Row("pow",                 lambda a, b: a**b,   SAME, [A, A], make=positive),
    Row("pow broadcast",       lambda a, b: a**b,   SAME, [(2, 3), (3,)], make=positive),
    Row("pow int scalar",      lambda a: a**3,      SAME, [A]),
    Row("pow float scalar",    lambda a: a**0.5,    SAME, [A], make=positive),
    Row("pow negative scalar", lambda a: a**-2.0,   SAME, [A], make=positive),
    Row("rpow scalar",         lambda a: 2.0**a,    SAME, [A]),
    Row("neg",                 lambda a: -a,        SAME, [A]),
    # ----------------------------------------------------------------------------------- unary
    Row("sigmoid", lambda a: a.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), [A]),
    Row("sigmoid tails", lambda a: a.sigmoid(), lambda a: 1 / (1 + np.exp(-a)), [A], make=tails),
    Row("tanh tails", lambda a: a.tanh(), np.tanh,                     [A], make=tails),
    Row("relu",    lambda a: a.relu(),    lambda a: np.maximum(a, 0),  [A], make=distinct),
    # ------------------------------------------------------------------ maximum, clip, where, cast
    Row("maximum",           ta.maximum, np.maximum, [A, A], make=distinct),
    Row("maximum broadcast", ta.maximum, np.maximum, [(2, 3, 1), (4,)], make=distinct),
    Row("maximum scalar",    lambda a: a.maximum(0.02), lambda a: np.maximum(a, 0.02), [A],
        make=distinct),
    Row("clip",              lambda a: a.clip(-0.32, 0.27), SAME, [(3, 5)], make=distinct),
    Row("clip min only",     lambda a: a.clip(min=0.0),     SAME, [A], make=distinct),
    Row("clip max only",     lambda a: a.clip(max=0.12),    SAME, [A], make=distinct),
    Row("where",             ta.where, np.where, [CONDITION, A, (4,)]),
    Row("where scalar",      lambda c, a: ta.where(c, a, 0.0), lambda c, a: np.where(c, a, 0.0),
        [CONDITION, A]),
    Row("to float32",        lambda a: a.to("float32"), lambda a: a.astype(np.float32), [A],
        check={"atol": 1e-4}, casts=True),
    # ------------------------------------------------------------------------------ reductions
    Row("sum all",                 lambda a: a.sum(),                           SAME, [A]),
    Row("sum axis",                lambda a: a.sum(axis=1),                     SAME, [B3]),
    Row("sum negative axis keep",  lambda a: a.sum(axis=-1, keepdims=True),     SAME, [B3]),
    Row("sum axes tuple",          lambda a: a.sum(axis=(0, 2)),                SAME, [B3]),
    Row("sum axes tuple keep",     lambda a: a.sum(axis=(2, 0), keepdims=True), SAME, [B3]),
    Row("mean all",                lambda a: a.mean(),                          SAME, [A]),
    Row("norm all",                lambda a: a.norm(),  lambda a: np.linalg.norm(a), [A]),
    Row("norm axis keep",          lambda a: a.norm(dim=1, keepdim=True),
        lambda a: np.linalg.norm(a, axis=1, keepdims=True), [B3]),
    Row("mean axis",               lambda a: a.mean(axis=0),                    SAME, [A]),
    Row("mean axes tuple keep",    lambda a: a.mean(axis=(1, 2), keepdims=True), SAME, [B3]),
    Row("max all",                 lambda a: a.max(),                SAME, [A], make=distinct),
    Row("amax axis",               lambda a: a.amax(axis=1),  lambda a: a.max(axis=1), [B3],
        make=distinct),
    Row("amax axes tuple keep",    lambda a: a.amax(dim=(0, 2), keepdim=True),
        lambda a: a.max(axis=(0, 2), keepdims=True), [B3], make=distinct),
    Row("min all",                 lambda a: a.min(),                SAME, [A], make=distinct),
    Row("amin axis keep",          lambda a: a.amin(axis=-1, keepdims=True),
        lambda a: a.min(axis=-1, keepdims=True), [B3], make=distinct),
    Row("amin axes tuple",         lambda a: a.amin(axis=(0, 1)),  lambda a: a.min(axis=(0, 1)),
        [B3], make=distinct),
    Row("max dim values",          lambda a: a.max(1).values,  lambda a: a.max(axis=1), [B3],
        make=distinct),
    Row("min dim keepdim values",  lambda a: a.min(dim=-1, keepdim=True)[0],
        lambda a: a.min(axis=-1, keepdims=True), [B3], make=distinct),
    Row("sum dim keepdim",         lambda a: a.sum(dim=(0, 2), keepdim=True),
        lambda a: a.sum(axis=(0, 2), keepdims=True), [B3]),
    Row("std",                     lambda a: a.std(), lambda a: a.std(ddof=1), [A], make=untied),
    Row("std dim keepdim",         lambda a: a.std(dim=1, keepdim=True),
        lambda a: a.std(axis=1, ddof=1, keepdims=True), [B3], make=untied),
    Row("std correction 0",        lambda a: a.std(0, correction=0), lambda a: a.std(axis=0),
        [A], make=untied),
    # Dropout draws its mask in forward; reseeding inside the call gives every evaluation the
    # same mask, so finite differences see one function.
    Row("dropout (reseeded)",      lambda a: _reseeded_dropout(a),
        lambda a: a * _dropout_keep(a.shape) / 0.7, [A]),
    Row("logsumexp",               lambda a: a.logsumexp(-1),
        lambda a: np.log(np.exp(a).sum(-1)), [B3]),
    Row("logsumexp dims keepdim",  lambda a: a.logsumexp((0, 2), keepdim=True),
        lambda a: np.log(np.exp(a).sum((0, 2), keepdims=True)), [B3], make=tails),
    Row("cumsum",                  lambda a: a.cumsum(1), lambda a: np.cumsum(a, axis=1), [B3]),
    Row("cumsum negative dim",     lambda a: a.cumsum(dim=-1), lambda a: np.cumsum(a, -1), [A]),
    Row("sum_to",                  lambda a: a.sum_to((1, 4)),
        lambda a: a.sum(axis=0, keepdims=True), [A]),
    Row("to another device and back", lambda a: (a.to("strict:device2") * 2.0).to(a.device),
        lambda a: a * 2.0, [A]),
    Row("var all",                 lambda a: a.var(),                lambda a: a.var(ddof=1), [A]),
    Row("var axis",                lambda a: a.var(axis=1),       lambda a: a.var(1, ddof=1), [B3]),
    Row("var axes tuple keep",     lambda a: a.var(axis=(0, 2), keepdims=True, correction=0),
        lambda a: a.var(axis=(0, 2), keepdims=True), [B3]),
    Row("var correction",          lambda a: a.var(axis=0, correction=1),
        lambda a: a.var(axis=0, ddof=1), [(4, 3)]),
    # ---------------------------------------------------------------------------------- matmul
    Row("matmul",                  lambda a, b: a @ b, SAME, [(3, 4), (4, 5)]),
    Row("matmul batched",          lambda a, b: a @ b, SAME, [(2, 3, 4), (2, 4, 5)]),
    Row("matmul broadcast batch",  lambda a, b: a @ b, SAME, [(2, 1, 3, 4), (3, 4, 2)]),
    Row("matmul batch and matrix", lambda a, b: a @ b, SAME, [(2, 3, 4), (4, 2)]),
    Row("matmul vector left",      lambda a, b: a @ b, SAME, [(4,), (4, 3)]),
    Row("matmul vector right",     lambda a, b: a @ b, SAME, [(3, 4), (4,)]),
    Row("matmul vector both",      lambda a, b: a @ b, SAME, [(4,), (4,)]),
    Row("matmul vector and batch", lambda a, b: a @ b, SAME, [(4,), (2, 4, 3)]),
    Row("matmul batch and vector", lambda a, b: a @ b, SAME, [(2, 3, 4), (4,)]),
    # ----------------------------------------------------------------------------------- shape
    Row("reshape",            lambda a: a.reshape(4, 6),        SAME, [B3]),
    Row("reshape -1 tuple",   lambda a: a.reshape((3, -1)),     SAME, [B3]),
    Row("reshape to 0-d",     lambda a: a.reshape(()),          SAME, [(1, 1)]),
    Row("transpose two dims", lambda a: a.transpose(0, 2),      lambda a: a.swapaxes(0, 2),
        [B3]),
    Row("transpose negative", lambda a: a.transpose(-1, -2),    lambda a: a.swapaxes(-1, -2),
        [B3]),
    Row("T reversed",         lambda a: a.T,                    lambda a: a.transpose(), [B3]),
    Row("view -1 varargs",    lambda a: a.view(2, -1),          lambda a: a.reshape(2, -1), [B3]),
    Row("flatten",            lambda a: a.flatten(),            lambda a: a.reshape(-1), [B3]),
    Row("flatten from 1",     lambda a: a.flatten(1),           lambda a: a.reshape(2, -1), [B3]),
    Row("flatten middle",     lambda a: a.flatten(0, 1),        lambda a: a.reshape(6, 4), [B3]),
    Row("repeat",             lambda a: a.repeat(2, 1, 3),      lambda a: np.tile(a, (2, 1, 3)),
        [B3]),
    Row("repeat new dims",    lambda a: a.repeat(2, 1, 2),      lambda a: np.tile(a, (2, 1, 2)),
        [(3, 4)]),
    Row("flip",               lambda a: a.flip(0, 2),           lambda a: np.flip(a, (0, 2)), [B3]),
    Row("flip tuple",         lambda a: a.flip((-1,)),          lambda a: np.flip(a, -1), [A]),
    Row("expand -1",          lambda a: a.expand(2, -1, 4),
        lambda a: np.broadcast_to(a, (2, 3, 4)), [(3, 1)]),
    Row("unsqueeze",          lambda a: a.unsqueeze(dim=0),     lambda a: a[None], [A]),
    Row("squeeze dim",        lambda a: a.squeeze(dim=2),       lambda a: a.squeeze(2),
        [(1, 3, 1, 2)]),
    Row("clone",              lambda a: a.clone(),              lambda a: a.copy(), [A]),
    Row("contiguous",         lambda a: a.contiguous(),         lambda a: a, [A]),
    Row("split sizes",        lambda a: ta.cat(a.split([1, 3], dim=1)[::-1], dim=1),
        lambda a: np.concatenate([a[:, 1:], a[:, :1]], axis=1), [A]),
    Row("split size",         lambda a: a.split(3, 1)[1],       lambda a: a[:, 3:], [A]),
    Row("chunk",              lambda a: a.chunk(2, dim=2)[1] * 2.0, lambda a: a[..., 2:] * 2.0,
        [B3]),
    Row("tril",               lambda a: ta.tril(a),             np.tril, [B3]),
    Row("triu diagonal",      lambda a: ta.triu(a, diagonal=1), lambda a: np.triu(a, 1), [B3]),
    Row("tril negative diagonal", lambda a: a.tril(-1),         lambda a: np.tril(a, -1), [A]),
    Row("masked_fill",        lambda a, m: a.masked_fill(m, -1.5),
        lambda a, m: np.where(m, -1.5, a), [A, CONDITION]),
    Row("permute",            lambda a: a.permute(2, 0, 1),     lambda a: a.transpose(2, 0, 1),
        [B3]),
    Row("permute negative",   lambda a: a.permute((-1, 0, 1)),  lambda a: a.transpose(2, 0, 1),
        [B3]),
    Row("mT",                 lambda a: a.mT,                   SAME, [B3]),
    Row("swapaxes",           lambda a: a.swapaxes(0, -1),      SAME, [B3]),
    Row("expand_dims",        lambda a: a.expand_dims(1),       lambda a: np.expand_dims(a, 1),
        [(2, 3)]),
    Row("expand_dims last",   lambda a: a.expand_dims(-1),      lambda a: np.expand_dims(a, -1),
        [(2, 3)]),
    Row("squeeze all",        lambda a: a.squeeze(),            SAME, [(1, 3, 1, 2)]),
    Row("squeeze axis",       lambda a: a.squeeze(2),           SAME, [(1, 3, 1, 2)]),
    Row("squeeze axes tuple", lambda a: a.squeeze((0, -2)),     SAME, [(1, 3, 1, 2)]),
    Row("broadcast_to",       lambda a: a.broadcast_to((2, 3, 4)),
        lambda a: np.broadcast_to(a, (2, 3, 4)), [(3, 1)]),
    Row("broadcast_to new axes", lambda a: a.broadcast_to(2, 3, 4),
        lambda a: np.broadcast_to(a, (2, 3, 4)), [(4,)]),
    # -------------------------------------------------------------------------------- indexing
    Row("index int",              lambda a: a[1],              SAME, [A]),
    Row("index negative int",     lambda a: a[-1, 2],          SAME, [A]),
    Row("index slices",           lambda a: a[1:, ::2],        SAME, [A]),
    Row("index negative step",    lambda a: a[::-1, 1:3],      SAME, [A]),
    Row("index None",             lambda a: a[:, None, 1],     SAME, [A]),
    Row("index ellipsis",         lambda a: a[..., 1],         SAME, [B3]),
    Row("index ellipsis None",    lambda a: a[None, ..., 0:2], SAME, [B3]),
    Row("gather repeated",        lambda a, i: a[i],           SAME, [A, REPEATED]),
    Row("gather repeated list",   lambda a: a[[2, 0, 2, 2]],   SAME, [A]),
    Row("gather negative",        lambda a, i: a[i],           SAME, [A, NEGATIVE]),
    Row("gather inner axis",      lambda a, i: a[:, i],        SAME, [B3, REPEATED]),
    Row("gather 2-d index",       lambda a, i: a[1:, i],       SAME, [A, INDEX_2D]),
    Row("gather with int",        lambda a, i: a[i, 1],        SAME, [A, REPEATED]),
    Row("gather split from int",  lambda a, i: a[0, :, i],     lambda a, i: a[0][:, i],
        [B3, REPEATED]),
    Row("index list last",        lambda a: a[:, [-1]],        SAME, [A]),
    Row("bool mask",              lambda a, m: a[m],           SAME, [A, Const(MASK)]),
    Row("bool mask leading dims", lambda a, m: a[m],           SAME,
        [B3, Const(np.array([[True, False, True], [False, False, True]]))]),
    Row("gather",                 lambda a, i: a.gather(1, i),
        lambda a, i: np.take_along_axis(a, i, 1), [A, Const(np.array([[0, 3], [1, 1], [2, 0]]))]),
    Row("gather function dim 0",  lambda a, i: ta.gather(a, 0, i),
        lambda a, i: np.take_along_axis(a, i, 0), [A, Const(np.array([[2, 0, 1, 2]]))]),
    Row("scatter",                lambda a, s, i: a.scatter(1, i, s),
        lambda a, s, i: _scatter_numpy(a, 1, i, s), [A, (3, 2), Const(np.array([[0, 3], [1, 2],
                                                                               [2, 0]]))]),
    Row("scatter value",          lambda a, i: ta.scatter(a, 0, i, 0.5),
        lambda a, i: _scatter_numpy(a, 0, i, np.full(i.shape, 0.5)),
        [A, Const(np.array([[2, 0, 1, 1]]))]),
    Row("topk values",            lambda a: a.topk(2).values,
        lambda a: -np.sort(-a, axis=-1)[..., :2], [B3], make=untied),
    Row("topk smallest dim 0",    lambda a: ta.topk(a, 2, dim=0, largest=False)[0],
        lambda a: np.sort(a, axis=0)[:2], [A], make=untied),
    Row("gather after ellipsis",  lambda a, i: a[..., i],      SAME, [(2, 3), REPEATED]),
    Row("gather empty list",      lambda a: a[[]],             SAME, [A]),
    Row("index NumPy integers",   lambda a: a[np.int64(1), np.int32(-1)], SAME, [A]),
    # ------------------------------------------------------------------------------ join
    Row("concat",  lambda a, b, c: ta.concat([a, b, c], axis=1),
        lambda a, b, c: np.concatenate([a, b, c], axis=1), [(2, 1, 3), (2, 3, 3), (2, 2, 3)]),
    Row("concat negative axis", lambda a, b: ta.concat([a, b], axis=-1),
        lambda a, b: np.concatenate([a, b], axis=-1), [(2, 3), (2, 1)]),
    Row("cat dim", lambda a, b: ta.cat([a, b], dim=-1),
        lambda a, b: np.concatenate([a, b], axis=-1), [(2, 3), (2, 1)]),
    Row("pad",     lambda a: ta.pad(a, (1, 2)), lambda a: np.pad(a, [(0, 0), (0, 0), (1, 2)]),
        [B3]),
    Row("pad two dims value", lambda a: ta.pad(a, (0, 1, 2, 0), value=-1.0),
        lambda a: np.pad(a, [(2, 0), (0, 1)], constant_values=-1.0), [A]),
    Row("pad negative crops", lambda a: ta.pad(a, (-1, 1)),
        lambda a: np.pad(a[:, 1:], [(0, 0), (0, 1)]), [A]),
    Row("einsum attention scores", lambda q, k: ta.einsum("bhtd,bhsd->bhts", q, k),
        lambda q, k: np.einsum("bhtd,bhsd->bhts", q, k), [(2, 2, 3, 4), (2, 2, 5, 4)]),
    Row("einsum attention values", lambda w, v: ta.einsum("bhts,bhsd->bhtd", w, v),
        lambda w, v: np.einsum("bhts,bhsd->bhtd", w, v), [(2, 2, 3, 5), (2, 2, 5, 4)]),
    Row("heads attention", lambda q, k, v: ops.HeadsAttention.apply(q, k, v, heads=2, scale=0.6),
        lambda q, k, v: _heads_attention(q, k, v, None), [(2, 3, 4), (2, 5, 4), (2, 5, 6)]),
    Row("heads attention masked",
        lambda q, k, v, m: ops.HeadsAttention.apply(q, k, v, m, heads=2, scale=0.6),
        _heads_attention, [(1, 3, 4), (1, 4, 4), (1, 4, 2), CAUSAL_3_4]),
    Row("heads attention packed",
        lambda qkv: ops.HeadsAttention.apply(qkv, heads=2, scale=0.6, packed=True),
        lambda qkv: _heads_attention(*np.split(qkv, 3, axis=-1), None), [(2, 3, 12)]),
    Row("heads attention packed masked",
        lambda qkv, m: ops.HeadsAttention.apply(qkv, m, heads=2, scale=0.6, packed=True),
        lambda qkv, m: _heads_attention(*np.split(qkv, 3, axis=-1), m),
        [(1, 3, 12), Const(np.tril(np.ones((3, 3), dtype=bool)))]),
    Row("einsum matmul", lambda a, b: ta.einsum("ij,jk->ik", a, b), np.matmul, [(3, 4), (4, 2)]),
    Row("einsum batched", lambda a, b: ta.einsum("bij,bjk->bik", [a, b]), np.matmul,
        [(2, 3, 4), (2, 4, 2)]),
    Row("einsum sums a letter", lambda a, b: ta.einsum("ij,kj->k", a, b),
        lambda a, b: np.einsum("ij,kj->k", a, b), [(3, 4), (2, 4)]),
    Row("einsum transpose", lambda a: ta.einsum("ijk->kij", a), lambda a: a.transpose(2, 0, 1),
        [B3]),
    Row("einsum outer implicit", lambda a, b: ta.einsum("i,j", a, b), np.outer, [(3,), (4,)]),
    Row("einsum three operands", lambda a, b, c: ta.einsum("ij,jk,kl->il", a, b, c),
        lambda a, b, c: a @ b @ c, [(2, 3), (3, 4), (4, 2)]),
    Row("einsum ellipsis", lambda a, b: ta.einsum("...ij,...jk->...ik", a, b), np.matmul,
        [(2, 3, 4), (4, 2)]),
    Row("einsum diagonal", lambda a: ta.einsum("bii->bi", a),
        lambda a: np.einsum("bii->bi", a), [(2, 3, 3)]),
    Row("stack",   lambda a, b: ta.stack([a, b]), lambda a, b: np.stack([a, b]), [(2, 3), (2, 3)]),
    Row("stack axis", lambda a, b, c: ta.stack([a, b, c], axis=-1),
        lambda a, b, c: np.stack([a, b, c], axis=-1), [(2, 3), (2, 3), (2, 3)]),
    # ---------------------------------------------------------------------------- compositions
    Row("softmax composed", lambda a: a.exp() / a.exp().sum(axis=-1, keepdims=True),
        lambda a: np.exp(a) / np.exp(a).sum(axis=-1, keepdims=True), [B3]),
    Row("fan-out product", lambda a, b: a * a + a * b - b / (a * a + 1.0), SAME, [A, (4,)]),
    # ------------------------------------------------------------------------------- fused ops
    Row("fused softmax", lambda a: F.softmax(a, dim=1),
        lambda a: np.exp(a - a.max(1, keepdims=True))
        / np.exp(a - a.max(1, keepdims=True)).sum(1, keepdims=True), [B3]),
    Row("fused log_softmax", lambda a: F.log_softmax(a, dim=-1),
        lambda a: a - a.max(-1, keepdims=True)
        - np.log(np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)), [B3]),
    Row("erf", lambda a: F.erf(a), lambda a: np.vectorize(math.erf)(a), [A]),
    Row("fused gelu", lambda a: F.gelu(a),
        lambda a: a * 0.5 * (1.0 + np.vectorize(math.erf)(a / math.sqrt(2.0))), [A]),
    Row("fused linear", lambda x, w, b: ops.Linear.apply(x, w, b),
        lambda x, w, b: x @ w.T + b, [B3, (5, 4), (5,)]),
    Row("fused linear 1-d, no bias", lambda x, w: ops.Linear.apply(x, w),
        lambda x, w: w @ x, [(4,), (5, 4)]),
    Row("fused layer norm", lambda x, w, b: ops.LayerNorm.apply(x, w, b, axes=(2,), eps=1e-5),
        lambda x, w, b: (x - x.mean(-1, keepdims=True))
        / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b, [B3, (4,), (4,)]),
    # ------------------------------------------------- composed of other ops (PyTorch's names)
    Row("erf method", lambda a: a.erf(), lambda a: np.vectorize(math.erf)(a), [A]),
    Row("frac", lambda a: (a * 3.0).frac(), lambda a: np.fmod(a * 3.0, 1.0), [A]),
    Row("lerp small weight", lambda a, b: a.lerp(b, 0.25), lambda a, b: a + 0.25 * (b - a),
        [A, A]),
    Row("lerp large weight", lambda a, b: ta.lerp(a, b, 0.75), lambda a, b: a + 0.75 * (b - a),
        [A, (4,)]),
    Row("lerp tensor weight", lambda a, b, w: a.lerp(b, w), lambda a, b, w: a + w * (b - a),
        [A, A, (4,)]),
    Row("addmm", lambda c, a, b: ta.addmm(c, a, b, beta=0.5, alpha=2.0),
        lambda c, a, b: 0.5 * c + 2.0 * (a @ b), [(4,), (3, 5), (5, 4)]),
    Row("addmm beta 0", lambda c, a, b: c.addmm(a, b, beta=0), lambda c, a, b: a @ b,
        [(3, 4), (3, 5), (5, 4)]),
    Row("diag of a matrix", lambda a: a.diag(1), lambda a: np.diag(a, 1), [A]),
    Row("diag of a matrix below", lambda a: ta.diag(a, -2), lambda a: np.diag(a, -2), [A]),
    Row("diag of a vector", lambda a: a.diag(), lambda a: np.diag(a), [(4,)]),
    Row("trace", lambda a: a.trace(), np.trace, [A]),
    Row("diagonal", lambda a: a.diagonal(1, 0, 2),
        lambda a: np.diagonal(a, 1, 0, 2), [B3]),
    Row("addcmul", lambda a, b, c: a.addcmul(b, c, value=0.5), lambda a, b, c: a + 0.5 * b * c,
        [A, A, (4,)]),
    Row("addcdiv", lambda a, b, c: ta.addcdiv(a, b, c, value=-2.0), lambda a, b, c: a - 2.0 * b / c,
        [A, A, A], make=nonzero),
    Row("scatter_add", lambda a, i, b: a.scatter_add(0, i, b),
        lambda a, i, b: _scatter_add_numpy(a, 0, i, b),
        [A, Const(np.array([[0, 2, 0, 1], [2, 2, 1, 0]])), (2, 4)]),
    Row("index_add", lambda a, i, b: a.index_add(1, i, b, alpha=0.5),
        lambda a, i, b: _index_add_numpy(a, 1, i, b * 0.5),
        [A, Const(np.array([1, 3, 1])), (3, 3)]),
    Row("logaddexp", lambda a, b: ta.logaddexp(a, b), np.logaddexp, [A, (4,)]),
    Row("logaddexp at ties", lambda a: a.logaddexp(a), lambda a: np.logaddexp(a, a), [A]),
    Row("logaddexp2", lambda a, b: a.logaddexp2(b), np.logaddexp2, [A, A]),
    Row("hstack", lambda a, b: ta.hstack([a, b]), lambda a, b: np.hstack([a, b]), [A, (3, 2)]),
    Row("vstack", lambda a, b: ta.vstack([a, b]), lambda a, b: np.vstack([a, b]), [A, (4,)]),
    Row("diag of a vector above", lambda a: a.diag(2), lambda a: np.diag(a, 2), [(3,)]),
    Row("diag of a vector below", lambda a: a.diag(-1), lambda a: np.diag(a, -1), [(3,)]),
    Row("tile", lambda a: a.tile(2), lambda a: np.tile(a, 2), [A]),
    Row("tile more dims", lambda a: ta.tile(a, (2, 1, 3)), lambda a: np.tile(a, (2, 1, 3)), [A]),
    Row("repeat_interleave", lambda a: a.repeat_interleave(2, dim=1),
        lambda a: np.repeat(a, 2, axis=1), [A]),
    Row("repeat_interleave flat", lambda a: ta.repeat_interleave(a, 3),
        lambda a: np.repeat(a, 3), [A]),
    Row("repeat_interleave counts", lambda a, r: a.repeat_interleave(r, dim=0),
        lambda a, r: np.repeat(a, r, axis=0), [A, Const(np.array([2, 0, 3]))]),
    Row("nan_to_num (finite)", lambda a: a.nan_to_num(), np.nan_to_num, [A]),
    Row("diff", lambda a: a.diff(), lambda a: np.diff(a), [A]),
    Row("diff twice, prepend", lambda a, p: ta.diff(a, n=2, dim=0, prepend=p),
        lambda a, p: np.diff(a, n=2, axis=0, prepend=p), [A, (2, 4)]),
    Row("masked_select", lambda a, m: a.masked_select(m), lambda a, m: a[m],
        [A, Const(MASK)]),
    Row("masked_select broadcast", lambda a, m: ta.masked_select(a, m),
        lambda a, m: a[np.broadcast_to(m, a.shape)], [A, Const(MASK[0])]),
    Row("meshgrid ij", lambda a, b: ta.meshgrid(a, b)[0] * ta.meshgrid(a, b)[1],
        lambda a, b: np.multiply(*np.meshgrid(a, b, indexing="ij")), [(3,), (4,)]),
    Row("meshgrid xy", lambda a, b: ta.meshgrid(a, b, indexing="xy")[1] ** 2,
        lambda a, b: np.meshgrid(a, b)[1] ** 2, [(3,), (4,)]),
    Row("cosine_similarity", lambda a, b: ta.cosine_similarity(a, b, dim=-1),
        lambda a, b: (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1),
        [B3, (3, 4)], make=nonzero),
    Row("cross_entropy class weights", lambda x: nn_functional.cross_entropy(
        x, ta.tensor([0, 3, -100], device=x.device), weight=ta.tensor(
            [1.0, 2.0, 0.5, 3.0], dtype="float64", device=x.device), label_smoothing=0.1),
        lambda x: _weighted_ce_numpy(x, [0, 3, -100], [1.0, 2.0, 0.5, 3.0], 0.1), [A]),
    Row("CrossEntropy mean smoothed", lambda a: ops.CrossEntropy.apply(
        a, ta.tensor([0, 3, 1], device=a.device), smoothing=0.1),
        lambda a: _ce_numpy(a, [0, 3, 1], -100, 0.1, "mean"), [A]),
    Row("CrossEntropy sum ignored", lambda a: ops.CrossEntropy.apply(
        a, ta.tensor([0, 3, 1], device=a.device), ignore_index=3, reduction="sum"),
        lambda a: _ce_numpy(a, [0, 3, 1], 3, 0.0, "sum"), [A]),
    Row("CrossEntropy none", lambda a: ops.CrossEntropy.apply(
        a, ta.tensor([[0, 3, 1], [2, 2, 0]], device=a.device), reduction="none"),
        lambda a: _ce_numpy(a, [[0, 3, 1], [2, 2, 0]], -100, 0.0, "none"), [B3]),
    Row("SavedLogSoftmax", lambda a: ops.SavedLogSoftmax.apply(
        a, values=F.log_softmax(a.detach(), dim=-1).array, axis=-1),
        lambda a: a - a.max(-1, keepdims=True)
        - np.log(np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)), [A]),
    Row("NegLogLikelihood", lambda a, w: ops.NegLogLikelihood.apply(a, w),
        lambda a, w: -(a * w).sum(-1), [B3, (3, 4)]),
    Row("NegLogLikelihood broadcast weights", lambda a, w: ops.NegLogLikelihood.apply(a, w),
        lambda a, w: -(a * w).sum(-1), [B3, (4,)]),
    Row("BinaryCrossEntropy", lambda p, t: ops.BinaryCrossEntropy.apply(
        p.sigmoid(), t.sigmoid()), lambda p, t: _bce_numpy(_sigmoid(p), _sigmoid(t)), [A, A]),
    Row("softsign", lambda a: nn_functional.softsign(a), lambda a: a / (1 + np.abs(a)), [A],
        make=distinct),
    Row("selu", lambda a: nn_functional.selu(a),
        lambda a: 1.0507009873554805 * np.where(a > 0, a, 1.6732632423543772 * np.expm1(a)),
        [A], make=distinct),
    Row("mish", lambda a: nn_functional.mish(a), lambda a: a * np.tanh(np.log1p(np.exp(a))),
        [A]),
    Row("hardsigmoid", lambda a: ta.nn.Hardsigmoid()(a * 4.0),
        lambda a: np.clip(a * 4.0 + 3, 0, 6) / 6, [A], make=distinct),
    Row("hardswish", lambda a: nn_functional.hardswish(a),
        lambda a: a * np.clip(a + 3, 0, 6) / 6, [A], make=distinct),
    Row("glu", lambda a: nn_functional.glu(a, dim=1),
        lambda a: a[:, :2] / (1 + np.exp(-a[:, 2:])), [A]),
    Row("softmin", lambda a: nn_functional.softmin(a, dim=-1),
        lambda a: np.exp(-a) / np.exp(-a).sum(-1, keepdims=True), [B3]),
    Row("smooth_l1_loss", lambda a, b: nn_functional.smooth_l1_loss(a, b, beta=0.5),
        lambda a, b: np.mean(np.where(np.abs(a - b) < 0.5, (a - b) ** 2, np.abs(a - b) - 0.25)),
        [A, A], make=distinct),
    Row("huber_loss", lambda a, b: nn_functional.huber_loss(a, b, reduction="sum", delta=0.7),
        lambda a, b: np.sum(np.where(np.abs(a - b) < 0.7, 0.5 * (a - b) ** 2,
                                     0.7 * (np.abs(a - b) - 0.35))), [A, A], make=distinct),
    Row("bincount weights", lambda i, w: i.bincount(w, minlength=6),
        lambda i, w: np.bincount(i, w, minlength=6), [Const(np.array([0, 3, 3, 1])), (4,)]),
    Row("sign", lambda a: a.sign() * a, lambda a: np.sign(a) * a, [A], make=nonzero),
    Row("prod all", lambda a: a.prod(), SAME, [A]),
    Row("prod axis, zeros", lambda a: a.prod(dim=1), lambda a: a.prod(axis=1), [B3],
        make=with_zeros),
    Row("prod axes keep, zeros", lambda a: ta.prod(a, axis=(0, 2), keepdims=True),
        lambda a: a.prod(axis=(0, 2), keepdims=True), [B3], make=with_zeros),
    Row("cumprod, zeros", lambda a: a.cumprod(1), lambda a: np.cumprod(a, axis=1), [B3],
        make=with_zeros),
    Row("cumprod function", lambda a: ta.cumprod(a, dim=-1), lambda a: np.cumprod(a, axis=-1),
        [(7,)]),
    Row("normalize", lambda a: nn_functional.normalize(a, dim=0),
        lambda a: a / np.linalg.norm(a, axis=0, keepdims=True), [A], make=nonzero),
    # ---------------------------------------------------------- scans, scatters, pads, division
    Row("cummax values", lambda a: a.cummax(1).values,
        lambda a: np.maximum.accumulate(a, axis=1), [B3], make=untied),
    Row("cummin function dim 0", lambda a: ta.cummin(a, 0)[0],
        lambda a: np.minimum.accumulate(a, axis=0), [A], make=untied),
    Row("logcumsumexp", lambda a: a.logcumsumexp(1), lambda a: np.logaddexp.accumulate(a, 1),
        [B3]),
    Row("logcumsumexp long", lambda a: ta.logcumsumexp(a, dim=-1),
        lambda a: np.logaddexp.accumulate(a, -1), [(9,)]),
    Row("fmod", lambda a, b: a.fmod(b), np.fmod, [A, A], make=positive),
    Row("fmod scalar", lambda a: ta.fmod(a, 1.5), lambda a: np.fmod(a, 1.5), [A]),
    Row("copysign", lambda a, b: a.copysign(b), np.copysign, [A, A], make=nonzero),
    Row("copysign broadcast", lambda a, b: ta.copysign(a, b), np.copysign,
        [(2, 1, 4), (3, 1)], make=nonzero),
    Row("add alpha", lambda a, b: a.add(b, alpha=2.5), lambda a, b: a + 2.5 * b, [A, A]),
    Row("sub alpha function", lambda a, b: ta.sub(a, b, alpha=0.5), lambda a, b: a - 0.5 * b,
        [A, (4,)]),
    Row("std_mean", lambda a: _product(ta.std_mean(a, dim=1)),
        lambda a: np.std(a, axis=1, ddof=1) * np.mean(a, axis=1), [B3]),
    Row("var_mean keepdim", lambda a: _product(a.var_mean((0, 2), correction=0, keepdim=True)),
        lambda a: np.var(a, axis=(0, 2), keepdims=True) * np.mean(a, (0, 2), keepdims=True),
        [B3]),
    Row("scatter_reduce sum", lambda a, i, s: a.scatter_reduce(0, i, s, "sum"),
        lambda a, i, s: _scatter_reduce_numpy(a, 0, i, s, "sum", True), [A, INDEX_3, A]),
    Row("scatter_reduce prod without self",
        lambda a, i, s: ta.scatter_reduce(a, 1, i, s, "prod", include_self=False),
        lambda a, i, s: _scatter_reduce_numpy(a, 1, i, s, "prod", False), [A, INDEX_2D, A]),
    Row("scatter_reduce mean", lambda a, i, s: a.scatter_reduce(1, i, s, "mean"),
        lambda a, i, s: _scatter_reduce_numpy(a, 1, i, s, "mean", True), [A, INDEX_2D, A]),
    Row("scatter_reduce amax", lambda a, i, s: a.scatter_reduce(0, i, s, "amax"),
        lambda a, i, s: _scatter_reduce_numpy(a, 0, i, s, "amax", True), [A, INDEX_3, A],
        make=untied),
    Row("scatter_reduce amin without self",
        lambda a, i, s: a.scatter_reduce(1, i, s, "amin", include_self=False),
        lambda a, i, s: _scatter_reduce_numpy(a, 1, i, s, "amin", False), [A, INDEX_2D, A],
        make=untied),
    Row("scatter reduce add", lambda a, i, s: a.scatter(1, i, s, reduce="add"),
        lambda a, i, s: _scatter_reduce_numpy(a, 1, i, s, "sum", True), [A, INDEX_2D, A]),
    Row("index_put accumulate",
        lambda a, i, v: a.index_put((i, i + 1), v, accumulate=True),
        lambda a, i, v: _index_put_numpy(a, (i, i + 1), v), [A, Const(np.array([0, 2, 0])),
                                                              (3,)]),
    Row("index_put", lambda a, i, v: ta.index_put(a, (i,), v),
        lambda a, i, v: _index_put_numpy(a, (i,), v, accumulate=False),
        [A, Const(np.array([2, 0])), (4,)]),
    Row("unfold", lambda a: a.unfold(1, 2, 1),
        lambda a: np.lib.stride_tricks.sliding_window_view(a, 2, axis=1), [B3]),
    Row("unfold step", lambda a: a.unfold(-1, 2, 2),
        lambda a: np.lib.stride_tricks.sliding_window_view(a, 2, axis=-1)[..., ::2, :], [B3]),
    Row("unflatten", lambda a: a.unflatten(1, (2, -1)), lambda a: a.reshape(3, 2, 2), [A]),
    Row("pad reflect", lambda a: F.pad(a, (2, 1), mode="reflect"),
        lambda a: np.pad(a, ((0, 0), (0, 0), (2, 1)), mode="reflect"), [B3]),
    Row("pad replicate 2 dims", lambda a: ta.pad(a, (1, 2, 2, 1), mode="replicate"),
        lambda a: np.pad(a, ((0, 0), (2, 1), (1, 2)), mode="edge"), [B3]),
    Row("pad circular", lambda a: F.pad(a, (3, 4), mode="circular"),
        lambda a: np.pad(a, ((0, 0), (3, 4)), mode="wrap"), [A]),
    Row("normalize p=3", lambda a: nn_functional.normalize(a, p=3.0, dim=1),
        lambda a: a / (np.abs(a) ** 3).sum(1, keepdims=True) ** (1 / 3), [A], make=nonzero),
    Row("norm p=0.5", lambda a: a.norm(p=0.5, dim=0),
        lambda a: (np.abs(a) ** 0.5).sum(0) ** 2, [A], make=nonzero),
    Row("celu", lambda a: nn_functional.celu(a, alpha=0.7),
        lambda a: np.where(a > 0, a, 0.7 * np.expm1(a / 0.7)), [A], make=distinct),
]
# fmt: on


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _bce_numpy(p: np.ndarray, t: np.ndarray) -> np.ndarray:
    return -(t * np.maximum(np.log(p), -100.0) + (1 - t) * np.maximum(np.log1p(-p), -100.0))


def _ce_numpy(x: np.ndarray, targets: list, ignore: int, s: float, reduction: str) -> np.ndarray:
    """PyTorch's label-smoothed cross entropy of class indices, classes last, written out."""
    logp = x - x.max(-1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
    t = np.asarray(targets)
    kept = t != ignore
    picked = np.take_along_axis(logp, np.where(kept, t, 0)[..., None], -1)[..., 0]
    losses = np.where(kept, -(1 - s) * picked - s * logp.mean(-1), 0.0)
    if reduction == "none":
        return losses
    return np.asarray(losses.sum() / (1 if reduction == "sum" else max(kept.sum(), 1)))


def _weighted_ce_numpy(x: np.ndarray, targets: list, weight: list, s: float) -> np.ndarray:
    """PyTorch's class-weighted, label-smoothed cross entropy ("mean"), written out."""
    logp = (
        x
        - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - x.max(-1, keepdims=True)
    )
    w, total, norm = np.asarray(weight), 0.0, 0.0
    for row, t in enumerate(targets):
        if t == -100:
            continue
        total += (1 - s) * w[t] * -logp[row, t] + s / len(w) * -(w * logp[row]).sum()
        norm += w[t]
    return np.asarray(total / norm)


def _scatter_add_numpy(a: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = a.copy()
    positions = list(np.indices(index.shape))
    positions[dim] = index
    np.add.at(out, tuple(positions), src[tuple(slice(0, n) for n in index.shape)])
    return out


def _index_add_numpy(a: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = np.moveaxis(a.copy(), dim, 0)
    np.add.at(out, index, np.moveaxis(src, dim, 0))
    return np.moveaxis(out, 0, dim)


def _product(pair: tuple) -> Any:
    return pair[0] * pair[1]


def _scatter_reduce_numpy(
    a: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray, reduce: str, include_self: bool
) -> np.ndarray:
    """PyTorch's scatter_reduce, one place at a time."""
    sent: dict = {}
    for position in np.ndindex(*index.shape):
        place = list(position)
        place[dim] = index[position]
        sent.setdefault(tuple(place), []).append(src[position])
    combine = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}
    out = a.copy()
    for place, values in sent.items():
        out[place] = combine[reduce](values + ([a[place]] if include_self else []))
    return out


def _index_put_numpy(a: np.ndarray, key: tuple, values: np.ndarray, accumulate: bool = True):
    out = a.copy()
    if accumulate:
        np.add.at(out, key, values)
    else:
        out[key] = values
    return out


def _scatter_numpy(a: np.ndarray, dim: int, index: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = a.copy()
    np.put_along_axis(out, index, src[tuple(slice(0, n) for n in index.shape)], dim)
    return out


# ------------------------------------------------------------------ rows from the op tables
# Every registered elementwise op (tinyattn/ops/table.py) gets rows here without a hand-written
# line: its method, its free function, its operators and its scalar forms, against the NumPy
# function the table names.
GENERATORS = {"normal": normal, "positive": positive, "distinct": distinct, "nonzero": nonzero,
              "unit": unit, "above_one": above_one, "moderate": moderate}  # fmt: skip


def _unary_rows(spec: table.Unary) -> list[Row]:
    make, reference, name = GENERATORS[spec.domain], getattr(np, spec.reference), spec.name
    return [
        Row(name, lambda a: getattr(a, name)(), reference, [A], make=make),
        Row(f"ta.{name}", lambda a: getattr(ta, name)(a), reference, [B3], make=make),
    ]


def _binary_rows(spec: table.Binary) -> list[Row]:
    make, reference, name = GENERATORS[spec.domain], getattr(np, spec.reference), spec.name
    rows = [
        Row(f"{name} method", lambda a, b: getattr(a, name)(b), reference, [A, A], make=make),
        Row(f"ta.{name} broadcast", lambda a, b: getattr(ta, name)(a, b), reference,
            [(2, 1, 4), (3, 1)], make=make),
    ]  # fmt: skip
    if spec.dunder:
        op = getattr(operator, spec.dunder)
        rows.append(Row(f"{name} operator", op, reference, [A, (4,)], make=make))
        rows.append(
            Row(f"{name} operator scalar", lambda a: op(a, 1.5), lambda a: reference(a, 1.5), [A],
                make=make)
        )  # fmt: skip
        rows.append(
            Row(f"{name} reflected scalar", lambda a: op(1.5, a), lambda a: reference(1.5, a),
                [A], make=make)
        )  # fmt: skip
    return rows


TABLE_ROWS = [row for spec in table.UNARY if spec.reference for row in _unary_rows(spec)]
TABLE_ROWS += [row for spec in table.BINARY if spec.differentiable for row in _binary_rows(spec)]
ROWS = ROWS + TABLE_ROWS


# --------------------------------------------------------- convolution, pooling, batch norm
# References in tests/conv_reference.py: loops over output positions, one window at a time.
C = conv_reference
# max_pool2d(kernel 2, stride 1)'s indices into a 3x3 plane, all distinct: where two windows
# choose one place, each value written there gets its gradient (PyTorch's rule, compared with torch
# in test_conv.py), which a finite difference of the last write cannot see.
UNPOOL_INDEX = Const(np.array([[[[4, 2], [3, 8]], [[0, 5], [7, 8]]]], np.int64))
RUNNING = [Const(np.array([0.5, -1.0], np.float32)), Const(np.array([2.0, 0.5], np.float32))]
# fmt: off
CONV_ROWS = [
    Row("conv1d stride padding", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
        lambda x, w, b: C.conv(x, w, b, stride=2, padding=1), [(2, 2, 5), (3, 2, 2), (3,)]),
    Row("conv2d groups dilation", lambda x, w: F.conv2d(x, w, padding=(1, 0), dilation=(1, 2),
        groups=2), lambda x, w: C.conv(x, w, padding=(1, 0), dilation=(1, 2), groups=2),
        [(1, 2, 3, 4), (2, 1, 2, 2)]),
    Row("conv2d same stride 1", lambda x, w: F.conv2d(x, w, padding="same"),
        lambda x, w: C.conv(x, w, padding="same"), [(1, 1, 3, 4), (2, 1, 2, 3)]),
    Row("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1,
        output_padding=1, groups=2), lambda x, w, b: C.conv_transpose(x, w, b, stride=2,
        padding=1, output_padding=1, groups=2), [(1, 2, 2, 3), (2, 1, 2, 2), (2,)]),
    Row("conv_transpose1d dilation", lambda x, w: F.conv_transpose1d(x, w, stride=2, dilation=2),
        lambda x, w: C.conv_transpose(x, w, stride=2, dilation=2), [(2, 1, 3), (1, 2, 2)]),
    Row("max_pool2d ceil_mode", lambda x: F.max_pool2d(x, 2, padding=1, ceil_mode=True),
        lambda x: C.max_pool(x, 2, padding=1, ceil_mode=True), [(1, 2, 4, 3)], make=untied),
    Row("max_pool1d dilation", lambda x: F.max_pool1d(x, 2, stride=1, dilation=2),
        lambda x: C.max_pool(x, 2, stride=1, dilation=2), [(2, 2, 5)], make=untied),
    Row("avg_pool2d ceil, padding not counted", lambda x: F.avg_pool2d(x, 2, padding=1,
        ceil_mode=True, count_include_pad=False), lambda x: C.avg_pool(x, 2, padding=1,
        ceil_mode=True, count_include_pad=False), [(1, 2, 4, 3)]),
    Row("avg_pool1d", lambda x: F.avg_pool1d(x, 3, stride=2, padding=1),
        lambda x: C.avg_pool(x, 3, stride=2, padding=1), [(2, 2, 6)]),
    Row("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 3)),
        lambda x: C.adaptive_avg_pool(x, (2, 3)), [(1, 2, 5, 4)]),
    Row("conv3d stride padding groups", lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1),
        padding=(1, 0, 1), groups=2), lambda x, w, b: C.conv(x, w, b, stride=(1, 2, 1),
        padding=(1, 0, 1), groups=2), [(1, 2, 3, 4, 2), (2, 1, 2, 2, 2), (2,)]),
    Row("conv_transpose3d", lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=(1, 0, 0),
        output_padding=(0, 1, 0)), lambda x, w: C.conv_transpose(x, w, stride=2,
        padding=(1, 0, 0), output_padding=(0, 1, 0)), [(1, 1, 2, 2, 2), (1, 2, 2, 1, 2)]),
    Row("max_pool3d ceil_mode", lambda x: F.max_pool3d(x, 2, padding=(1, 0, 1), ceil_mode=True),
        lambda x: C.max_pool(x, 2, padding=(1, 0, 1), ceil_mode=True), [(1, 1, 3, 4, 3)],
        make=untied),
    Row("avg_pool3d padding not counted", lambda x: F.avg_pool3d(x, 2, stride=1, padding=1,
        count_include_pad=False), lambda x: C.avg_pool(x, 2, stride=1, padding=1,
        count_include_pad=False), [(1, 1, 2, 3, 2)]),
    Row("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (2, 1, 3)),
        lambda x: C.adaptive_avg_pool(x, (2, 1, 3)), [(1, 2, 3, 2, 4)]),
    Row("max_unpool2d", lambda v, i: F.max_unpool2d(v, i, 2, stride=1),
        lambda v, i: C.max_unpool(v, i, (3, 3)), [(1, 2, 2, 2), UNPOOL_INDEX]),
    Row("unfold", lambda x: F.unfold(x, 2, padding=1, stride=2),
        lambda x: C.unfold(x, 2, padding=1, stride=2), [(1, 2, 4, 3)]),
    Row("fold", lambda c: F.fold(c, (3, 5), 2, stride=(1, 2)),
        lambda c: C.fold(c, (3, 5), 2, stride=(1, 2)), [(1, 8, 4)]),
    Row("batch_norm training", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        C.batch_norm, [(3, 2, 2), (2,), (2,)]),
    Row("batch_norm eval", lambda x, w, m, v: F.batch_norm(x, m, v, w),
        lambda x, w, m, v: (x - m[:, None]) / np.sqrt(v[:, None] + 1e-5) * w[:, None],
        [(3, 2, 2), (2,), *RUNNING]),
]
# fmt: on
ROWS = ROWS + CONV_ROWS


def _reference(row: Row) -> Callable:
    return row.reference if row.reference is not None else row.call


def _host_inputs(row: Row, seed: int = 0) -> list[np.ndarray]:
    shapes = [spec for spec in row.inputs if not isinstance(spec, Const)]
    drawn = iter(row.make(np.random.default_rng(seed), shapes))
    return [spec.array() if isinstance(spec, Const) else next(drawn) for spec in row.inputs]


def _device_inputs(row: Row, host: list[np.ndarray], device: str, dtype: str = "float64"):
    return [
        ta.tensor(array, device=device)
        if isinstance(spec, Const)
        else ta.tensor(array, dtype=dtype, device=device, requires_grad=True)
        for spec, array in zip(row.inputs, host, strict=True)
    ]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_forward_matches_numpy(device, row):
    host = _host_inputs(row)
    out = row.call(*_device_inputs(row, host, device))
    expected = np.asarray(_reference(row)(*host))
    assert out.shape == expected.shape
    assert dtype_name(out.dtype) == expected.dtype.name
    assert out.device == ta.tensor(0.0, device=device).device
    assert out.requires_grad
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_forward_keeps_float32(device, row):
    """float32 inputs (and Python scalars) give float32 results, close to the float64 values."""
    host = _host_inputs(row)
    out = row.call(*_device_inputs(row, host, device, dtype="float32"))
    expected = np.asarray(_reference(row)(*host))
    if not row.casts:
        assert dtype_name(out.dtype) == "float32"
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-5, atol=1e-5)


def untied_tensors(shape: tuple, device: str) -> st.SearchStrategy:
    """Tensors of `shape` whose values are distinct multiples of 1/8 in [-10, 10]: no two are
    within a finite-difference step of a tie, and every value is exact in float32 too."""
    size = math.prod(shape)
    grid = st.lists(st.integers(-80, 80), min_size=size, max_size=size, unique=True)
    return grid.map(
        lambda ks: ta.tensor([k / 8 for k in ks], dtype="float64", device=device).reshape(shape)
    )


# The domain the gradient check draws each input's values from, by the row's generator: the
# elements of `tensors`, or a function (shape, device) -> tensor strategy.
DOMAINS = {
    normal: (-10.0, 10.0),
    positive: (0.1, 10.0),
    distinct: (-10.0, 10.0),  # kinks and ties included: the checker accepts subgradients there
    nonzero: st.floats(-10.0, -0.1) | st.floats(0.1, 10.0),
    untied: untied_tensors,
    tails: st.floats(-40.0, -15.0) | st.floats(15.0, 40.0),
    with_zeros: st.just(0.0) | st.floats(-3.0, 3.0),
    unit: (-0.9, 0.9),
    above_one: (1.1, 10.0),
    moderate: (-1.3, 1.3),
}


# The numerics are the same on every backend: other backends check that the rules run there
# (on one example); the numpy backend takes the Hypothesis profile's count (conftest.py).
OTHER_BACKEND_EXAMPLES = 1


def check_row_gradients(row: Row, device: str, forward: bool = False) -> None:
    """`check_grads` over the row's domain: float64 and float32, second order if `twice`; with
    `forward`, the jvp rules instead (against finite differences and the backward rules)."""
    examples = settings.default.max_examples if device == "cpu" else OTHER_BACKEND_EXAMPLES
    domain = DOMAINS[row.make]
    strategies = [
        st.just(ta.tensor(spec.array(), device=device))
        if isinstance(spec, Const)
        else domain(spec, device)
        if callable(domain)
        else tensors(spec, elements=domain, device=device)
        for spec in row.inputs
    ]
    if forward:
        options = {"check_forward_ad": True, "check_backward_ad": False}
    else:
        options = {"order": 2 if row.twice else 1}
    check_grads(row.call, *strategies, max_examples=examples, **options, **row.check)


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_gradients(device, row):
    check_row_gradients(row, device)


# Forward mode: every row's jvp rules, checked as its backward rules are. The Functions whose
# jvp rule is not written yet are listed; a row that runs one of them is an expected failure.
# Writing a Function's jvp rule removes it from this list (the test below holds it exact).
NO_JVP_YET: set[str] = set()  # every Function has its rule now
# Functions with no derivative at all (their outputs are indices, masks or counts, or, like
# PyTorch's floor_divide, they refuse differentiation): forward mode needs no rule from them.
NEEDS_NO_JVP = {"Computed", "ClassWeights", "KeptCount", "FloorDivide"}


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_forward_mode(device, row):
    """J v by the jvp rules against finite differences and against the backward rules."""
    out = row.call(*_device_inputs(row, _host_inputs(row), "cpu"))
    missing = _functions_in_graph(out) & NO_JVP_YET
    if missing:
        pytest.xfail(f"no JVP rule yet: {', '.join(sorted(missing))}")
    check_row_gradients(row, device, forward=True)


def test_the_list_of_functions_without_a_jvp_rule_is_exact():
    import inspect

    from tinyattn.autograd import Function

    functions = {
        name: c
        for name, c in vars(ops).items()
        if inspect.isclass(c) and issubclass(c, Function) and c is not Function
    }
    for row in ROWS:  # and those the rows run that the ops namespace does not name
        functions |= _function_classes(row.call(*_device_inputs(row, _host_inputs(row), "cpu")))
    without = {name for name, c in functions.items() if c.jvp is Function.jvp}
    assert NO_JVP_YET - without == set(), "these have a jvp rule now: remove them from NO_JVP_YET"
    assert without - NO_JVP_YET - NEEDS_NO_JVP == set(), "a new Function without a jvp rule"


# ------------------------------------------------------------------------------------- ties
# max/min split the gradient evenly between tied extremes (docs/autograd.md): hand-computed.
TIES = [
    # (name, call, input, expected gradient of out.sum())
    (
        "amax axis",
        lambda x: x.amax(axis=1),
        [[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]],
        [[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]],
    ),
    ("max all", lambda x: x.max(), [[1.0, 3.0], [3.0, 0.0]], [[0.0, 0.5], [0.5, 0.0]]),
    (
        "amax axes tuple",
        lambda x: x.amax(axis=(1, 2)),
        [[[4.0, 4.0], [4.0, 1.0]], [[0.0, 4.0], [2.0, 3.0]]],
        [[[1 / 3, 1 / 3], [1 / 3, 0.0]], [[0.0, 1.0], [0.0, 0.0]]],
    ),
    (
        "amin axis keepdims",
        lambda x: x.amin(axis=0, keepdims=True),
        [[-1.0, 5.0], [-1.0, 6.0]],
        [[0.5, 1.0], [0.5, 0.0]],
    ),
    ("min all", lambda x: x.min(), [2.0, -4.0, -4.0, -4.0], [0.0, 1 / 3, 1 / 3, 1 / 3]),
    (
        "maximum",
        lambda x: ta.maximum(x, ta.tensor([1.0, 0.0, 2.0], dtype="float64", device=x.device)),
        [1.0, 1.0, 2.0],
        [0.5, 1.0, 0.5],
    ),
]


@pytest.mark.parametrize("name,call,values,expected", TIES, ids=[t[0] for t in TIES])
def test_ties_split_the_gradient_evenly(device, name, call, values, expected):
    x = ta.tensor(values, dtype="float64", device=device, requires_grad=True)
    call(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.array(expected), rtol=1e-15)


def test_maximum_tie_gives_each_side_half(device):
    a = ta.tensor([2.0, 1.0], dtype="float64", device=device, requires_grad=True)
    b = ta.tensor([2.0, 0.0], dtype="float64", device=device, requires_grad=True)
    ta.maximum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 0.0])


@pytest.mark.parametrize(
    "spec", [s for s in table.BINARY if not s.differentiable], ids=lambda spec: spec.name
)
def test_non_differentiable_binary_op_matches_numpy_and_refuses_backward(device, spec):
    rng = np.random.default_rng(0)
    a_host, b_host = rng.uniform(-3.0, 3.0, (3, 4)), rng.uniform(0.5, 2.0, (4,))
    a = ta.tensor(a_host, dtype="float64", device=device, requires_grad=True)
    b = ta.tensor(b_host, dtype="float64", device=device)
    reference = getattr(np, spec.reference)
    np.testing.assert_array_equal(
        getattr(a, spec.name)(b).detach().numpy(), reference(a_host, b_host)
    )
    op = getattr(operator, spec.dunder)
    np.testing.assert_array_equal(op(a, 1.5).detach().numpy(), reference(a_host, 1.5))
    np.testing.assert_array_equal(op(4, b).numpy(), reference(4, b_host))
    with pytest.raises(RuntimeError, match=spec.name):
        op(a, b).sum().backward()


@pytest.mark.parametrize("spec", table.LOGICAL, ids=lambda spec: spec.name)
def test_logical_table(device, spec):
    """Every comparison and bitwise entry: method, operator, free function, against NumPy."""
    rng = np.random.default_rng(1)
    if spec.integral == "int":  # shifts: integers only
        a_host, b_host = rng.integers(-8, 8, (3, 4)), rng.integers(0, 4, (4,))
    elif spec.integral:
        a_host, b_host = rng.integers(0, 2, (3, 4)) > 0, rng.integers(0, 2, (4,)) > 0
    else:
        a_host, b_host = rng.integers(0, 3, (3, 4)) * 0.5, rng.integers(0, 3, (4,)) * 0.5
    a, b = ta.tensor(a_host, device=device), ta.tensor(b_host, device=device)
    expected = getattr(np, spec.reference)(a_host, b_host)
    results = [getattr(a, spec.name)(b), getattr(ta, spec.name)(a, b)]
    if spec.dunder:
        op = getattr(operator, spec.dunder + "_", None) or getattr(operator, spec.dunder)
        results.append(op(a, b))
    for out in results:
        assert dtype_name(out.dtype) == dtype_name(expected.dtype) and not out.requires_grad
        np.testing.assert_array_equal(out.numpy(), expected)


def test_bitwise_ops_refuse_floats(device):
    x = ta.ones(2, device=device)
    with pytest.raises(TypeError, match="bitwise_and: expected a bool or integer tensor"):
        _ = x & x
    with pytest.raises(TypeError, match="bitwise_not: expected a bool or integer tensor"):
        _ = ~x
    flags = ta.ones(2, dtype="bool", device=device)
    with pytest.raises(TypeError, match="bitwise_left_shift: expected an integer tensor"):
        _ = flags << flags


def test_invert_and_integer_bitwise_ops(device):
    mask = ta.tensor([True, False, True], device=device)
    np.testing.assert_array_equal((~mask).numpy(), [False, True, False])
    np.testing.assert_array_equal((mask | ~mask).numpy(), [True] * 3)
    ints = ta.tensor([6, 3], device=device)
    np.testing.assert_array_equal((ints & 5).numpy(), [4, 1])
    np.testing.assert_array_equal((5 ^ ints).numpy(), [3, 6])


# ------------------------------------------------------------------------------- comparisons
COMPARISONS = [
    ("lt", lambda a, b: a < b),
    ("le", lambda a, b: a <= b),
    ("gt", lambda a, b: a > b),
    ("ge", lambda a, b: a >= b),
    ("lt scalar", lambda a, b: a < 0.5),
    ("ge scalar", lambda a, b: a >= 0.5),
    ("gt reflected scalar", lambda a, b: 0.5 > a),
    ("eq", lambda a, b: a == b),
    ("ne scalar", lambda a, b: a != 0.5),
    ("eq method", lambda a, b: a.eq(b) if isinstance(a, ta.Tensor) else a == b),
]


@pytest.mark.parametrize("name,call", COMPARISONS, ids=[c[0] for c in COMPARISONS])
def test_comparison_gives_bool_without_grad(device, name, call):
    rng = np.random.default_rng(0)
    a_host = rng.integers(0, 3, (3, 4)).astype(np.float64) * 0.5  # values repeat: ties exist
    b_host = rng.integers(0, 3, (4,)).astype(np.float64) * 0.5  # broadcasts against (3, 4)
    a = ta.tensor(a_host, device=device, requires_grad=True)
    b = ta.tensor(b_host, device=device, requires_grad=True)
    out = call(a, b)
    expected = call(a_host, b_host)
    assert dtype_name(out.dtype) == "bool"
    assert not out.requires_grad and out.is_leaf
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)


# --------------------------------------------------------------------------------- factories
def _seeded(kind: str, shape: tuple) -> np.ndarray:
    rng = np.random.default_rng(7)
    draw = rng.standard_normal(shape) if kind == "normal" else rng.random(shape)
    return draw.astype(np.float32)


FACTORIES = [
    # (name, call(device), expected values, expected dtype)
    ("tensor floats", lambda d: ta.tensor([[1.0, 2.5]], device=d), [[1.0, 2.5]], "float32"),
    ("tensor ints", lambda d: ta.tensor([1, 2, 3], device=d), [1, 2, 3], "int64"),
    ("tensor bools", lambda d: ta.tensor([True, False], device=d), [True, False], "bool"),
    ("tensor scalar", lambda d: ta.tensor(1.5, device=d), 1.5, "float32"),
    ("tensor dtype", lambda d: ta.tensor([1, 2], dtype="float64", device=d), [1.0, 2.0], "float64"),
    (
        "tensor ndarray keeps dtype",
        lambda d: ta.tensor(np.arange(3.0), device=d),
        [0.0, 1.0, 2.0],
        "float64",
    ),
    ("zeros", lambda d: ta.zeros(2, 3, device=d), np.zeros((2, 3)), "float32"),
    (
        "zeros tuple",
        lambda d: ta.zeros((2, 3), dtype="float64", device=d),
        np.zeros((2, 3)),
        "float64",
    ),
    ("ones", lambda d: ta.ones(3, device=d), np.ones(3), "float32"),
    ("full", lambda d: ta.full((2, 2), 1.5, device=d), np.full((2, 2), 1.5), "float32"),
    ("arange int", lambda d: ta.arange(4, device=d), [0, 1, 2, 3], "int64"),
    (
        "arange float",
        lambda d: ta.arange(0.0, 1.0, 0.25, device=d),
        [0.0, 0.25, 0.5, 0.75],
        "float32",
    ),
    ("arange start stop", lambda d: ta.arange(2, 5, device=d), [2, 3, 4], "int64"),
    (
        "zeros_like",
        lambda d: ta.zeros_like(ta.ones(2, 3, dtype="float64", device=d)),
        np.zeros((2, 3)),
        "float64",
    ),
    ("ones_like", lambda d: ta.ones_like(ta.zeros(2, device=d)), np.ones(2), "float32"),
    (
        "ones_like dtype",
        lambda d: ta.ones_like(ta.zeros(2, device=d), dtype="float64"),
        np.ones(2),
        "float64",
    ),
    (
        "from_numpy",
        lambda d: ta.from_numpy(np.array([1, 2], dtype=np.int32), device=d),
        [1, 2],
        "int32",
    ),
    (
        "randn",
        lambda d: (ta.manual_seed(7), ta.randn(2, 3, device=d))[1],
        _seeded("normal", (2, 3)),
        "float32",
    ),
    (
        "rand",
        lambda d: (ta.manual_seed(7), ta.rand((3,), device=d))[1],
        _seeded("uniform", (3,)),
        "float32",
    ),
]


@pytest.mark.parametrize("name,call,expected,dtype", FACTORIES, ids=[f[0] for f in FACTORIES])
def test_factory(device, name, call, expected, dtype):
    out = call(device)
    expected = np.asarray(expected)
    assert out.device == ta.tensor(0.0, device=device).device
    assert dtype_name(out.dtype) == dtype
    assert out.shape == expected.shape
    assert out.is_leaf and not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), expected.astype(dtype))


REQUIRES_GRAD_FACTORIES = [
    ("tensor", lambda d: ta.tensor([1.0], device=d, requires_grad=True)),
    ("zeros", lambda d: ta.zeros(2, device=d, requires_grad=True)),
    ("ones", lambda d: ta.ones(2, device=d, requires_grad=True)),
    ("full", lambda d: ta.full(2, 3.0, device=d, requires_grad=True)),
    ("randn", lambda d: ta.randn(2, device=d, requires_grad=True)),
    ("rand", lambda d: ta.rand(2, device=d, requires_grad=True)),
    ("zeros_like", lambda d: ta.zeros_like(ta.ones(2, device=d), requires_grad=True)),
    ("ones_like", lambda d: ta.ones_like(ta.ones(2, device=d), requires_grad=True)),
    ("from_numpy", lambda d: ta.from_numpy(np.ones(2), device=d, requires_grad=True)),
]


@pytest.mark.parametrize(
    "name,call", REQUIRES_GRAD_FACTORIES, ids=[f[0] for f in REQUIRES_GRAD_FACTORIES]
)
def test_factory_requires_grad_makes_a_leaf_parameter(device, name, call):
    out = call(device)
    assert out.requires_grad and out.is_leaf
    (out * 2.0).sum().backward()
    np.testing.assert_array_equal(out.grad.numpy(), np.full(out.shape, 2.0))


def test_randn_is_reproducible_and_identical_across_devices(device):
    ta.manual_seed(3)
    first = ta.randn(4, 5, device=device).numpy()
    ta.manual_seed(3)
    on_host = ta.randn(4, 5).numpy()
    np.testing.assert_array_equal(first, on_host)
    assert not np.array_equal(first, ta.randn(4, 5, device=device).numpy())


# --------------------------------------------------------------------------------- promotion
PROMOTIONS = [
    # (name, call(device), expected values, expected dtype)
    ("int / int", lambda d: ta.arange(3, device=d) / ta.tensor([2, 2, 4], device=d),
     [0.0, 0.5, 0.5], "float32"),
    ("int / Python int", lambda d: ta.arange(3, device=d) / 2, [0.0, 0.5, 1.0], "float32"),
    ("Python int / int", lambda d: 1 / ta.arange(1, 3, device=d), [1.0, 0.5], "float32"),
    ("int * Python float", lambda d: ta.arange(3, device=d) * 2.5, [0.0, 2.5, 5.0], "float32"),
    ("int + int", lambda d: ta.arange(3, device=d) + 1, [1, 2, 3], "int64"),
    ("int ** Python int", lambda d: ta.arange(3, device=d) ** 2, [0, 1, 4], "int64"),
    ("float64 + int", lambda d: ta.ones(2, dtype="float64", device=d) + ta.arange(2, device=d),
     [1.0, 2.0], "float64"),
    ("float32 * float64", lambda d: ta.ones(2, device=d) * ta.full(2, 3.0, dtype="float64",
                                                                      device=d),
     [3.0, 3.0], "float64"),
    ("float32 * Python float", lambda d: ta.ones(2, device=d) * 0.5, [0.5, 0.5], "float32"),
]  # fmt: skip


@pytest.mark.parametrize("name,call,expected,dtype", PROMOTIONS, ids=[p[0] for p in PROMOTIONS])
def test_dtype_promotion(device, name, call, expected, dtype):
    out = call(device)
    assert dtype_name(out.dtype) == dtype
    np.testing.assert_array_equal(out.numpy(), np.array(expected, dtype=dtype))


def test_computed_results_are_ops_without_a_gradient(device):
    """Comparisons, ~, argmax and the like run as `Computed` ops on detached inputs: no graph,
    no gradient, the same values as the array code."""
    from tinyattn.ops import Computed

    x = ta.tensor(np.array([[0.5, -1.0, 2.0], [3.0, 0.0, -2.0]]), device=device)
    x.requires_grad_(True)
    for result, expected in (
        (x > 0, np.array([[True, False, True], [True, False, False]])),
        (~(x > 0), np.array([[False, True, False], [False, True, True]])),
        (x.argmax(-1), np.array([2, 0])),
        ((x > 0).any(-1), np.array([True, True])),
    ):
        assert result.grad_fn is None and not result.requires_grad
        np.testing.assert_array_equal(result.numpy(), expected)
    made = Computed.apply(x.detach(), function=lambda xp, a: a > 0)
    assert isinstance(made, ta.Tensor) and made.grad_fn is None
    fn = Computed.__new__(Computed)
    fn.inputs = (x.detach(),)
    assert fn.backward(ta.ones(2, 3, device=device)) == (None,)


# Functions that no row above runs, each with the reason and where it is checked instead.
NOT_IN_THE_TABLE = {
    "Computed": "no gradient: comparisons, masks and indices (test_computed_results_...)",
    "ClassWeights": "no gradient: cross-entropy's per-target weights (tests/test_functional.py)",
    "KeptCount": "no gradient: the count of kept targets (tests/test_functional.py)",
    "FloorDivide": "no derivative, as in PyTorch: backward raises (tests/test_pytorch_names.py)",
    "BlockwiseAttention": "gradchecked against the plain path in tests/test_attention_blockwise.py",
    "OnceDifferentiable": "the first-order wrapper of BlockwiseAttention, checked with it",
    "DiagonalEmbed": "the adjoint of Diagonal: its backward, run by the diagonal rows' gradchecks",
}


def _function_classes(out: Any) -> dict[str, type]:
    """The Function classes in the graph behind `out`, by name."""
    found, stack, done = {}, list(out if isinstance(out, tuple) else (out,)), set()
    while stack:
        fn = getattr(stack.pop(), "_ctx", None)
        if fn is not None and id(fn) not in done:
            done.add(id(fn))
            found[type(fn).__name__] = type(fn)
            stack.extend(fn.inputs)
    return found


def _functions_in_graph(out: Any) -> set[str]:
    return set(_function_classes(out))


def test_every_function_is_run_by_a_row_of_the_table():
    """Each Function in tinyattn.ops is in the graph of at least one row above (so its backward is
    gradchecked on every backend), or listed in NOT_IN_THE_TABLE with the reason."""
    import inspect

    from tinyattn import ops
    from tinyattn.autograd import Function

    functions = {
        name
        for name, c in vars(ops).items()
        if inspect.isclass(c) and issubclass(c, Function) and c is not Function
    }
    seen = set()
    for row in ROWS:
        seen |= _functions_in_graph(row.call(*_device_inputs(row, _host_inputs(row), "cpu")))
    assert functions - seen - set(NOT_IN_THE_TABLE) == set()
    assert set(NOT_IN_THE_TABLE) <= functions - seen, "a listed Function is run by a row now"


def test_composed_spellings_match_numpy(device):
    """PyTorch's spellings built from other calls (their PyTorch parity, gradients included, is
    in tests/test_pytorch_names.py), against NumPy, without torch."""
    host = np.array([[3.0, -1.0, 2.0, 0.5], [0.0, 5.0, -2.0, 1.0]])
    x = ta.tensor(host, device=device)
    values, indices = x.sort(dim=1, descending=True)
    np.testing.assert_array_equal(values.numpy(), -np.sort(-host, axis=1))
    np.testing.assert_array_equal(indices.numpy(), np.argsort(-host, axis=1, kind="stable"))
    np.testing.assert_array_equal(x.argsort(dim=0).numpy(), np.argsort(host, axis=0))
    np.testing.assert_array_equal(x.roll(3, 1).numpy(), np.roll(host, 3, axis=1))
    np.testing.assert_array_equal(x.roll(-3).numpy(), np.roll(host, -3))
    np.testing.assert_array_equal(x.roll((1, 2), (0, 1)).numpy(), np.roll(host, (1, 2), (0, 1)))
    other = host + np.array([[1e-9, 1.0, 0.0, np.inf], [0.0, 0.0, np.nan, 1e-3]])
    for kwargs in ({}, {"atol": 1e-2}, {"rtol": 0.5, "atol": 0.0}):
        expected = np.isclose(host, other, **kwargs)
        got = ta.isclose(x, ta.tensor(other, device=device), **kwargs).numpy()
        np.testing.assert_array_equal(got, expected, err_msg=str(kwargs))
    assert ta.allclose(x, x) and not x.allclose(ta.tensor(other, device=device))
    np.testing.assert_array_equal(x.t().numpy(), host.T)
    np.testing.assert_allclose(x.mm(x.t()).numpy(), host @ host.T)
    np.testing.assert_allclose(ta.outer(x[0], x[1]).numpy(), np.outer(host[0], host[1]))
    np.testing.assert_array_equal(x.index_select(1, ta.tensor([3, 0], device=device)).numpy(),
                                  host[:, [3, 0]])  # fmt: skip
    np.testing.assert_array_equal(ta.linspace(-1, 2, 7, device=device).numpy(),
                                  np.linspace(-1, 2, 7, dtype=np.float32))  # fmt: skip


def test_the_norm_of_zeros_has_a_zero_gradient(device):
    """At a zero norm x / |x| is 0 / 0; the gradient is 0 there, as in PyTorch, not NaN, and a
    slice that is not zero keeps its own gradient."""
    x = ta.tensor(np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]]), device=device)
    x.requires_grad_(True)
    x.norm(dim=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 0.0, 0.0], [0.6, 0.0, 0.8]])
    whole = ta.zeros(4, dtype="float64", device=device).requires_grad_(True)
    whole.norm().backward()
    np.testing.assert_array_equal(whole.grad.numpy(), np.zeros(4))
    with pytest.raises(ValueError, match="norm: p='nuc' is not supported"):
        x.norm("nuc")
