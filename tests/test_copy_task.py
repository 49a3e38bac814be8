"""examples/copy_task.py: it learns the copy, the ablation cannot, a resumed run is bit-exact,
and the command line works.

The training tests call the example's own functions (make_batch, build_model, train, evaluate;
the helpers in copy_task_extras.py) with its default configuration, so the README's first command
is what is tested. No timing is asserted (the machine is shared).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
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
extras = importlib.import_module("copy_task_extras")  # importable once the example has loaded


# Training runs in a child process that imports the example BEFORE NumPy, so that the example's
# one-BLAS-thread setting takes effect (tiny matmuls ran 13x slower with OpenBLAS threads on the
# busy 2-core machine; in this process NumPy is loaded already and cannot be changed without
# threadpoolctl, which is not a dependency). It calls the example's own functions.
TRAINING = """
import json, sys
sys.path.insert(0, sys.argv[1])
import copy_task  # first: it sets OPENBLAS_NUM_THREADS=1 before NumPy loads
import copy_task_extras as extras
import numpy as np

def run(config, eval_seed):
    model = copy_task.build_model(config)
    history = copy_task.train(model, config, quiet=True)
    result = copy_task.evaluate(model, config, 1000, np.random.default_rng(eval_seed))
    entry = {"result": result, "steps": history.steps, "stopped_early": history.stopped_early,
             "checks": history.checks, "losses": history.losses,
             "report": extras.report(config, history, result)}
    return model, entry

runs = {}
for seed in (0, 1, 2):
    config = copy_task.Config(seed=seed)
    model, runs[seed] = run(config, 10_000 + seed)
    if seed == 0:
        inputs, _ = copy_task.make_batch(1, config.seq_len, config.vocab, np.random.default_rng(5))
        maps = extras.attention_maps(model, inputs)
        layer, head, share = extras.copy_head(maps, config.seq_len)
        names = extras.token_names(inputs, config.sep)
        runs["maps"] = {"shapes": [list(m.shape) for m in maps], "share": share,
                        "row_sums": [float(abs(m.sum(axis=-1) - 1).max()) for m in maps],
                        "heatmap": extras.text_heatmap(maps[layer][head], names)}
        digits = inputs.numpy()[0, : config.seq_len].tolist()  # the same held-out example
        sequence = copy_task.greedy_copy(model, config, digits)
        runs["decoding"] = {"digits": digits, "sequence": sequence,
                            "rows": extras.decoding_rows(model, config, sequence)[2],
                            "explained": extras.explain(model, config, inputs, sequence)}
_, runs["ablation"] = run(copy_task.Config(seed=0, attention=False, steps=150), 7)
runs["attn_parameters"] = [name for name, _ in copy_task.build_model(
    copy_task.Config(attention=False)).named_parameters() if "attn" in name]
print(json.dumps(runs))
"""


@pytest.fixture(scope="module")
def runs():
    done = subprocess.run(
        [sys.executable, "-c", TRAINING, str(EXAMPLE.parent)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def parse_args(flags: list[str]):
    return extras.parse_args(flags, copy_task.Config())


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


@pytest.mark.parametrize("seed", ["0", "1", "2"])
def test_default_configuration_copies_perfectly(seed, runs):
    run, config = runs[seed], copy_task.Config()
    result = run["result"]
    assert result["exact"] == 1.0 and result["token"] == 1.0, (seed, run["checks"])
    assert result["min_prob"] > 0.5  # every correct digit is the model's first choice, clearly
    assert run["stopped_early"] and run["steps"] < config.steps
    assert all(min_prob >= config.confidence for _, _, min_prob in run["checks"][-2:])
    assert run["losses"][-1] < 0.05 < run["losses"][0]
    assert "held-out exact-sequence accuracy: 100.00% on 1,000 fresh" in "\n".join(run["report"])


def test_the_copy_head_looks_n_positions_back(runs):
    maps = runs["maps"]
    assert maps["shapes"] == [[2, 16, 16]]  # one layer, two heads, 2n = 16 positions
    assert max(maps["row_sums"]) < 1e-5  # every query's weights sum to 1
    assert maps["share"] > 0.5  # attention spread over the ~12 keys visible there gives < 0.1
    assert maps["heatmap"].count("\n") == 16 and "query  |" in maps["heatmap"]


def test_greedy_decoding_copies_by_looking_n_positions_back(runs):
    """The explanation's claim: each digit the trained model writes, from the first half alone,
    is the token at the key its copy head weighted most, n positions back."""
    decoding, n = runs["decoding"], 8
    assert decoding["sequence"][: n + 1] == [*decoding["digits"], 10]  # the prompt is kept
    assert decoding["sequence"][n + 1 :] == decoding["digits"]  # the copy is exact
    rows = decoding["rows"]
    assert [p for p, _, _, _ in rows] == list(range(n, 2 * n))
    for p, written, key, weight in rows:
        assert key == p - n and decoding["sequence"][key] == written and weight > 0.5, rows
    explained = "\n".join(decoding["explained"])
    assert "copied 8 of 8 digits right; 8 of the 8 digits written" in explained
    assert "it copies by looking 8 positions back" in explained
    assert explained.count("<- position") == n and "query  |" in explained


def test_without_attention_it_stays_at_chance(runs):
    run = runs["ablation"]
    assert runs["attn_parameters"] == []  # the ablation has no attention weights at all
    assert not run["stopped_early"] and run["steps"] == 150
    assert abs(run["result"]["token"] - 0.1) < 0.03 and run["result"]["exact"] < 0.01
    assert any("near chance, as expected" in line for line in run["report"])


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


def tiny(steps: int, device: str = "cpu") -> object:
    """A seconds-fast configuration with dropout on (its masks come from tinyattn's generator)
    and held-out checks that never stop training early."""
    return copy_task.Config(
        seq_len=4, vocab=5, width=16, batch=8, steps=steps, seed=3, device=device, dropout=0.2,
        check_every=2, check_size=16, confidence=2.0,
    )  # fmt: skip


def test_resume_is_bit_exact(device, tmp_path):
    """Train 4 steps, save, reload into a fresh model, train 3 more: the same losses, checks,
    weights, optimizer moments and generator state, bit for bit, as 7 steps in one go."""
    whole = copy_task.build_model(tiny(7, device))
    whole_state = copy_task.start_training(whole, tiny(7, device))
    history = copy_task.train(whole, tiny(7, device), whole_state, quiet=True)
    rng_after = ta.get_rng_state()

    first = tiny(4, device)
    model = copy_task.build_model(first)
    state = copy_task.start_training(model, first)
    copy_task.train(model, first, state, quiet=True)
    extras.save_checkpoint(tmp_path / "checkpoint.npz", model, first, state)
    ta.manual_seed(12345)  # whatever happens in between must not matter
    ta.randn(10)

    checkpoint = ta.load(tmp_path / "checkpoint.npz", device=device)
    config = replace(copy_task.Config(**checkpoint["config"]), steps=7)
    resumed = copy_task.build_model(config)
    state = copy_task.start_training(resumed, config)
    extras.restore(checkpoint, resumed, state)
    resumed_history = copy_task.train(resumed, config, state, quiet=True)

    assert history.steps == 7 and len(history.checks) == 3
    assert resumed_history.losses == history.losses  # floats compared exactly
    assert resumed_history.accuracies == history.accuracies
    assert [tuple(c) for c in resumed_history.checks] == [tuple(c) for c in history.checks]
    for name, value in whole.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[name].numpy(), value.numpy(), name)
    moments, expected = state.optimizer.state_dict(), whole_state.optimizer.state_dict()
    for index, entry in expected["state"].items():
        for key, value in entry.items():
            np.testing.assert_array_equal(_host(moments["state"][index][key]), _host(value), key)
    assert ta.get_rng_state() == rng_after


def _host(value):
    return value.numpy() if isinstance(value, ta.Tensor) else np.asarray(value)


def run_example(*flags: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *flags], cwd=cwd, capture_output=True, text=True
    )


@pytest.mark.slow
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


@pytest.mark.slow
def test_resume_from_the_command_line(tmp_path):
    """--resume takes the saved configuration and continues to --steps: the checkpoint equals
    that of one uninterrupted run (the history and the weights)."""
    small = ["--quiet", "--width", "16", "--batch", "8", "--seed", "2"]
    for flags in (["--steps", "3", "--out", "first"], ["--steps", "5", "--out", "whole"]):
        done = run_example(*small, *flags, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    resumed = run_example(
        "--resume", "first/checkpoint.npz", "--steps", "5", "--quiet", "--out", "resumed",
        cwd=tmp_path,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert (
        "trained 5 steps" in resumed.stdout
        and ", 3 of them in the run the checkpoint saved" in resumed.stdout
    )
    whole, again = (ta.load(tmp_path / name / "checkpoint.npz") for name in ("whole", "resumed"))
    assert again["config"] == whole["config"] and whole["config"]["width"] == 16
    assert again["history"]["losses"] == whole["history"]["losses"]
    for name, value in whole["model"].items():
        np.testing.assert_array_equal(again["model"][name].numpy(), value.numpy(), name)


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
        (["--resume", "nowhere.npz"], "--resume nowhere.npz: not a checkpoint of this script"),
    ],
)
def test_bad_flags_are_argparse_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(flags)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message in error and "usage:" in error and "Traceback" not in error


@pytest.mark.skipif(ta.cupy_status()[0] is not None, reason="a GPU is usable here")
def test_cuda_without_a_gpu_is_an_argparse_error_with_the_reason(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--device", "cuda"])
    assert f"--device cuda: {ta.cupy_status()[1]}" in capsys.readouterr().err


def test_missing_plotting_library_is_reported_before_training(capsys, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name: None if name == "matplotlib" else real_find_spec(name),
    )
    with pytest.raises(SystemExit):
        parse_args([])
    assert "needs matplotlib: pip install -e '.[examples]'" in capsys.readouterr().err


def test_strict_device_is_accepted_but_not_advertised(capsys):
    config, _ = parse_args(["--device", "strict"])
    assert config.device == "strict"
    with pytest.raises(SystemExit):
        parse_args(["--help"])
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
