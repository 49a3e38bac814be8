"""The PyTorch names real programs stop on, each checked against PyTorch as the oracle.

``Tensor.__index__`` and ``__format__``, the legacy typed constructors, ``.byte()``,
``ta.device`` and ``x.is_cuda``, ``ta.inference_mode``, the ``utils.data.dataloader`` module
path, ``Embedding.from_pretrained``, ``squeeze(d)`` of a dimension whose size is not 1, and
``optim.RMSprop`` / ``optim.Adagrad`` (steps and state dicts). Skipped without PyTorch.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyattn as ta
from tinyattn import nn, optim

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def outcome(call):
    """What a call gives: ("ok", value) or ("error", exception type)."""
    try:
        return "ok", call()
    except Exception as exc:  # noqa: BLE001  (the oracle's exception type is the answer)
        return "error", type(exc)


# ------------------------------------------------------------------------------- __index__
INDEX_CASES = {
    "0-d int64": lambda lib: lib.tensor(2),
    "0-d int32": lambda lib: lib.tensor(1, dtype=lib.int32),
    "0-d uint8": lambda lib: lib.tensor(1, dtype=lib.uint8),
    "0-d bool": lambda lib: lib.tensor(True),
    "one-element 1-d": lambda lib: lib.tensor([1]),
    "one-element 2-d": lambda lib: lib.tensor([[2]]),
    "0-d float": lambda lib: lib.tensor(1.0),
    "two elements": lambda lib: lib.tensor([1, 2]),
}


@pytest.mark.parametrize("case", list(INDEX_CASES))
@pytest.mark.parametrize(
    "use",
    [
        lambda i: [10, 20, 30][i],
        lambda i: list(range(5))[:i],
        lambda i: list(range(5))[i:],
        lambda i: "abcdef"[1:i],
        lambda i: list(range(i)),
    ],
    ids=["list index", "slice stop", "slice start", "str slice", "range"],
)
def test_index_accepts_and_refuses_what_pytorch_does(case, use):
    ours = outcome(lambda: use(INDEX_CASES[case](ta)))
    theirs = outcome(lambda: use(INDEX_CASES[case](torch)))
    assert ours == theirs


def test_a_tensor_slice_bound_slices_a_tensor():
    x = ta.arange(10)
    n = ta.tensor(3)
    np.testing.assert_array_equal(x[:n].numpy(), np.arange(3))
    np.testing.assert_array_equal(x[n : n + 2].numpy(), [3, 4])
    assert ta.zeros(n).shape == (3,)
    with pytest.raises(TypeError, match="sizes must be ints"):  # as torch.zeros refuses it
        ta.zeros(ta.tensor(2.5))


# ------------------------------------------------------------------------------ __format__
@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.tensor(3.14159265),
        lambda lib: lib.tensor(7),
        lambda lib: lib.tensor(True),
        lambda lib: lib.tensor(-0.000123, dtype=lib.float64),
    ],
)
@pytest.mark.parametrize("spec", ["", ".4f", ">10.2f", "e", "d", "5"])
def test_format_of_a_0d_tensor_is_its_values(make, spec):
    ours = outcome(lambda: format(make(ta), spec))
    theirs = outcome(lambda: format(make(torch), spec))
    assert ours == theirs


def test_fstrings_with_a_spec_on_0d_tensors():
    loss = ta.tensor(0.123456)
    step = ta.tensor(12)
    assert f"step {step:4d}: loss {loss:.4f}" == "step   12: loss 0.1235"


def test_format_of_a_larger_tensor_is_pytorchs():
    for spec in (".2f", "d"):
        assert outcome(lambda s=spec: format(ta.tensor([1.0, 2.0]), s))[1] is TypeError
        assert outcome(lambda s=spec: format(torch.tensor([1.0, 2.0]), s))[1] is TypeError
    x = ta.tensor([1.0, 2.0])
    assert format(x, "") == f"{x}" == str(x)


# ---------------------------------------------------------------------- legacy constructors
LEGACY = ["FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "ByteTensor", "BoolTensor"]


@pytest.mark.parametrize("name", LEGACY)
@pytest.mark.parametrize(
    "args",
    [([1, 0, 2],), ([[1, 2], [3, 4]],), ((1, 0),), (2, 3), (4,), ()],
    ids=["list", "nested", "tuple", "shape", "length", "empty"],
)
def test_legacy_constructors_match_pytorch(name, args):
    ours = getattr(ta, name)(*args)
    theirs = getattr(torch, name)(*args)
    assert ours.shape == tuple(theirs.shape)
    assert ta.backend.dtype_name(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    if args and isinstance(args[0], list | tuple):  # data: the values; a shape: unset there
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    else:
        assert not ours.numpy().any(), "tinyattn fills a shape-only legacy tensor with zeros"


def test_legacy_constructors_take_tensors_and_answer_isinstance():
    t = ta.tensor([1, 2])
    same = ta.LongTensor(t)
    same[0] = 9  # shares memory, as PyTorch's does
    assert t[0].item() == 9
    with pytest.raises(TypeError, match="LongTensor"):
        ta.LongTensor(ta.tensor([1.0]))
    assert isinstance(t, ta.LongTensor) and not isinstance(t, ta.FloatTensor)
    assert isinstance(ta.ones(2), ta.FloatTensor)
    assert isinstance(torch.ones(2), torch.FloatTensor)  # the oracle agrees
    with pytest.raises(TypeError):
        ta.FloatTensor(2, 3.0)


def test_byte_matches_pytorch():
    values = [0.0, 1.7, 200.0, 255.0]
    np.testing.assert_array_equal(
        ta.tensor(values).byte().numpy(), torch.tensor(values).byte().numpy()
    )
    assert ta.backend.dtype_name(ta.tensor([True]).byte().dtype) == "uint8"


# --------------------------------------------------------------------------------- devices
def test_device_objects_behave_as_pytorchs():
    for spec in (("cpu",), ("cuda",), ("cuda:1",), ("cuda", 2)):
        ours, theirs = ta.device(*spec), torch.device(*spec)
        assert (ours.type, ours.index) == (theirs.type, theirs.index)
        assert str(ours) == str(theirs)
    assert ta.device("cpu") == ta.device("cpu") and ta.device("cuda") != ta.device("cuda:0")
    assert ta.device(0) == "cuda:0"  # PyTorch's bare int (it asks for an accelerator first)
    for bad in (("tpu",), ("cuda:x",), ("cuda:1", 1)):
        assert outcome(lambda b=bad: ta.device(*b))[1] is RuntimeError
        assert outcome(lambda b=bad: torch.device(*b))[1] is RuntimeError


def test_tensor_device_compares_as_pytorch_programs_compare_it():
    x = ta.ones(2)
    assert x.device == ta.device("cpu")
    assert x.device.type == "cpu" and x.device.index is None
    assert x.device == "cpu"  # a difference: PyTorch's device never equals a string
    assert not x.is_cuda and x.is_cuda == torch.ones(2).is_cuda
    assert f"{x.device}" == "cpu"


def test_a_device_object_is_accepted_wherever_a_device_is():
    cpu = ta.device("cpu")
    x = ta.zeros(2, device=cpu)
    assert x.to(cpu) is x
    assert ta.tensor([1.0], device=cpu).device == "cpu"
    layer = nn.Linear(2, 2).to(cpu)
    assert layer.weight.device.type == "cpu"
    assert ta.randn(2, device=x.device).device == "cpu"


# ---------------------------------------------------------------------------- inference_mode
def test_inference_mode_records_no_graph_like_pytorchs():
    w = ta.ones(2, requires_grad=True)
    tw = torch.ones(2, requires_grad=True)
    with ta.inference_mode():
        ours = w * 2
    with torch.inference_mode():
        theirs = tw * 2
    assert ours.requires_grad == theirs.requires_grad is False
    with ta.inference_mode(False):
        assert (w * 2).requires_grad

    @ta.inference_mode()
    def called(t):
        return t * 2

    @ta.inference_mode
    def bare(t):
        return t * 2

    assert not called(w).requires_grad and not bare(w).requires_grad
    assert ta.is_grad_enabled(), "grad mode is restored on exit"


# ------------------------------------------------------------------------ utils.data modules
def test_dataloader_module_path_is_pytorchs():
    from torch.utils.data.dataloader import DataLoader as TorchLoader

    from tinyattn.utils.data import DataLoader, TensorDataset
    from tinyattn.utils.data.dataloader import DataLoader as ModuleLoader
    from tinyattn.utils.data.dataset import Dataset
    from tinyattn.utils.data.sampler import RandomSampler

    assert ModuleLoader is DataLoader and issubclass(TensorDataset, Dataset)
    assert RandomSampler is ta.utils.data.RandomSampler
    rows = np.arange(10, dtype=np.float32).reshape(5, 2)
    ours = [b[0].numpy() for b in ModuleLoader(TensorDataset(ta.tensor(rows)), batch_size=2)]
    theirs = [
        b[0].numpy()
        for b in TorchLoader(torch.utils.data.TensorDataset(torch.tensor(rows)), batch_size=2)
    ]
    assert len(ours) == len(theirs) == 3
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ Embedding.from_pretrained
@pytest.mark.parametrize("freeze", [True, False])
@pytest.mark.parametrize("padding_idx", [None, 1])
def test_embedding_from_pretrained_matches_pytorch(freeze, padding_idx):
    table = RNG.standard_normal((5, 3)).astype(np.float32)
    ours = nn.Embedding.from_pretrained(ta.tensor(table), freeze=freeze, padding_idx=padding_idx)
    theirs = torch.nn.Embedding.from_pretrained(
        torch.tensor(table), freeze=freeze, padding_idx=padding_idx
    )
    assert ours.weight.requires_grad == theirs.weight.requires_grad == (not freeze)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ids = [[1, 4, 1], [0, 2, 3]]
    out, expected = ours(ta.tensor(ids)), theirs(torch.tensor(ids))
    np.testing.assert_array_equal(out.detach().numpy(), expected.detach().numpy())
    if not freeze:
        out.sum().backward()
        expected.sum().backward()
        np.testing.assert_array_equal(ours.weight.grad.numpy(), theirs.weight.grad.numpy())


def test_embedding_from_pretrained_refuses_what_it_lacks():
    with pytest.raises(NotImplementedError, match="max_norm"):
        nn.Embedding.from_pretrained(ta.ones(3, 2), max_norm=1.0)
    with pytest.raises(ValueError, match="2-D"):
        nn.Embedding.from_pretrained(ta.ones(3))


# ----------------------------------------------------------------------------------- squeeze
@pytest.mark.parametrize("dims", [0, 1, 2, -1, (0, 1), (0, 2)])
def test_squeeze_of_a_dimension_not_of_size_1_is_pytorchs(dims):
    values = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    ours = ta.tensor(values).squeeze(dims)
    assert ours.shape == tuple(torch.tensor(values).squeeze(dims).shape)
    if dims == 0:  # nothing to remove: a view of the same memory, as in PyTorch
        x = ta.tensor(values)
        view = x.squeeze(0)
        view[0, 0, 0] = 100.0
        assert x[0, 0, 0].item() == 100.0


# -------------------------------------------------------------------- RMSprop and Adagrad
OPTIMIZERS = [
    ("RMSprop", {}),
    ("RMSprop", {"momentum": 0.9}),
    ("RMSprop", {"centered": True}),
    ("RMSprop", {"lr": 0.05, "alpha": 0.9, "centered": True, "momentum": 0.5, "weight_decay": 0.1}),
    ("Adagrad", {}),
    (
        "Adagrad",
        {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.1, "initial_accumulator_value": 0.5},
    ),
]


def optimizer_pair(name, options):
    shapes = [(3, 4), (4,)]
    values = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    ours = [nn.Parameter(ta.tensor(v)) for v in values]
    theirs = [torch.nn.Parameter(torch.tensor(v)) for v in values]
    return (
        ours,
        theirs,
        getattr(optim, name)(ours, **options),
        getattr(torch.optim, name)(theirs, **options),
    )


def step_both(ours, theirs, opt, torch_opt, steps):
    for _ in range(steps):
        for p, tp in zip(ours, theirs, strict=True):
            g = RNG.standard_normal(p.shape).astype(np.float32)
            p.grad, tp.grad = ta.tensor(g), torch.tensor(g)
        opt.step()
        torch_opt.step()


def assert_same_params(ours, theirs, atol=1e-6):
    for p, tp in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=0, atol=atol)


@pytest.mark.parametrize(("name", "options"), OPTIMIZERS)
def test_adaptive_optimizers_step_as_pytorch(name, options):
    ours, theirs, opt, torch_opt = optimizer_pair(name, options)
    for _ in range(10):
        step_both(ours, theirs, opt, torch_opt, 1)
        assert_same_params(ours, theirs)


@pytest.mark.parametrize(("name", "options"), OPTIMIZERS)
def test_a_pytorch_state_dict_loads_and_the_run_continues(name, options):
    ours, theirs, opt, torch_opt = optimizer_pair(name, options)
    step_both(ours, theirs, opt, torch_opt, 3)
    theirs_state = torch_opt.state_dict()
    ours_state = opt.state_dict()
    assert list(ours_state["state"]) == list(theirs_state["state"])
    for index, entries in theirs_state["state"].items():
        assert set(ours_state["state"][index]) == set(entries)
    # A fresh tinyattn optimizer takes PyTorch's state dict (with its flags and tensors) ...
    fresh = getattr(optim, name)(ours, **options)
    fresh.load_state_dict(
        {
            "state": {
                i: {k: ta.tensor(v.numpy()) for k, v in entries.items()}
                for i, entries in theirs_state["state"].items()
            },
            "param_groups": theirs_state["param_groups"],
        }
    )
    # ... and continues in step with PyTorch.
    step_both(ours, theirs, fresh, torch_opt, 7)
    assert_same_params(ours, theirs)


def test_adagrad_state_exists_from_the_start_as_in_pytorch():
    ours, theirs, opt, torch_opt = optimizer_pair("Adagrad", {"initial_accumulator_value": 0.3})
    assert list(opt.state_dict()["state"]) == list(torch_opt.state_dict()["state"]) == [0, 1]
    np.testing.assert_array_equal(
        opt.state_dict()["state"][1]["sum"].numpy(), np.full(4, 0.3, np.float32)
    )


def test_adaptive_optimizers_refuse_what_pytorch_refuses_and_flags_they_lack():
    p = [nn.Parameter(ta.ones(2))]
    for name, bad in (
        ("RMSprop", {"lr": -1.0}),
        ("RMSprop", {"alpha": -0.5}),
        ("Adagrad", {"eps": -1.0}),
    ):
        assert issubclass(outcome(lambda n=name, b=bad: getattr(optim, n)(p, **b))[1], ValueError)
        assert (
            outcome(
                lambda n=name, b=bad: getattr(torch.optim, n)(
                    [torch.nn.Parameter(torch.ones(2))], **b
                )
            )[1]
            is ValueError
        )
    with pytest.raises(NotImplementedError, match="maximize"):
        optim.RMSprop(p, maximize=True)
    optim.Adagrad(p, fused=None, differentiable=False)  # PyTorch's hints are accepted
