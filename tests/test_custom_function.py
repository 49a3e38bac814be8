"""PyTorch's custom-Function protocol (staticmethod forward(ctx, ...)) on tinyattn's engine.

The same class body runs under tinyattn and under PyTorch (the oracle, skipped without torch);
gradcheck checks a function written this way; the teaching protocol keeps working beside it.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta


def _protocol_classes(lib):
    """The same custom Functions, for `lib` (tinyattn or torch): the test's two doors."""

    class ScaledCube(lib.autograd.Function):
        """y = scale * x**3, scale a Python number; dL/dx = 3 scale x**2 g."""

        @staticmethod
        def forward(ctx, x, scale):
            ctx.save_for_backward(x)
            ctx.scale = scale
            return scale * x**3

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 3.0 * ctx.scale * x**2, None

    class MulAdd(lib.autograd.Function):
        """(a * b, a + b): two outputs; a rule that skips the gradients nobody needs."""

        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return a * b, a + b

        @staticmethod
        def backward(ctx, grad_product, grad_sum):
            a, b = ctx.saved_tensors
            grad_a = grad_product * b + grad_sum if ctx.needs_input_grad[0] else None
            grad_b = grad_product * a + grad_sum if ctx.needs_input_grad[1] else None
            return grad_a, grad_b

    class SortedWithIndex(lib.autograd.Function):
        """(sorted values, argsort), the index marked non-differentiable."""

        @staticmethod
        def forward(ctx, x):
            values, index = x.sort(dim=-1)
            ctx.mark_non_differentiable(index)
            ctx.save_for_backward(index)
            return values, index

        @staticmethod
        def backward(ctx, grad_values, grad_index):
            (index,) = ctx.saved_tensors
            grad = lib.zeros_like(grad_values)
            grad.scatter_(-1, index, grad_values)
            return grad

    return ScaledCube, MulAdd, SortedWithIndex


def _data(seed, shape=(2, 3)):
    return np.random.default_rng(seed).normal(size=shape)


def test_ta_autograd_is_a_module_attribute():
    assert ta.autograd.Function is ta.Function


def test_a_non_tensor_argument_and_saved_tensors():
    ScaledCube, _, _ = _protocol_classes(ta)
    x = ta.tensor(_data(0), requires_grad=True)
    y = ScaledCube.apply(x, 0.5)
    assert y._ctx.name == "ScaledCube" and y.requires_grad
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1.5 * _data(0) ** 2, rtol=1e-6)


def test_needs_input_grad_has_one_flag_per_forward_argument():
    seen = []

    class Probe(ta.autograd.Function):
        @staticmethod
        def forward(ctx, a, flag, b):
            return a * b

        @staticmethod
        def backward(ctx, grad):
            seen.append(ctx.needs_input_grad)
            return grad, None, None

    a = ta.tensor([1.0, 2.0], requires_grad=True)
    Probe.apply(a, "flag", ta.tensor([3.0, 4.0])).sum().backward()
    assert seen == [(True, False, False)]


def test_gradcheck_and_gradgradcheck_of_protocol_functions():
    ScaledCube, MulAdd, SortedWithIndex = _protocol_classes(ta)
    x = ta.tensor(_data(1), requires_grad=True)
    b = ta.tensor(_data(2), requires_grad=True)
    assert ta.gradcheck(lambda t: ScaledCube.apply(t, 2.0), [x])
    assert ta.gradgradcheck(lambda t: ScaledCube.apply(t, 2.0), [x])
    assert ta.gradcheck(MulAdd.apply, [x, b])
    assert ta.gradcheck(SortedWithIndex.apply, [x])


def test_forward_records_nothing_inside_and_one_node_outside():
    _, MulAdd, _ = _protocol_classes(ta)
    a = ta.tensor([1.0, 2.0], requires_grad=True)
    b = ta.tensor([3.0, 4.0], requires_grad=True)
    product, total = MulAdd.apply(a, b)
    assert product._ctx is total._ctx and product._ctx.inputs == (a, b)


def test_a_saved_tensor_changed_in_place_is_refused():
    ScaledCube, _, _ = _protocol_classes(ta)
    x = ta.tensor([1.0, 2.0], requires_grad=True)
    h = x * 1.0
    y = ScaledCube.apply(h, 1.0)
    with ta.no_grad():
        h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_wrong_gradient_count_and_a_gradient_for_a_non_tensor_are_errors():
    class TooFew(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x, scale):
            return x * scale

        @staticmethod
        def backward(ctx, grad):
            return grad

    class ForTheNumber(TooFew):
        @staticmethod
        def backward(ctx, grad):
            return grad, grad

    x = ta.tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="TooFew.backward returned 1 gradient"):
        TooFew.apply(x, 2.0).sum().backward()
    with pytest.raises(RuntimeError, match="argument 1, which is not a Tensor"):
        ForTheNumber.apply(x, 2.0).sum().backward()


def test_backward_must_be_static_when_forward_is():
    with pytest.raises(TypeError, match="backward must be one too"):

        class Mixed(ta.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            def backward(self, grad):
                return grad


def test_forward_must_return_tensors():
    class Raw(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.detach().numpy()

        @staticmethod
        def backward(ctx, grad):
            return grad

    with pytest.raises(TypeError, match="Raw.forward returned a ndarray as output 0"):
        Raw.apply(ta.tensor([1.0], requires_grad=True))


def test_the_teaching_protocol_still_works_beside_it():
    class Double(ta.autograd.Function):
        def forward(self, x):
            return 2 * x

        def backward(self, grad):
            return grad * 2.0

    x = ta.tensor([1.0, 2.0], requires_grad=True)
    Double.apply(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


# ------------------------------------------------------------------------- PyTorch as oracle
def _run(lib, classes, arrays):
    ScaledCube, MulAdd, SortedWithIndex = classes
    x, b, w = (lib.tensor(a, requires_grad=True) for a in arrays)
    product, total = MulAdd.apply(x, b)
    values, index = SortedWithIndex.apply(ScaledCube.apply(product, 0.7))
    loss = (values * w).sum() + (total * total).sum() + index.sum() * 0
    loss.backward()
    return [t.grad.detach().numpy() if lib is not ta else t.grad.numpy() for t in (x, b, w)]


def test_gradients_equal_pytorch_on_the_same_class_bodies():
    torch = pytest.importorskip("torch")
    arrays = [_data(k, (3, 4)) for k in range(3)]
    ours = _run(ta, _protocol_classes(ta), arrays)
    theirs = _run(torch, _protocol_classes(torch), arrays)
    for mine, reference in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(mine, reference, rtol=1e-10, atol=1e-12)


def test_an_unused_output_gets_zeros_as_in_pytorch():
    torch = pytest.importorskip("torch")
    arrays = [_data(5), _data(6)]
    grads = {}
    for lib in (ta, torch):
        _, MulAdd, _ = _protocol_classes(lib)
        a, b = (lib.tensor(v, requires_grad=True) for v in arrays)
        _, total = MulAdd.apply(a, b)
        (total * 2.0).sum().backward()
        grads[lib.__name__] = [np.asarray(t.grad.detach().numpy()) for t in (a, b)]
    for mine, reference in zip(grads["tinyattn"], grads["torch"], strict=True):
        np.testing.assert_allclose(mine, reference)
