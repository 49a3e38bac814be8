"""In-place operations and version counters, with PyTorch as the oracle.

Every in-place operation writes into the tensor's existing array and bumps its version; a node
records the versions of what its backward reads, and backward refuses when one changed. Each
case runs on every backend; the PyTorch half of a case skips cleanly without torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.backend import windows

BASE = np.array([[0.5, -1.5, 2.0], [3.0, -0.25, 1.0]])


def _torch():
    return pytest.importorskip("torch")


def _pair(device, values=BASE, dtype="float64"):
    """The same values as a tinyattn tensor and (when torch is importable) a torch tensor."""
    return ta.tensor(values, dtype=dtype, device=device)


# ------------------------------------------------------------------------ values of each op
# (name, in-place call on tinyattn, the same call on torch); `t` is the tensor, `m` its module.
INPLACE = [
    ("+= number", lambda t, m: t.__iadd__(2.0)),
    ("-= tensor", lambda t, m: t.__isub__(m.ones(3, dtype=t.dtype))),
    ("*= broadcast row", lambda t, m: t.__imul__(m.tensor([1.0, 2.0, 3.0], dtype=t.dtype))),
    ("/= number", lambda t, m: t.__itruediv__(4.0)),
    ("add_ alpha", lambda t, m: t.add_(m.ones(2, 3, dtype=t.dtype), alpha=3.0)),
    ("sub_", lambda t, m: t.sub_(1.5)),
    ("mul_", lambda t, m: t.mul_(-2.0)),
    ("div_", lambda t, m: t.div_(m.full((2, 3), 2.0, dtype=t.dtype))),
    ("copy_ broadcast", lambda t, m: t.copy_(m.tensor([7.0, 8.0, 9.0], dtype=t.dtype))),
    ("fill_", lambda t, m: t.fill_(3.5)),
    ("zero_", lambda t, m: t.zero_()),
    ("clamp_", lambda t, m: t.clamp_(-1.0, 1.0)),
    ("masked_fill_", lambda t, m: t.masked_fill_(m.tensor([True, False, True]), -9.0)),
    ("index_fill_", lambda t, m: t.index_fill_(1, m.tensor([0, 2]), 5.0)),
    ("scatter_ value", lambda t, m: t.scatter_(1, m.tensor([[2], [0]]), 4.0)),
    (
        "scatter_ src",
        lambda t, m: t.scatter_(
            0, m.tensor([[1, 0, 1]]), m.tensor([[10.0, 20.0, 30.0]], dtype=t.dtype)
        ),
    ),
    ("setitem slice", lambda t, m: t.__setitem__((slice(None), slice(1, None)), 0.0)),
    ("setitem step", lambda t, m: t.__setitem__((0, slice(None, None, 2)), -1.0)),
    ("setitem row tensor", lambda t, m: t.__setitem__(1, m.tensor([4.0, 5.0, 6.0], dtype=t.dtype))),
    ("setitem int list", lambda t, m: t.__setitem__((slice(None), [2, 0]), 8.0)),
    ("setitem bool mask", lambda t, m: t.__setitem__(t > 0.75, 0.0)),
    (
        "setitem bool mask values",
        lambda t, m: t.__setitem__(t < 0, m.tensor([-1.0, -2.0], dtype=t.dtype)),
    ),
    ("setitem row mask", lambda t, m: t.__setitem__(m.tensor([False, True]), 2.0)),
]


def _module_for(device):
    """A stand-in for the torch module that builds tinyattn tensors on `device`."""

    class Module:
        @staticmethod
        def tensor(values, dtype=None):
            return ta.tensor(values, dtype=dtype, device=device)

        @staticmethod
        def ones(*shape, dtype=None):
            return ta.ones(*shape, dtype=dtype, device=device)

        @staticmethod
        def full(shape, value, dtype=None):
            return ta.full(shape, value, dtype=dtype, device=device)

    return Module


@pytest.mark.parametrize("name,call", INPLACE, ids=[row[0] for row in INPLACE])
def test_inplace_ops_match_torch_write_in_place_and_bump_the_version(device, name, call):
    torch = _torch()
    t = _pair(device)
    array, alias = t.array, t.reshape(3, 2)
    result = call(t, _module_for(device))
    reference = torch.tensor(BASE)
    call(reference, torch)
    assert result is (None if name.startswith("setitem") else t)  # methods return self
    assert t.array is array  # the same storage, written in place
    assert t._version == 1 and alias._version == 1  # a view shares the counter
    np.testing.assert_array_equal(t.numpy(), reference.numpy())
    np.testing.assert_array_equal(alias.numpy(), reference.numpy().reshape(3, 2))


# -------------------------------------------------------- backward refuses changed values
def _exp_output(x):
    y = x.exp()
    return y.sum(), y


def _mul_input(x):
    c = x.detach() * 1.0
    return (x * c).sum(), c


def _view_of_mul_input(x):
    base = x.detach() * 1.0
    return (x * base.reshape(2, 3)).sum(), base.reshape(6)


def _detached_exp_output(x):
    y = x.exp()
    return y.sum(), y.detach()


CHANGED = [
    # (name, build -> (loss, tensor to change), op named in the error, what, shape)
    ("Exp output", _exp_output, "Exp's output", (2, 3)),
    ("through detach()", _detached_exp_output, "Exp's output", (2, 3)),
    ("Mul input", _mul_input, "Mul's input 1", (2, 3)),
    ("through a view", _view_of_mul_input, "Mul's input 1", (2, 3)),
]


@pytest.mark.parametrize("name,build,what,shape", CHANGED, ids=[row[0] for row in CHANGED])
def test_backward_refuses_a_value_changed_in_place(device, name, build, what, shape):
    torch = _torch()
    for module, make in ((torch, torch.tensor), (ta, lambda v, **k: _pair(device, v, **k))):
        x = make(BASE, requires_grad=True) if module is torch else make(BASE).requires_grad_()
        loss, changed = build(x)
        with module.no_grad():
            changed.mul_(2.0)
        with pytest.raises(RuntimeError) as info:
            loss.backward()
        assert "modified by an inplace operation" in str(info.value)
    message = str(info.value)
    assert f"{what} of shape {shape} is at version 1; expected version 0" in message


def _sum_after_add(x):
    h = x * 2.0
    loss = (h + 1.0).sum()
    return loss, h


def _reshape_then_change(x):
    h = x * 3.0
    loss = h.reshape(3, 2).sum()
    return loss, h


LEGAL = [
    ("Add and Sum read no values", _sum_after_add),
    ("Reshape reads none", _reshape_then_change),
]


@pytest.mark.parametrize("name,build", LEGAL, ids=[row[0] for row in LEGAL])
def test_ops_that_read_no_values_raise_no_false_alarm(device, name, build):
    torch = _torch()
    grads = []
    for module in (torch, ta):
        if module is torch:
            x = torch.tensor(BASE, requires_grad=True)
        else:
            x = _pair(device).requires_grad_()
        loss, changed = build(x)
        with module.no_grad():
            changed.add_(100.0)
        loss.backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])


def test_a_saved_tensor_changed_in_place_is_refused(device):
    class Scale(ta.Function):
        def forward(self, x, factor=None):
            self.save_for_backward(factor)
            return x * factor.array

        def backward(self, grad):
            (factor,) = self.saved_tensors
            return grad * factor

    x = _pair(device).requires_grad_()
    factor = ta.ones(2, 3, dtype="float64", device=device)
    loss = Scale.apply(x, factor=factor).sum()
    factor.fill_(2.0)
    with pytest.raises(
        RuntimeError, match=r"Scale's saved tensor 0 of shape \(2, 3\) is at version 1"
    ):
        loss.backward()


# ------------------------------------------------------------------- what in-place refuses
def test_inplace_on_a_leaf_that_requires_grad_is_refused_outside_no_grad(device):
    torch = _torch()
    for leaf in (torch.tensor(BASE, requires_grad=True), _pair(device).requires_grad_()):
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used"):
            leaf += 1.0


def test_no_grad_update_keeps_the_same_leaf(device):
    w = _pair(device).requires_grad_()
    (w * w).sum().backward()
    before, array = w, w.array
    with ta.no_grad():
        w -= 0.1 * w.grad
    assert w is before and w.array is array and w.is_leaf and w.requires_grad
    np.testing.assert_allclose(w.detach().numpy(), BASE - 0.2 * BASE)
    assert w._version == 1


# ------------------------------------------------------------ in-place ops inside the graph
# Each program takes the module `m` (tinyattn or torch), a leaf `x` and a leaf `w` (both
# require grad), and returns the loss; its gradients, or its error, must be PyTorch's.
IN_GRAPH = [
    ("h.mul_(w) reads the old h", lambda m, x, w: _h(x).mul_(w).sum()),
    ("mul_ twice", lambda m, x, w: _h(x).mul_(w).mul_(w).sum()),
    ("+= residual", lambda m, x, w: _iadd(_h(x), w * 3).pow(2).sum()),
    ("relu_", lambda m, x, w: _h(x - 3).relu_().mul(w).sum()),
    ("clamp_", lambda m, x, w: (_h(x).clamp_(1.5, 4.5) * w).sum()),
    ("masked_fill_ -inf, softmax", lambda m, x, w: _masked(m, x).softmax(-1).mul(w).sum()),
    ("setitem a number", lambda m, x, w: _set(_h(x), (slice(None), 0), 0.0).pow(2).sum()),
    ("setitem a graph value", lambda m, x, w: _set(_h(x), 1, w[0] * 2).pow(2).sum()),
    ("buffer takes a value", lambda m, x, w: _set(m.zeros(2, 3, dtype=x.dtype), 0, x[1]).sum()),
    ("copy_ into a buffer", lambda m, x, w: m.zeros(2, 3, dtype=x.dtype).copy_(w).pow(2).sum()),
    ("through a view: h[0].mul_(3)", lambda m, x, w: _through(_h(x), lambda v: v[0].mul_(3))),
    ("through t()[1].add_", lambda m, x, w: _through(_h(x), lambda v: v.t()[1].add_(w[0, :2]))),
    ("a view made before", lambda m, x, w: _view_before(_h(x))),
    ("fill_ after use", lambda m, x, w: _used_then_filled(x)),
    ("saved value changed", lambda m, x, w: _saved_then_changed(x)),
    ("output read by exp, changed", lambda m, x, w: _exp_then_changed(x)),
]


def _h(x):
    return x * 1.0  # a non-leaf: in the graph


def _iadd(h, v):
    h += v
    return h


def _set(h, key, value):
    h[key] = value
    return h


def _masked(m, x):
    scores = x * 2.0
    scores.masked_fill_(m.tensor([[True, False, False], [False, False, True]]), float("-inf"))
    return scores


def _through(h, write):
    write(h)
    return (h * h).sum()


def _view_before(h):
    row = h[1]
    h.mul_(3)
    return (row * row).sum()


def _used_then_filled(x):
    h = x.tanh()
    y = h * 2.0
    h.fill_(1.0)
    return y.sum()


def _saved_then_changed(x):
    h = x * 1.0
    y = h * h
    h.add_(1)
    return y.sum()


def _exp_then_changed(x):
    h = x.exp()
    h.add_(1)
    return h.sum()


def _run_in_graph(module, program, x_values, w_values):
    if module is ta:
        x = ta.tensor(x_values, dtype="float64").requires_grad_()
        w = ta.tensor(w_values, dtype="float64").requires_grad_()
    else:
        x = module.tensor(x_values, dtype=module.float64, requires_grad=True)
        w = module.tensor(w_values, dtype=module.float64, requires_grad=True)
    try:
        program(module, x, w).backward()
    except RuntimeError as error:
        return "error", str(error)
    grads = [None if t.grad is None else np.asarray(t.grad.tolist()) for t in (x, w)]
    return "grads", grads


@pytest.mark.parametrize("name,program", IN_GRAPH, ids=[row[0] for row in IN_GRAPH])
def test_inplace_in_the_graph_gives_pytorchs_gradients_or_error(name, program):
    torch = _torch()
    x_values = BASE + 2.0
    w_values = np.array([[1.5, -2.0, 0.5], [0.25, 3.0, -1.0]])
    ours = _run_in_graph(ta, program, x_values, w_values)
    theirs = _run_in_graph(torch, program, x_values, w_values)
    assert ours[0] == theirs[0], f"{name}: {ours} vs {theirs}"
    if ours[0] == "error":
        assert "modified by an inplace operation" in ours[1]
        return
    for mine, reference in zip(ours[1], theirs[1]):
        assert (mine is None) == (reference is None)
        if mine is not None:
            np.testing.assert_allclose(mine, reference, rtol=1e-12, atol=1e-12)


def test_inplace_in_the_graph_moves_the_history(device):
    x = _pair(device).requires_grad_()
    h = x * 2.0
    first = h.grad_fn
    h.add_(1.0)
    assert h.grad_fn is not first and h.grad_fn.name == "AddScalar" or h.grad_fn.name == "Add"
    assert h._version == 1 and not h.is_leaf
    h.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 2.0))


def test_a_view_of_a_leaf_is_refused_in_place(device):
    w = _pair(device).requires_grad_()
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        w[0].add_(1.0)
    assert w._version == 0


def test_assigning_into_a_consumed_tensor_under_no_grad_gives_the_value_no_gradient(device):
    torch = _torch()
    results = []
    for module in (torch, ta):
        make = torch.tensor if module is torch else lambda v, **k: _pair(device, v, **k)
        w = make(BASE, requires_grad=True) if module is torch else make(BASE).requires_grad_()
        h = make(np.zeros((2, 3)))
        v = (
            make(np.full(3, 5.0), requires_grad=True)
            if module is torch
            else make(np.full(3, 5.0)).requires_grad_()
        )
        a = w + h
        with module.no_grad():
            h[0] = v
        a.sum().backward()
        results.append((w.grad.numpy(), v.grad, h.numpy()))
    (torch_w, torch_v, torch_h), (ours_w, ours_v, ours_h) = results
    np.testing.assert_array_equal(ours_w, torch_w)
    assert ours_v is None and torch_v is None
    np.testing.assert_array_equal(ours_h, torch_h)


def test_int_tensor_refuses_a_float_result_like_torch(device):
    torch = _torch()
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        torch.tensor([1, 2]).add_(0.5)
    t = ta.tensor([1, 2], device=device)
    with pytest.raises(RuntimeError, match="add_: result type float32 can't be cast .* int64"):
        t += 0.5
    assert t._version == 0


def test_inplace_cannot_broadcast_its_target(device):
    t = ta.zeros(3, dtype="float64", device=device)
    with pytest.raises(RuntimeError, match=r"add_: the result has shape \(2, 3\).*shape \(3,\)"):
        t += ta.ones(2, 3, dtype="float64", device=device)


def test_a_broadcast_view_is_read_only(device):
    row = ta.zeros(3, dtype="float64", device=device).broadcast_to(2, 3)
    with pytest.raises(RuntimeError, match=r"fill_: cannot write .* shape \(2, 3\).*read-only"):
        row.fill_(1.0)


def test_optimizer_step_bumps_the_version_of_a_kept_graph(device):
    w = _pair(device).requires_grad_()
    loss = (w * w).sum()
    loss.backward(retain_graph=True)
    ta.optim.SGD([w], lr=0.1).step()
    assert w._version == 1
    with pytest.raises(RuntimeError, match="Mul's input 0 of shape \\(2, 3\\) is at version 1"):
        loss.backward()


def test_a_tensor_built_or_moved_from_an_array_never_shares_its_memory(device):
    """``ta.tensor(array)`` and ``.to(device)`` make new tensors, as torch.tensor and ``.to``
    do: writing into one leaves the other as it was (the strict stand-in wraps NumPy memory,
    so it must be asked for copies)."""
    host = BASE.copy()
    built = ta.tensor(host, device=device)
    built.add_(1.0)
    np.testing.assert_array_equal(host, BASE)
    source = ta.tensor(BASE, device=device)
    for target in ("cpu", device):
        moved = source.to(target)
        if moved is source:
            continue  # already there: .to returns the tensor itself, as in PyTorch
        moved.mul_(0.0)
        np.testing.assert_array_equal(source.numpy(), BASE)
        back = moved.to(device)
        back.add_(5.0)
        np.testing.assert_array_equal(moved.numpy(), 0.0)


def test_each_leaf_gets_a_gradient_of_its_own(device):
    """Add hands one gradient to both its inputs, and a reshape's gradient is a view of the one
    it gets; still every leaf's .grad has memory of its own, as in PyTorch, so a hand-written
    SGD loop that zeroes each gradient in place after using it updates every parameter."""
    weights = np.array([1.0, 2.0, 3.0])
    w1 = ta.tensor(np.ones(3), device=device).requires_grad_(True)
    w2 = ta.tensor(np.full(3, 2.0), device=device).requires_grad_(True)
    w3 = ta.tensor(np.zeros(3), device=device).requires_grad_(True)
    w4 = ta.tensor(np.zeros((1, 3)), device=device).requires_grad_(True)
    scale = ta.tensor(weights, device=device)
    loss = ((w1 + w2) * scale).sum() + ((w3.reshape(1, 3) + w4) * (2 * scale)).sum()
    loss.backward()
    with ta.no_grad():
        for p in (w1, w2, w3, w4):
            p -= 0.1 * p.grad
            p.grad.zero_()
    np.testing.assert_allclose(w1.detach().numpy(), 1.0 - 0.1 * weights)
    np.testing.assert_allclose(w2.detach().numpy(), 2.0 - 0.1 * weights)
    np.testing.assert_allclose(w3.detach().numpy(), -0.2 * weights)
    np.testing.assert_allclose(w4.detach().numpy(), -0.2 * weights[None, :])
    for w in (w1, w2, w3, w4):
        np.testing.assert_array_equal(w.grad.numpy(), np.zeros(w.shape))


@pytest.mark.parametrize(
    "loss_of",
    [
        lambda w: w.sum(),
        lambda w: (w + 1.0).sum(),
        lambda w: (w - w.detach()).sum(axis=0).sum(),
        lambda w: w.expand(4, 2, 3).sum(),
    ],
    ids=["sum", "add then sum", "sub then sums", "expand then sum"],
)
def test_a_leafs_gradient_is_writable_memory_of_its_own(device, loss_of):
    """A sum's gradient is a broadcast view (one element repeated); when it reaches a leaf
    unchanged, the leaf's .grad is still memory it can write, as PyTorch copies an expanded
    gradient: grad.zero_(), grad.mul_() and an accumulation change only that .grad."""
    w = ta.tensor(np.ones((2, 3)), device=device).requires_grad_(True)
    loss_of(w).backward()
    expected = 4.0 if w.grad.numpy()[0, 0] == 4.0 else 1.0  # expand repeats each element 4 times
    w.grad.mul_(2.0)
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), 2 * expected))
    w.grad.zero_()
    loss_of(w).backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 3), expected))
    (g,) = ta.grad(loss_of(w), [w])  # grad() hands back the rule's gradient, as PyTorch's
    np.testing.assert_array_equal(g.numpy(), np.full((2, 3), expected))


@pytest.mark.parametrize("joined", ["concat", "add"])
def test_leaves_sharing_one_gradient_array_each_write_only_their_own(device, joined):
    """Concat hands its inputs disjoint blocks of one gradient (kept as they are: no element is
    in two of them); Add hands both inputs the same array (the second gets a copy). Either
    way, writing one leaf's .grad in place changes no other leaf's."""
    a, b = (ta.tensor(np.ones((2, 3)), device=device).requires_grad_(True) for _ in range(2))
    if joined == "concat":
        out = ta.cat([a, b]) * ta.tensor(np.arange(12.0).reshape(4, 3), device=device)
    else:
        out = (a + b) * ta.tensor(np.arange(6.0).reshape(2, 3), device=device)
    out.sum().backward()
    want_b = b.grad.numpy().copy()
    a.grad.zero_()
    a.grad.add_(5.0)
    np.testing.assert_array_equal(a.grad.numpy(), np.full((2, 3), 5.0))
    np.testing.assert_array_equal(b.grad.numpy(), want_b)
    if joined == "concat":
        np.testing.assert_array_equal(want_b, np.arange(6.0, 12.0).reshape(2, 3))


def test_memory_extent_is_the_span_of_bytes_a_view_reaches(device):
    """`windows.extent`: [first byte, end) from pointer, shape and strides, for arrays,
    their views (row blocks, strided and reversed ones), empty ones and NumPy scalars."""

    base = ta.zeros(4, 6, dtype="float32", device=device).array
    start, end = windows.extent(base)
    assert end - start == 4 * 6 * 4
    top, bottom = windows.extent(base[:2, :]), windows.extent(base[2:, :])
    assert top == (start, start + 48) and bottom == (start + 48, end)  # disjoint row blocks
    assert windows.extent(base[:, ::2]) == (start, end - 4)  # interleaved: they meet
    assert windows.extent(base[::-1, :]) == (start, end)
    assert windows.extent(base[:0, :])[0] == windows.extent(base[:0, :])[1]
    scalar = np.float32(2.0)
    low, high = windows.extent(scalar)
    assert high - low == 4


@pytest.mark.parametrize("clip", ["norm", "value"])
def test_gradient_clipping_writes_into_the_gradients_in_place(device, clip):
    """``clip_grad_norm_`` and ``clip_grad_value_`` change each .grad in place, as in PyTorch: a
    tensor held before the call sees the clipped values, and its version goes up."""
    from tinyattn import nn

    layer = nn.Linear(3, 2).to(device)
    (layer(ta.tensor(BASE, dtype="float32", device=device)) ** 2).sum().backward()
    held = layer.weight.grad
    before, version = held.numpy().copy(), held._version
    if clip == "norm":
        nn.utils.clip_grad_norm_(layer.parameters(), 0.01)
        assert np.linalg.norm(held.numpy()) < np.linalg.norm(before)
    else:
        nn.utils.clip_grad_value_(layer.parameters(), 0.01)
        np.testing.assert_allclose(held.numpy(), np.clip(before, -0.01, 0.01))
    assert layer.weight.grad is held and held._version == version + 1


def test_a_compiled_step_replays_inplace_ops_in_the_graph():
    """``h += x``, ``masked_fill_``, ``p[:, 0] = 0`` and ``relu_`` in the graph: a compiled
    step's losses equal eager's bit for bit."""
    from tinyattn import nn, optim

    def run(compiled: bool) -> list[float]:
        ta.manual_seed(0)
        layer = nn.Linear(4, 4)
        optimizer = optim.AdamW(layer.parameters(), lr=0.01)
        mask = ta.tensor(np.triu(np.ones((4, 4), bool), 1))

        def step(x, y):
            optimizer.zero_grad()
            h = layer(x)
            h += x
            scores = h @ h.mT
            scores.masked_fill_(mask, float("-inf"))
            p = scores.softmax(-1) * 1.0
            p[:, 0] = 0.0
            loss = ((p @ h).relu_() - y).pow(2).mean()
            loss.backward()
            optimizer.step()
            return loss

        rng = np.random.default_rng(0)
        data = [
            (
                ta.tensor(rng.standard_normal((4, 4)), dtype="float32"),
                ta.tensor(rng.standard_normal((4, 4)), dtype="float32"),
            )
        ]
        data = data * 6
        step = ta.compile(step) if compiled else step
        return [step(x, y).item() for x, y in data]

    assert run(compiled=True) == run(compiled=False)


def test_a_piece_of_split_in_the_graph_is_refused_in_place_as_pytorch(device):
    x = _pair(device).requires_grad_()
    first, second = (x * 1.0).split(2, 1)
    with pytest.raises(RuntimeError, match="output 1 of Split is a view and is being modified"):
        second.mul_(3.0)
    with ta.no_grad():
        second.mul_(3.0)  # outside the graph it is a plain write into the base
    torch = pytest.importorskip("torch")
    pieces = (torch.tensor(BASE, requires_grad=True) * 1.0).split(2, 1)
    with pytest.raises(RuntimeError, match=r"Output 1 of Split(Backward0)? is a view"):
        pieces[1].mul_(3.0)


def test_a_layout_that_shares_elements_is_found_without_numpys_read_only_flag():
    """CuPy has no read-only flag: the write into a broadcast view is refused by its strides."""
    from tinyattn import backend

    class Strided:  # a CuPy-like array: shape and byte strides, no flags
        shape, strides = (2, 3), (0, 8)

    assert backend.shares_elements(Strided())
    Strided.strides = (24, 8)
    assert not backend.shares_elements(Strided())
    Strided.shape, Strided.strides = (1, 3), (0, 8)  # a zero stride on a length-1 axis is fine
    assert not backend.shares_elements(Strided())
