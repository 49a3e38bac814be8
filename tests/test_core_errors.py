"""Errors teach: each mistake raises a specific exception whose message names the op and the facts.

One table: a call that must fail, the exception type, and the fragments the message must hold
(the op's name and both shapes, both devices, the dtype, the reason). Runs on every backend; the
device-mixing rows pair the host with the strict device and need no GPU.
"""

from __future__ import annotations

import pytest

import tinyattn as ta


def _ones(*shape, device, grad=False):
    return ta.ones(*shape, dtype="float64", device=device, requires_grad=grad)


ERRORS = [
    # (name, call(device), exception type, fragments the message must contain)
    # ------------------------------------------------------------------ shape mismatches
    ("matmul inner", lambda d: _ones(2, 3, device=d) @ _ones(4, 5, device=d),
     ValueError, ["matmul", "(2, 3)", "(4, 5)", "3 != 4"]),
    ("matmul vectors", lambda d: _ones(3, device=d) @ _ones(4, device=d),
     ValueError, ["matmul", "(3,)", "(4,)"]),
    ("matmul batch", lambda d: _ones(2, 3, 4, device=d) @ _ones(3, 4, 5, device=d),
     ValueError, ["matmul", "(2, 3, 4)", "(3, 4, 5)", "broadcast"]),
    ("matmul 0-d", lambda d: _ones(3, device=d) @ _ones(device=d),
     ValueError, ["matmul", "(3,)", "()", "at least 1 dimension"]),
    ("add broadcast", lambda d: _ones(2, 3, device=d) + _ones(4, device=d),
     ValueError, ["add", "(2, 3)", "(4,)", "broadcast"]),
    ("sub broadcast", lambda d: _ones(2, 3, device=d) - _ones(2, 1, 2, device=d),
     ValueError, ["sub", "(2, 3)", "(2, 1, 2)"]),
    ("mul broadcast", lambda d: _ones(2, 3, device=d) * _ones(3, 2, device=d),
     ValueError, ["mul", "(2, 3)", "(3, 2)"]),
    ("div broadcast", lambda d: 1.0 / _ones(3, device=d) / _ones(2, device=d),
     ValueError, ["div", "(3,)", "(2,)"]),
    ("maximum broadcast", lambda d: ta.maximum(_ones(2, device=d), _ones(3, device=d)),
     ValueError, ["maximum", "(2,)", "(3,)"]),
    ("where broadcast", lambda d: ta.where(_ones(3, device=d) > 0, _ones(2, device=d), 0.0),
     ValueError, ["where", "(3,)", "(2,)"]),
    ("comparison broadcast", lambda d: _ones(2, device=d) < _ones(3, device=d),
     ValueError, ["lt", "(2,)", "(3,)"]),
    ("reshape count", lambda d: _ones(2, 3, device=d).reshape(4, 2),
     ValueError, ["reshape", "(2, 3)", "(4, 2)", "6 elements", "8 elements"]),
    ("reshape -1", lambda d: _ones(2, 3, device=d).reshape(-1, 4),
     ValueError, ["reshape", "(2, 3)", "(-1, 4)"]),
    ("broadcast_to", lambda d: _ones(2, 3, device=d).broadcast_to(3, 3),
     ValueError, ["broadcast_to", "(2, 3)", "(3, 3)"]),
    ("concat", lambda d: ta.concat([_ones(2, 3, device=d), _ones(3, 3, device=d)], axis=1),
     ValueError, ["concat", "(2, 3)", "(3, 3)"]),
    ("stack", lambda d: ta.stack([_ones(2, 3, device=d), _ones(3, 3, device=d)]),
     ValueError, ["stack", "(2, 3)", "(3, 3)"]),
    ("permute", lambda d: _ones(2, 3, device=d).permute(0, 0),
     ValueError, ["permute", "(0, 0)", "(2, 3)"]),
    ("squeeze", lambda d: _ones(2, 3, device=d).squeeze(2),
     ValueError, ["squeeze", "axis 2", "2 dimension"]),
    ("axis out of range", lambda d: _ones(2, 3, device=d).sum(axis=2),
     ValueError, ["sum", "axis 2", "2 dimension"]),
    ("index out of range", lambda d: _ones(2, 3, device=d)[2],
     IndexError, ["getitem", "index 2", "size 2"]),
    ("gather out of range", lambda d: _ones(2, 3, device=d)[[0, 5]],
     IndexError, ["getitem", "index 5", "size 2"]),
    ("too many indices", lambda d: _ones(2, 3, device=d)[0, 0, 0],
     IndexError, ["getitem", "too many indices", "(2, 3)"]),
    # -------------------------------------------------------------------------- backward
    ("backward non-scalar", lambda d: (_ones(2, 3, device=d, grad=True) * 2.0).backward(),
     RuntimeError, ["backward", "(2, 3)", "single-element", "gradient"]),
    ("backward without grad", lambda d: _ones(2, device=d).sum().backward(),
     RuntimeError, ["backward", "does not require grad"]),
    ("backward under no_grad", lambda d: _no_grad_loss(d).backward(),
     RuntimeError, ["does not require grad", "no_grad"]),
    ("backward wrong gradient shape",
     lambda d: (_ones(2, device=d, grad=True) * 2.0).backward(_ones(3, device=d)),
     RuntimeError, ["backward", "(3,)", "(2,)"]),
    ("grad non-scalar", lambda d: ta.grad(_ones(2, device=d, grad=True) * 2.0, []),
     RuntimeError, ["grad", "(2,)", "single-element"]),
    ("grad input without grad", lambda d: ta.grad(_ones(2, device=d, grad=True).sum(),
                                                  _ones(2, device=d)),
     RuntimeError, ["grad", "input 0", "does not require grad"]),
    # ---------------------------------------------------------------------------- dtypes
    ("int requires_grad", lambda d: ta.tensor([1, 2], device=d, requires_grad=True),
     TypeError, ["floating-point", "int64"]),
    ("int requires_grad_", lambda d: ta.arange(3, device=d).requires_grad_(),
     TypeError, ["requires_grad_", "floating-point", "int64"]),
    ("softmax of int", lambda d: ta.arange(3, device=d).softmax(0),
     TypeError, ["softmax", "floating-point", "int64"]),
    ("where non-bool", lambda d: ta.where(_ones(2, device=d), _ones(2, device=d), 0.0),
     TypeError, ["where", "bool", "float64"]),
    ("bool mask beside a slice", lambda d: _ones(2, 3, device=d)[:, _ones(2, device=d) > 0],
     IndexError, ["getitem", "mask (2,)", "(3,)"]),
    ("bool mask shape", lambda d: _ones(2, 3, device=d)[_ones(3, device=d) > 0],
     IndexError, ["getitem", "(3,)", "(2, 3)"]),
    ("float index", lambda d: _ones(3, device=d)[ta.tensor([0.0, 1.0], device=d)],
     IndexError, ["getitem", "long, int, byte or bool", "float32"]),
    # ----------------------------------------------------------------------- conversions
    ("item of many", lambda d: _ones(2, 3, device=d).item(),
     ValueError, ["item", "one-element", "(2, 3)"]),
    ("bool of many", lambda d: bool(_ones(2, device=d)),
     ValueError, ["ambiguous", "(2,)"]),
    ("ragged data", lambda d: ta.tensor([[1.0, 2.0], [3.0]], device=d),
     ValueError, ["ragged"]),
    ("string data", lambda d: ta.tensor("abc", device=d),
     TypeError, ["tensor", "str"]),
    ("string operand", lambda d: _ones(2, device=d) + "a",
     TypeError, ["add", "str"]),
    ("unknown device", lambda d: _ones(2, device=d).to("tpu"),
     ValueError, ["unknown device 'tpu'", "'cpu'", "'cuda'"]),
    # ------------------------------------------------------- PyTorch's composed spellings
    ("t of 3 dims", lambda d: _ones(2, 3, 4, device=d).t(),
     ValueError, ["t:", "at most 2 dims", "(2, 3, 4)", "transpose"]),
    ("mm of a batch", lambda d: _ones(2, 3, 4, device=d).mm(_ones(4, 2, device=d)),
     ValueError, ["mm", "2 and 2 dims", "(2, 3, 4)", "(4, 2)"]),
    ("bmm of matrices", lambda d: ta.bmm(_ones(3, 4, device=d), _ones(4, 2, device=d)),
     ValueError, ["bmm", "3 and 3 dims", "(3, 4)"]),
    ("dot of a matrix", lambda d: _ones(3, device=d).dot(_ones(3, 1, device=d)),
     ValueError, ["dot", "1 and 1 dims", "(3, 1)"]),
    ("bmm batches apart", lambda d: _ones(2, 3, 4, device=d).bmm(_ones(3, 4, 2, device=d)),
     ValueError, ["bmm", "(2, 3, 4)", "(3, 4, 2)", "do not fit"]),
    ("mv inner sizes", lambda d: _ones(2, 3, device=d).mv(_ones(4, device=d)),
     ValueError, ["mv", "(2, 3)", "(4,)", "do not fit"]),
    ("movedim out of range", lambda d: _ones(2, 3, device=d).movedim(5, 0),
     ValueError, ["movedim", "axis 5", "2 dimension"]),
    ("sort dim out of range", lambda d: _ones(2, 3, device=d).sort(dim=2),
     ValueError, ["sort", "axis 2", "2 dimension"]),
    ("roll dim out of range", lambda d: _ones(2, 3, device=d).roll(1, -3),
     ValueError, ["roll", "axis -3", "2 dimension"]),
    ("isclose broadcast", lambda d: _ones(2, 3, device=d).isclose(_ones(2, device=d)),
     ValueError, ["isclose", "(2, 3)", "(2,)"]),
    ("narrow past the end", lambda d: _ones(2, 3, device=d).narrow(1, 2, 2),
     IndexError, ["narrow", "start 2", "length 2", "(2, 3)"]),
    ("select dim out of range", lambda d: _ones(2, 3, device=d).select(2, 0),
     IndexError, ["select", "dim 2", "(2, 3)"]),
    ("index_select float index", lambda d: _ones(2, 3, device=d).index_select(
        1, ta.tensor([0.0], device=d)), TypeError, ["index_select", "integer", "float32"]),
    ("index_select 2-d index", lambda d: _ones(2, 3, device=d).index_select(
        1, ta.tensor([[0]], device=d)), ValueError, ["index_select", "1-D"]),
    ("randperm negative", lambda d: ta.randperm(-1, device=d),
     ValueError, ["randperm", "n must be an int >= 0", "-1"]),
    ("linspace float steps", lambda d: ta.linspace(0, 1, 2.5, device=d),
     ValueError, ["linspace", "steps", "2.5"]),
    ("eye negative", lambda d: ta.eye(2, -1, device=d),
     ValueError, ["eye", "m must be", "-1"]),
    ("diag of 3 dims", lambda d: _ones(2, 3, 4, device=d).diag(),
     ValueError, ["diag", "1-D or 2-D", "(2, 3, 4)"]),
    ("addmm input too large", lambda d: _ones(3, 3, device=d).addmm(
        _ones(2, 4, device=d), _ones(4, 3, device=d)), ValueError, ["addmm", "(3, 3)", "(2, 3)"]),
    ("repeat_interleave negative", lambda d: _ones(3, device=d).repeat_interleave(-1),
     ValueError, ["repeat_interleave", ">= 0", "-1"]),
    ("repeat_interleave counts", lambda d: _ones(3, device=d).repeat_interleave(
        ta.tensor([1, 2], device=d)), ValueError, ["repeat_interleave", "(2,)", "3 entries"]),
    ("repeat_interleave dim", lambda d: _ones(3, device=d).repeat_interleave(2, dim=1),
     IndexError, ["repeat_interleave", "dim 1", "(3,)"]),
    ("diff negative n", lambda d: _ones(3, device=d).diff(n=-1),
     ValueError, ["diff", "n must be", "-1"]),
    ("masked_select float mask", lambda d: _ones(3, device=d).masked_select(_ones(3, device=d)),
     TypeError, ["masked_select", "bool", "got float"]),
    ("masked_select shapes", lambda d: _ones(3, device=d).masked_select(
        ta.tensor([True, False], device=d)), ValueError, ["masked_select", "(3,)", "(2,)"]),
    ("meshgrid indexing", lambda d: ta.meshgrid(_ones(2, device=d), indexing="ji"),
     ValueError, ["meshgrid", "'ij' or 'xy'", "'ji'"]),
    ("meshgrid of a matrix", lambda d: ta.meshgrid(_ones(2, 2, device=d)),
     ValueError, ["meshgrid", "1-D"]),
    ("lerp of integers", lambda d: ta.tensor([1, 2], device=d).lerp(ta.tensor([3, 4], device=d),
     0.5), TypeError, ["lerp", "int64"]),
    ("frac of integers", lambda d: ta.tensor([1, 2], device=d).frac(),
     TypeError, ["frac", "int64"]),
    ("retain_grad without grad", lambda d: _ones(2, device=d).retain_grad(),
     RuntimeError, ["retain_grad", "does not require grad"]),
    ("prod axis out of range", lambda d: _ones(2, 3, device=d).prod(2),
     ValueError, ["prod", "axis 2", "2 dimension"]),
    ("cumprod dim out of range", lambda d: _ones(2, 3, device=d).cumprod(-3),
     ValueError, ["cumprod", "axis -3", "2 dimension"]),
    ("bincount negative", lambda d: ta.tensor([1, -2], device=d).bincount(),
     ValueError, ["bincount", ">= 0", "-2"]),
    ("bincount of a matrix", lambda d: ta.tensor([[1]], device=d).bincount(),
     ValueError, ["bincount", "1-D", "(1, 1)"]),
    ("bincount of floats", lambda d: _ones(2, device=d).bincount(),
     TypeError, ["bincount", "integer", "float"]),
    ("bincount weights shape", lambda d: ta.tensor([1, 2], device=d).bincount(
        _ones(3, device=d)), ValueError, ["bincount", "(3,)", "(2,)"]),
    ("unique dim out of range", lambda d: _ones(2, 3, device=d).unique(dim=2),
     ValueError, ["unique", "axis 2", "2 dimension"]),
    ("MSELoss reduce=False", lambda d: ta.nn.MSELoss(reduce=False),
     NotImplementedError, ["MSELoss", "size_average= and reduce=", "reduction="]),
    ("BCELoss size_average", lambda d: ta.nn.BCELoss(size_average=False),
     NotImplementedError, ["BCELoss", "reduction="]),
    ("cross_entropy weight shape", lambda d: ta.nn.functional.cross_entropy(
        _ones(2, 3, device=d), ta.tensor([0, 1], device=d), weight=_ones(4, device=d)),
     ValueError, ["cross_entropy", "one entry per class", "(3,)", "(4,)"]),
    ("exp_ of a leaf", lambda d: _ones(2, device=d, grad=True).exp_(),
     RuntimeError, ["exp_", "leaf"]),
    ("clamp tensor bound shapes", lambda d: _ones(2, 3, device=d).clamp(min=_ones(4, device=d)),
     ValueError, ["clip", "(2, 3)", "(4,)"]),
    ("where with one branch", lambda d: ta.where(_ones(2, device=d) > 0, _ones(2, device=d)),
     TypeError, ["where", "both a and b, or neither"]),
    ("glu odd size", lambda d: ta.nn.functional.glu(_ones(2, 3, device=d)),
     ValueError, ["glu", "(2, 3)", "even"]),
    ("lerp shapes", lambda d: _ones(3, device=d).lerp(_ones(4, device=d), 0.5),
     ValueError, ["lerp", "(3,)", "(4,)"]),
    ("lerp weight shape", lambda d: _ones(3, device=d).lerp(_ones(3, device=d),
     _ones(4, device=d)), ValueError, ["lerp", "(3,)", "(4,)"]),
    ("addmm of vectors", lambda d: ta.addmm(_ones(3, device=d), _ones(3, device=d),
     _ones(3, device=d)), ValueError, ["addmm", "2 and 2 dims", "(3,)"]),
    ("addmm inner sizes", lambda d: ta.addmm(_ones(2, 2, device=d), _ones(2, 3, device=d),
     _ones(4, 2, device=d)), ValueError, ["addmm", "(2, 3)", "(4, 2)", "do not fit"]),
    ("sum unknown dtype", lambda d: _ones(2, device=d).sum(dtype="float7"),
     ValueError, ["sum", "unknown dtype", "float7"]),
    ("prod unknown dtype", lambda d: _ones(2, device=d).prod(dtype="x"),
     ValueError, ["prod", "unknown dtype"]),
    ("nan_to_num string", lambda d: _ones(2, device=d).nan_to_num(nan="a"),
     TypeError, ["nan_to_num", "nan must be a number", "'a'"]),
    ("cosine_similarity dim", lambda d: ta.cosine_similarity(_ones(2, 3, device=d),
     _ones(2, 3, device=d), dim=3), ValueError, ["cosine_similarity", "axis 3", "2 dimension"]),
    ("normalize p", lambda d: ta.nn.functional.normalize(_ones(2, 3, device=d), p="nuc"),
     ValueError, ["normalize", "p='nuc'"]),
    ("trace 3-d", lambda d: _ones(2, 3, 4, device=d).trace(),
     ValueError, ["trace", "2-D", "(2, 3, 4)"]),
    ("logaddexp broadcast", lambda d: ta.logaddexp(_ones(2, 3, device=d), _ones(2, device=d)),
     ValueError, ["logaddexp", "(2, 3)", "(2,)"]),
    ("logaddexp integers", lambda d: ta.logaddexp(ta.ones(2, dtype="int64", device=d),
     ta.ones(2, dtype="int32", device=d)), NotImplementedError, ["logaddexp", "int64"]),
    ("hstack not a list", lambda d: ta.hstack(_ones(2, device=d)),
     TypeError, ["hstack", "list or tuple"]),
    ("vstack shapes", lambda d: ta.vstack([_ones(2, 3, device=d), _ones(2, 4, device=d)]),
     ValueError, ["vstack", "(2, 4)", "(2, 3)"]),
    ("hstack shapes", lambda d: ta.hstack([_ones(2, 3, device=d), _ones(3, 4, device=d)]),
     ValueError, ["hstack", "(3, 4)", "(2, 3)"]),
    ("logaddexp2 broadcast", lambda d: ta.logaddexp2(_ones(2, 3, device=d), _ones(2, device=d)),
     ValueError, ["logaddexp2", "(2, 3)", "(2,)"]),
    ("scatter src", lambda d: _ones(3, 4, device=d).scatter(0, ta.tensor([[0, 1]], device=d),
     _ones(1, device=d)), ValueError, ["scatter", "(1,)", "(1, 2)"]),
    ("vstack a number", lambda d: ta.vstack([_ones(2, device=d), 3.0]),
     TypeError, ["vstack", "float"]),
    ("logical_and devices", lambda d: ta.logical_and(_ones(2, device=d), ta.ones(2, device="cpu"))
     if d != "cpu" else ta.logical_and(_ones(2, device=d), "a"),
     (RuntimeError, TypeError), ["logical_and"]),
    ("index_add index", lambda d: _ones(3, 4, device=d).index_add(0, _ones(2, device=d),
     _ones(2, 4, device=d)), TypeError, ["index_add", "1-D integer", "float64"]),
    ("index_add source", lambda d: _ones(3, 4, device=d).index_add(
     1, ta.tensor([0, 1], device=d), _ones(3, 3, device=d)),
     ValueError, ["index_add", "(3, 3)", "(3, 2)", "(3, 4)"]),
    ("scatter_add src", lambda d: _ones(3, 4, device=d).scatter_add(
     0, ta.tensor([[0, 1]], device=d), _ones(2, device=d)),
     ValueError, ["scatter_add", "(2,)", "(1, 2)"]),
    ("scatter_add range", lambda d: _ones(3, 4, device=d).scatter_add(
     0, ta.tensor([[0, 3]], device=d), _ones(1, 2, device=d)),
     IndexError, ["scatter_add", "3", "size 3"]),
    ("diagonal dims", lambda d: _ones(3, 4, device=d).diagonal(0, 1, -1),
     ValueError, ["diagonal", "differ"]),
    ("addcdiv integers", lambda d: ta.ones(2, dtype="int64", device=d).addcdiv(
     _ones(2, device=d), _ones(2, device=d)), TypeError, ["addcdiv", "int64"]),
    ("addcmul broadcast", lambda d: _ones(2, 3, device=d).addcmul(_ones(3, device=d),
     _ones(4, device=d)), ValueError, ["addcmul", "(3,)", "(4,)"]),
    ("cosine_similarity shapes", lambda d: ta.cosine_similarity(_ones(2, 3, device=d),
     _ones(2, 4, device=d)), ValueError, ["cosine_similarity", "(2, 3)", "(2, 4)"]),
]  # fmt: skip


def _no_grad_loss(device):
    x = _ones(2, device=device, grad=True)
    with ta.no_grad():
        return (x * 2.0).sum()


@pytest.mark.parametrize("name,call,error,fragments", ERRORS, ids=[e[0] for e in ERRORS])
def test_error_names_the_op_and_the_facts(device, name, call, error, fragments):
    with pytest.raises(error) as info:
        call(device)
    message = str(info.value)
    missing = [fragment for fragment in fragments if fragment not in message]
    assert not missing, f"message {message!r} lacks {missing}"


# ------------------------------------------------------------------------------- devices
MIXED = [
    # (name, call(host tensor, strict tensor), op name in the message)
    ("add", lambda h, s: h + s, "add"),
    ("reflected add", lambda h, s: s + h, "add"),
    ("mul", lambda h, s: h * s, "mul"),
    ("matmul", lambda h, s: h @ s, "matmul"),
    ("maximum", lambda h, s: ta.maximum(s, h), "maximum"),
    ("comparison", lambda h, s: h < s, "lt"),
    ("where", lambda h, s: ta.where(h > 0, s, s), "where"),
    ("concat", lambda h, s: ta.concat([h, s]), "concat"),
    ("stack", lambda h, s: ta.stack([h, s]), "stack"),
    ("gather", lambda h, s: h[ta.tensor([0, 1], device="strict")], "getitem"),
]


@pytest.mark.parametrize("name,call,op", MIXED, ids=[m[0] for m in MIXED])
def test_mixing_devices_names_both(name, call, op):
    host, strict = _ones(3, device="cpu", grad=True), _ones(3, device="strict", grad=True)
    with pytest.raises(RuntimeError) as info:
        call(host, strict)
    message = str(info.value)
    assert message.startswith(f"{op}: ")
    assert "'cpu'" in message and "'strict:device1'" in message and ".to(device)" in message


def test_mixing_two_strict_devices_names_both():
    with pytest.raises(RuntimeError, match=r"'strict:device1' and 'strict:device2'"):
        _ones(2, device="strict") + _ones(2, device="strict:device2")


def test_implicit_conversion_to_numpy_is_refused_off_the_host():
    import numpy as np

    with pytest.raises(TypeError, match=r"device 'strict:device1'.*\.numpy\(\)"):
        np.asarray(_ones(2, device="strict"))


CUDA_CALLS = [
    ("to", lambda: _ones(2, device="cpu").to("cuda")),
    ("to ordinal", lambda: _ones(2, device="cpu").to("cuda:1")),
    ("factory", lambda: ta.zeros(2, device="cuda")),
    ("tensor", lambda: ta.tensor([1.0], device="cuda")),
]


@pytest.mark.parametrize("name,call", CUDA_CALLS, ids=[c[0] for c in CUDA_CALLS])
def test_cuda_without_a_gpu_says_why(name, call):
    module, reason = ta.cupy_status()
    if module is not None:
        pytest.skip(f"a GPU is usable here ({reason})")
    with pytest.raises(RuntimeError) as info:
        call()
    message = str(info.value)
    assert "is not available" in message and "'cuda" in message
    assert reason in message  # the probe's reason, not a CUDA traceback
