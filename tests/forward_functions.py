"""Small Functions with jvp rules, for the forward-mode tests: each rule written with these
Functions only, so tangents of tangents and gradients of tangents run through them too."""

from __future__ import annotations

import numpy as np

from tinyattn.autograd import Function


class Sin(Function):
    """y = sin(x); dL/dx = dL/dy * cos(x); dy = cos(x) dx."""

    def forward(self, x):
        return np.sin(x)

    def backward(self, grad):
        return Mul.apply(grad, Cos.apply(self.inputs[0]))

    def jvp(self, tangent):
        return Mul.apply(tangent, Cos.apply(self.inputs[0]))


class Cos(Function):
    """y = cos(x); dL/dx = -dL/dy * sin(x); dy = -sin(x) dx."""

    def forward(self, x):
        return np.cos(x)

    def backward(self, grad):
        return Neg.apply(Mul.apply(grad, Sin.apply(self.inputs[0])))

    def jvp(self, tangent):
        return Neg.apply(Mul.apply(tangent, Sin.apply(self.inputs[0])))


class Neg(Function):
    """y = -x; dL/dx = -dL/dy; dy = -dx."""

    backward_reads = ()

    def forward(self, x):
        return -x

    def backward(self, grad):
        return Neg.apply(grad)

    def jvp(self, tangent):
        return Neg.apply(tangent)


class Add(Function):
    """y = a + b (same shapes); dL/da = dL/db = dL/dy; dy = da + db."""

    backward_reads = ()

    def forward(self, a, b):
        return a + b

    def backward(self, grad):
        return grad, grad

    def jvp(self, tangent_a, tangent_b):
        if tangent_a is None or tangent_b is None:
            return tangent_b if tangent_a is None else tangent_a
        return Add.apply(tangent_a, tangent_b)


class Mul(Function):
    """y = a * b (same shapes); dL/da = dL/dy * b, dL/db = dL/dy * a; dy = da b + a db."""

    def forward(self, a, b):
        return a * b

    def backward(self, grad):
        a, b = self.inputs
        return Mul.apply(grad, b), Mul.apply(grad, a)

    def jvp(self, tangent_a, tangent_b):
        a, b = self.inputs
        left = None if tangent_a is None else Mul.apply(tangent_a, b)
        right = None if tangent_b is None else Mul.apply(a, tangent_b)
        return sum_of(left, right)


def sum_of(left, right):
    """left + right, where None stands for a zero tangent."""
    if left is None or right is None:
        return right if left is None else left
    return Add.apply(left, right)


class SinCos(Function):
    """Two outputs: (sin(x), cos(x)); d(sin) = cos(x) dx, d(cos) = -sin(x) dx."""

    def forward(self, x):
        return np.sin(x), np.cos(x)

    def backward(self, grad_sin, grad_cos):
        x = self.inputs[0]
        return Add.apply(
            Mul.apply(grad_sin, Cos.apply(x)), Neg.apply(Mul.apply(grad_cos, Sin.apply(x)))
        )

    def jvp(self, tangent):
        sin, cos = self.output
        return Mul.apply(tangent, cos), Neg.apply(Mul.apply(tangent, sin))


def assert_reverse_through_tangent_matches_torch(call, x, v, torch) -> None:
    """d/dx of sum(J(x) v) by backward through the tangent that `call` (written for either
    library, `call(lib, x)`) makes from x and the direction v, against PyTorch's."""
    import tinyattn as ta
    from tinyattn.autograd import forward_ad

    leaf = ta.tensor(x, requires_grad=True)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(leaf, ta.tensor(v))
        forward_ad.unpack_dual(call(ta, dual)).tangent.sum().backward()
    torch_leaf = torch.tensor(x, requires_grad=True)
    with torch.autograd.forward_ad.dual_level():
        dual = torch.autograd.forward_ad.make_dual(torch_leaf, torch.tensor(v))
        torch.autograd.forward_ad.unpack_dual(call(torch, dual)).tangent.sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), torch_leaf.grad.numpy(), rtol=1e-10)
