"""Forward mode (``tinyattn.autograd.forward_ad``): dual levels, make_dual and unpack_dual with
PyTorch's rules and errors, tangents through jvp rules (checked against PyTorch's forward AD
where PyTorch is installed), composition with reverse mode and with itself, in-place writes,
and custom Functions in PyTorch's protocol with a static jvp."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from forward_functions import Cos, Mul, Sin, SinCos

import tinyattn as ta
from tinyattn.autograd import Function, listeners
from tinyattn.autograd import forward_ad as fwAD
from tinyattn.autograd.torch_protocol import vmap_support

RNG = np.random.default_rng(0)
X, V = RNG.standard_normal(5), RNG.standard_normal(5)


def tensor(values, **kwargs):
    return ta.tensor(values, dtype="float64", **kwargs)


def torch_or_skip():
    return pytest.importorskip("torch")


# ------------------------------------------------------------------------------ levels
def test_no_level_means_no_listener_and_make_dual_refuses():
    assert listeners.active is None
    with pytest.raises(RuntimeError, match="no level exists"):
        fwAD.make_dual(tensor(X), tensor(V))
    x = tensor(X)
    primal, tangent = fwAD.unpack_dual(x)
    assert primal is x and tangent is None


def test_levels_nest_and_exit_as_pytorchs():
    with fwAD.dual_level() as level:
        assert level == 0 and listeners.active is not None
        with pytest.raises(RuntimeError, match="Nested forward mode AD is not supported"):
            fwAD.enter_dual_level()
        with pytest.raises(RuntimeError, match="not the last one"):
            fwAD.exit_dual_level(level=3)
        with pytest.raises(RuntimeError, match="Invalid level"):
            fwAD.make_dual(tensor(X), tensor(V), level=3)
    assert listeners.active is None
    with pytest.raises(RuntimeError, match="Dual level must be a positive number"):
        fwAD.exit_dual_level()
    assert fwAD.enter_dual_level() == 0
    fwAD.exit_dual_level()


def test_exiting_a_level_drops_its_tangents():
    with fwAD.dual_level():
        dual = fwAD.make_dual(tensor(X), tensor(V))
        assert fwAD.unpack_dual(dual).tangent is not None
    assert fwAD.unpack_dual(dual).tangent is None
    with fwAD.dual_level():
        assert fwAD.unpack_dual(dual).tangent is None


@pytest.mark.parametrize(
    "primal, tangent, error, match",
    [
        (np.zeros(3), np.zeros(4), RuntimeError, r"size \[3\] while .* size \[4\]"),
        (np.zeros(3), np.zeros(3, dtype=np.int64), ValueError, "tangent to be floating"),
        (np.zeros(3, dtype=np.int64), np.zeros(3), ValueError, "primal to be floating"),
    ],
)
def test_make_dual_checks_its_arguments(primal, tangent, error, match):
    with fwAD.dual_level(), pytest.raises(error, match=match):
        fwAD.make_dual(ta.tensor(primal), ta.tensor(tangent))


def test_the_dual_is_a_view_and_unpacking_gives_the_tangent_it_was_given():
    x, v = tensor(X), tensor(V)
    with fwAD.dual_level():
        dual = fwAD.make_dual(x, v)
        primal, tangent = fwAD.unpack_dual(dual)
        assert tangent is v
        assert np.shares_memory(dual.numpy(), x.numpy())
        assert np.shares_memory(primal.numpy(), x.numpy())
        assert fwAD.unpack_dual(primal).tangent is None
        assert fwAD.unpack_dual(x).tangent is None  # the input itself stays plain
        assert isinstance(fwAD.unpack_dual(dual), fwAD.UnpackedDualTensor)


def test_a_dying_primal_leaves_no_entry():
    with fwAD.dual_level():
        dual = fwAD.make_dual(tensor(X), tensor(V))
        level = fwAD._levels[-1]
        assert len(level.tangents) == 1
        del dual
        gc.collect()
        assert len(level.tangents) == 0


# ------------------------------------------------------------------------ tangents through ops
def test_tangents_match_pytorchs_forward_ad():
    torch = torch_or_skip()
    import torch.autograd.forward_ad as torch_fwAD

    y, w = RNG.standard_normal(5), RNG.standard_normal(5)
    with fwAD.dual_level():
        a = fwAD.make_dual(tensor(X), tensor(V))
        b = fwAD.make_dual(tensor(y), tensor(w))
        ours = fwAD.unpack_dual(Mul.apply(Sin.apply(a), Cos.apply(b))).tangent.numpy()
    with torch_fwAD.dual_level():
        a = torch_fwAD.make_dual(torch.tensor(X), torch.tensor(V))
        b = torch_fwAD.make_dual(torch.tensor(y), torch.tensor(w))
        theirs = torch_fwAD.unpack_dual(torch.sin(a) * torch.cos(b)).tangent.numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def test_several_outputs_each_get_their_tangent():
    with fwAD.dual_level():
        sin, cos = SinCos.apply(fwAD.make_dual(tensor(X), tensor(V)))
        np.testing.assert_allclose(fwAD.unpack_dual(sin).tangent.numpy(), np.cos(X) * V)
        np.testing.assert_allclose(fwAD.unpack_dual(cos).tangent.numpy(), -np.sin(X) * V)


def test_an_op_without_a_jvp_rule_is_named():
    class Cube(Function):
        def forward(self, x):
            return x**3

        def backward(self, grad):
            return grad * 3 * self.inputs[0] ** 2

    with fwAD.dual_level():
        dual = fwAD.make_dual(tensor(X), tensor(V))
        with pytest.raises(RuntimeError, match="forward AD with Cube that does not support it"):
            Cube.apply(dual)
        Cube.apply(tensor(X))  # no tangent reaches it: no rule needed


def test_a_jvp_of_the_wrong_shape_is_refused():
    class Bad(Function):
        def forward(self, x):
            return x

        def jvp(self, tangent):
            return tangent.numpy()[:2]  # an array: wrapped, then found too short

    with fwAD.dual_level():
        dual = fwAD.make_dual(tensor(X), tensor(V))
        with pytest.raises(RuntimeError, match=r"Bad.jvp returned a tangent of shape \(2,\)"):
            Bad.apply(dual)


def test_integer_outputs_get_no_tangent_and_need_no_rule():
    with fwAD.dual_level():
        dual = fwAD.make_dual(tensor(X), tensor(V))
        assert fwAD.unpack_dual(dual > 0).tangent is None
        assert fwAD.unpack_dual(dual.argmax()).tangent is None


def test_no_grad_does_not_stop_forward_mode_and_detach_drops_the_tangent():
    with fwAD.dual_level():
        dual = fwAD.make_dual(tensor(X), tensor(V))
        with ta.no_grad():
            tangent = fwAD.unpack_dual(Sin.apply(dual)).tangent
        np.testing.assert_allclose(tangent.numpy(), np.cos(X) * V)
        assert fwAD.unpack_dual(dual.detach()).tangent is None


def test_reverse_over_forward_differentiates_the_tangent():
    """d/dx <cos(x) v, 1> = -sin(x) v: backward through the graph the jvp rule recorded."""
    x = tensor(X, requires_grad=True)
    with fwAD.dual_level():
        tangent = fwAD.unpack_dual(Sin.apply(fwAD.make_dual(x, tensor(V)))).tangent
        (gradient,) = ta.autograd.grad(tangent, x, ta.ones(5, dtype="float64"))
    np.testing.assert_allclose(gradient.numpy(), -np.sin(X) * V)


def test_forward_over_forward_gives_the_second_derivative():
    """A level inside a level: the outer tangent of the inner tangent is -sin(x) v w."""
    w = RNG.standard_normal(5)
    with fwAD.dual_level():
        outer = fwAD.make_dual(tensor(X), tensor(V))
        with fwAD.nested_level() as level:
            inner = fwAD.make_dual(outer, tensor(w), level=level)
            tangent = fwAD.unpack_dual(Sin.apply(inner), level=level).tangent
        second = fwAD.unpack_dual(tangent, level=0).tangent
    np.testing.assert_allclose(tangent.numpy(), np.cos(X) * w)
    np.testing.assert_allclose(second.numpy(), -np.sin(X) * V * w)


def test_in_place_writes_carry_the_tangent_as_pytorchs():
    """A random refill zeroes the tangent, written into the tangent given (PyTorch's too)."""
    torch = torch_or_skip()
    import torch.autograd.forward_ad as torch_fwAD

    v = tensor(V)
    with fwAD.dual_level():
        dual = fwAD.make_dual(tensor(X), v)
        dual.normal_()
        ours = fwAD.unpack_dual(dual).tangent
    theirs_v = torch.tensor(V)
    with torch_fwAD.dual_level():
        dual = torch_fwAD.make_dual(torch.tensor(X), theirs_v)
        dual.normal_()
        theirs = torch_fwAD.unpack_dual(dual).tangent
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(v.numpy(), theirs_v.numpy())
    assert not np.any(v.numpy())


def test_an_in_place_write_runs_the_ops_jvp_rule():
    with fwAD.dual_level():
        dual = fwAD.make_dual(tensor(X), tensor(V))
        dual._inplace("sin_", Sin.apply)
        np.testing.assert_allclose(dual.numpy(), np.sin(X))
        np.testing.assert_allclose(fwAD.unpack_dual(dual).tangent.numpy(), np.cos(X) * V)


# --------------------------------------------------------------------- custom Functions
class ScaledProduct(ta.autograd.Function):
    """y = x * w * c in PyTorch's protocol, with a static jvp."""

    @staticmethod
    def forward(ctx, x, w, c):
        ctx.save_for_forward(x, w)
        ctx.c = c
        return x * w * c

    @staticmethod
    def jvp(ctx, tangent_x, tangent_w, tangent_c):
        x, w = ctx.saved_tensors
        return (tangent_x * w + x * tangent_w) * ctx.c


def test_a_static_jvp_matches_pytorchs():
    torch = torch_or_skip()
    import torch.autograd.forward_ad as torch_fwAD

    class TorchScaledProduct(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, c):
            ctx.save_for_forward(x, w)
            ctx.c = c
            return x * w * c

        @staticmethod
        def jvp(ctx, tangent_x, tangent_w, tangent_c):
            x, w = ctx.saved_tensors
            return (tangent_x * w + x * tangent_w) * ctx.c

    w = RNG.standard_normal(5)
    with fwAD.dual_level():
        out = ScaledProduct.apply(fwAD.make_dual(tensor(X), tensor(V)), tensor(w), 2.0)
        ours = fwAD.unpack_dual(out).tangent.numpy()
    with torch_fwAD.dual_level():
        dual = torch_fwAD.make_dual(torch.tensor(X), torch.tensor(V))
        theirs = torch_fwAD.unpack_dual(TorchScaledProduct.apply(dual, torch.tensor(w), 2.0))
    np.testing.assert_allclose(ours, theirs.tangent.numpy(), rtol=1e-12)


def test_a_static_jvp_gets_zeros_for_a_tensor_without_tangent_and_none_for_the_rest():
    seen = {}

    class Spy(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, c):
            return x * w * c

        @staticmethod
        def jvp(ctx, tangent_x, tangent_w, tangent_c):
            seen.update(x=tangent_x, w=tangent_w, c=tangent_c)
            return tangent_x

    with fwAD.dual_level():
        Spy.apply(fwAD.make_dual(tensor(X), tensor(V)), tensor(X), 2.0)
    np.testing.assert_array_equal(seen["x"].numpy(), V)
    np.testing.assert_array_equal(seen["w"].numpy(), np.zeros(5))
    assert seen["c"] is None


def test_the_setup_context_style_and_forward_mode_without_backward():
    class Double(ta.autograd.Function):
        @staticmethod
        def forward(x):
            return x * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.count = len(inputs)

        @staticmethod
        def jvp(ctx, tangent):
            assert ctx.count == 1
            return tangent * 2

    with fwAD.dual_level():
        out = Double.apply(fwAD.make_dual(tensor(X), tensor(V)))
        np.testing.assert_allclose(fwAD.unpack_dual(out).tangent.numpy(), 2 * V)
    x = tensor(X, requires_grad=True)
    with pytest.raises(NotImplementedError, match="implement either the backward or vjp"):
        Double.apply(x).sum().backward()


def test_a_custom_function_without_jvp_refuses_a_tangent():
    class Twice(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    with fwAD.dual_level(), pytest.raises(NotImplementedError, match="implement the jvp"):
        Twice.apply(fwAD.make_dual(tensor(X), tensor(V)))


def test_a_jvp_that_is_not_static_is_refused():
    with pytest.raises(TypeError, match="jvp must be one too"):

        class Wrong(ta.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            def jvp(self, tangent):
                return tangent


def test_vmap_declarations_are_checked_as_pytorchs():
    class Generated(ta.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(x):
            return x

        @staticmethod
        def setup_context(ctx, inputs, output):
            pass

    class Both(Generated):
        @staticmethod
        def vmap(info, in_dims, x):
            return x, 0

    class Neither(Generated):
        generate_vmap_rule = False

    class OldStyle(ta.autograd.Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(ctx, x):
            return x

    assert vmap_support(Generated) == "generate"
    with pytest.raises(RuntimeError, match="both generate_vmap_rule=True and an overridden"):
        vmap_support(Both)
    with pytest.raises(RuntimeError, match="does not have vmap support"):
        vmap_support(Neither)
    with pytest.raises(RuntimeError, match="must override the setup_context"):
        vmap_support(OldStyle)
    with pytest.raises(TypeError, match="generate_vmap_rule must be True or False"):

        class NotABool(Generated):
            generate_vmap_rule = "yes"


def test_compile_refuses_a_dual_tensor_in_a_recorded_step_naming_forward_ad():
    """A replay repeats array calls and would file no tangents: the recording refuses."""
    linear = ta.nn.Linear(3, 2)
    step = ta.compile(lambda x: linear(x).sum())
    with fwAD.dual_level():
        dual = fwAD.make_dual(ta.randn(4, 3), ta.ones(4, 3))
        with pytest.raises(RuntimeError, match="forward_ad"):
            for _ in range(3):  # the first calls run eagerly; a recording follows
                step(dual)
