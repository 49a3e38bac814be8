"""Module hooks and ModuleList's list operations, PyTorch as the oracle.

The same small modules are built in both libraries with the same weights; each hook is checked
by what it sees (args, outputs, grad_input, grad_output) and by what its replacement does to the
values and gradients. The PyTorch half skips cleanly without torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn


def _torch():
    return pytest.importorskip("torch")


def _pair(torch):
    """A Linear(3, 2) in each library with the same weights, and the same input (B=4)."""
    ta.manual_seed(0)
    ours = nn.Linear(3, 2).double()
    theirs = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight.numpy()))
        theirs.bias.copy_(torch.tensor(ours.bias.numpy()))
    x = np.random.default_rng(0).normal(size=(4, 3))
    return ours, theirs, x


def _grads(module, x_leaf):
    return [p.grad.numpy() for p in (*module.parameters(), x_leaf)]


def _run(torch, register):
    """Run both modules with `register(module, lib)` applied; return (out, grads) per library."""
    ours, theirs, x = _pair(torch)
    results = []
    for module, lib, leaf in (
        (ours, ta, ta.tensor(x, requires_grad=True)),
        (theirs, torch, torch.tensor(x, requires_grad=True)),
    ):
        register(module, lib)
        out = module(leaf)
        weights = lib.tensor(np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape)))
        (out * weights).sum().backward()
        results.append((out.detach().numpy(), _grads(module, leaf)))
    return results


def _assert_same(results):
    (out, grads), (expected, expected_grads) = results
    np.testing.assert_allclose(out, expected)
    for mine, reference in zip(grads, expected_grads, strict=True):
        np.testing.assert_allclose(mine, reference)


HOOKS = [
    (
        "pre-hook doubles the args",
        lambda m, lib: m.register_forward_pre_hook(lambda mod, a: (a[0] * 2.0,)),
    ),
    (
        "pre-hook returns a tensor",
        lambda m, lib: m.register_forward_pre_hook(lambda mod, a: a[0] + 1.0),
    ),
    (
        "pre-hook with kwargs",
        lambda m, lib: m.register_forward_pre_hook(
            lambda mod, a, kw: ((a[0] * 3.0,), kw), with_kwargs=True
        ),
    ),
    (
        "forward hook replaces",
        lambda m, lib: m.register_forward_hook(lambda mod, a, out: out.tanh()),
    ),
    (
        "forward hook with kwargs",
        lambda m, lib: m.register_forward_hook(
            lambda mod, a, kw, out: out * a[0].sum(), with_kwargs=True
        ),
    ),
    ("forward hook observes", lambda m, lib: m.register_forward_hook(lambda mod, a, out: None)),
    (
        "backward hook halves grad_input",
        lambda m, lib: m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0.5,)),
    ),
    (
        "backward pre-hook scales grad_output",
        lambda m, lib: m.register_full_backward_pre_hook(lambda mod, go: (go[0] * 3.0,)),
    ),
    (
        "both backward hooks",
        lambda m, lib: (
            m.register_full_backward_pre_hook(lambda mod, go: (go[0] + 1.0,)),
            m.register_full_backward_hook(lambda mod, gi, go: (gi[0] * go[0].sum(),)),
        ),
    ),
    (
        "two forward hooks in order, one prepended",
        lambda m, lib: (
            m.register_forward_hook(lambda mod, a, out: out * 2.0),
            m.register_forward_hook(lambda mod, a, out: out + 1.0, prepend=True),
        ),
    ),
]


@pytest.mark.parametrize("name, register", HOOKS, ids=[h[0] for h in HOOKS])
def test_hook_matches_pytorch(name, register):
    _assert_same(_run(_torch(), register))


def test_removed_hooks_no_longer_run():
    torch = _torch()

    def register(module, lib):
        for handle in (
            module.register_forward_pre_hook(lambda mod, a: (a[0] * 5.0,)),
            module.register_forward_hook(lambda mod, a, out: out * 7.0),
            module.register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0.0,)),
            module.register_full_backward_pre_hook(lambda mod, go: (go[0] * 0.0,)),
        ):
            handle.remove()

    _assert_same(_run(torch, register))


class _Scaled:
    """forward(a, scale, b): a * b * scale, in either library (two tensor args, a number)."""

    @staticmethod
    def make(lib):
        class Scaled(lib.nn.Module):
            def forward(self, a, scale, b):
                return a * b * scale, (a - b).sum()

        return Scaled()


def test_backward_hook_sees_pytorchs_grad_input_and_grad_output():
    """One place per positional arg (None for the number, zeros for the tensor that needs no
    gradient), one per output tensor."""
    torch = _torch()
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(2, 3))
    seen = {}
    for lib in (ta, torch):
        module = _Scaled.make(lib)
        module.register_full_backward_hook(
            lambda mod, gi, go, lib=lib: seen.__setitem__(
                lib.__name__, [None if g is None else g.detach().numpy() for g in gi + go]
            )
        )
        left, right = lib.tensor(a, requires_grad=True), lib.tensor(b)  # b needs no gradient
        product, total = module(left, 2.0, right)
        (product * 3.0).sum().backward()
        seen[lib.__name__ + " grad"] = left.grad.numpy()
    ours, theirs = seen["tinyattn"], seen["torch"]
    assert len(ours) == len(theirs) == 5
    assert [g is None for g in ours] == [g is None for g in theirs[:4]] + [False]
    for mine, reference in zip(ours[:4], theirs[:4]):
        if reference is not None:  # a, the number, b (zeros: it needs no gradient), product
            np.testing.assert_allclose(mine, reference)
    # PyTorch gives None for the output that reached no loss; tinyattn gives its zero gradient.
    assert theirs[4] is None and not ours[4].any()
    np.testing.assert_allclose(seen["tinyattn grad"], seen["torch grad"])


def test_a_backward_hook_with_a_wrong_tuple_is_a_clear_error():
    lin = nn.Linear(3, 2)
    lin.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="must return None or a tuple of 1"):
        lin(ta.ones(4, 3, requires_grad=True)).sum().backward()


def test_backward_hooks_run_without_an_input_that_needs_a_gradient():
    calls = []
    lin = nn.Linear(3, 2)
    lin.register_full_backward_hook(lambda mod, gi, go: calls.append((gi, go[0].shape)))
    lin(ta.ones(4, 3)).sum().backward()
    assert calls == [((None,), (4, 2))]


def test_hooks_under_no_grad_run_forward_hooks_only():
    calls = []
    lin = nn.Linear(3, 2)
    lin.register_forward_hook(lambda mod, a, out: calls.append("forward"))
    lin.register_full_backward_hook(lambda mod, gi, go: calls.append("backward"))
    with ta.no_grad():
        lin(ta.ones(1, 3))
    assert calls == ["forward"]


# ------------------------------------------------------------------------------ ModuleList
OPERATIONS = [
    ("+=", lambda lst, new: lst.__iadd__([new(), new()])),
    ("+", lambda lst, new: lst + type(lst)([new()])),
    ("extend", lambda lst, new: lst.extend([new()])),
    ("insert at 1", lambda lst, new: lst.insert(1, new())),
    ("insert at 0", lambda lst, new: lst.insert(0, new())),
    ("slice", lambda lst, new: lst[1:]),
    ("pop", lambda lst, new: lst.pop(1)),
    ("del", lambda lst, new: lst.__delitem__(0)),
]


@pytest.mark.parametrize("name, operation", OPERATIONS, ids=[o[0] for o in OPERATIONS])
def test_module_list_operations_match_pytorch(name, operation):
    """The same operation on both: the same result kind, modules in the same order (told apart
    by their out_features) and the same state_dict keys."""
    torch = _torch()
    shapes = []
    for lib in (nn, torch.nn):
        counter = iter(range(10, 20))
        lst = lib.ModuleList([lib.Linear(1, n) for n in (1, 2, 3)])
        result = operation(lst, lambda lib=lib, counter=counter: lib.Linear(1, next(counter)))
        listed = result if isinstance(result, lib.ModuleList) else lst
        shapes.append(
            (
                type(result).__name__,
                [m.out_features for m in listed],
                list(listed.state_dict()),
                getattr(result, "out_features", None),
            )
        )
    assert shapes[0] == shapes[1]
