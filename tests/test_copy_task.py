"""examples/copy_task.py: it learns the copy, the ablation cannot, and the command line works.

The training tests call the example's own functions (make_batch, build_model, train, evaluate)
with its default configuration, so the README's first command is what is tested. No timing is
asserted (the machine is shared); the whole file takes about 15 s on a 2-core CPU.
"""

from __future__ import annotations

import contextlib
import importlib.util
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "copy_task.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load_example():
    spec = importlib.util.spec_from_file_location("copy_task", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["copy_task"] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


copy_task = _load_example()


@pytest.fixture
def one_blas_thread():
    """Tiny matmuls run ~10x slower with OpenBLAS threads on a busy 2-core machine; the example
    sets this before NumPy loads, but here NumPy is loaded already, so limit it at run time."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # not a dependency: the tests are then only slower
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(1)
    with limits:
        yield


def test_make_batch_is_digits_sep_digits():
    rng = np.random.default_rng(0)
    inputs, targets = copy_task.make_batch(5, 4, 10, rng)
    assert inputs.shape == (5, 8) and targets.shape == (5, 4)
    assert ta.backend.dtype_name(inputs.dtype) == "int64"
    tokens, digits = inputs.numpy(), targets.numpy()
    assert (tokens[:, 4] == 10).all()  # SEP = vocab, after the n digits
    np.testing.assert_array_equal(tokens[:, :4], digits)  # the first half is the source
    np.testing.assert_array_equal(tokens[:, 5:], digits[:, :3])  # the copy, shifted by n + 1
    assert digits.min() >= 0 and digits.max() < 10


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_configuration_copies_perfectly(seed, one_blas_thread):
    config = copy_task.Config(seed=seed)
    model = copy_task.build_model(config)
    history = copy_task.train(model, config, quiet=True)
    result = copy_task.evaluate(model, config, 1000, np.random.default_rng(10_000 + seed))
    assert result["exact"] == 1.0 and result["token"] == 1.0, (seed, history.checks)
    assert history.stopped_early and history.steps < config.steps
    assert history.losses[-1] < 0.05 < history.losses[0]


def test_the_copy_head_looks_n_positions_back(one_blas_thread):
    config = copy_task.Config(seed=0)
    model = copy_task.build_model(config)
    copy_task.train(model, config, quiet=True)
    inputs, _ = copy_task.make_batch(1, config.seq_len, config.vocab, np.random.default_rng(5))
    maps = copy_task.attention_maps(model, inputs)
    assert len(maps) == config.layers and maps[0].shape == (config.heads, 16, 16)
    assert np.allclose(maps[0].sum(axis=-1), 1.0, atol=1e-5)
    layer, head, share = copy_task.copy_head(maps, config.seq_len)
    assert share > 0.4  # random attention over ~12 visible keys would give under 0.1
    text = copy_task.text_heatmap(maps[layer][head], copy_task.token_names(inputs, config.sep))
    assert text.count("\n") == 16 and "query  |" in text


def test_without_attention_it_stays_at_chance(one_blas_thread):
    config = copy_task.Config(seed=0, attention=False, steps=150)
    model = copy_task.build_model(config)
    assert not any("attn" in name for name, _ in model.named_parameters())
    history = copy_task.train(model, config, quiet=True)
    result = copy_task.evaluate(model, config, 1000, np.random.default_rng(7))
    assert not history.stopped_early and history.steps == 150
    assert abs(result["token"] - 0.1) < 0.03 and result["exact"] < 0.01
    lines = copy_task.report(config, history, result)
    assert any("near chance, as expected" in line for line in lines)


def test_a_few_steps_on_every_backend(device):
    """Portability smoke: data, a training step and evaluation on cpu, strict (and cuda)."""
    config = copy_task.Config(device=device, steps=2, check_every=1, check_size=20)
    inputs, targets = copy_task.make_batch(
        3, config.seq_len, config.vocab, np.random.default_rng(0), device
    )
    assert inputs.device.startswith(device.split(":")[0]) and targets.device == inputs.device
    model = copy_task.build_model(config)
    history = copy_task.train(model, config, quiet=True)
    assert history.steps == 2 and all(np.isfinite(history.losses))
    result = copy_task.evaluate(model, config, 40, np.random.default_rng(1))
    assert 0.0 <= result["token"] <= 1.0 and result["sequences"] == 40


def run_example(*flags: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *flags], cwd=cwd, capture_output=True, text=True
    )


def test_command_line_end_to_end(tmp_path):
    out = tmp_path / "run"
    done = run_example("--steps", "3", "--quiet", "--out", str(out), "--seed", "4", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "held-out exact-sequence accuracy" in done.stdout and "steps/s" in done.stdout
    for picture in ("loss.png", "attention.png"):
        assert (out / picture).read_bytes().startswith(PNG_MAGIC), picture
    checkpoint = ta.load(out / "checkpoint.npz")
    assert checkpoint["config"]["seed"] == 4 and checkpoint["config"]["steps"] == 3
    config = copy_task.Config(**checkpoint["config"])
    model = copy_task.build_model(replace(config, seed=99))  # other weights, then the saved ones
    model.load_state_dict(checkpoint["model"])
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), checkpoint["model"][name].numpy())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "0"], "--steps: expected a positive integer, got 0"),
        (["--batch", "many"], "--batch: expected a positive integer, got 'many'"),
        (["--lr", "-1"], "--lr: expected a learning rate in (0, 10), got -1.0"),
        (["--lr", "nan"], "--lr: expected a learning rate in (0, 10), got nan"),
        (["--seed", "-3"], "--seed: expected an integer >= 0, got -3"),
        (["--device", "tpu"], "--device: expected 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
        (["--vocab", "1"], "--vocab: needs at least 2 digits"),
        (["--width", "30", "--heads", "4"], "--width 30 must be a multiple of --heads 4"),
    ],
)
def test_bad_flags_are_argparse_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        copy_task.parse_args(flags)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message in error and "usage:" in error and "Traceback" not in error


def test_strict_device_is_accepted_but_not_advertised(capsys):
    config, _ = copy_task.parse_args(["--device", "strict"])
    assert config.device == "strict"
    with pytest.raises(SystemExit):
        copy_task.parse_args(["--help"])
    assert "strict" not in capsys.readouterr().out


def test_importing_the_example_loads_no_plotting_library():
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('copy_task', {str(EXAMPLE)!r}); "
        "module = importlib.util.module_from_spec(spec); sys.modules['copy_task'] = module; "
        "spec.loader.exec_module(module); "
        "bad = [m for m in ('matplotlib', 'tqdm') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
