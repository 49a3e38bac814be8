"""The error catalogue: one table of wrong uses across the public API and what each must say.

Every row is a call that must fail, the exception type, the prefix the message must start with
(the operation: errors read ``op: what is wrong (shapes/values)``) and the facts it must name:
shapes, dtypes, devices, keys or values. Every row also checks that the error is raised by
tinyattn itself, never by NumPy or array_api_strict from deep inside an op. The table runs on
every backend (`device`); the rows that mix devices pair the host with the strict device.
docs/errors.md describes the conventions; the count of rows is reported there.
"""

from __future__ import annotations

import math
import os
import traceback

import array_api_strict
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim
from tinyattn.errors import DimError, TinyattnError

PACKAGE = os.path.dirname(ta.__file__)


def ones(*shape, device, grad=False, dtype="float64"):
    return ta.ones(*shape, dtype=dtype, device=device, requires_grad=grad)


def ints(values, device):
    return ta.tensor(values, dtype="int64", device=device)


def bools(*shape, device):
    return ta.ones(*shape, dtype="bool", device=device)


# --------------------------------------------------------------------------- helpers for rows
def backward_twice(device):
    x = ones(3, device=device, grad=True)
    y = (x * x).sum()
    y.backward()
    y.backward()


def grad_twice(device):
    x = ones(3, device=device, grad=True)
    y = x.exp().sum()
    ta.grad(y, x)
    ta.grad(y, x)


def under_no_grad(device):
    x = ones(2, device=device, grad=True)
    with ta.no_grad():
        y = (x * 2.0).sum()
    y.backward()


class WrongShapeGrad(ta.Function):
    def forward(self, x):
        return x * 1.0

    def backward(self, grad):
        return grad.sum()  # a scalar for a (3,) input


class TwoGrads(ta.Function):
    def forward(self, x):
        return x * 1.0

    def backward(self, grad):
        return grad, grad  # two gradients for one input


def model(device):
    ta.manual_seed(0)
    return nn.Linear(3, 2).to(device)


def load_edited(device, edit):
    module = model(device)
    state = module.state_dict()
    edit(state)
    module.load_state_dict(state)


def sgd_state(momentum_shape, device):
    p = ones(2, device=device, grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    group = {"lr": 0.1, "momentum": 0.9, "dampening": 0.0, "nesterov": False}
    group.update(weight_decay=0.0, params=[0])
    state = {0: {"momentum_buffer": ta.ones(*momentum_shape, device=device)}}
    opt.load_state_dict({"state": state, "param_groups": [group]})


def adam_state_into_sgd(device):
    p = ones(2, device=device, grad=True)
    adam = optim.Adam([p])
    p.grad = ones(2, device=device)
    adam.step()
    optim.SGD([p], lr=0.1).load_state_dict(adam.state_dict())


def step_with_grad(grad, device):
    p = ones(2, device=device, grad=True)
    p.grad = grad
    optim.SGD([p], lr=0.1).step()


def mha(device, **kwargs):
    ta.manual_seed(0)
    return nn.MultiHeadAttention(8, 2, **kwargs).to(device)


def x8(*shape, device):
    return ta.ones(*shape, 8, device=device)


def save_to_tmp(value):
    import tempfile  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as directory:
        ta.save(value, os.path.join(directory, "checkpoint.npz"))


def load_text(device):
    import tempfile  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "notes.txt")
        with open(path, "w") as file:
            file.write("not a checkpoint")
        ta.load(path)


def strict_array():
    return array_api_strict.ones(3, device=array_api_strict.Device("device1"))


# ------------------------------------------------------------------------------------ the table
# (id, call(device), exception type, message prefix, facts the message must contain)
CATALOGUE = [
    # ------------------------------------------------ shape mismatches in every binary op
    ("add", lambda d: ones(2, 3, device=d) + ones(4, device=d),
     TinyattnError, "add:", ["(2, 3)", "(4,)", "broadcast"]),
    ("add a list", lambda d: ones(2, 3, device=d) + [1.0, 2.0],
     TinyattnError, "add:", ["(2, 3)", "(2,)"]),
    ("sub", lambda d: ones(2, 3, device=d) - ones(2, 1, 2, device=d),
     TinyattnError, "sub:", ["(2, 3)", "(2, 1, 2)"]),
    ("reflected sub", lambda d: [1.0, 2.0] - ones(3, device=d),
     TinyattnError, "sub:", ["(2,)", "(3,)"]),
    ("mul", lambda d: ones(2, 3, device=d) * ones(3, 2, device=d),
     TinyattnError, "mul:", ["(2, 3)", "(3, 2)"]),
    ("div", lambda d: ones(3, device=d) / ones(2, device=d),
     TinyattnError, "div:", ["(3,)", "(2,)"]),
    ("pow", lambda d: ones(2, 3, device=d) ** ones(4, device=d),
     TinyattnError, "pow:", ["(2, 3)", "(4,)"]),
    ("maximum", lambda d: ta.maximum(ones(2, device=d), ones(3, device=d)),
     TinyattnError, "maximum:", ["(2,)", "(3,)"]),
    ("where", lambda d: ta.where(ones(3, device=d) > 0, ones(2, device=d), 0.0),
     TinyattnError, "where:", ["(3,)", "(2,)"]),
    ("comparison", lambda d: ones(2, device=d) >= ones(3, device=d),
     TinyattnError, "ge:", ["(2,)", "(3,)"]),
    # -------------------------------------------------------------------------- matmul
    ("matmul inner", lambda d: ones(2, 3, device=d) @ ones(4, 5, device=d),
     TinyattnError, "matmul:", ["(2, 3)", "(4, 5)", "3 != 4"]),
    ("matmul vector", lambda d: ones(3, device=d) @ ones(2, 4, 5, device=d),
     TinyattnError, "matmul:", ["(3,)", "(2, 4, 5)", "3 != 4"]),
    ("matmul batch", lambda d: ones(2, 3, 4, device=d) @ ones(3, 4, 5, device=d),
     TinyattnError, "matmul:", ["(2, 3, 4)", "(3, 4, 5)", "broadcast"]),
    ("matmul 0-d", lambda d: ones(3, device=d) @ ones(device=d),
     TinyattnError, "matmul:", ["(3,)", "()", "at least 1 dimension"]),
    # --------------------------------------------------------------- reshape, concat, stack
    ("reshape count", lambda d: ones(2, 3, device=d).reshape(4, 2),
     TinyattnError, "reshape:", ["(2, 3)", "(4, 2)", "6 elements", "8 elements"]),
    ("reshape two -1", lambda d: ones(2, 3, device=d).reshape(-1, -1),
     TinyattnError, "reshape:", ["(-1, -1)", "(2, 3)"]),
    ("reshape -2", lambda d: ones(2, 3, device=d).reshape(-2, 3),
     TinyattnError, "reshape:", ["(-2, 3)", "(2, 3)"]),
    ("broadcast_to", lambda d: ones(2, 3, device=d).broadcast_to(3, 3),
     TinyattnError, "broadcast_to:", ["(2, 3)", "(3, 3)"]),
    ("concat shapes", lambda d: ta.concat([ones(2, 3, device=d), ones(3, 3, device=d)], axis=1),
     TinyattnError, "concat:", ["tensor 1", "(3, 3)", "(2, 3)", "axis 1"]),
    ("concat ranks", lambda d: ta.concat([ones(2, 3, device=d), ones(3, device=d)]),
     TinyattnError, "concat:", ["(3,)", "(2, 3)"]),
    ("concat axis", lambda d: ta.concat([ones(2, 3, device=d)] * 2, axis=2),
     DimError, "concat:", ["axis 2", "2 dimension"]),
    ("concat a list", lambda d: ta.concat([ones(2, device=d), [1.0, 2.0]]),
     TypeError, "concat:", ["element 1", "list"]),
    ("concat nothing", lambda d: ta.concat([]),
     TinyattnError, "concat:", ["at least one"]),
    ("stack shapes", lambda d: ta.stack([ones(2, 3, device=d), ones(3, 3, device=d)]),
     TinyattnError, "stack:", ["tensor 1", "(3, 3)", "(2, 3)"]),
    ("stack axis", lambda d: ta.stack([ones(2, 3, device=d)] * 2, axis=4),
     DimError, "stack:", ["axis 4", "3 dimension"]),
    ("stack a float", lambda d: ta.stack([ones(2, device=d), 3.0]),
     TypeError, "stack:", ["element 1", "float"]),
    # ------------------------------------------------------------------------------ axes
    ("sum axis", lambda d: ones(2, 3, device=d).sum(axis=2),
     DimError, "sum:", ["axis 2", "2 dimension"]),
    ("mean float axis", lambda d: ones(2, 3, device=d).mean(axis=1.0),
     TypeError, "mean:", ["axis", "1.0"]),
    ("amax repeated axis", lambda d: ones(2, 3, device=d).amax(axis=(0, 0)),
     TinyattnError, "amax:", ["repeated axis", "(0, 0)"]),
    ("max several dims", lambda d: ones(2, 3, device=d).max(dim=(0, 1)),
     TypeError, "max:", ["dim must be an int", "amax"]),
    ("var axis", lambda d: ones(2, 3, device=d).var(axis=-3),
     DimError, "var:", ["axis -3", "2 dimension"]),
    ("softmax dim", lambda d: F.softmax(ones(2, 3, device=d), dim=2),
     DimError, "softmax:", ["dim 2", "(2, 3)"]),
    ("log_softmax axis", lambda d: F.log_softmax(ones(2, 3, device=d), axis=-3),
     DimError, "log_softmax:", ["dim -3", "(2, 3)"]),
    ("permute", lambda d: ones(2, 3, device=d).permute(0, 2),
     TinyattnError, "permute:", ["(0, 2)", "(2, 3)"]),
    ("swapaxes", lambda d: ones(2, 3, device=d).swapaxes(0, 2),
     DimError, "swapaxes:", ["axis 2"]),
    ("squeeze", lambda d: ones(2, 3, device=d).squeeze(2),
     DimError, "squeeze:", ["axis 2", "2 dimension"]),
    ("expand_dims", lambda d: ones(2, 3, device=d).expand_dims(5),
     DimError, "expand_dims:", ["axis 5", "3 dimensions"]),
    ("mT of a vector", lambda d: ones(3, device=d).mT,
     TinyattnError, "mT:", ["(3,)", "2 dimensions"]),
    # -------------------------------------------------------------------------- indexing
    ("index", lambda d: ones(2, 3, device=d)[2],
     IndexError, "getitem:", ["index 2", "size 2"]),
    ("gather", lambda d: ones(2, 3, device=d)[[0, 5]],
     IndexError, "getitem:", ["index 5", "size 2"]),
    ("float index", lambda d: ones(3, device=d)[ones(2, device=d)],
     IndexError, "getitem:", ["long, int, byte or bool", "float64"]),
    ("string index", lambda d: ones(3, device=d)["a"],
     IndexError, "getitem:", ["str"]),
    # ------------------------------------------------- integer tensors asked for gradients
    ("int tensor requires grad", lambda d: ta.tensor([1, 2], device=d, requires_grad=True),
     TypeError, "requires_grad_:", ["floating-point", "int64"]),
    ("int zeros requires grad", lambda d: ta.zeros(2, dtype="int32", device=d,
                                                   requires_grad=True),
     TypeError, "requires_grad_:", ["floating-point", "int32"]),
    ("bool requires_grad_", lambda d: bools(2, device=d).requires_grad_(),
     TypeError, "requires_grad_:", ["floating-point", "bool"]),
    ("int Parameter", lambda d: nn.Parameter(ta.arange(3, device=d)),
     TypeError, "requires_grad_:", ["floating-point", "int64"]),
    ("grad of an int input", lambda d: ta.grad(ones(2, device=d, grad=True).sum(),
                                               ta.arange(2, device=d)),
     RuntimeError, "grad:", ["input 0", "does not require grad"]),
    ("frac of int", lambda d: ta.arange(3, device=d).frac(),
     TypeError, "frac:", ["floating-point", "int64"]),
    ("var of int", lambda d: ta.arange(3, device=d).var(),
     TypeError, "var:", ["floating-point", "int64"]),
    ("softmax of int", lambda d: F.softmax(ta.arange(3, device=d), dim=-1),
     TypeError, "softmax:", ["floating-point", "int64"]),
    ("dropout of int", lambda d: F.dropout(ta.arange(3, device=d), 0.5),
     TypeError, "dropout:", ["floating-point", "int64"]),
    ("layer_norm of int", lambda d: nn.LayerNorm(3).to(d)(ta.arange(3, device=d)),
     TypeError, "layer_norm:", ["floating-point", "int64"]),
    # ----------------------------------------------------------- non-numeric or ragged data
    ("ragged", lambda d: ta.tensor([[1.0, 2.0], [3.0]], device=d),
     TinyattnError, "tensor:", ["ragged"]),
    ("ragged deep", lambda d: ta.tensor([[[1.0, 2.0]], [[3.0]]], device=d),
     TinyattnError, "tensor:", ["ragged"]),
    ("a string", lambda d: ta.tensor("abc", device=d),
     TypeError, "tensor:", ["str"]),
    ("strings", lambda d: ta.tensor(["a", "b"], device=d),
     TypeError, "tensor:", ["numeric", "<U1"]),
    ("None", lambda d: ta.tensor(None, device=d),
     TypeError, "tensor:", ["NoneType"]),
    ("a dict", lambda d: ta.tensor({"a": 1.0}, device=d),
     TypeError, "tensor:", ["dict"]),
    ("complex", lambda d: ta.tensor([1j], device=d),
     TypeError, "tensor:", ["numeric", "complex128"]),
    ("unknown dtype", lambda d: ta.tensor([1.0], dtype="float8", device=d),
     TinyattnError, "unknown dtype", ["'float8'", "float32"]),
    ("unknown device", lambda d: ones(2, device=d).to("tpu"),
     TinyattnError, "unknown device", ["'tpu'", "'cpu'", "'cuda'"]),
    ("unknown strict device", lambda d: ta.zeros(2, device="strict:device9"),
     TinyattnError, "unknown device", ["'strict:device9'", "'strict:device2'"]),
    ("string operand", lambda d: ones(2, device=d) + "a",
     TypeError, "add:", ["str"]),
    ("negative size", lambda d: ta.zeros(2, -3, device=d),
     TinyattnError, "zeros:", ["(2, -3)", "non-negative"]),
    ("float size", lambda d: ta.randn(2.5, device=d),
     TypeError, "randn:", ["(2.5,)", "ints"]),
    ("fill value", lambda d: ta.full((2,), "a", device=d),
     TypeError, "full:", ["number", "str"]),
    ("zero step", lambda d: ta.arange(0, 3, 0, device=d),
     TinyattnError, "arange:", ["step", "zero"]),
    # ---------------------------------------------------- class targets, embedding indices
    ("target too large", lambda d: F.cross_entropy(ones(2, 3, device=d), ints([0, 3], d)),
     IndexError, "cross_entropy:", ["target value 3", "3 classes", "0..2"]),
    ("negative target", lambda d: F.cross_entropy(ones(2, 3, device=d), ints([-1, 0], d)),
     IndexError, "cross_entropy:", ["target value -1", "3 classes"]),
    ("target beside ignore_index",
     lambda d: F.cross_entropy(ones(2, 3, device=d), ints([-100, 7], d), ignore_index=-100),
     IndexError, "cross_entropy:", ["target value 7", "ignore_index=-100"]),
    ("float targets", lambda d: F.cross_entropy(ones(2, 3, device=d), [0.0, 1.0]),
     TypeError, "cross_entropy:", ["class-index targets must be integers", "float32"]),
    ("bool targets", lambda d: F.cross_entropy(ones(2, 3, device=d), bools(2, device=d)),
     TypeError, "cross_entropy:", ["class-index targets must be integers", "bool"]),
    ("targets shape", lambda d: F.cross_entropy(ones(2, 3, device=d), ints([0, 1, 2], d)),
     TinyattnError, "cross_entropy:", ["(3,)", "(2, 3)", "needs target of shape (2,)"]),
    ("integer logits", lambda d: F.cross_entropy(ta.arange(6, device=d).reshape(2, 3),
                                                 ints([0, 1], d)),
     TypeError, "cross_entropy:", ["floating-point", "int64"]),
    ("reduction", lambda d: F.cross_entropy(ones(2, 3, device=d), ints([0, 1], d),
                                            reduction="avg"),
     TinyattnError, "cross_entropy:", ["reduction", "'avg'"]),
    ("label smoothing", lambda d: F.cross_entropy(ones(2, 3, device=d), ints([0, 1], d),
                                                  label_smoothing=1.5),
     TinyattnError, "cross_entropy:", ["label_smoothing", "1.5"]),
    ("embedding index", lambda d: F.embedding(ints([0, 7], d), ones(5, 2, device=d)),
     IndexError, "embedding:", ["index 7", "5 embeddings", "0..4", "(2,)"]),
    ("negative embedding index", lambda d: F.embedding(ints([[-1]], d), ones(5, 2, device=d)),
     IndexError, "embedding:", ["index -1", "5 embeddings", "(1, 1)"]),
    ("float embedding indices", lambda d: nn.Embedding(5, 2).to(d)(ones(2, device=d)),
     TypeError, "embedding:", ["integers", "float64"]),
    ("embedding weight", lambda d: F.embedding(ints([0], d), ones(5, device=d)),
     TinyattnError, "embedding:", ["2-D", "(5,)"]),
    # ---------------------------------------------------------------- hyper-parameters
    ("negative lr", lambda d: optim.SGD([ones(2, device=d, grad=True)], lr=-0.1),
     TinyattnError, "SGD:", ["lr", "-0.1"]),
    ("NaN lr", lambda d: optim.Adam([ones(2, device=d, grad=True)], lr=math.nan),
     TinyattnError, "Adam:", ["lr", "nan"]),
    ("string lr", lambda d: optim.SGD([ones(2, device=d, grad=True)], lr="0.1"),
     TinyattnError, "SGD:", ["lr", "'0.1'"]),
    ("negative momentum", lambda d: optim.SGD([ones(2, device=d, grad=True)], lr=0.1,
                                              momentum=-0.9),
     TinyattnError, "SGD:", ["momentum", "-0.9"]),
    ("nesterov without momentum", lambda d: optim.SGD([ones(2, device=d, grad=True)], lr=0.1,
                                                      nesterov=True),
     TinyattnError, "SGD:", ["nesterov", "momentum > 0"]),
    ("beta2 of 1", lambda d: optim.Adam([ones(2, device=d, grad=True)], betas=(0.9, 1.0)),
     TinyattnError, "Adam:", ["beta at index 1", "1.0", "[0.0, 1.0)"]),
    ("negative beta1", lambda d: optim.AdamW([ones(2, device=d, grad=True)], betas=(-0.1, 0.9)),
     TinyattnError, "AdamW:", ["beta at index 0", "-0.1"]),
    ("three betas", lambda d: optim.Adam([ones(2, device=d, grad=True)], betas=(0.9,) * 3),
     TinyattnError, "Adam:", ["pair", "(0.9, 0.9, 0.9)"]),
    ("negative Adam eps", lambda d: optim.Adam([ones(2, device=d, grad=True)], eps=-1e-8),
     TinyattnError, "Adam:", ["eps", "-1e-08"]),
    ("negative weight decay", lambda d: optim.AdamW([ones(2, device=d, grad=True)],
                                                    weight_decay=-1.0),
     TinyattnError, "AdamW:", ["weight_decay", "-1.0"]),
    ("non-leaf parameter", lambda d: optim.SGD([ones(2, device=d, grad=True) * 2.0], lr=0.1),
     TinyattnError, "SGD:", ["parameter 0", "(2,)", "not a leaf"]),
    ("no parameters", lambda d: optim.Adam([]),
     TinyattnError, "Adam:", ["empty parameter list"]),
    ("negative max_norm", lambda d: optim.clip_grad_norm([ones(2, device=d, grad=True)], -1.0),
     TinyattnError, "clip_grad_norm:", ["max_norm", "-1.0"]),
    ("dropout p", lambda d: F.dropout(ones(3, device=d), p=1.5),
     TinyattnError, "dropout:", ["[0, 1]", "1.5"]),
    ("Dropout p", lambda d: nn.Dropout(-0.1),
     TinyattnError, "Dropout:", ["[0, 1]", "-0.1"]),
    ("attention dropout_p", lambda d: F.scaled_dot_product_attention(
        *[ones(2, 3, device=d)] * 3, dropout_p=-0.5),
     TinyattnError, "scaled_dot_product_attention:", ["dropout_p", "-0.5"]),
    ("heads do not divide", lambda d: nn.MultiHeadAttention(10, 3),
     TinyattnError, "MultiHeadAttention:", ["d_model=10", "num_heads=3"]),
    ("zero heads", lambda d: nn.MultiHeadAttention(8, 0),
     TinyattnError, "MultiHeadAttention:", ["num_heads", "0"]),
    ("attention dropout", lambda d: nn.MultiHeadAttention(8, 2, dropout=2.0),
     TinyattnError, "MultiHeadAttention:", ["dropout", "2.0"]),
    ("LayerNorm eps 0", lambda d: nn.LayerNorm(4, eps=0.0),
     TinyattnError, "LayerNorm:", ["eps", "0.0"]),
    ("LayerNorm eps NaN", lambda d: nn.LayerNorm(4, eps=math.nan),
     TinyattnError, "LayerNorm:", ["eps", "nan"]),
    ("layer_norm eps", lambda d: F.layer_norm(ones(2, 4, device=d), 4, eps=-1.0),
     TinyattnError, "layer_norm:", ["eps", "-1.0"]),
    ("Linear size", lambda d: nn.Linear(0, 3),
     TinyattnError, "Linear:", ["in_features", "0"]),
    ("activation", lambda d: nn.TransformerBlock(8, 2, 16, activation="swish"),
     TinyattnError, "TransformerBlock:", ["activation", "'swish'"]),
    ("causal_mask size", lambda d: F.causal_mask(2.5),
     TinyattnError, "causal_mask:", ["Tq=2.5"]),
    # --------------------------------------------------------- wrong-width inputs to modules
    ("Linear width", lambda d: nn.Linear(4, 3).to(d)(ones(2, 5, device=d)),
     TinyattnError, "linear:", ["(2, 5)", "5 features", "(3, 4)", "expects 4"]),
    ("linear bias", lambda d: F.linear(ones(2, 3, device=d), ones(4, 3, device=d),
                                       ones(3, device=d)),
     TinyattnError, "linear:", ["bias", "(3,)", "(4, 3)", "(4,)"]),
    ("LayerNorm width", lambda d: nn.LayerNorm(4).to(d)(ones(2, 5, device=d)),
     TinyattnError, "layer_norm:", ["(4,)", "(2, 5)"]),
    ("attention width", lambda d: mha(d)(ones(2, 3, 6, device=d, dtype="float32")),
     TinyattnError, "MultiHeadAttention:", ["query", "(2, 3, 6)", "width 6", "d_model is 8"]),
    ("attention rank", lambda d: mha(d)(x8(1, 2, 3, device=d)),
     TinyattnError, "MultiHeadAttention:", ["(B, T, C)", "(1, 2, 3, 8)"]),
    ("attention key batch", lambda d: mha(d)(x8(2, 3, device=d), x8(3, 5, device=d)),
     TinyattnError, "MultiHeadAttention:", ["(2, 3, 8)", "(3, 5, 8)", "batch"]),
    ("attention key/value length", lambda d: mha(d)(x8(2, 3, device=d), x8(2, 5, device=d),
                                                    x8(2, 6, device=d)),
     TinyattnError, "MultiHeadAttention:", ["key", "(2, 5, 8)", "value", "(2, 6, 8)"]),
    ("block width", lambda d: nn.TransformerBlock(4, 2, 8).to(d)(x8(2, 3, device=d)),
     TinyattnError, "MultiHeadAttention:", ["(2, 3, 8)", "width 8", "d_model is 4"]),
    ("positions width", lambda d: nn.LearnedPositionalEmbedding(4, 6).to(d)(x8(3, device=d)),
     TinyattnError, "LearnedPositionalEmbedding:", ["(T, 6)", "(3, 8)"]),
    ("positions length", lambda d: nn.SinusoidalPositionalEncoding(4, 8).to(d)(x8(5,
                                                                                  device=d)),
     TinyattnError, "SinusoidalPositionalEncoding:", ["length 5", "max_len=4"]),
    # --------------------------------------------------------------------------- masks
    ("attention mask shape", lambda d: F.scaled_dot_product_attention(
        ones(2, 3, 4, device=d), ones(2, 5, 4, device=d), ones(2, 5, 4, device=d),
        attn_mask=bools(3, 4, device=d)),
     TinyattnError, "scaled_dot_product_attention:", ["mask", "(3, 4)", "(2, 3, 5)"]),
    ("integer attention mask", lambda d: F.scaled_dot_product_attention(
        *[ones(2, 3, device=d)] * 3, attn_mask=ints([[0, 1], [1, 0]], d)),
     TypeError, "scaled_dot_product_attention:", ["bool", "floating", "int64"]),
    ("query/key width", lambda d: F.scaled_dot_product_attention(
        ones(2, 3, 4, device=d), ones(2, 5, 3, device=d), ones(2, 5, 4, device=d)),
     TinyattnError, "scaled_dot_product_attention:", ["(2, 3, 4)", "(2, 5, 3)", "4 != 3"]),
    ("key/value length", lambda d: F.scaled_dot_product_attention(
        ones(2, 3, 4, device=d), ones(2, 5, 4, device=d), ones(2, 6, 4, device=d)),
     TinyattnError, "scaled_dot_product_attention:", ["(2, 5, 4)", "(2, 6, 4)", "5 != 6"]),
    ("MHA 2-D mask", lambda d: mha(d)(x8(2, 3, device=d), mask=bools(3, 4, device=d)),
     TinyattnError, "MultiHeadAttention:", ["mask", "(3, 4)", "(2, 2, 3, 3)"]),
    ("MHA 3-D mask", lambda d: mha(d)(x8(2, 3, device=d), mask=bools(3, 3, 3, device=d)),
     TinyattnError, "MultiHeadAttention:", ["mask", "(3, 3, 3)", "(2, 2, 3, 3)"]),
    ("MHA float mask", lambda d: mha(d)(x8(2, 3, device=d), mask=ones(3, 3, device=d)),
     TypeError, "MultiHeadAttention:", ["bool", "float64"]),
    ("MHA integer query", lambda d: mha(d)(ta.ones(2, 3, 8, dtype="int64", device=d)),
     TypeError, "MultiHeadAttention:", ["floating-point", "int64"]),
    # ---------------------------------------------------------------------- state dicts
    ("missing key", lambda d: load_edited(d, lambda s: s.pop("bias")),
     RuntimeError, "load_state_dict:", ["Linear", "missing", "'bias'", "nothing was changed"]),
    ("unexpected key", lambda d: load_edited(d, lambda s: s.update(extra=ta.ones(2))),
     RuntimeError, "load_state_dict:", ["unexpected", "'extra'"]),
    ("mis-shaped key", lambda d: load_edited(d, lambda s: s.update(weight=ta.ones(3, 2))),
     RuntimeError, "load_state_dict:", ["'weight'", "(3, 2)", "(2, 3)"]),
    ("unconvertible value", lambda d: load_edited(d, lambda s: s.update(bias="zeros")),
     RuntimeError, "load_state_dict:", ["'bias'", "str"]),
    ("optimizer state shape", lambda d: sgd_state((3,), d),
     TinyattnError, "SGD.load_state_dict:", ["momentum_buffer", "(3,)", "(2,)"]),
    ("optimizer of another kind", adam_state_into_sgd,
     TinyattnError, "SGD.load_state_dict:", ["betas", "another optimizer"]),
    ("optimizer groups", lambda d: optim.SGD([ones(2, device=d, grad=True)], lr=0.1)
     .load_state_dict({"state": {}, "param_groups": []}),
     TinyattnError, "SGD.load_state_dict:", ["0 parameter group", "has 1"]),
    # -------------------------------------------------------------------------- backward
    ("backward twice", backward_twice,
     RuntimeError, "Sum:", ["second time", "retain_graph=True"]),
    ("grad twice", grad_twice,
     RuntimeError, "Sum:", ["second time", "retain_graph=True"]),
    ("backward non-scalar", lambda d: (ones(2, 3, device=d, grad=True) * 2.0).backward(),
     RuntimeError, "backward:", ["(2, 3)", "single-element"]),
    ("grad non-scalar", lambda d: ta.grad(ones(2, device=d, grad=True) * 2.0,
                                          ones(1, device=d, grad=True)),
     RuntimeError, "grad:", ["(2,)", "single-element"]),
    ("backward without a graph", under_no_grad,
     RuntimeError, "backward:", ["does not require grad", "no_grad"]),
    ("backward gradient shape", lambda d: (ones(2, device=d, grad=True) * 2.0)
     .backward(ones(3, device=d)),
     RuntimeError, "backward:", ["(3,)", "(2,)"]),
    ("grad of a float", lambda d: ta.grad(ones(2, device=d, grad=True).sum(), [1.0]),
     TypeError, "grad:", ["input 0", "float"]),
    ("custom gradient shape", lambda d: WrongShapeGrad.apply(ones(3, device=d, grad=True))
     .sum().backward(),
     RuntimeError, "WrongShapeGrad.backward", ["shape ()", "(3,)"]),
    ("custom gradient count", lambda d: TwoGrads.apply(ones(3, device=d, grad=True))
     .sum().backward(),
     RuntimeError, "TwoGrads.backward", ["2 gradient", "1 input"]),
    ("gradcheck without inputs", lambda d: ta.gradcheck(lambda x: x, (ones(2, device=d),)),
     TinyattnError, "gradcheck:", ["no input requires grad"]),
    ("step gradient shape", lambda d: step_with_grad(ones(3, device=d), d),
     RuntimeError, "assigned grad has shape", ["(2,)", "(3,)"]),
    # ------------------------------------------------------------ devices and backends
    ("add across devices", lambda d: ones(3, device="cpu") + ones(3, device="strict"),
     RuntimeError, "add:", ["'cpu'", "'strict:device1'", ".to(device)"]),
    ("matmul across devices", lambda d: ones(2, 3, device="strict") @ ones(3, device="cpu"),
     RuntimeError, "matmul:", ["'strict:device1'", "'cpu'"]),
    ("two strict devices",
     lambda d: ones(2, device="strict") * ones(2, device="strict:device2"),
     RuntimeError, "mul:", ["'strict:device1'", "'strict:device2'"]),
    ("concat across devices", lambda d: ta.concat([ones(2, device="cpu"),
                                                   ones(2, device="strict")]),
     RuntimeError, "concat:", ["'cpu'", "'strict:device1'"]),
    ("linear across devices", lambda d: F.linear(ones(4, 3, device="cpu"),
                                                 ones(2, 3, device="strict")),
     RuntimeError, "linear:", ["'cpu'", "'strict:device1'"]),
    ("layer_norm weight on another device",
     lambda d: F.layer_norm(ones(2, 3, device="cpu"), 3, ones(3, device="strict")),
     RuntimeError, "layer_norm:", ["'cpu'", "'strict:device1'"]),
    ("to a number", lambda d: ones(3, device=d).to(5),
     TypeError, "to:", ["device", "dtype", "5"]),
    ("targets on another device", lambda d: F.cross_entropy(ones(2, 3, device="cpu"),
                                                            ints([0, 1], "strict")),
     RuntimeError, "cross_entropy:", ["'strict:device1'", "'cpu'"]),
    ("indices on another device", lambda d: F.embedding(ints([0], "strict"),
                                                        ones(5, 2, device="cpu")),
     RuntimeError, "embedding:", ["'strict:device1'", "'cpu'"]),
    ("mask on another device", lambda d: F.scaled_dot_product_attention(
        *[ones(2, 3, device="cpu")] * 3, attn_mask=bools(2, 2, device="strict")),
     RuntimeError, "scaled_dot_product_attention:", ["'strict:device1'", "'cpu'"]),
    ("MHA mask on another device", lambda d: mha("cpu")(x8(2, 3, device="cpu"),
                                                      mask=bools(3, 3, device="strict")),
     RuntimeError, "MultiHeadAttention:", ["'strict:device1'", "'cpu'"]),
    ("backward gradient device", lambda d: (ones(2, device="cpu", grad=True) * 2.0)
     .backward(ones(2, device="strict")),
     RuntimeError, "backward:", ["'strict:device1'", "'cpu'"]),
    ("step gradient device", lambda d: step_with_grad(ones(2, device="strict"), "cpu"),
     RuntimeError, "assigned grad has device", ["'cpu'", "'strict:device1'", "(2,)"]),
    ("a raw strict array", lambda d: ones(3, device="cpu") + strict_array(),
     TypeError, "add:", ["array_api_strict.Array", "ta.tensor"]),
    ("implicit NumPy conversion", lambda d: np.asarray(ones(2, device="strict")),
     TypeError, "__array__:", ["'strict:device1'", ".numpy()"]),
    # ------------------------------------------------------- .item(), bool(), len()
    ("item of many", lambda d: ones(2, 3, device=d).item(),
     TinyattnError, "item:", ["one-element", "(2, 3)"]),
    ("item of none", lambda d: ones(0, device=d).item(),
     TinyattnError, "item:", ["one-element", "(0,)"]),
    ("float of many", lambda d: float(ones(3, device=d)),
     TinyattnError, "item:", ["(3,)"]),
    ("bool of many", lambda d: bool(ones(2, device=d)),
     TinyattnError, "bool:", ["ambiguous", "(2,)"]),
    ("if on a comparison", lambda d: 1 if ones(2, device=d) > 0 else 0,
     TinyattnError, "bool:", ["ambiguous", "(2,)", ".any()"]),
    ("len of 0-d", lambda d: len(ones(device=d)),
     TypeError, "len:", ["0-d", "()"]),
    # ------------------------------------------------------------------------ files
    ("save a lambda", lambda d: save_to_tmp({"w": lambda: 0}),
     TypeError, "save:", ["<lambda>", "'w'", "import path"]),
    ("save a generator", lambda d: save_to_tmp({"w": (i for i in range(2))}),
     TypeError, "save:", ["generator", "'w'", "__reduce__"]),
    ("save to no directory", lambda d: ta.save({}, os.path.join(PACKAGE, "no", "x.npz")),
     FileNotFoundError, "save:", ["directory", "does not exist"]),
    ("load no file", lambda d: ta.load(os.path.join(PACKAGE, "no-such-file.npz")),
     FileNotFoundError, "load:", ["no-such-file.npz"]),
    ("load a text file", load_text,
     TinyattnError, "load:", ["notes.txt", "not an .npz archive", "b'not a '"]),
]  # fmt: skip


def test_the_catalogue_is_large_and_its_ids_are_unique():
    names = [row[0] for row in CATALOGUE]
    assert len(names) >= 50
    assert len(set(names)) == len(names)


def _raised_by_tinyattn(error: BaseException) -> bool:
    """The innermost frame of the traceback is tinyattn's, not NumPy's or array_api_strict's."""
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(PACKAGE)


@pytest.mark.parametrize(
    "name,call,error,prefix,facts", CATALOGUE, ids=[row[0] for row in CATALOGUE]
)
def test_wrong_use_gets_a_clear_error(device, name, call, error, prefix, facts):
    with pytest.raises(error) as info:
        call(device)
    assert type(info.value) is error  # not a subclass that happens to match
    message = str(info.value)
    assert message.startswith(prefix), f"{message!r} does not start with {prefix!r}"
    missing = [fact for fact in facts if fact not in message]
    assert not missing, f"{message!r} lacks {missing}"
    assert _raised_by_tinyattn(info.value), (
        f"raised outside tinyattn: {traceback.format_tb(info.value.__traceback__)[-1]}"
    )


# ------------------------------------------------------ Hypothesis: more broadcast mismatches
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "maximum": ta.maximum,
    "lt": lambda a, b: a < b,
}


@st.composite
def mismatched_shapes(draw):
    """Two shapes that do not broadcast: one trailing-aligned axis differs with neither size 1."""
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    axis = draw(st.integers(0, len(shape) - 1))
    shape[axis] = draw(st.integers(2, 4))
    other = list(shape)
    other[axis] = draw(st.integers(2, 5).filter(lambda n: n != shape[axis]))
    lead = draw(st.lists(st.integers(1, 3), max_size=1))
    return tuple(shape), tuple(lead + other)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(BINARY)), shapes=mismatched_shapes())
def test_any_broadcast_mismatch_names_the_op_and_both_shapes(name, shapes):
    a_shape, b_shape = shapes
    with pytest.raises(TinyattnError) as info:
        BINARY[name](ta.ones(*a_shape), ta.ones(*b_shape))
    message = str(info.value)
    assert message == f"{name}: shapes {a_shape} and {b_shape} cannot be broadcast together"
