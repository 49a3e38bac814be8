"""Fusion in ``ta.compile``: runs of elementwise and row-wise ops replayed as generated kernels.

The unfused replay equals eager bit for bit (tests/test_compile.py); a fused one may round
differently, and must equal eager within `fusion.tolerance` (float32: 1e-6 of the largest
value, per kernel and step). Each test compares against eager, on the op table below, on the
three benchmark models and on examples/gpt.py. Tests that compile kernels skip without Numba;
the group description and the GPU generator's text need neither Numba nor a GPU.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn.compiler import codegen_cpu, codegen_gpu, fusion
from tinyattn.compiler.fusion import Buffer, Group, Item
from tinyattn.errors import TinyattnError

ROOT = Path(__file__).resolve().parents[1]
numba_missing = not codegen_cpu.available()
needs_numba = pytest.mark.skipif(numba_missing, reason="fusion compiles kernels with Numba")


@pytest.fixture(autouse=True)
def _kernel_cache(tmp_path_factory, monkeypatch):
    """Kernels cached in one folder of this session's own."""
    monkeypatch.setenv("TINYATTN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def _relative(a, b) -> float:
    """max |a - b| over max |b| (NaN and inf must sit at the same places, with equal values)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    finite = np.isfinite(b)
    assert np.array_equal(np.isfinite(a), finite)
    assert np.array_equal(a[~finite], b[~finite], equal_nan=True)
    if not finite.any():
        return 0.0
    scale = max(float(np.abs(b[finite]).max()), 1e-30)
    return float(np.abs(a[finite] - b[finite]).max()) / scale


def _compiled_and_eager(function, args_list, steps=4):
    """(fused results, eager results) of `function` over the argument tuples."""
    compiled = ta.compile(function, fuse=True)
    fused = [compiled(*args_list[k % len(args_list)]) for k in range(steps)]
    eager = [function(*args_list[k % len(args_list)]) for k in range(steps)]
    return compiled, fused, eager


# ------------------------------------------------------------------------------- the op table
RNG = np.random.default_rng(0)
SHAPE = (6, 5, 8)


def _x(shape=SHAPE, positive=False, dtype="float32"):
    values = RNG.standard_normal(shape)
    return ta.tensor((np.abs(values) + 0.5 if positive else values).astype(dtype))


# (name, function of tensors, inputs): each a chain of two or more fusable ops, so it fuses.
CHAINS = [
    ("add mul", lambda a, b: (a + b) * b, [SHAPE, SHAPE]),
    ("sub div", lambda a, b: (a - b) / (b * b + 1.0), [SHAPE, SHAPE]),
    ("bias broadcast", lambda a, b: (a * 2.0 + b) * 0.5, [SHAPE, (8,)]),
    ("row broadcast", lambda a, b: (a - b) * 3.0, [SHAPE, (6, 5, 1)]),
    ("exp log", lambda a: (a * a).exp().log() - a, [SHAPE]),
    ("exp of large values", lambda a: (a * 20.0).exp() * 0.5, [SHAPE]),
    ("tanh sqrt neg", lambda a: -((a * a + 1.0).sqrt().tanh()), [SHAPE]),
    ("maximum minimum", lambda a, b: ta.maximum(a, b) - ta.minimum(a, b) * 2.0, [SHAPE, SHAPE]),
    ("relu", lambda a: F.relu(a * 3.0) + 1.0, [SHAPE]),
    ("rsub", lambda a: (1.0 - a) * a, [SHAPE]),
    ("where", lambda a, b: ta.where(a > 0, a, b) * 2.0, [SHAPE, SHAPE]),
    ("gelu", lambda a: F.gelu(a * 4.0), [SHAPE]),
    ("softmax", lambda a, b: F.softmax(a + b, dim=-1), [SHAPE, (8,)]),
    ("log_softmax", lambda a: F.log_softmax(a * 5.0, dim=-1), [SHAPE]),
    ("layer_norm", lambda a, w, b: F.layer_norm(a * 2.0, (8,), w, b), [SHAPE, (8,), (8,)]),
    ("layer_norm no bias", lambda a, w: F.layer_norm(a + 1.0, (8,), w), [SHAPE, (8,)]),
]


@needs_numba
@pytest.mark.parametrize("name, function, shapes", CHAINS, ids=[c[0] for c in CHAINS])
def test_each_fused_op_equals_eager_within_the_tolerance(name, function, shapes):
    args = [tuple(_x(shape) for shape in shapes) for _ in range(2)]
    compiled, fused, eager = _compiled_and_eager(function, args)
    (tape,) = compiled.tapes.values()
    assert tape.groups, f"{name}: nothing fused"
    for got, want in zip(fused, eager, strict=True):
        assert _relative(got.numpy(), want.numpy()) <= fusion.tolerance("float32")


@needs_numba
def test_a_chain_becomes_one_kernel_that_stores_only_what_is_read_later():
    def chain(a, b):
        return ((a * b + 1.0).exp() * 0.5 - b) * a

    compiled, fused, eager = _compiled_and_eager(chain, [(_x(), _x())])
    (tape,) = compiled.tapes.values()
    (group,) = tape.groups
    assert [item.op for item in group.items] == ["mul", "add_scalar", "exp", "mul_scalar"] + [
        "sub",
        "mul",
    ]
    assert len(tape.program) == 1  # six ops, one program item
    assert [b.stored for b in group.outputs] == [False] * 5 + [True]
    assert group.loops == (int(np.prod(SHAPE)),)  # whole arrays: one flat loop
    assert _relative(fused[-1].numpy(), eager[-1].numpy()) <= 1e-6


@needs_numba
def test_float64_fuses_with_its_own_tolerance():
    def chain(a):
        return (a * a).exp() * 0.25 + a

    args = [(_x(dtype="float64"),)]
    compiled, fused, eager = _compiled_and_eager(chain, args)
    assert next(iter(compiled.tapes.values())).groups[0].dtype == "float64"
    assert _relative(fused[-1].numpy(), eager[-1].numpy()) <= fusion.tolerance("float64")


@needs_numba
def test_masked_and_nan_rows_keep_eager_meaning():
    """A row all -inf gives zeros (softmax) as eager's does, and a NaN makes its row NaN."""
    x = RNG.standard_normal((4, 8)).astype("float32")
    x[1] = -np.inf
    x[2, 3] = np.nan

    def step(a):
        return F.softmax(a * 1.0, dim=-1), F.log_softmax(a + 0.0, dim=-1)

    compiled, fused, eager = _compiled_and_eager(step, [(ta.tensor(x),)])
    assert len(next(iter(compiled.tapes.values())).groups) == 2
    for got, want in zip(fused[-1], eager[-1], strict=True):
        assert _relative(got.numpy(), want.numpy()) <= 1e-6
    assert np.isnan(fused[-1][0].numpy()[2]).all() and (fused[-1][0].numpy()[1] == 0).all()


@needs_numba
@pytest.mark.parametrize(
    "options", [{}, {"reduction": "sum"}, {"label_smoothing": 0.1}, {"ignore_index": 3}]
)
def test_cross_entropy_fuses_its_rows_and_its_total(options):
    """Log-softmax, the target rows and the loss over all rows in one kernel, equal to eager's
    within the tolerance, ignored targets (the default -100, or a class) counted out."""
    x = ta.tensor(RNG.standard_normal((6, 5, 7)).astype("float32"))
    targets = RNG.integers(0, 7, (6, 5))
    with_ignored = targets.copy()
    with_ignored[0, :2] = options.get("ignore_index", -100)

    def loss(a, t):
        return F.cross_entropy(a.reshape(-1, 7), t.reshape(-1), **options)

    batches = [(x, ta.tensor(targets)), (x * 2.0, ta.tensor(with_ignored))]
    compiled, fused, eager = _compiled_and_eager(loss, batches)
    assert any(g.labels == ["CrossEntropy"] for g in next(iter(compiled.tapes.values())).groups)
    for got, want in zip(fused, eager, strict=True):
        assert _relative(got.numpy(), want.numpy()) <= 1e-6


@needs_numba
def test_a_fused_cross_entropy_refuses_a_target_out_of_range():
    x = ta.tensor(RNG.standard_normal((8, 4)).astype("float32"))
    compiled = ta.compile(lambda a, t: F.cross_entropy(a, t), fuse=True)
    for _ in range(3):
        compiled(x, ta.tensor(np.arange(8) % 4))
    with pytest.raises(IndexError, match=r"out of range for 4 classes .* compiled step"):
        compiled(x, ta.tensor(np.arange(8)))


@needs_numba
def test_a_view_of_a_fused_result_read_in_the_same_run_splits_the_run():
    """y.T read elementwise after y is written: one index no longer means one element, so the
    run is cut there, and the values still equal eager's."""

    def step(a):
        y = a * 2.0 + 1.0
        return (y.T * 3.0 + y.T).exp()

    x = ta.tensor(RNG.standard_normal((8, 8)).astype("float32"))
    compiled, fused, eager = _compiled_and_eager(step, [(x,)])
    for group in next(iter(compiled.tapes.values())).groups:
        assert len({b.shape for b in group.outputs}) == 1
    assert _relative(fused[-1].numpy(), eager[-1].numpy()) <= 1e-6


# ------------------------------------------------------------------------------- whole models
def _benchmark_step(model: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import compiled as benchmark  # benchmarks/compiled.py
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return benchmark._tinyattn_step(model)


def _losses(model: str, steps: int, fuse: bool | None, verify_every: int = 0) -> np.ndarray:
    step, args = _benchmark_step(model)
    if fuse is not None:
        step = ta.compile(step, fuse=fuse, verify_every=verify_every)
    losses = [step(*args[k % len(args)]).item() for k in range(steps)]
    if fuse:
        assert next(iter(step.tapes.values())).groups, "the model's step fused nothing"
    return np.array(losses)


@pytest.mark.slow  # trains three models, compiling their kernels
@needs_numba
@pytest.mark.parametrize("model", ["small", "bench", "gpt"])
def test_the_benchmark_models_train_fused_as_eager_within_the_tolerance(model):
    """Each model's losses over 12 steps, fused (with every fused group checked against the
    unfused ops after every 4th call) against eager: within 1e-5 relative."""
    eager = _losses(model, 12, fuse=None)
    fused = _losses(model, 12, fuse=True, verify_every=4)
    assert np.max(np.abs(fused - eager) / np.abs(eager)) <= 1e-5


@pytest.mark.slow
@needs_numba
def test_gpt_example_losses_stay_within_1e_5_over_100_steps():
    eager = _losses("gpt", 100, fuse=None)
    fused = _losses("gpt", 100, fuse=True)
    assert np.max(np.abs(fused - eager)) <= 1e-5


def _example(name: str):
    """examples/<name>.py as a module (its own folder importable, for its helper modules)."""
    import importlib.util

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        spec = importlib.util.spec_from_file_location(
            f"fusion_{name}", ROOT / "examples" / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "examples"))
    return module


def _digits_losses(compile_step: bool) -> list[float]:
    digits = _example("digits_cnn")
    config = digits.Config(epochs=2, compile=compile_step)
    train_x, train_y, _, _ = digits.load_data(config)
    ta.manual_seed(config.seed)
    return digits.train(digits.build_model(config), train_x[:256], train_y[:256], config)


def _char_lstm_losses(compile_step: bool) -> list[float]:
    char_lstm = _example("char_lstm")
    config = char_lstm.Config(sentences=200, steps=12, compile=compile_step)
    text = char_lstm.make_text(config.sentences, config.seed)
    vocab = char_lstm.Vocabulary(text)
    ta.manual_seed(config.seed)
    model = char_lstm.CharLSTM(len(vocab), config)
    return char_lstm.train(model, vocab.encode(text), config, quiet=True).losses


@pytest.mark.slow  # trains two examples, compiling their kernels
@needs_numba
@pytest.mark.parametrize("losses", [_digits_losses, _char_lstm_losses], ids=["digits", "lstm"])
def test_the_examples_that_compile_train_fused_as_eager(losses, monkeypatch):
    """examples/digits_cnn.py and char_lstm.py call ta.compile(step): with fusion on (the
    default where Numba is installed), their losses equal eager's within 1e-5 relative."""
    monkeypatch.setenv("TINYATTN_COMPILE_FUSE", "1")
    fused, eager = np.array(losses(True)), np.array(losses(False))
    assert np.max(np.abs(fused - eager) / np.abs(eager)) <= 1e-5


# --------------------------------------------------------------- verification, switches, text
@needs_numba
def test_verification_finds_a_kernel_that_computes_something_else(monkeypatch):
    monkeypatch.setitem(codegen_cpu.EXPRESSIONS, "mul", "{0} + {1}")  # a wrong generator

    def chain(a, b):
        return (a * b).exp() * 0.5

    compiled = ta.compile(chain, fuse=True, verify_every=3)
    args = (_x(), _x())
    with pytest.raises(ta.compiler.CompileError, match=r"verification .*fused group \(Mul"):
        for _ in range(8):
            compiled(*args)


def test_fusion_is_off_without_numba_and_asked_for_it_says_what_to_install(monkeypatch):
    monkeypatch.setattr(codegen_cpu, "available", lambda: False)
    monkeypatch.delenv("TINYATTN_COMPILE_FUSE", raising=False)
    assert ta.compile(lambda a: a * 2.0).fuse is False
    with pytest.raises(TinyattnError, match=r"tinyattn\[fast\]"):
        ta.compile(lambda a: a * 2.0, fuse=True)


@needs_numba
def test_fuse_none_follows_the_environment(monkeypatch):
    monkeypatch.setenv("TINYATTN_COMPILE_FUSE", "1")
    assert ta.compile(lambda a: a).fuse is True
    monkeypatch.setenv("TINYATTN_COMPILE_FUSE", "0")
    assert ta.compile(lambda a: a).fuse is False
    assert ta.compile(lambda a: a, fuse=True).fuse is True
    monkeypatch.setenv("TINYATTN_COMPILE_FUSE", "yes")
    with pytest.raises(TinyattnError, match="TINYATTN_COMPILE_FUSE"):
        ta.compile(lambda a: a)


def test_unfused_replays_make_no_groups():
    compiled = ta.compile(lambda a: (a * 2.0 + 1.0).exp(), fuse=False)
    x = _x()
    for _ in range(3):
        result = compiled(x)
    assert not next(iter(compiled.tapes.values())).groups
    assert np.array_equal(result.numpy(), (x * 2.0 + 1.0).exp().numpy())  # bit for bit


@needs_numba
def test_explain_prints_each_group_and_its_generated_code(capsys):
    compiled = ta.compile(lambda a: F.gelu(a * 2.0) + 1.0, fuse=True)
    x = _x()
    for _ in range(3):
        compiled(x)
    text = compiled.explain()
    assert capsys.readouterr().out.strip() == text.strip()
    assert "fused groups" in text and "v0 = mul_scalar(x0, c=2.0)" in text
    assert "def kernel(" in text and "exp32(-z * z)" in text
    gpu = compiled.explain(gpu=True)
    assert "cupy.ElementwiseKernel(" in gpu and "normcdff(v0)" in gpu


@pytest.mark.slow  # two fresh processes importing Numba
@needs_numba
def test_kernels_are_cached_on_disk_for_the_next_process(tmp_path):
    """A second process finds the kernel's source and Numba's machine code in the cache."""
    program = (
        "import tinyattn as ta, numpy as np\n"
        "f = ta.compile(lambda a: (a * 2.0).exp() + a, fuse=True)\n"
        "x = ta.tensor(np.ones((4, 4), 'float32'))\n"
        "for _ in range(3): f(x)\n"
        "print(len(next(iter(f.tapes.values())).groups))\n"
    )
    env = {"TINYATTN_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True
        )
        assert done.stdout.strip() == "1"
    sources = list(tmp_path.glob("fused_*.py"))
    assert len(sources) == 1 and "def kernel(" in sources[0].read_text()
    assert list(tmp_path.glob("__pycache__/*.nbi")), "Numba wrote no cache index"


def test_importing_tinyattn_does_not_import_numba():
    program = (
        "import sys, tinyattn as ta, tinyattn.compiler\n"
        "f = ta.compile(lambda a: a * 2.0 + 1.0, fuse=False)\n"
        "x = ta.ones(3)\n"
        "for _ in range(3): f(x)\n"
        "print('numba' in sys.modules, 'llvmlite' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False False"


# ------------------------------------------------------------- the description and generators
def _gelu_group() -> Group:
    """The group fusion makes of ``gelu(x * 2)`` on (4, 8) float32, written by hand: plain data."""
    group = Group("pointwise", (4, 8), "float32", loops=(32,), axes=((0, 1),))
    group.inputs = [Buffer("in0", "x0", 0, (4, 8), "float32", walks=(0,))]
    group.outputs = [
        Buffer("out0", "v0", 1, (4, 8), "float32", stored=False, walks=(0,)),
        Buffer("out1", "v1", 2, (4, 8), "float32", walks=(0,)),
        Buffer("out2", "v2", 3, (4, 8), "float32", walks=(0,)),
    ]
    group.items = [
        Item("mul_scalar", ("x0",), ("v0",), (("c", 2.0),)),
        Item("gelu", ("v0",), ("v1", "v2")),
    ]
    group.labels = ["MulScalar", "Gelu"]
    return group


def _softmax_group() -> Group:
    group = Group("rows", (2, 3, 8), "float32", loops=(6, 8), axes=((0, 1), (2,)))
    group.inputs = [Buffer("in0", "x0", 0, (2, 3, 8), "float32", walks=(0, 1))]
    group.inputs.append(Buffer("in1", "x1", 1, (8,), "float32", walks=(1,)))
    group.outputs = [
        Buffer("out0", "v0", 2, (2, 3, 8), "float32", walks=(0, 1)),
        Buffer("out1", "v1", 3, (2, 3, 8), "float32", walks=(0, 1)),
    ]
    group.items = [
        Item("add", ("x0", "x1"), ("v0",)),
        Item("softmax", ("v0",), ("v1",), (("axis", -1),)),
    ]
    group.labels = ["Add", "Softmax"]
    return group


def test_the_cpu_generator_writes_one_loop_with_every_item():
    text = codegen_cpu.source(_gelu_group())
    assert "def kernel(in0, out1, out2):" in text
    assert "for i0 in range(n0):" in text and "for i1" not in text
    assert "v0 = x0 * np.float32(2.0)" in text
    assert "out0[" not in text  # kept in a register
    assert "out1[i0] = v1" in text and "out2[i0] = v2" in text
    rows = codegen_cpu.source(_softmax_group())
    assert "v0 = x0 + x1" in rows and "in1[j]" in rows and "m = max(m, out0[i0, j])" in rows


def test_the_gpu_generator_writes_cupy_source_from_the_same_groups():
    ins, outs, operation, name = codegen_gpu.elementwise_kernel(_gelu_group())
    assert ins == "float32 in0"
    assert outs == "float32 out1, float32 out2"
    assert "float v0 = x0 * ((float)2.0);" in operation and "out2 = v2;" in operation
    assert name.startswith("fused_mul_scalar_gelu_")
    raw = codegen_gpu.source(_softmax_group())
    assert raw.startswith('extern "C" __global__ void fused_add_softmax_')
    assert "float v0 = x0 + x1;" in raw and "exp(out0[out0_row + j * out0_s1] - m)" in raw
