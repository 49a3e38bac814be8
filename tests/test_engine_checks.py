"""Engine checks: per-thread grad mode, checked hooks and .grad, custom-op rules, the skeleton.

PyTorch is the oracle where it has an answer (skipping cleanly without it).
"""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import tinyattn as ta
from tinyattn.autograd import KEPT_CONSTANT_SIZE, ReleasedConstant, is_anomaly_enabled


def _leaf(values, device, dtype="float64"):
    return ta.tensor(values, dtype=dtype, device=device, requires_grad=True)


def _run_threads(*targets):
    errors = []

    def guarded(target):
        def run():
            try:
                target()
            except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


# ---------------------------------------------------------------------- grad mode per thread
def test_a_no_grad_block_in_one_thread_does_not_stop_training_in_another(device):
    in_no_grad, trained = threading.Event(), threading.Event()
    w = _leaf([1.0, 2.0], device)
    seen = {}

    def evaluator():
        with ta.no_grad():
            in_no_grad.set()
            trained.wait(timeout=30)
            seen["evaluator records"] = (w * 2.0).requires_grad

    def trainer():
        in_no_grad.wait(timeout=30)
        seen["trainer mode"] = ta.is_grad_enabled()
        (w * w).sum().backward()
        trained.set()

    _run_threads(evaluator, trainer)
    assert seen == {"evaluator records": False, "trainer mode": True}
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])


def test_overlapping_no_grad_blocks_in_two_threads_never_leave_grad_mode_off():
    # A enters, B enters, A leaves, B leaves: with one global flag B restores A's "off" for good.
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with ta.no_grad():
            a_in.set()
            b_in.wait(timeout=30)
        a_out.set()

    def second():
        a_in.wait(timeout=30)
        with ta.no_grad():
            b_in.set()
            a_out.wait(timeout=30)

    _run_threads(first, second)
    assert ta.is_grad_enabled()


def test_the_count_of_threads_with_grad_off_follows_every_way_of_switching():
    # The hot path trusts grad mode is on everywhere while the count is 0: it must count every
    # switch, undo it on the way back, and stay above 0 while any thread's mode is off.
    from tinyattn.autograd import grad_mode  # noqa: PLC0415

    w = _leaf([1.0], None)
    start = grad_mode._grad_off_threads
    with ta.no_grad():
        assert grad_mode._grad_off_threads == start + 1 and not (w * 2.0).requires_grad
        with ta.enable_grad():
            assert grad_mode._grad_off_threads == start and (w * 2.0).requires_grad
        with ta.no_grad(), ta.inference_mode():  # no change, no second count
            assert grad_mode._grad_off_threads == start + 1
    ta.set_grad_enabled(False)  # called alone: switches at once
    assert grad_mode._grad_off_threads == start + 1 and not ta.is_grad_enabled()
    ta.set_grad_enabled(True)
    assert grad_mode._grad_off_threads == start

    def leaves_it_off():
        ta.set_grad_enabled(False)

    _run_threads(leaves_it_off)  # a thread that ends with its mode off: counted, harmless
    assert grad_mode._grad_off_threads == start + 1
    assert ta.is_grad_enabled() and (w * 2.0).requires_grad
    grad_mode._grad_off_threads = start  # that thread is gone: its count with it


def test_a_new_thread_starts_with_grad_on_and_anomaly_off():
    seen = {}

    def probe():
        seen["grad"], seen["anomaly"] = ta.is_grad_enabled(), is_anomaly_enabled()

    with ta.no_grad(), ta.detect_anomaly():
        _run_threads(probe)
        assert not ta.is_grad_enabled() and is_anomaly_enabled()
    assert seen == {"grad": True, "anomaly": False}


def test_anomaly_mode_in_one_thread_does_not_check_another():
    inside, checked = threading.Event(), threading.Event()
    seen = {}

    def watched():
        with ta.detect_anomaly():
            inside.set()
            checked.wait(timeout=30)
            try:
                with np.errstate(invalid="ignore"):
                    ta.tensor([-1.0]).sqrt()
            except ta.AnomalyError:
                seen["watched"] = "raised"

    def free():
        inside.wait(timeout=30)
        with np.errstate(invalid="ignore"):  # NumPy's error state is per thread too
            seen["free"] = bool(np.isnan(ta.tensor([-1.0]).sqrt().numpy()[0]))
        checked.set()

    _run_threads(watched, free)
    assert seen == {"watched": "raised", "free": True}


def test_one_decorated_function_runs_in_two_threads_at_once():
    entered = threading.Barrier(2, timeout=30)

    @ta.no_grad()
    def evaluate():
        entered.wait()
        return ta.is_grad_enabled()

    results = []
    _run_threads(lambda: results.append(evaluate()), lambda: results.append(evaluate()))
    assert results == [False, False] and ta.is_grad_enabled()


def test_set_grad_enabled_switches_at_once_and_restores_as_a_context_manager():
    torch = pytest.importorskip("torch")
    for module in (torch, ta):
        module.set_grad_enabled(False)
        assert not module.is_grad_enabled()
        module.set_grad_enabled(True)
        with module.set_grad_enabled(False):
            assert not module.is_grad_enabled()
        assert module.is_grad_enabled()


# ------------------------------------------------------------------------------ hooks checked
BAD_HOOKS = [
    # (name, hook result, error type, words the message must hold)
    ("wrong shape", lambda g: g.sum(), RuntimeError, ["shape ()", "shape (3,)"]),
    ("wrong dtype", lambda g: g.to("float32"), RuntimeError, ["float32", "float64", "(3,)"]),
    ("numpy array", lambda g: g.numpy(), TypeError, ["numpy.ndarray", "shape (3,)"]),
    ("a list", lambda g: [1.0, 2.0, 3.0], TypeError, ["builtins.list", "shape (3,)"]),
]


@pytest.mark.parametrize("where", ["leaf", "intermediate"])
@pytest.mark.parametrize("name,hook,error,words", BAD_HOOKS, ids=[r[0] for r in BAD_HOOKS])
def test_a_hook_returning_a_wrong_gradient_is_a_clear_error(
    device, where, name, hook, error, words
):
    x = _leaf([1.0, 2.0, 3.0], device)
    target = x if where == "leaf" else x * 2.0
    target.register_hook(hook)
    with pytest.raises(error) as info:
        (target * target).sum().backward()
    message = str(info.value)
    assert message.startswith("hook '<lambda>'")
    for word in words:
        assert word in message
    assert x.grad is None


def test_a_hook_returning_a_gradient_on_another_device_is_a_clear_error():
    x = _leaf([1.0, 2.0], "cpu")
    x.register_hook(lambda g: g.to("strict"))
    with pytest.raises(RuntimeError, match=r"device 'strict:device1' .* \(device 'cpu'\)"):
        (x * x).sum().backward()


def test_a_hook_may_scale_the_gradient(device):
    x = _leaf([1.0, 2.0], device)
    x.register_hook(lambda g: g * 10.0)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 40.0])


# ---------------------------------------------------------------------- x.grad = ... checked
BAD_GRADS = [
    # (name, value from device, error, words)
    ("wrong shape", lambda d: ta.ones(2, 2, dtype="float64", device=d), RuntimeError, ["(2, 2)"]),
    ("wrong dtype", lambda d: ta.ones(3, dtype="float32", device=d), RuntimeError, ["float32"]),
    ("numpy array", lambda d: np.ones(3), TypeError, ["numpy.ndarray", "(3,)"]),
    ("other device", lambda d: ta.ones(3, dtype="float64", device="strict"), RuntimeError, []),
]


@pytest.mark.parametrize("name,value,error,words", BAD_GRADS, ids=[r[0] for r in BAD_GRADS])
def test_assigning_a_wrong_grad_is_refused(name, value, error, words):
    torch = pytest.importorskip("torch")
    with pytest.raises((RuntimeError, TypeError)):  # torch refuses each of these too
        torch_value = {
            "wrong shape": torch.ones(2, 2, dtype=torch.float64),
            "wrong dtype": torch.ones(3, dtype=torch.float32),
            "numpy array": np.ones(3),
            "other device": torch.ones(3, dtype=torch.float64, device="meta"),
        }[name]
        torch.zeros(3, dtype=torch.float64, requires_grad=True).grad = torch_value
    x = _leaf([1.0, 2.0, 3.0], "cpu")
    with pytest.raises(error) as info:
        x.grad = value("cpu")
    assert str(info.value).startswith("assigned grad")
    for word in words:
        assert word in str(info.value)
    assert x.grad is None


def test_assigning_a_matching_grad_or_none_is_accepted(device):
    x = _leaf([1.0, 2.0], device)
    x.grad = ta.ones(2, dtype="float64", device=device)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 5.0])
    x.grad = None
    assert x.grad is None


# ------------------------------------------------------------------------------- custom ops
def test_defining_init_on_a_function_is_a_clear_error_at_class_creation():
    with pytest.raises(TypeError, match=r"Scale defines __init__.*Scale.apply\(x, scale=2.0\)"):

        class Scale(ta.Function):
            def __init__(self, scale):
                self.scale = scale


def test_constants_reach_forward_as_keyword_arguments(device):
    class Scale(ta.Function):
        def forward(self, x, scale=1.0):
            self.scale = scale
            return x * scale

        def backward(self, grad):
            return grad * self.scale

    x = _leaf([1.0, 2.0], device)
    Scale.apply(x, scale=3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_backward_reads_must_name_inputs_or_output():
    with pytest.raises(TypeError, match="backward_reads must be a tuple"):

        class Odd(ta.Function):
            backward_reads = "output"


@pytest.mark.parametrize("reads", [("inputs", "output"), ("output",), ("inputs",), ()])
def test_a_rule_is_lent_its_output_when_backward_reads_names_it(device, reads):
    """``self.output`` is the output during the rule when ``backward_reads`` names it (the
    default does), None otherwise; and never kept after the rule (no lasting cycle)."""
    seen = []

    class Square(ta.Function):
        backward_reads = reads

        def forward(self, x):
            return x * x

        def backward(self, grad):
            seen.append(self.output)
            return grad * 2.0 * self.inputs[0]

    x = _leaf([1.0, 3.0], device)
    y = Square.apply(x)
    node = y._ctx
    y.sum().backward(retain_graph=True)
    assert (seen[0] is y) == ("output" in reads) and (seen[0] is None) == ("output" not in reads)
    assert node.output is None
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 6.0])


# --------------------------------------------------------------- the skeleton after release
def test_release_keeps_a_skeleton_of_leaves_and_functions(device):
    x, w = _leaf([1.0, 2.0], device), _leaf([3.0, 4.0], device)
    h = x * w
    loss = h.tanh().sum()
    sum_node, tanh_node, mul_node = loss._ctx, loss._ctx.inputs[0]._ctx, h._ctx
    assert sum_node.released_inputs is None
    loss.backward()
    assert sum_node.inputs is None and sum_node.released_inputs == (tanh_node,)
    assert tanh_node.released_inputs == (mul_node,)
    assert mul_node.released_inputs[0] is x and mul_node.released_inputs[1] is w


def test_release_keeps_only_the_shape_of_a_large_constant(device):
    """A mask (no gradient reaches it) is freed with the graph: the skeleton keeps its shape and
    dtype for drawing, while a leaf and a small constant are kept as they are."""
    size = KEPT_CONSTANT_SIZE + 1
    x = _leaf(np.ones(size), device)
    mask = ta.tensor(np.arange(size) % 2, dtype="float64", device=device)
    half = ta.tensor([0.5] * KEPT_CONSTANT_SIZE, dtype="float64", device=device)[:1]
    loss = (x * mask * half).sum()
    masked = loss._ctx.inputs[0]._ctx.inputs[0]._ctx  # x * mask
    scaled = loss._ctx.inputs[0]._ctx  # (x * mask) * half
    alive = weakref.ref(mask)
    del mask
    loss.backward()
    kept = masked.released_inputs[1]
    assert isinstance(kept, ReleasedConstant) and kept.shape == (size,) and kept.numel() == size
    assert masked.released_inputs[0] is x and scaled.released_inputs[1] is half
    gc.collect()
    assert alive() is None, "the skeleton kept the mask alive"
    np.testing.assert_array_equal(x.grad.numpy(), 0.5 * (np.arange(size) % 2))


class _Twice(ta.Function):
    """y = 2x;  dL/dx = 2 g. A user op: unlike the built-ins it has a __dict__ and weakrefs."""

    backward_reads = ()

    def forward(self, x):
        return x * 2.0

    def backward(self, grad):
        return grad * 2.0


def test_the_skeleton_makes_no_reference_cycle(device, no_cyclic_gc):
    x = _leaf([1.0, 2.0], device)
    h = _Twice.apply(x.exp())
    loss = _Twice.apply(h * h).sum()
    outer = loss._ctx.inputs[0]._ctx  # the second _Twice
    refs = [weakref.ref(h._ctx), weakref.ref(outer), weakref.ref(x)]
    del outer
    loss.backward()
    assert h._ctx.released_inputs[0].name == "Exp"
    del loss, h, x
    assert not gc.isenabled()
    assert [ref() for ref in refs] == [None, None, None]  # freed by reference counting alone
