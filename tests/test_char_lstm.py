"""examples/char_lstm.py: its text and baselines are what they say, a short run gets far below
the unigram baseline, it runs on every backend, and the command line works.

The example's own functions are called; the end-to-end run uses the command line on a small
budget. No timing is asserted (the machine is shared).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import re
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

import tinyattn as ta

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "char_lstm.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load_example():
    spec = importlib.util.spec_from_file_location("char_lstm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["char_lstm"] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


char_lstm = _load_example()
extras = importlib.import_module("char_lstm_extras")  # importable once the example has loaded


def run_example(*flags: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *flags], cwd=cwd, capture_output=True, text=True
    )


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, f"{pattern!r} not in:\n{text}"
    return float(found.group(1))


def test_text_follows_the_grammar_and_depends_on_the_seed():
    text = char_lstm.make_text(40, seed=0)
    sentences = re.findall(r"[A-Z][a-z ]+\.", text)
    assert len(sentences) == text.count(".") == 40
    assert len(text.splitlines()) == 10  # four sentences to a line
    for sentence in sentences:
        lowered = sentence[0].lower() + sentence[1:]
        assert any(lowered.startswith(subject + " ") for subject in char_lstm.SUBJECTS)
        assert any(f" {verb} " in sentence for verb in char_lstm.VERBS), sentence
        assert any(f" {thing}" in sentence for thing in char_lstm.OBJECTS), sentence
    assert text == char_lstm.make_text(40, seed=0) != char_lstm.make_text(40, seed=1)


def test_vocabulary_round_trip_and_unigram_baseline():
    vocab = char_lstm.Vocabulary("abca")
    ids = vocab.encode("abca")
    assert vocab.chars == ["a", "b", "c"] and ids.tolist() == [0, 1, 2, 0]
    assert vocab.decode(ids.tolist()) == "abca"
    expected = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert char_lstm.unigram_baseline(ids, len(vocab)) == pytest.approx(expected)


def test_grammar_floor_is_below_the_unigram_baseline():
    text = char_lstm.make_text(400, seed=0)
    vocab = char_lstm.Vocabulary(text)
    floor = char_lstm.grammar_floor(text, 400)
    assert 0.0 < floor < char_lstm.unigram_baseline(vocab.encode(text), len(vocab)) / 5


def test_make_batch_targets_are_inputs_shifted_by_one():
    ids = np.arange(100)
    inputs, targets = char_lstm.make_batch(ids, 4, 8, np.random.default_rng(0))
    assert inputs.shape == targets.shape == (4, 8)
    np.testing.assert_array_equal(inputs.numpy()[:, 1:], targets.numpy()[:, :-1])
    np.testing.assert_array_equal(targets.numpy(), inputs.numpy() + 1)


def test_a_few_steps_on_every_backend(device):
    config = char_lstm.Config(sentences=40, steps=3, hidden=8, device=device, sample_len=20)
    text = char_lstm.make_text(config.sentences, config.seed)
    vocab = char_lstm.Vocabulary(text)
    ids = vocab.encode(text)
    ta.manual_seed(0)
    model = char_lstm.CharLSTM(len(vocab), config).to(device)
    history = char_lstm.train(model, ids, config, quiet=True)
    assert len(history.losses) == 3 and all(math.isfinite(loss) for loss in history.losses)
    assert math.isfinite(char_lstm.evaluate(model, ids, config))
    written = char_lstm.sample(model, vocab, config, prompt="The")
    assert written.startswith("The") and len(written) == 3 + 20
    assert set(written) <= set(vocab.chars)


def test_compiled_training_equals_eager_bit_for_bit():
    config = char_lstm.Config(sentences=40, steps=6, hidden=8)
    ids = char_lstm.Vocabulary(char_lstm.make_text(40, 0)).encode(char_lstm.make_text(40, 0))
    runs = []
    for compiled in (False, True):
        ta.manual_seed(0)
        model = char_lstm.CharLSTM(int(ids.max()) + 1, config)
        history = char_lstm.train(model, ids, replace(config, compile=compiled), quiet=True)
        runs.append((history.losses, [p.detach().numpy() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0]
    for eager, compiled in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(eager, compiled)


@pytest.mark.slow
def test_command_line_learns_far_below_the_unigram_baseline(tmp_path):
    out = tmp_path / "run"
    flags = ("--steps", "100", "--sentences", "400", "--quiet", "--out", str(out))
    done = run_example(*flags, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    baseline = _number(r"unigram baseline \(character frequencies alone\): ([\d.]+)", done.stdout)
    held_out = _number(r"held-out loss: ([\d.]+) nats/char", done.stdout)
    floor = _number(r"no model beats on average: ([\d.]+)", done.stdout)
    assert floor < held_out < 0.5 * baseline, done.stdout
    assert "sample:" in done.stdout and "steps/s" in done.stdout
    assert (out / "loss.png").read_bytes().startswith(PNG_MAGIC)


def test_help_lists_every_option_with_its_default(capsys):
    with pytest.raises(SystemExit) as exited:
        extras.parse_args(["--help"], char_lstm.Config())
    assert exited.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    for field in fields(char_lstm.Config):
        flag = "--" + field.name.replace("_", "-")
        assert flag in help_text, flag
        assert f"(default: {getattr(char_lstm.Config(), field.name)})" in help_text, field.name
    for flag in ("--out", "--quiet"):
        assert flag in help_text


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--steps", "0"], "expected a positive integer, got 0"),
        (["--lr", "nan"], "expected a learning rate in (0, 10)"),
        (["--temperature", "0"], "expected a temperature > 0, got 0.0"),
        (["--device", "tpu"], "expected 'cpu', 'cuda' or 'cuda:N'"),
    ],
)
def test_bad_flags_are_argparse_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as exited:
        extras.parse_args(flags, char_lstm.Config())
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_flags_reach_the_config():
    config, _ = extras.parse_args(
        ["--hidden", "7", "--seq-len", "5", "--quiet"], char_lstm.Config()
    )
    assert (config.hidden, config.seq_len) == (7, 5)
    assert config.steps == char_lstm.Config().steps
