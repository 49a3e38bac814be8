"""Calls whose answer must be PyTorch's where a plausible implementation returns another one
without an error: dims given as sequences or as an empty list, NaN in rankings and signs,
negative indices, empty sequences, padding copies, repeated backward through graphs that saved
nothing, a captured tensor's requires_grad in a compiled step, and float16 optimizer steps.

Each test states the known answer without torch, and compares with torch where it is importable.
"""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest

import tinyattn as ta

NAN, INF = math.nan, math.inf


def _torch():
    return pytest.importorskip("torch")


def _same(ours: ta.Tensor, theirs, rtol: float = 0.0, signs: bool = True) -> None:
    """Equal values (NaN in place, with `signs` the sign of zeros too) and shapes; `rtol` for
    sums PyTorch adds in another order."""
    mine, other = ours.detach().numpy(), theirs.detach().numpy()
    assert mine.shape == other.shape
    assert np.allclose(mine, other, rtol=rtol, atol=0.0, equal_nan=True)
    if mine.dtype.kind == "f" and signs:
        real = ~np.isnan(mine)
        assert np.array_equal(np.signbit(mine[real]), np.signbit(other[real]))


def _no_half_on_strict(device: str, dtype: str) -> None:
    if device == "strict" and dtype == "float16":
        pytest.skip("array_api_strict has no float16")


# movedim with sequences of dims


MOVES = [((0, 1), (1, 0)), ([0, 2], [2, 0]), (0, -1), ((1, 3), (0, 1)), ((), ()), ((-1,), (0,))]


@pytest.mark.parametrize(("source", "destination"), MOVES)
def test_movedim_sequences(device, source, destination):
    values = np.arange(120.0).reshape(2, 3, 4, 5)
    x = ta.tensor(values, device=device)
    expected = np.moveaxis(values, source, destination)  # NumPy's meaning is PyTorch's
    for moved in (x.movedim(source, destination), ta.movedim(x, source, destination)):
        assert np.array_equal(moved.numpy(), expected)
    assert np.array_equal(x.moveaxis(source, destination).numpy(), expected)


def test_movedim_known_shapes_and_gradient():
    x = ta.zeros(2, 3, 4, requires_grad=True)
    assert x.movedim((0, 1), (1, 0)).shape == (3, 2, 4)
    assert ta.movedim(x, [0, 2], [2, 0]).shape == (4, 3, 2)
    weights = ta.tensor(np.arange(24.0).reshape(4, 2, 3))
    (x.movedim((0, 1), (1, 2)) * weights).sum().backward()
    assert np.array_equal(x.grad.numpy(), np.moveaxis(weights.numpy(), (1, 2), (0, 1)))


def test_movedim_random_against_torch():
    torch = _torch()
    values = np.random.default_rng(0).random((2, 3, 4, 5))
    x, t = ta.tensor(values), torch.tensor(values)
    rng = random.Random(0)
    for _ in range(200):
        k = rng.randint(0, 4)
        source = [d - 4 * rng.randint(0, 1) for d in rng.sample(range(4), k)]
        destination = [d - 4 * rng.randint(0, 1) for d in rng.sample(range(4), k)]
        _same(x.movedim(source, destination), t.movedim(source, destination))


@pytest.mark.parametrize(
    ("source", "destination", "error"),
    [
        ((0, 1), (1,), RuntimeError),  # lengths differ
        ((0, 0), (1, 2), RuntimeError),  # a repeated source dim
        ((0, 1), (2, 2), RuntimeError),  # a repeated destination dim
        ((0, -4), (1, 2), RuntimeError),  # the same dim twice, spelled two ways
        ((0, 4), (1, 2), IndexError),  # out of range
        (0, (1,), TypeError),  # an int and a sequence
        (None, 1, TypeError),
    ],
)
def test_movedim_refusals_are_pytorchs(source, destination, error):
    x = ta.zeros(2, 3, 4, 5)
    with pytest.raises(error, match="movedim"):
        x.movedim(source, destination)
    torch = pytest.importorskip("torch")
    with pytest.raises(error):
        torch.zeros(2, 3, 4, 5).movedim(source, destination)


def test_movedim_of_a_0d_tensor():
    assert ta.tensor(1.0).movedim(0, -1).shape == ()
    assert ta.tensor(1.0).movedim((0,), (-1,)).shape == ()


@pytest.mark.parametrize("call", ["argmax", "cumsum", "size", "gather", "sort", "split"])
def test_a_single_dim_refuses_a_tuple(call):
    """A tuple where one dim is meant would otherwise be read as its smallest dim."""
    x = ta.zeros(2, 3)
    calls = {
        "argmax": lambda: x.argmax(dim=(1, 0)),
        "cumsum": lambda: x.cumsum(dim=(1,)),
        "size": lambda: x.size((1,)),
        "gather": lambda: x.gather((1,), ta.zeros(2, 3, dtype="int64")),
        "sort": lambda: x.sort(dim=(1,)),
        "split": lambda: x.split(1, dim=(1,)),
    }
    with pytest.raises(TypeError, match=call):
        calls[call]()


# dim=() and dim=[] in reductions


REDUCTIONS = {
    "sum": lambda x, d, k: x.sum(dim=d, keepdim=k),
    "mean": lambda x, d, k: x.mean(dim=d, keepdim=k),
    "amax": lambda x, d, k: x.amax(dim=d, keepdim=k),
    "amin": lambda x, d, k: x.amin(dim=d, keepdim=k),
    "std": lambda x, d, k: x.std(dim=d, keepdim=k),
    "var": lambda x, d, k: x.var(dim=d, keepdim=k),
    "std_mean": lambda x, d, k: _module(x).std_mean(x, dim=d, keepdim=k)[1],
    "var_mean": lambda x, d, k: _module(x).var_mean(x, dim=d, keepdim=k)[0],
    "norm": lambda x, d, k: x.norm(dim=d, keepdim=k),
    "norm1": lambda x, d, k: x.norm(p=1, dim=d, keepdim=k),
    "norm_inf": lambda x, d, k: x.norm(p=INF, dim=d, keepdim=k),
    "norm3": lambda x, d, k: x.norm(p=3, dim=d, keepdim=k),
    "count_nonzero": lambda x, d, k: x.count_nonzero(dim=d),
    "any": lambda x, d, k: x.any(dim=d, keepdim=k),  # PyTorch: no dims, x tested elementwise
    "all": lambda x, d, k: x.all(dim=d, keepdim=k),
    "logsumexp_keepdim": lambda x, d, k: x.logsumexp(dim=d, keepdim=True),
}
SHAPES = [(2, 3), (4,), ()]


def _module(x):
    """ta or torch, by the tensor's library: std_mean and var_mean are functions in torch."""
    return ta if isinstance(x, ta.Tensor) else _torch()


def test_empty_dims_reduce_every_dim_known_values():
    x = ta.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    for dims in ((), []):
        assert x.sum(dim=dims).item() == 21.0
        assert x.mean(dim=dims).item() == 3.5
        assert x.amax(dim=dims).item() == 6.0
        assert x.amin(dim=dims).item() == 1.0
        assert x.var(dim=dims).item() == pytest.approx(3.5)
        assert x.sum(dim=dims, keepdim=True).shape == (1, 1)
        assert x.any(dim=dims).shape == (2, 3)
    # The generic spelling "every dim but the batch" on a 1-d tensor reduces it all.
    v = ta.tensor([1.0, 2.0, 3.0])
    assert v.sum(dim=tuple(range(1, v.ndim))).item() == 6.0


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dims", [(), []], ids=["tuple", "list"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_empty_dims_against_torch(name, shape, dims, keepdim):
    torch = _torch()
    values = np.arange(1.0, 1.0 + math.prod(shape)).reshape(shape)
    call = REDUCTIONS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the variance of one element warns in both
        ours, theirs = (
            call(ta.tensor(values), dims, keepdim),
            call(torch.tensor(values), dims, keepdim),
        )
        _same(ours, theirs, rtol=1e-12)


def test_logsumexp_empty_dims_without_keepdim_refuses_as_pytorch():
    x = ta.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(RuntimeError, match="logsumexp"):
        x.logsumexp(dim=())
    assert x.logsumexp(dim=(), keepdim=True).shape == (1, 1)
    assert ta.tensor(2.0).logsumexp(dim=()).item() == 2.0
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError):
        torch.tensor([[1.0, 2.0], [3.0, 4.0]]).logsumexp(dim=())


def test_empty_dims_gradient():
    x = ta.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    x.mean(dim=()).backward()
    assert np.array_equal(x.grad.numpy(), np.full((2, 2), 0.25))


# NaN ranks above every number in topk and sort, as in max


def test_topk_keeps_nan_known():
    top = ta.tensor([3.0, NAN, 1.0]).topk(2)
    assert math.isnan(top.values[0].item()) and top.values[1].item() == 3.0
    assert top.indices.tolist() == [1, 0]
    low = ta.tensor([3.0, NAN, 1.0]).topk(2, largest=False)
    assert low.values.tolist() == [1.0, 3.0]
    assert ta.tensor([NAN, 2.0, NAN]).sort(descending=True).indices.tolist() == [0, 2, 1]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_sort_and_topk_with_nan_against_torch(device, dtype):
    torch = _torch()
    _no_half_on_strict(device, dtype)
    pool = [NAN, INF, -INF, 0.0, -0.0, 1.0, 2.0, -1.0]
    rng = random.Random(1)
    for _ in range(60):
        shape = rng.choice([(5,), (3, 4), (2, 3, 4), (1,), (4, 0)])
        values = np.array([rng.choice(pool) for _ in range(math.prod(shape))], dtype=dtype)
        values = values.reshape(shape)
        dim = rng.randrange(len(shape))
        x, t = ta.tensor(values, device=device), torch.tensor(values)
        for descending in (False, True):
            ours = x.sort(dim, descending=descending)
            theirs = t.sort(dim=dim, descending=descending, stable=True)
            _same(ours.values, theirs.values)
            assert ours.indices.tolist() == theirs.indices.tolist()
            k = rng.randint(0, shape[dim])
            # topk's order among equal values is unspecified in PyTorch
            # (so the sign of a zero among -0.0 and 0.0 too): compare the values.
            top = x.topk(k, dim, largest=descending).values
            _same(top, t.topk(k, dim, largest=descending)[0], signs=False)


def test_topk_gradient_reaches_the_nan():
    x = ta.tensor([3.0, NAN, 1.0], requires_grad=True)
    x.topk(2).values.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 0.0]


# sign: 0 for NaN


def test_sign_of_nan_zero_and_inf(device):
    values = [NAN, -NAN, -0.0, 0.0, INF, -INF, 2.0, -3.0]
    for dtype in ("float16", "float32", "float64")[device == "strict" :]:
        signs = ta.tensor(values, dtype=dtype, device=device).sign().numpy()
        assert signs.tolist() == [0.0, 0.0, 0.0, 0.0, 1.0, -1.0, 1.0, -1.0]
        assert not np.signbit(signs[:4]).any()  # +0.0, as PyTorch's
    torch = pytest.importorskip("torch")
    _same(ta.tensor(values).sign(), torch.tensor(values, dtype=torch.float32).sign())


def test_abs_gradient_at_nan_is_zero():
    """|x|' = sign(x), 0 at NaN: a NaN masked out after abs sends no NaN back."""
    x = ta.tensor([NAN, -0.0, 2.0], requires_grad=True)
    ta.where(ta.tensor([False, True, True]), x.abs(), 0.0).sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0]


# index_select and index_add take no negative index


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_index_select_refuses_a_negative_index(device, dim):
    x = ta.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], device=device)
    with pytest.raises(IndexError, match="index_select: index -1"):
        x.index_select(dim, ta.tensor([0, -1], device=device))
    with pytest.raises(RuntimeError):  # the type PyTorch's kernel for a middle dim raises
        x.index_select(dim, ta.tensor([-1], device=device))
    with pytest.raises(IndexError, match="index_add: index -1"):
        x.index_add(dim, ta.tensor([-1], device=device), x.index_select(dim, ta.tensor([0])))
    torch = pytest.importorskip("torch")
    with pytest.raises((IndexError, RuntimeError)):
        torch.zeros(2, 3).index_select(dim, torch.tensor([0, -1]))


def test_index_select_keeps_valid_indices():
    x = ta.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], requires_grad=True)
    picked = x.index_select(1, ta.tensor([2, 2, 0]))
    assert picked.tolist() == [[2.0, 2.0, 0.0], [5.0, 5.0, 3.0]]
    picked.sum().backward()
    assert x.grad.tolist() == [[1.0, 0.0, 2.0], [1.0, 0.0, 2.0]]
    assert x.index_select(1, ta.tensor(1)).shape == (2, 1)  # a 0-d index is one position
    assert ta.tensor(5.0).index_select(0, ta.tensor([0])).item() == 5.0
    with pytest.raises(IndexError, match="gather"):
        x.gather(1, ta.tensor([[-1], [0]]))


# a recurrent layer over an empty sequence


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_recurrent_layers_refuse_an_empty_sequence(name, batch_first):
    layer = getattr(ta.nn, name)(3, 4, batch_first=batch_first)
    empty = (2, 0, 3) if batch_first else (0, 2, 3)
    for shape in (empty, (0, 3)):
        with pytest.raises(RuntimeError, match=f"{name}: expected sequence length"):
            layer(ta.zeros(*shape))
    torch = pytest.importorskip("torch")
    theirs = getattr(torch.nn, name)(3, 4, batch_first=batch_first)
    for shape in (empty, (0, 3)):
        with pytest.raises(RuntimeError):
            theirs(torch.zeros(*shape))


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_recurrent_layers_take_an_empty_batch(name):
    output, final = getattr(ta.nn, name)(3, 4)(ta.zeros(2, 0, 3))
    assert output.shape == (2, 0, 4)
    assert (final[0] if name == "LSTM" else final).shape == (1, 0, 4)


# F.pad always returns a new tensor


@pytest.mark.parametrize("pads", [(), (0, 0), (0, 0, 0, 0), (-1, 0), (-1, -1), (1, -1), (2, 1)])
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_is_a_new_tensor(pads, mode):
    import tinyattn.nn.functional as F

    if mode != "constant" and not pads:
        pytest.skip("non-constant modes need pads for one dim or more")
    values = np.arange(12.0).reshape(1, 3, 4)
    x = ta.tensor(values, requires_grad=True)
    padded = F.pad(x, pads, mode=mode)
    assert padded is not x
    weights = np.random.default_rng(0).random(padded.shape)
    (padded * ta.tensor(weights)).sum().backward()
    torch = pytest.importorskip("torch")
    theirs = torch.tensor(values, requires_grad=True)
    expected = torch.nn.functional.pad(theirs, pads, mode=mode)
    _same(padded, expected)
    (expected * torch.tensor(weights)).sum().backward()
    _same(x.grad, theirs.grad)


@pytest.mark.parametrize("pads", [(), (0, 0), (0, 0, 0, 0), (-1, 0), (-1, -1)])
def test_pad_without_a_positive_amount_copies(pads):
    import tinyattn.nn.functional as F

    values = np.arange(12.0).reshape(1, 3, 4)
    x = ta.tensor(values)
    F.pad(x, pads).add_(1.0)  # a write into the result leaves the input alone
    assert np.array_equal(x.numpy(), values)


def test_pad_refuses_what_pytorch_refuses():
    import tinyattn.nn.functional as F

    x = ta.zeros(1, 2, 4)
    with pytest.raises(RuntimeError, match="pad"):
        F.pad(x, (-5, 0))  # a crop larger than the dim
    with pytest.raises(RuntimeError, match="reflect"):
        F.pad(x, (1, 1), mode="reflect", value=1.0)  # a fill value it would not use
    assert F.pad(x, (1, 1), mode="reflect", value=0.0).shape == (1, 2, 6)


# a second backward through nodes that saved nothing


def _twice(make):
    """Build a graph on a fresh leaf, backward through it twice; the leaf's gradient."""
    x = ta.ones(6, requires_grad=True)
    for loss in make(x):
        loss.backward()
    return x.grad.tolist()


GRAPHS = {
    "slice": lambda x: [x[0:3].sum()] * 2,
    "two slices": lambda x: [x[0:3].sum(), x[1:4].sum()],
    "chunk": lambda x: [part.sum() for part in x.chunk(2)],
    "unbind": lambda x: [row.sum() for row in x.view(2, 3).unbind()],
    "view then rows": lambda x: (lambda v: [v[0].sum(), v[1].sum()])(x.view(2, 3)),
    "add then slices": lambda x: (lambda y: [y[0:2].sum(), y[1:3].sum()])(x + 1),
    "flip and cumsum": lambda x: (lambda y: [y.sum(), y.sum()])(x.flip(0).cumsum(0)),
}


def test_a_graph_that_saved_nothing_backpropagates_twice_known():
    assert _twice(GRAPHS["slice"]) == [2.0, 2.0, 2.0, 0.0, 0.0, 0.0]
    assert _twice(GRAPHS["two slices"]) == [1.0, 2.0, 2.0, 1.0, 0.0, 0.0]
    assert _twice(GRAPHS["chunk"]) == [1.0] * 6


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_a_graph_that_saved_nothing_backpropagates_twice_as_in_torch(name):
    torch = _torch()
    ours = _twice(GRAPHS[name])
    x = torch.ones(6, requires_grad=True)
    for loss in GRAPHS[name](x):
        loss.backward()
    assert ours == x.grad.tolist()


@pytest.mark.parametrize(
    "make",
    [
        lambda x: (x * x).sum(),  # the product saved x
        lambda x: x.exp()[0:3].sum(),  # exp saved its output, under a slice that saved nothing
        lambda x: ta.where(x > 1, x, 0.0).sum(),
    ],
)
def test_a_graph_that_saved_values_still_refuses_a_second_backward(make):
    x = ta.ones(6, requires_grad=True)
    loss = make(x)
    loss.backward()
    first = x.grad.tolist()
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        loss.backward()
    assert x.grad.tolist() == first  # nothing accumulated by the refused walk


def test_a_node_over_one_that_saved_values_releases_its_inputs():
    """Keeping a sum's input would keep memory a second backward could not use."""
    x = ta.ones(6, requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    assert loss._ctx.inputs is None and loss._ctx.released_inputs is not None
    kept = x[0:3].sum()
    kept.backward()
    assert kept._ctx.inputs is not None


def test_a_number_or_an_index_kept_on_the_node_is_walked_again():
    """A deliberate difference (docs/from-pytorch.md): PyTorch saves the 2 of x * 2 and the index
    of x[index] as tensors and refuses a second backward; here they stay on the node."""
    x = ta.ones(3, requires_grad=True)
    doubled, picked = x * 2, x[ta.tensor([0, 2])]
    for _ in range(2):
        doubled.sum().backward()
        picked.sum().backward()
    assert x.grad.tolist() == [6.0, 4.0, 6.0]


# a compiled step over a tensor whose requires_grad the caller switches


def _frozen_steps(flags: list[bool], compiled: bool, max_signatures: int = 8):
    """A small model trained one step per flag, its first weight's requires_grad set to the
    flag before each step; the model, and the compiled step (None when eager)."""
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(3, 4), ta.nn.Tanh(), ta.nn.Linear(4, 1))
    optimizer = ta.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        optimizer.zero_grad()
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        return loss.detach()

    run = ta.compile(step, max_signatures=max_signatures) if compiled else step
    for flag in flags:
        model[0].weight.requires_grad_(flag)
        run(ta.ones(2, 3))
    return model, (run if compiled else None)


@pytest.mark.parametrize(
    "flags",
    [[True, False, True, False, True], [False, True, False, True], [True] * 3 + [False] * 5],
    ids=["alternating", "alternating from frozen", "frozen after a tape"],
)
def test_compiled_step_follows_a_switched_requires_grad(flags):
    eager, _ = _frozen_steps(flags, compiled=False)
    compiled, _ = _frozen_steps(flags, compiled=True)
    for ours, expected in zip(compiled.parameters(), eager.parameters(), strict=True):
        assert np.array_equal(ours.detach().numpy(), expected.detach().numpy())


def test_compiled_step_replays_after_a_layer_is_frozen():
    _, step = _frozen_steps([True] * 3 + [False] * 5, compiled=True)
    assert [tape.replays for tape in step.tapes.values()] == [3]


def test_a_requires_grad_switched_on_every_call_is_named():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "nothing replays", before the error
        with pytest.raises(ta.CompileError, match=r"requires_grad of a tensor of shape \(4, 3\)"):
            _frozen_steps([True, False] * 4, compiled=True, max_signatures=2)


# optimizers on float16 parameters compute each step in float32, as PyTorch's kernels


OPTIMIZERS = {
    "SGD": lambda m, ps, lr: m.optim.SGD(ps, lr=lr),
    "SGD momentum": lambda m, ps, lr: m.optim.SGD(ps, lr=lr, momentum=0.9, weight_decay=0.01),
    "SGD nesterov": lambda m, ps, lr: m.optim.SGD(ps, lr=lr, momentum=0.9, nesterov=True),
    "Adam": lambda m, ps, lr: m.optim.Adam(ps, lr=lr),
    "Adam decay": lambda m, ps, lr: m.optim.Adam(ps, lr=lr, eps=1e-3, weight_decay=0.1),
    "AdamW": lambda m, ps, lr: m.optim.AdamW(ps, lr=lr, eps=1e-3),
    "RMSprop": lambda m, ps, lr: m.optim.RMSprop(ps, lr=lr, eps=1e-3),
    "RMSprop centered": lambda m, ps, lr: m.optim.RMSprop(
        ps, lr=lr, momentum=0.5, centered=True, eps=1e-3, weight_decay=0.1
    ),
    "Adagrad": lambda m, ps, lr: m.optim.Adagrad(ps, lr=lr, lr_decay=0.01, eps=1e-3),
}


def _half_steps(module, name: str, lr: float, foreach=None) -> np.ndarray:
    """Four steps of one optimizer on a float16 parameter of 64 elements (whole vectors for
    PyTorch's kernels), with fixed float16 gradients: the parameter's final values."""
    rng = np.random.default_rng(0)
    start = rng.standard_normal((4, 16)).astype(np.float16)
    grads = [rng.standard_normal((4, 16)).astype(np.float16) for _ in range(4)]
    param = module.tensor(start, requires_grad=True)
    optimizer = OPTIMIZERS[name](module, [param], lr)
    for group in optimizer.param_groups:
        group["foreach"] = foreach
    for grad in grads:
        param.grad = module.tensor(grad)
        optimizer.step()
    return param.detach().numpy()


def test_adam_on_float16_keeps_its_step_size_in_float32():
    """lr / (1 - beta1) = 1e5 overflows float16: the first step is -lr * sign(g), not -inf."""
    param = ta.zeros(3, dtype="float16", requires_grad=True)
    optimizer = ta.optim.Adam([param], lr=1e4)
    param.grad = ta.tensor([1.0, -2.0, 0.5], dtype="float16")
    optimizer.step()
    assert param.tolist() == [-10000.0, 10000.0, -10000.0]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # lr = 1e4 overflows some runs, in both
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("lr", [1e4, 1e-2])
def test_float16_optimizers_against_torch(name, lr):
    torch = _torch()
    expected = _half_steps(torch, name, lr)
    for foreach in (None, False):  # the multi-tensor default and the loop
        ours = _half_steps(ta, name, lr, foreach)
        assert np.array_equal(ours, expected, equal_nan=True), (name, lr, foreach)


def test_float16_sgd_refuses_a_learning_rate_float16_cannot_hold():
    """PyTorch's add(alpha=-lr) rounds lr to float16, and refuses one that overflows."""
    param = ta.zeros(2, dtype="float16", requires_grad=True)
    param.grad = ta.ones(2, dtype="float16")
    with pytest.raises(RuntimeError, match="SGD: lr 100000.0 cannot be converted to float16"):
        ta.optim.SGD([param], lr=1e5).step()
    torch = pytest.importorskip("torch")
    theirs = torch.zeros(2, dtype=torch.float16, requires_grad=True)
    theirs.grad = torch.ones(2, dtype=torch.float16)
    with pytest.raises(RuntimeError):
        torch.optim.SGD([theirs], lr=1e5).step()


def test_float32_optimizers_are_unchanged_by_the_float16_rule():
    """The float32 loop and the multi-tensor path still agree bit for bit."""
    rng = np.random.default_rng(1)
    start, grad = rng.standard_normal(10).astype(np.float32), rng.standard_normal(10)
    results = []
    for foreach in (None, False):
        param = ta.tensor(start, requires_grad=True)
        optimizer = ta.optim.Adam([param], lr=0.1, weight_decay=0.01, foreach=foreach)
        for _ in range(3):
            param.grad = ta.tensor(grad.astype(np.float32))
            optimizer.step()
        results.append(param.detach().numpy())
    assert np.array_equal(results[0], results[1])


def test_a_root_gradient_of_another_dtype_is_cast_to_the_roots(device):
    """backward(g) with g in another float dtype: cast to the root's dtype, as PyTorch's engine
    casts it, for a leaf root (whose .grad it becomes) and through a graph alike."""
    given = ta.tensor([1.0, 2.0, 3.0], dtype="float64", device=device)
    leaf = ta.ones(3, requires_grad=True, device=device)
    leaf.backward(given)
    through = ta.ones(3, requires_grad=True, device=device)
    (through * 2.0).backward(given)
    for x, scale in ((leaf, 1.0), (through, 2.0)):
        assert x.grad.numpy().dtype == np.float32
        np.testing.assert_array_equal(x.grad.numpy(), scale * np.array([1.0, 2.0, 3.0]))
    torch = _torch()
    theirs = torch.ones(3, requires_grad=True)
    theirs.backward(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    assert theirs.grad.dtype == torch.float32
