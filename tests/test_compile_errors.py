"""Every pattern ta.compile refuses, with the message it gives: each names what the step did and
says what to do instead. One row per pattern: a function that makes the mistake, the exception
type, and a pattern for the message's two halves. No message advises ``retain_graph=True``
unless backward really ran twice through one call.
"""

from __future__ import annotations

import warnings

import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim


@pytest.fixture(autouse=True)
def _verified(monkeypatch):
    """As in the other compile tests: every third replayed call records again and compares."""
    monkeypatch.setenv("TINYATTN_COMPILE_VERIFY", "3")


def _linear():
    ta.manual_seed(0)
    return nn.Linear(3, 2)


def _calls(step, count, *, make=lambda: ta.ones(4, 3)):
    compiled = ta.compile(step)
    for _ in range(count):
        compiled(make())


def _item():
    lin = _linear()
    _calls(lambda x: lin(x) * (2.0 if lin(x).sum().item() > 0 else 1.0), 1)


def _nonzero():
    _calls(lambda x: x[x.nonzero()[:, 0]], 1)


def _branch_on_python_state():
    calls = []

    def step(x):
        calls.append(1)
        out = x * 2.0
        return out.exp() if len(calls) % 2 else out  # len() reads the list where no guard sees

    _calls(step, 3)


def _other_op_on_python_state():
    calls = []

    def step(x):
        calls.append(1)
        return x * 2.0 if len(calls) % 2 else x + 2.0

    _calls(step, 3)


def _constant_from_changing_values():
    scale = [1.0]

    def step(x):
        scale[0] += 1.0
        return x * ta.tensor(max(scale))  # max() reads the list where no guard sees

    _calls(step, 3)


def _sampling():
    _calls(lambda probs: ta.multinomial(probs, 1), 1, make=lambda: ta.tensor([[0.2, 0.8]]))


def _seeding():
    def step(x):
        ta.manual_seed(0)
        return F.dropout(x, 0.5, training=True)

    _calls(step, 1)


def _nested():
    inner = ta.compile(lambda x: x * 2.0)
    _calls(lambda x: inner(x) + 1.0, 1)


def _changing_python_result():
    counter = [0]

    def step(x):
        counter[0] += 1
        return x * 2.0, max(counter)

    _calls(step, 3)


def _unsupported_result():
    _calls(lambda x: {1, 2}, 1)


def _learning_rate_set_in_the_step():
    lin = _linear()
    optimizer = optim.SGD(lin.parameters(), lr=0.1)

    def step(x):
        optimizer.param_groups[0]["lr"] = 0.05
        lin(x).sum().backward()
        optimizer.step()

    _calls(step, 1)


def _hook_reads_a_value_and_returns_a_gradient():
    weight = ta.ones(3, 2, requires_grad=True)

    def step(x):
        weight.grad = None
        hidden = x @ weight
        hidden.register_hook(lambda g: g * float(g.sum().item()))
        hidden.sum().backward()
        return weight.grad

    _calls(step, 1)


def _value_changing_on_every_call():
    lin, counter = _linear(), [0.0]

    def step(x):
        counter[0] += 1.0
        return lin(x) * counter[0]

    compiled = ta.compile(step, max_signatures=2)
    with ta.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "nothing replays", before the error
        for _ in range(6):
            compiled(ta.ones(4, 3))


def _extra_result_with_a_graph():
    lin, extra = _linear(), nn.Linear(3, 1)

    def step(x):
        lin.zero_grad()
        lin(x).sum().backward()
        return extra(x).sum()  # its graph reaches extra's parameters, untouched by backward

    _calls(step, 1)


def _compiled_model():
    model = _linear()
    return model, ta.compile(model)


def _backward_after_a_later_replay():
    _, compiled = _compiled_model()
    for _ in range(3):
        compiled(ta.ones(4, 3)).sum().backward()
    early = compiled(ta.ones(4, 3)).sum()
    compiled(ta.ones(4, 3))
    compiled(ta.ones(4, 3))  # one of two calls in a row replays (verification: every third)
    early.backward()


def _backward_twice_through_one_call():
    _, compiled = _compiled_model()
    for _ in range(3):
        compiled(ta.ones(4, 3)).sum().backward()
    (tape,) = compiled.tapes.values()
    out = compiled(ta.ones(4, 3)).sum()
    assert tape.verified == 0, "replayed (a verifying call returns eager's own graph)"
    out.backward(retain_graph=True)
    out.backward()


def _create_graph_through_a_replay():
    _, compiled = _compiled_model()
    x = ta.ones(4, 3, requires_grad=True)
    for _ in range(4):
        out = compiled(x).sum()
    ta.grad(out, [x], create_graph=True)


def _input_with_a_graph_from_outside():
    model, compiled = _compiled_model()
    compiled(ta.ones(4, 3, requires_grad=True) * 2.0)


def _hook_on_a_parameter_of_a_compiled_model():
    model, compiled = _compiled_model()
    model.weight.register_hook(lambda g: None)
    compiled(ta.ones(4, 3))


def _hook_inside_a_compiled_model():
    lin = _linear()

    def forward(x):
        hidden = lin(x)
        hidden.register_hook(lambda g: None)
        return hidden.relu()

    _calls(forward, 1)


def _module_hook_in_the_step():
    lin = _linear()
    lin.register_forward_hook(lambda module, args, output: output * 2.0)
    _calls(lambda x: lin(x).sum(), 1)


# (name, mistake, exception type, what was done ... what to do instead)
class _TwoOutputsSaved(ta.Function):
    """y1 = 2x, y2 = 3x, with x saved: a rule with several outputs that reads a saved value."""

    def forward(self, x):
        self.save_for_backward(x)
        return x * 2.0, x * 3.0

    def backward(self, grad_1, grad_2):
        (x,) = self.saved_tensors
        return grad_1 * 2.0 + grad_2 * 3.0 + x * 0.0


def _several_outputs_saving():
    lin = _linear()

    def step(x):
        a, b = _TwoOutputsSaved.apply(lin(x))
        loss = (a * b).sum()
        loss.backward()
        return loss

    _calls(step, 3)


def _split_piece_unused():
    lin = _linear()

    def step(x):
        a, _ = lin(x).split(1, dim=1)
        loss = (a * a).sum()
        loss.backward()
        return loss

    _calls(step, 3)


REFUSED = [
    ("item", _item, ta.CompileError, r"reads a tensor's value into Python.*Return the tensor"),
    (
        "several outputs, a saved value",
        _several_outputs_saving,
        ta.CompileError,
        r"_TwoOutputsSaved has several outputs and saves values.*run this step eagerly",
    ),
    (
        "a piece of split unused",
        _split_piece_unused,
        ta.CompileError,
        r"Split backward is the rule of an op with several outputs.*use every output",
    ),
    ("nonzero", _nonzero, ta.CompileError, r"calls nonzero\(\).*Use an op of fixed shape"),
    (
        "branch on Python state",
        _branch_on_python_state,
        ta.CompileError,
        r"ran different operations.*Take the branch outside the step",
    ),
    (
        "another op on Python state",
        _other_op_on_python_state,
        ta.CompileError,
        r"operation 0 differs between two calls.*Pass such a value as a tensor argument",
    ),
    (
        "constant from changing values",
        _constant_from_changing_values,
        ta.CompileError,
        r"changes between calls but is not made.*Make it with tensor ops inside the step",
    ),
    ("sampling", _sampling, ta.CompileError, r"samples with.*Sample outside the compiled step"),
    ("seeding", _seeding, ta.CompileError, r"seeds or sets the random.*seed before calling"),
    ("nested", _nested, ta.CompileError, r"called another compiled step.*call the compiled one"),
    (
        "changing Python result",
        _changing_python_result,
        ta.CompileError,
        r"returned Python values that changed.*return them as tensors",
    ),
    ("unsupported result", _unsupported_result, ta.CompileError, r"returned a set; return"),
    (
        "learning rate set in the step",
        _learning_rate_set_in_the_step,
        ta.CompileError,
        r"sets a parameter group's 'lr'.*Set it outside the step",
    ),
    (
        "hook reads a value",
        _hook_reads_a_value_and_returns_a_gradient,
        ta.CompileError,
        r"reads a tensor's value into Python and returns.*tensor ops only",
    ),
    (
        "value changing every call",
        _value_changing_on_every_call,
        ta.CompileError,
        r"`counter\[0\]`.*calls in a row.*Pass such a value as a tensor argument",
    ),
    (
        "extra result with a graph",
        _extra_result_with_a_graph,
        ta.CompileError,
        r"runs its own backward and returns a tensor.*return the tensor detached",
    ),
    (
        "backward after a later replay",
        _backward_after_a_later_replay,
        ta.CompileError,
        r"after a later call with the same signature.*Run backward before calling",
    ),
    (
        "backward twice through one call",
        _backward_twice_through_one_call,
        ta.CompileError,
        r"backward ran twice through one call.*call the function again before",
    ),
    (
        "create_graph through a replay",
        _create_graph_through_a_replay,
        ta.CompileError,
        r"create_graph=True.*call the function uncompiled",
    ),
    (
        "input with a graph from outside",
        _input_with_a_graph_from_outside,
        ta.CompileError,
        r"computed outside it.*pass a leaf",
    ),
    (
        "hook inside a compiled model",
        _hook_inside_a_compiled_model,
        ta.CompileError,
        r"backward runs gradient hooks.*Compile the whole training step instead",
    ),
    (
        "module hook",
        _module_hook_in_the_step,
        ta.CompileError,
        r"Linear with module hooks.*Remove them \(handle.remove\(\)\) before compiling",
    ),
    (
        "hook on a parameter",
        _hook_on_a_parameter_of_a_compiled_model,
        ta.CompileError,
        r"has gradient hooks.*register the hook after calling",
    ),
]


@pytest.mark.parametrize(
    ("name", "mistake", "error", "message"), REFUSED, ids=[r[0] for r in REFUSED]
)
def test_each_refused_pattern_names_the_mistake_and_the_alternative(name, mistake, error, message):
    with pytest.raises(error, match=message) as raised:
        mistake()
    text = str(raised.value)
    assert text.startswith("compile: "), text
    if name != "backward twice through one call":
        assert "retain_graph" not in text, text


def test_every_refusal_in_the_compile_modules_has_a_row():
    """The refusals raised by the compile modules, counted in their source: a new one needs a
    row above (this count goes up with it)."""
    import inspect

    from tinyattn.compiler import graph as compile_graph
    from tinyattn.compiler import record as compile_record
    from tinyattn.compiler import replay
    from tinyattn.compiler import step as compiler

    raises = sum(
        inspect.getsource(module).count("raise CompileError(")
        for module in (compiler, compile_record, compile_graph, replay)
    )
    # Not in the table: verification's own message (tests/test_compile_guards.py), the write
    # into a 0-d NumPy scalar, and four differences between two recordings that only a step
    # with one of the patterns above reaches (array counts, gradient holders, arrays written
    # in place, an array made in one call only).
    assert raises == len(REFUSED) + 6
