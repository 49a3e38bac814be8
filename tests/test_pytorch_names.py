"""PyTorch's names mean PyTorch's things: the same program text runs on tinyattn and on torch.

Each case is one expression written once, ``call(lib, *tensors)``, and run twice: with
``lib = tinyattn`` on the backend under test and with ``lib = torch``, on the same float64 values
(and the same integer or bool constants). The results must agree in value, dtype and shape
(named tuples field by field, Python values exactly), and every float input's gradient of
``sum(out * cotangent)`` must agree too, so a method with the right forward and a wrong gradient
convention (max(dim) giving the gradient to the index, floor giving zeros) fails. Skipped
cleanly without torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tinyattn as ta  # noqa: E402  (after the skip)
from tinyattn.backend import dtype_name  # noqa: E402

TOL = {"rtol": 1e-10, "atol": 1e-12}


@dataclass(frozen=True)
class Const:
    """An input that is not differentiated: an integer index or a bool mask."""

    value: object


@dataclass
class Case:
    name: str
    call: Callable  # (lib, *tensors) -> tensor, tuple of tensors, or a Python value
    inputs: list  # shapes of float64 inputs that require grad, or Const
    distinct: bool = False  # values all distinct and away from 0 (no ties at max, sort, floor)


def _pad(lib):
    return lib.nn.functional.pad if lib is torch else lib.pad


SPREAD = [[0, 2, 0, 1], [2, 2, 1, 0]]  # scatter_add along dim 0: repeated places add up
REPEATS = [[3, 3], [0, 1], [1, 1]]  # along dim 1


def _ix(lib, like, data):
    """An int64 index tensor on `like`'s device."""
    return lib.tensor(data, device=like.device)


MASK = Const(np.array([[True, False, True, True], [False, False, False, False], [True] * 4]))
ROW_MASK = Const(np.array([True, False, True]))
INDEX = Const(np.array([[0, 3], [1, 1], [2, 0]]))
UNIQUE = Const(np.array([[0, 3], [1, 2], [2, 0]]))  # scatter: each row writes distinct places
A, B3 = (3, 4), (2, 3, 4)

# fmt: off
CASES = [
    # ----------------------------------------------------------------- meanings that changed
    Case("transpose two dims",  lambda t, x: x.transpose(0, 1), [A]),
    Case("transpose 3-d",       lambda t, x: x.transpose(-1, 0), [B3]),
    Case("T of a matrix",       lambda t, x: x.T, [A]),
    Case("max dim",             lambda t, x: x.max(1), [B3], distinct=True),
    Case("max dim keepdim",     lambda t, x: x.max(dim=-1, keepdim=True), [B3], distinct=True),
    Case("max dim ties",        lambda t, x: (x * 0.0 + 1.0).max(0), [A]),
    Case("min dim",             lambda t, x: t.min(x, 0), [A], distinct=True),
    Case("max all",             lambda t, x: x.max(), [A], distinct=True),
    Case("max of two tensors",  lambda t, x, y: t.max(x, y), [A, A], distinct=True),
    Case("min of two tensors",  lambda t, x, y: x.min(y), [A, (4,)], distinct=True),
    Case("amax dims",           lambda t, x: x.amax(dim=(0, 2)), [B3], distinct=True),
    Case("eq",                  lambda t, x: x == x[0], [A]),
    Case("ne scalar",           lambda t, x: (x * 0.0).floor() != 0.0, [A]),
    Case("size",                lambda t, x: tuple(x.size()), [B3]),
    Case("size dim",            lambda t, x: x.size(-1), [B3]),
    Case("numel and dim",       lambda t, x: (x.numel(), x.dim(), t.numel(x)), [B3]),
    # --------------------------------------------------------------------------------- shape
    Case("view -1",             lambda t, x: x.view(-1, 4), [B3]),
    Case("view varargs",        lambda t, x: x.view(4, 6), [B3]),
    Case("reshape tuple",       lambda t, x: x.reshape((3, -1)), [B3]),
    Case("flatten",             lambda t, x: x.flatten(1), [B3]),
    Case("split size",          lambda t, x: x.split(3, dim=1), [(2, 7)]),
    Case("split sections",      lambda t, x: x.split([1, 3], 1), [A]),
    Case("chunk",               lambda t, x: x.chunk(3, -1), [(2, 7)]),
    Case("chunk fewer",         lambda t, x: x.chunk(4, 0), [(6, 2)]),
    Case("contiguous",          lambda t, x: x.transpose(0, 1).contiguous().view(-1), [A]),
    Case("repeat",              lambda t, x: x.repeat(2, 1, 3), [A]),
    Case("flip",                lambda t, x: x.flip(0, -1), [B3]),
    Case("flip list",           lambda t, x: t.flip(x, [1]), [A]),
    Case("expand -1",           lambda t, x: x.expand(2, -1, 4), [(3, 1)]),
    Case("unsqueeze squeeze",   lambda t, x: x.unsqueeze(1).squeeze(dim=1), [A]),
    Case("tril",                lambda t, x: t.tril(x), [B3]),
    Case("triu diagonal",       lambda t, x: t.triu(x, diagonal=1), [(4, 5)]),
    Case("tril method",         lambda t, x: x.tril(-1), [A]),
    Case("cat",                 lambda t, x, y: t.cat([x, y], dim=1), [(2, 3), (2, 1)]),
    Case("cat negative dim",    lambda t, x, y: t.cat((x, y), -1), [B3, (2, 3, 2)]),
    Case("pad",                 lambda t, x: _pad(t)(x, (1, 2)), [B3]),
    Case("pad two dims value",  lambda t, x: _pad(t)(x, (0, 1, 2, 0), value=-1.0), [A]),
    Case("pad crops",           lambda t, x: _pad(t)(x, (-1, 1)), [A]),
    # -------------------------------------------------------------------------------- values
    Case("clone",               lambda t, x: x.clone() * 2.0, [A]),
    Case("masked_fill",         lambda t, x, m: x.masked_fill(m, -1e9), [A, MASK]),
    Case("masked_fill row",     lambda t, x, m: x.masked_fill(m[:, None], 0.0), [A, ROW_MASK]),
    Case("where method",        lambda t, x, y, m: x.where(m, y), [A, A, MASK]),
    Case("where method number", lambda t, x, m: x.where(m[:, None], 0.5), [A, ROW_MASK]),
    Case("type long",           lambda t, x: x.type(t.long), [A]),
    Case("type_as",             lambda t, x, i: i.type_as(x), [A, INDEX]),
    Case("long float bool int", lambda t, x: (x.long(), x.int(), x.bool(), x.long().float()),
         [A]),
    Case("double",              lambda t, x: x.float().double(), [A]),
    Case("tolist",              lambda t, x: (x * 4.0).round().tolist(), [A]),
    # ---------------------------------------------------------------------------- reductions
    Case("std",                 lambda t, x: x.std(), [A]),
    Case("std dim keepdim",     lambda t, x: x.std(dim=1, keepdim=True), [B3]),
    Case("std dim unbiased",    lambda t, x: x.std(0, False), [A]),
    Case("std correction",      lambda t, x: x.std(dim=-1, correction=0), [B3]),
    Case("sum dim keepdim",     lambda t, x: x.sum(dim=(0, 2), keepdim=True), [B3]),
    Case("mean dim",            lambda t, x: x.mean(dim=-1), [B3]),
    Case("var dim",             lambda t, x: x.var(dim=1, correction=1), [B3]),
    Case("var default (unbiased)", lambda t, x: x.var(), [B3]),
    Case("var dim keepdim",     lambda t, x: x.var(1, keepdim=True), [B3]),
    Case("var dim unbiased",    lambda t, x: x.var(0, False), [A]),
    Case("sum of bool",         lambda t, x: (x > 0).sum(), [B3]),
    Case("sum of bool dim",     lambda t, x: (x > 0).sum(dim=0), [B3]),
    Case("sum of int",          lambda t, i: i.int().sum(1), [INDEX]),
    Case("logsumexp",           lambda t, x: x.logsumexp(-1), [B3]),
    Case("logsumexp keepdim",   lambda t, x: t.logsumexp(x * 40.0, dim=0, keepdim=True), [A]),
    Case("cumsum",              lambda t, x: x.cumsum(1), [B3]),
    Case("cumsum function",     lambda t, x: t.cumsum(x, dim=-1), [A]),
    Case("cumsum of int",       lambda t, i: i.cumsum(0), [INDEX]),
    Case("argmax",              lambda t, x: x.argmax(), [A], distinct=True),
    Case("argmax dim",          lambda t, x: x.argmax(dim=1), [B3], distinct=True),
    Case("argmin dim keepdim",  lambda t, x: t.argmin(x, -1, keepdim=True), [B3], distinct=True),
    Case("softmax",             lambda t, x: x.softmax(-1), [B3]),
    Case("softmax dim 0",       lambda t, x: x.softmax(dim=0), [A]),
    Case("log_softmax",         lambda t, x: x.log_softmax(1), [B3]),
    Case("topk",                lambda t, x: t.topk(x, 2), [B3], distinct=True),
    Case("topk smallest dim 0", lambda t, x: x.topk(2, dim=0, largest=False), [A], distinct=True),
    # ---------------------------------------------------------------------------- elementwise
    Case("relu",                lambda t, x: x.relu(), [A], distinct=True),
    Case("sin cos",             lambda t, x: x.sin() * x.cos(), [A]),
    Case("functions",           lambda t, x: (t.exp(x), t.sin(x), t.cos(x), t.tanh(x),
                                              t.pow(x, 2), t.pow(2.0, x)), [A]),
    Case("log sqrt functions",  lambda t, x: (t.log(x.abs()), t.sqrt(x.abs())), [A],
         distinct=True),
    Case("floor ceil round",    lambda t, x: (x * 3.0).floor() + (x * 3.0).ceil() + x.round(),
         [A], distinct=True),
    Case("remainder",           lambda t, x, y: x % (y.abs() + 0.5), [A, A], distinct=True),
    Case("remainder scalar",    lambda t, x: x % 0.75, [A], distinct=True),
    Case("remainder int",       lambda t, i: (i - 2) % 3, [INDEX]),
    Case("floor divide",        lambda t, x: x.detach() // 0.5, [A], distinct=True),
    Case("floor divide int",    lambda t, i: (i - 2) // 2, [INDEX]),
    Case("comparisons",         lambda t, x, y: (x < y, x <= 0.1, x > y, x >= y, 0.2 < x),
         [A, (4,)], distinct=True),
    Case("and or not",          lambda t, x: ((x > 0) & (x < 1), (x > 0) | (x < -1), ~(x > 0)),
         [A]),
    Case("matmul function",     lambda t, x, y: t.matmul(x, y), [(2, 3, 4), (4, 2)]),
    Case("minimum",             lambda t, x, y: t.minimum(x, y), [A, A], distinct=True),
    # ------------------------------------------------------------------------------- indexing
    Case("bool mask",           lambda t, x, m: x[m], [A, MASK]),
    Case("bool mask rows",      lambda t, x, m: x[m], [A, ROW_MASK]),
    Case("bool mask from x",    lambda t, x: x[x > 0.5], [B3]),
    Case("list index last",     lambda t, x: x[:, [-1]], [A]),
    Case("int then list",       lambda t, x: x[0, :, [1, 3]], [B3]),
    Case("rows and targets",    lambda t, x, r, c: x[r, c],
         [A, Const(np.arange(3)), Const(np.array([3, 0, -1]))]),
    Case("slice, two arrays",   lambda t, x, i, j: x[:, i, j],
         [B3, Const(np.array([[0], [2]])), Const(np.array([1, 3, 0]))]),
    Case("two arrays, then int", lambda t, x, i: x[i, i, 1], [B3, Const(np.array([1, 0, 1]))]),
    Case("gather",              lambda t, x, i: t.gather(x, 1, i), [A, INDEX]),
    Case("gather dim 0",        lambda t, x, i: x.gather(0, i[:2, :1]), [A, INDEX]),
    Case("scatter",             lambda t, x, s, i: x.scatter(1, i, s), [A, (3, 2), UNIQUE]),
    Case("scatter value",       lambda t, x, i: t.scatter(x, 1, i, 0.5), [A, UNIQUE]),
    Case("nonzero",             lambda t, x: t.nonzero(x > 0.5), [B3]),
    Case("nonzero as tuple",    lambda t, x: (x > 0).nonzero(as_tuple=True), [A]),
    # --------------------------------------------------------------------------------- einsum
    Case("einsum scores",       lambda t, q, k: t.einsum("bhtd,bhsd->bhts", q, k),
         [(2, 2, 3, 4), (2, 2, 5, 4)]),
    Case("einsum values",       lambda t, w, v: t.einsum("bhts,bhsd->bhtd", w, v),
         [(2, 2, 3, 5), (2, 2, 5, 4)]),
    Case("einsum matmul",       lambda t, a, b: t.einsum("ij,jk->ik", a, b), [(3, 4), (4, 2)]),
    Case("einsum batched",      lambda t, a, b: t.einsum("bij,bjk->bik", a, b),
         [(2, 3, 4), (2, 4, 2)]),
    Case("einsum implicit",     lambda t, a, b: t.einsum("ij,jk", a, b), [(3, 4), (4, 2)]),
    Case("einsum sum and permute", lambda t, a: t.einsum("ijk->ki", a), [B3]),
    # ----------------------------------------------------------- composed spellings of calls
    Case("t",                   lambda t, x: x.t(), [A]),
    Case("t of a vector",       lambda t, x: t.t(x), [(4,)]),
    Case("mm",                  lambda t, a, b: a.mm(b), [(3, 4), (4, 2)]),
    Case("mm function",         lambda t, a, b: t.mm(a, b), [(3, 4), (4, 2)]),
    Case("bmm",                 lambda t, a, b: t.bmm(a, b), [(2, 3, 4), (2, 4, 2)]),
    Case("mv",                  lambda t, a, v: a.mv(v), [(3, 4), (4,)]),
    Case("dot",                 lambda t, a, b: t.dot(a, b), [(4,), (4,)]),
    Case("outer",               lambda t, a, b: a.outer(b), [(3,), (4,)]),
    Case("view_as",             lambda t, x, y: x.view_as(y), [(2, 6), A]),
    Case("reshape_as",          lambda t, x, y: x.reshape_as(y), [(12,), A]),
    Case("expand_as",           lambda t, x, y: x.expand_as(y), [(1, 4), A]),
    Case("sign in a product",   lambda t, x: x * x.sign(), [A]),
    Case("sign alone",          lambda t, x: t.sign(x) * 3.0, [A]),
    Case("sign function",       lambda t, x: t.sign(x), [Const(np.array([-1.5, 0.0, 2.0]))]),
    Case("square",              lambda t, x: x.square(), [A]),
    Case("reciprocal",          lambda t, x: x.reciprocal(), [A], distinct=True),
    Case("rsqrt",               lambda t, x: (x * x + 0.5).rsqrt(), [A]),
    Case("isnan isinf isfinite", lambda t, x: (t.isnan(x.log()), x.reciprocal().isinf(),
                                               (x / x).isfinite()), [A]),
    Case("clamp_min clamp_max", lambda t, x: x.clamp_min(-0.3) + t.clamp_max(x, 0.2), [A],
         distinct=True),
    Case("select",              lambda t, x: x.select(1, -1), [B3]),
    Case("narrow",              lambda t, x: t.narrow(x, 2, 1, 2), [B3]),
    Case("narrow from the end", lambda t, x: x.narrow(-1, -3, 2), [B3]),
    Case("unbind",              lambda t, x: x.unbind(1), [B3]),
    Case("unbind function",     lambda t, x: t.unbind(x), [A]),
    Case("index_select",        lambda t, x, i: x.index_select(2, i),
         [B3, Const(np.array([3, 0, 3]))]),
    Case("index_select dim 0",  lambda t, x, i: t.index_select(x, 0, i),
         [A, Const(np.array([2, 0]))]),
    Case("sort",                lambda t, x: x.sort(), [B3], distinct=True),
    Case("sort descending dim", lambda t, x: t.sort(x, dim=0, descending=True), [A],
         distinct=True),
    Case("argsort",             lambda t, x: x.argsort(dim=1, descending=True), [B3],
         distinct=True),
    Case("roll",                lambda t, x: x.roll(2, 1), [A]),
    Case("roll several dims",   lambda t, x: t.roll(x, (1, -1), (0, 2)), [B3]),
    Case("roll flattened",      lambda t, x: x.roll(-5), [A]),
    Case("isclose",             lambda t, x, y: (x.isclose(y), t.isclose(x, x + 1e-9),
                                                 x.isclose(y, rtol=0.0, atol=2.0)), [A, A]),
    Case("isclose special",     lambda t, x: (t.isclose(x, x, equal_nan=True), x.isclose(x)),
         [Const(np.array([np.nan, np.inf, -np.inf, 1.0]))]),
    Case("allclose",            lambda t, x, y: (t.allclose(x, x), x.allclose(y),
                                                 x.allclose(y, atol=10.0)), [A, A]),
    Case("norm",                lambda t, x: x.norm(), [B3]),
    Case("norm dim keepdim",    lambda t, x: t.norm(x, dim=(0, 2), keepdim=True), [B3]),
    Case("norm 1 and inf",      lambda t, x: (x.norm(1, dim=1), x.norm(float("inf")),
                                              x.norm(p=float("-inf"), dim=0)), [A], distinct=True),
    Case("movedim",             lambda t, x: x.movedim(0, -1), [B3]),
    Case("movedim function",    lambda t, x: t.movedim(x, 2, 0), [B3]),
    Case("log1p expm1",         lambda t, x: (t.log1p(x.abs()), x.expm1(), x.erf(), t.erf(x)),
         [A]),
    Case("tan atan sinh cosh",  lambda t, x: (t.tan(x * 0.4), x.atan(), t.sinh(x), x.cosh(),
                                              t.asinh(x)), [A]),
    Case("asin acos atanh",     lambda t, x: (t.asin(x.tanh() * 0.9), (x.tanh() * 0.9).acos(),
                                              t.atanh(x.tanh() * 0.9)), [A]),
    Case("acosh log2 log10 exp2", lambda t, x: (t.acosh(x.abs() + 1.5), (x.abs() + 0.5).log2(),
                                                t.log10(x.abs() + 0.5), t.exp2(x), x.exp2()),
         [A]),
    Case("logaddexp",           lambda t, x, y: (t.logaddexp(x, y), x.logaddexp(y[0]),
                                                 t.logaddexp(x, x), x.logaddexp2(y),
                                                 t.logaddexp2(x * 40, y)), [A, A]),
    Case("logaddexp infinities", lambda t, x, y: (t.logaddexp(x, y), t.logaddexp2(y, x)),
         [Const(np.array([-np.inf, np.inf, 0.0, -np.inf, 1.0, np.nan, np.inf, 800.0])),
          Const(np.array([-np.inf, np.inf, -np.inf, 2.0, 1.0, 0.0, -np.inf, -800.0]))]),
    Case("trace count_nonzero", lambda t, x: (t.trace(x), x.trace(), t.count_nonzero(x.floor()),
                                              x.floor().count_nonzero(dim=1),
                                              t.count_nonzero(x.floor(), dim=(0, 1))), [A]),
    Case("logical and or xor",  lambda t, x, y: (t.logical_and(x > 0, y > 0),
                                                 (x > 0).logical_or(y.floor()),
                                                 t.logical_xor(x.floor(), y > 0),
                                                 x.logical_and(y[0])), [A, A]),
    Case("hstack vstack",       lambda t, x, y: (t.hstack([x, y]), t.vstack([x, y]),
                                                 t.vstack([x[0], y[0]]), t.hstack((x[0], y[1])),
                                                 t.vstack([x, y[0]])), [A, A]),
    Case("swapaxes broadcast_to detach", lambda t, x: (t.swapaxes(x, 0, 2),
                                                       t.broadcast_to(x[0], (2, 3, 4)),
                                                       t.detach(x) * 2.0), [B3]),
    Case("addcmul addcdiv",     lambda t, x, y, z: (t.addcmul(x, y, z, value=0.3),
                                                    x.addcmul(y, z[0]),
                                                    t.addcdiv(x, y, z.abs() + 1.0, value=-2.0),
                                                    x.addcdiv(y, z.abs() + 1.0)), [A, A, A]),
    Case("scatter_add",         lambda t, x, y: (x.scatter_add(0, _ix(t, x, SPREAD), y[:2]),
                                                 t.scatter_add(x, 1, _ix(t, x, REPEATS), y[:, :2])),
         [A, A]),
    Case("index_add",           lambda t, x, y: (x.index_add(0, _ix(t, x, [2, 0, 2]), y),
                                                 t.index_add(x, 1, _ix(t, x, [1, 3, 1, 1]), y,
                                                             alpha=-0.5)), [A, A]),
    Case("diagonal",            lambda t, x: (x.diagonal(), t.diagonal(x, 1, 0, 2),
                                              x.diagonal(-1, 2, 1), x[0].diagonal(-2)), [B3]),
    Case("trunc frac",          lambda t, x: ((x * 3).trunc(), t.frac(x * 3)), [A],
         distinct=True),
    Case("atan2",               lambda t, x, y: (t.atan2(x, y), x.atan2(y[0])), [A, A],
         distinct=True),
    Case("lerp",                lambda t, x, y, w: (x.lerp(y, 0.3), t.lerp(x, y, 0.8),
                                                    x.lerp(y, w)), [A, A, (4,)]),
    Case("addmm",               lambda t, c, a, b: (t.addmm(c, a, b), c.addmm(a, b, beta=0.5,
                                                                           alpha=-2.0)),
         [(4,), (3, 5), (5, 4)]),
    Case("diag",                lambda t, x, v: (x.diag(), t.diag(x, -1), v.diag(2),
                                                 t.diag(v, -1)), [A, (3,)]),
    Case("tile",                lambda t, x: (x.tile((2,)), t.tile(x, (2, 1, 3))), [A]),
    Case("repeat_interleave",   lambda t, x, r: (x.repeat_interleave(2), t.repeat_interleave(
                                    x, r, dim=0), x.repeat_interleave(3, dim=-1)),
         [A, Const(np.array([1, 0, 2]))]),
    Case("nan_to_num",          lambda t, x: (x.nan_to_num(), t.nan_to_num(x, 1.0, 2.0, -3.0)),
         [Const(np.array([np.nan, np.inf, -np.inf, 1.5]))]),
    Case("nan_to_num gradient", lambda t, x: (x / (x - x.round())).nan_to_num(), [A]),
    Case("diff",                lambda t, x, p: (x.diff(), t.diff(x, n=2, dim=0, prepend=p)),
         [A, (2, 4)]),
    Case("masked_select",       lambda t, x, m: (x.masked_select(m), t.masked_select(x, m[0])),
         [A, MASK]),
    Case("meshgrid",            lambda t, x, y: (*t.meshgrid(x, y, indexing="ij"),
                                                 *t.meshgrid(x, y, indexing="xy")), [(3,), (4,)]),
    Case("cosine_similarity",   lambda t, x, y: (
        t.cosine_similarity(x, y), t.nn.functional.cosine_similarity(x, y[0], dim=-1)), [A, A]),
    Case("prod",                lambda t, x: (x.prod(), t.prod(x, 1), x.prod(dim=0, keepdim=True)),
         [Const(np.array([[1.5, 0.0, 2.0], [0.0, 3.0, 0.0], [1.0, -2.0, 3.0]]))]),
    Case("prod gradient",       lambda t, x: (x.prod(1), x.prod()), [(3, 5)]),
    Case("cumprod",             lambda t, x: (x.cumprod(1), t.cumprod(x, dim=0)), [(3, 5)]),
    Case("prod of integers",    lambda t, x: (x.prod(), x.cumprod(0)),
         [Const(np.array([1, 2, 3, 4]))]),
    Case("unique",              lambda t, x: (x.unique(), t.unique(x, return_inverse=True,
                                                                   return_counts=True)),
         [Const(np.array([[3, 1, 3], [0, 1, 1]]))]),
    Case("unique dim",          lambda t, x: t.unique(x, dim=0, return_inverse=True),
         [Const(np.array([[3, 1], [0, 2], [3, 1]]))]),
    Case("unique floats",       lambda t, x: t.unique(x, return_counts=True),
         [Const(np.array([2.5, -1.0, 2.5, 0.0]))]),
    Case("bincount",            lambda t, x, w: (x.bincount(), t.bincount(x, minlength=7),
                                                 x.bincount(w), t.bincount(x, w, 2)),
         [Const(np.array([0, 4, 4, 2, 1])), Const(np.array([0.5, 1.0, 2.0, -1.0, 3.0]))]),
    Case("cross_entropy weight", lambda t, x, y, w: (
        t.nn.functional.cross_entropy(x, y, weight=w),
        t.nn.functional.cross_entropy(x, y.clamp(min=0), w, reduction="none", label_smoothing=0.2),
        t.nn.CrossEntropyLoss(weight=w, reduction="sum")(x, y.flip(0))),
         [(3, 4), Const(np.array([0, 3, -100])), Const(np.array([1.0, 2.0, 0.5, 3.0]))]),
    Case("cross_entropy weight 3-d", lambda t, x, y, w: t.nn.functional.cross_entropy(
        x, y, weight=w, label_smoothing=0.1),
         [(2, 3, 2), Const(np.array([[0, 2], [-100, 1]])), Const(np.array([1.0, 2.0, 3.0]))]),
    Case("cross_entropy soft weight", lambda t, x, p, w: t.nn.functional.cross_entropy(
        x, p.softmax(-1), weight=w, label_smoothing=0.1),
         [(3, 4), Const(np.arange(12.0).reshape(3, 4) / 7), Const(np.array([1.0, 2.0, 0.5, 3.0]))]),
    Case("nll_loss weight",     lambda t, x, y, w: (
        t.nn.functional.nll_loss(x.log_softmax(-1), y, weight=w),
        t.nn.NLLLoss(w.flip(0))(x.log_softmax(-1), y.clamp(min=0))),
         [(3, 4), Const(np.array([0, -100, 3])), Const(np.array([1.0, 2.0, 0.5, 3.0]))]),
    Case("activations",         lambda t, x: (
        t.nn.functional.relu6(x * 4), t.nn.functional.hardtanh(x * 2, -1.5, 2.0),
        t.nn.functional.softsign(x), t.nn.functional.selu(x), t.nn.functional.mish(x),
        t.nn.functional.hardswish(x * 4),
        t.nn.functional.glu(x), t.nn.functional.glu(x, 0), t.nn.functional.softmin(x, dim=1)),
         [(4, 6)], distinct=True),
    Case("activation modules",  lambda t, x: tuple(m(x * 3) for m in (
        t.nn.ReLU6(), t.nn.Hardtanh(), t.nn.SELU(), t.nn.Mish(), t.nn.Softsign(), t.nn.GLU(),
        t.nn.Softmin(dim=0), t.nn.Hardswish())), [(4, 6)], distinct=True),
    # hardsigmoid: PyTorch's gradient is 1/6 rounded to float32 even in float64 (3e-8 off);
    # tests/test_ops.py checks tinyattn's against the exact slope instead.
    Case("smooth_l1 and huber", lambda t, x, y: (
        t.nn.functional.smooth_l1_loss(x, y), t.nn.functional.smooth_l1_loss(x, y, beta=0.5,
                                                                             reduction="none"),
        t.nn.functional.huber_loss(x, y, delta=0.7, reduction="sum"),
        t.nn.SmoothL1Loss(beta=2.0)(x, y), t.nn.HuberLoss(delta=1.5)(x, y)), [A, A],
         distinct=True),
    Case("clamp tensor bounds", lambda t, x, lo, hi: (x.clamp(min=lo), t.clamp(x, lo, hi),
                                                       x.clamp(max=hi), x.clip(hi, lo)),
         [A, (4,), (3, 1)], distinct=True),
    Case("sum and mean dtype",  lambda t, x: (x.float().sum(dtype=t.float64),
                                              x.sum(1, dtype=t.float64),
                                              x.float().mean(0, dtype=t.float64)), [A]),
    Case("where one argument",  lambda t, m: t.where(m), [MASK]),
    Case("reductions of integers with dtype", lambda t, x: (
        x.sum(dtype=t.int32), x.prod(dtype=t.float64), x.cumsum(0, dtype=t.int32),
        x.cumprod(0, dtype=t.float64), x.sum(), x.prod()),
         [Const(np.array([3, -1, 2, 4], dtype=np.int32))]),
    Case("prod dtype gradient", lambda t, x: x.float().prod(1, dtype=t.float64), [(3, 4)]),
    Case("in-place unary ops",  lambda t, x: tuple(
        getattr(x.detach().abs().clone(), name)() for name in (
            "abs_", "neg_", "exp_", "log_", "sqrt_", "tanh_", "sigmoid_", "relu_")) + (
        x.detach().clone().pow_(2), x.detach().clone().clamp_(min=x[0].detach())), [A]),
    Case("normalize",           lambda t, x: (t.nn.functional.normalize(x),
                                              t.nn.functional.normalize(x, p=1, dim=0)), [A]),
]
# fmt: on


def _host(case: Case, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    shapes = [s for s in case.inputs if not isinstance(s, Const)]
    if case.distinct:
        sizes = [int(np.prod(s)) for s in shapes]
        ranks = rng.permutation(sum(sizes)) + 1
        values = 0.13 * ranks * np.where(ranks % 2, 1.0, -1.0)
        drawn = iter(np.split(values, np.cumsum(sizes)[:-1]))
        floats = [next(drawn).reshape(s) for s in shapes]
    else:
        floats = [rng.standard_normal(s) for s in shapes]
    it = iter(floats)
    return [np.asarray(s.value) if isinstance(s, Const) else next(it) for s in case.inputs]


def _tensors(lib, case: Case, host: list, device: str) -> list:
    out = []
    for spec, array in zip(case.inputs, host, strict=True):
        if lib is torch:
            grad = not isinstance(spec, Const)
            out.append(torch.tensor(array, requires_grad=grad))
        elif isinstance(spec, Const):
            out.append(ta.tensor(array, device=device))
        else:
            out.append(ta.tensor(array, dtype="float64", device=device, requires_grad=True))
    return out


def _leaves(result) -> list:
    if isinstance(result, tuple | list) and not isinstance(result, str):
        return [leaf for part in result for leaf in _leaves(part)]
    return [result]


def _compare(ours, theirs, what: str) -> None:
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, ta.Tensor), what
        assert dtype_name(ours.dtype) == str(theirs.dtype).removeprefix("torch."), what
        assert tuple(ours.shape) == tuple(theirs.shape), what
        np.testing.assert_allclose(
            ours.detach().numpy(), theirs.detach().numpy(), **TOL, err_msg=what
        )
    else:
        assert ours == theirs, what


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_same_program_same_numbers(device, case):
    host = _host(case)
    ours_in, theirs_in = _tensors(ta, case, host, device), _tensors(torch, case, host, device)
    ours, theirs = case.call(ta, *ours_in), case.call(torch, *theirs_in)
    if hasattr(theirs, "_fields"):  # a named tuple: the same field names
        assert ours._fields == ("values", "indices") and len(theirs) == 2
    ours_leaves, theirs_leaves = _leaves(ours), _leaves(theirs)
    assert len(ours_leaves) == len(theirs_leaves)
    for position, (o, t) in enumerate(zip(ours_leaves, theirs_leaves, strict=True)):
        _compare(o, t, f"{case.name}: output {position}")
    # Gradients of sum(out * cotangent) over the differentiable outputs, against torch's.
    rng = np.random.default_rng(1)
    pairs = [
        (o, t)
        for o, t in zip(ours_leaves, theirs_leaves, strict=True)
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    if not pairs:
        return
    loss_ours, loss_theirs = 0.0, 0.0
    for o, t in pairs:
        cotangent = rng.standard_normal(tuple(t.shape))
        loss_ours = loss_ours + (o * ta.tensor(cotangent, device=device).double()).sum()
        loss_theirs = loss_theirs + (t * torch.tensor(cotangent)).sum()
    loss_ours.backward()
    loss_theirs.backward()
    for position, (o, t) in enumerate(zip(ours_in, theirs_in, strict=True)):
        if t.requires_grad:
            expected = t.grad if t.grad is not None else torch.zeros_like(t)
            got = o.grad if o.grad is not None else ta.zeros_like(o)
            _compare(got, expected, f"{case.name}: gradient of input {position}")


# ---------------------------------------------------------------------------------- factories
# (name, call(lib, device keyword arguments)): the result's values, dtype and shape must match.
FACTORIES = [
    ("ones varargs", lambda t, kw: t.ones(2, 3, **kw)),
    ("ones tuple", lambda t, kw: t.ones((2, 3), dtype=t.float64, **kw)),
    ("zeros varargs", lambda t, kw: t.zeros(4, dtype=t.long, **kw)),
    ("zeros tuple", lambda t, kw: t.zeros((1, 2), **kw)),
    ("full", lambda t, kw: t.full((2, 2), 1.5, **kw)),
    ("full int dtype", lambda t, kw: t.full((3,), 7, dtype=t.int64, **kw)),
    ("empty shape", lambda t, kw: t.empty(2, 3, **kw).shape),
    ("empty tuple", lambda t, kw: t.empty((4,), dtype=t.uint8, **kw).shape),
    ("dtype compares with the name", lambda t, kw: t.ones(2, dtype=t.long).dtype == t.long),
    ("arange", lambda t, kw: t.arange(5, **kw)),
    ("arange start end step", lambda t, kw: t.arange(1, 10, 3, **kw)),
    ("arange keywords", lambda t, kw: t.arange(start=2, end=4, step=0.5, dtype=t.float32, **kw)),
    ("arange float", lambda t, kw: t.arange(0.0, 1.0, 0.25, **kw)),
    ("tensor long dtype", lambda t, kw: t.tensor([1, 2], dtype=t.long, **kw)),
    ("tensor bool dtype", lambda t, kw: t.tensor([1, 0], dtype=t.bool, **kw)),
    ("tensor uint8", lambda t, kw: t.tensor([1, 255], dtype=t.uint8, **kw)),
    ("tensor int and float", lambda t, kw: t.tensor([1, 2], dtype=t.int, **kw).float()),
    ("is_tensor", lambda t, kw: (t.is_tensor(t.ones(1, **kw)), t.is_tensor([1.0]))),
    ("linspace", lambda t, kw: t.linspace(0, 1, 5, **kw)),
    ("linspace float64", lambda t, kw: t.linspace(-2.5, 7, 11, dtype=t.float64, **kw)),
    ("linspace one step", lambda t, kw: t.linspace(3, 4, 1, **kw)),
    ("eye", lambda t, kw: t.eye(3, **kw)),
    ("eye rectangle", lambda t, kw: t.eye(2, 4, dtype=t.float64, **kw)),
    ("full_like", lambda t, kw: t.full_like(t.ones(2, 3, dtype=t.float64, **kw), 2.5)),
    (
        "new_zeros new_ones new_full",
        lambda t, kw: (
            t.ones(2, dtype=t.float64, **kw).new_zeros(3, 1),
            t.ones(2, dtype=t.float64, **kw).new_ones((2,)),
            t.ones(2, **kw).new_full((2, 2), 4.0),
            t.ones(2, dtype=t.long, **kw).new_tensor([1, 2, 3]),
        ),
    ),
    # Random values differ between the libraries: their dtype, shape and sums are compared.
    ("randperm", lambda t, kw: t.randperm(7, **kw).sum()),
    (
        "rand_like randn_like",
        lambda t, kw: (
            t.rand_like(t.ones(2, 3, dtype=t.float64, **kw)) * 0,
            t.randn_like(t.ones(4, **kw)) * 0,
        ),
    ),
]


@pytest.mark.parametrize("name,call", FACTORIES, ids=[f[0] for f in FACTORIES])
def test_factories_match(device, name, call):
    ours, theirs = call(ta, {"device": device}), call(torch, {})
    if isinstance(theirs, torch.Size):
        theirs = tuple(theirs)
    for position, (o, t) in enumerate(zip(_leaves(ours), _leaves(theirs), strict=True)):
        _compare(o, t, f"{name}: output {position}")


def test_dtype_names_match_torch():
    for name in ("long", "int", "float", "double", "half", "bool", "uint8", "int8", "int16"):
        ours, theirs = getattr(ta, name), getattr(torch, name)
        assert ours == str(theirs).removeprefix("torch."), name
    for name in ("int64", "int32", "float32", "float64", "float16"):
        assert getattr(ta, name) == name


# ------------------------------------------------------------------------- PyTorch's errors
def test_floor_divide_refuses_backward_as_torch_does(device):
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError):
        (x // 0.5).sum().backward()
    y = ta.ones(2, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="floor_divide"):
        (y // 0.5).sum().backward()


def test_einsum_refuses_a_repeated_output_letter(device):
    x = ta.ones(3, 3, device=device)
    with pytest.raises(RuntimeError, match="einsum"):
        ta.einsum("ii->ii", x)


def test_scatter_to_one_place_twice_is_refused(device):
    index = ta.tensor([[1, 1]], device=device)
    with pytest.raises(ValueError, match="scatter: the index writes the same place twice"):
        ta.zeros(2, 3, device=device).scatter(1, index, 1.0)


def test_index_arrays_apart_put_their_dims_first(device):
    """NumPy and PyTorch agree: index arrays separated by a slice gather into leading dims."""
    x = ta.ones(2, 3, 4, device=device)
    assert x[[0, 1, 1], :, [1, 2, 0]].shape == (3, 3)
    assert x[0, :, [1, 2]].shape == (3, 2)  # an int selects first: nothing moves
    with pytest.raises(IndexError, match="out of range for axis 1"):
        x[[0, 1], [1, 3]]


def test_transpose_needs_two_dims(device):
    with pytest.raises(TypeError):
        ta.ones(2, 3, device=device).transpose()


# ------------------------------------------------------------------ seeded random functions
def test_randint_is_seeded_and_in_range(device):
    ta.manual_seed(5)
    first = ta.randint(3, 9, (200,), device=device)
    ta.manual_seed(5)
    again = ta.randint(3, 9, (200,), device=device)
    assert dtype_name(first.dtype) == "int64" and first.shape == (200,)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    values = first.numpy()
    assert values.min() == 3 and values.max() == 8  # 200 draws from 6 values hit both ends
    assert ta.randint(4, (2, 3), device=device).numpy().max() < 4  # randint(high, size)


@pytest.mark.parametrize("replacement", [False, True])
def test_multinomial_is_seeded_and_follows_the_weights(device, replacement):
    weights = ta.tensor([[0.0, 1.0, 3.0, 0.0], [2.0, 2.0, 0.0, 4.0]], device=device)
    ta.manual_seed(11)
    drawn = ta.multinomial(weights, 2, replacement=replacement)
    ta.manual_seed(11)
    np.testing.assert_array_equal(drawn.numpy(), weights.multinomial(2, replacement).numpy())
    assert drawn.shape == (2, 2) and dtype_name(drawn.dtype) == "int64"
    rows = drawn.numpy()
    assert set(rows[0]) <= {1, 2} and set(rows[1]) <= {0, 1, 3}  # never a zero weight
    if not replacement:
        assert all(len(set(row)) == 2 for row in rows)
    counts = np.bincount(ta.multinomial(weights[0], 4000, True).numpy(), minlength=4)
    assert counts[0] == counts[3] == 0 and 0.7 < counts[2] / 4000 < 0.8  # p = 3/4


def test_multinomial_without_replacement_refuses_too_many(device):
    with pytest.raises(ValueError, match="multinomial"):
        ta.multinomial(ta.tensor([1.0, 0.0, 1.0], device=device), 3)


# ----------------------------------------------------------------- identity hashing survives
def test_tensors_stay_dict_keys_and_set_members_with_elementwise_eq(device):
    a, b = ta.ones(3, device=device), ta.ones(3, device=device)
    table = {a: "a", b: "b"}
    assert table[a] == "a" and table[b] == "b" and len({a, b, a}) == 2
    assert (a == b).numpy().all()  # equal values, still two keys
    assert (a == None) is False and (a != None) is True  # noqa: E711  (as torch answers)
    assert (torch.ones(3) == None) is False  # noqa: E711
    assert a in [None, "x", a] and [None, a].index(a) == 1


def test_star_import_leaves_python_builtins_alone():
    namespace: dict = {}
    exec("from tinyattn import *", namespace)
    for name in ("max", "min", "sum", "abs", "round", "pow", "float", "int", "bool"):
        assert name not in namespace, name
    assert {"exp", "cat", "long", "einsum", "tril"} <= set(namespace)
    assert ta.max is not max and ta.float == "float32"  # still reachable as attributes


def test_type_as_takes_the_other_tensors_device_too():
    """PyTorch's type names the device (torch.cuda.FloatTensor): type_as moves as well as casts."""
    pytest.importorskip("array_api_strict")
    mask = ta.tensor([[True, False]], device="strict")
    ones = ta.ones(1, 2, dtype=ta.int64).type_as(mask)
    assert ones.device == mask.device and ones.dtype == mask.dtype
    assert (ones & mask).tolist() == [[True, False]]


def test_nan_to_num_passes_the_gradient_only_where_the_value_was_finite(device):
    values = np.array([1.0, -2.0, 4.0])  # log(-2) is NaN

    def gradient(x):
        x.log().nan_to_num().sum().backward()
        return np.asarray(x.grad.tolist())

    ours = gradient(ta.tensor(values, dtype="float64", device=device, requires_grad=True))
    theirs = gradient(torch.tensor(values, requires_grad=True))
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(ours, [1.0, 0.0, 0.25])


@pytest.mark.parametrize(
    "call",
    [
        lambda t, x: t.nn.functional.softplus(x),
        lambda t, x: t.nn.functional.logsigmoid(x),
        lambda t, x: t.nn.functional.mish(x),
        lambda t, x: t.nn.functional.binary_cross_entropy_with_logits(x, (x + 1.0).detach()),
    ],
    ids=["softplus", "logsigmoid", "mish", "bce_with_logits"],
)
def test_gradients_at_exactly_zero_logits(device, call):
    # Zero logits are common (a zero-initialised last layer); a softplus written as
    # max(z, 0) + log1p(exp(-|z|)) gave the gradient 1 there instead of sigmoid(0) = 1/2.
    values = np.array([0.0, 0.0, -1.5, 2.0])

    def gradient(lib, x):
        call(lib, x).sum().backward()
        return np.asarray(x.grad.tolist())

    ours = gradient(ta, ta.tensor(values, dtype="float64", device=device, requires_grad=True))
    theirs = gradient(torch, torch.tensor(values, requires_grad=True))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)


def test_std_of_a_constant_slice_has_a_zero_gradient_and_nan_stays_nan(device):
    # sqrt(var)'s rule would give g / (2 * 0) * 0 = NaN; PyTorch's std gives 0 there.
    values = np.array([[3.0, 3.0, 3.0], [1.0, 2.0, 4.0]])

    def gradient(x):
        (x.std(1) * x.std(1, unbiased=False)).sum().backward()
        return np.asarray(x.grad.tolist())

    ours = gradient(ta.tensor(values, dtype="float64", device=device, requires_grad=True))
    theirs = gradient(torch.tensor(values, requires_grad=True))
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)
    assert not np.isnan(ours).any()
    with_nan = ta.tensor([1.0, np.nan, 2.0], dtype="float64", device=device)
    assert np.isnan(with_nan.std().item())


def test_a_hand_written_adam_step_with_addcmul_addcdiv_and_lerp_runs_as_in_pytorch(device):
    """PyTorch's own Adam, written out with the in-place methods it uses (mul_, addcmul_,
    addcdiv_, and lerp_ for an EMA of the weights), gives the same parameters in both."""
    rng = np.random.default_rng(0)
    start, grads = rng.standard_normal((3, 4)), [rng.standard_normal((3, 4)) for _ in range(4)]
    results = []
    for lib in (ta, torch):
        kwargs = {"device": device} if lib is ta else {}
        p = lib.tensor(start, dtype=lib.float64, **kwargs)
        ema, m, v = p.clone(), lib.zeros_like(p), lib.zeros_like(p)
        for step, g in enumerate(grads, 1):
            g = lib.tensor(g, dtype=lib.float64, **kwargs)
            with lib.no_grad():
                m.mul_(0.9).add_(g, alpha=0.1)
                v.mul_(0.999).addcmul_(g, g, value=0.001)
                denom = (v / (1 - 0.999**step)).sqrt().add_(1e-8)
                p.addcdiv_(m, denom, value=-0.01 / (1 - 0.9**step))
                ema.lerp_(p, 0.1)
        results.append([t.cpu().numpy() if lib is torch else t.numpy() for t in (p, ema, v)])
    for ours, theirs in zip(*results, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)
