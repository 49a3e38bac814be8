"""examples/gpt.py runs end to end, its compiled training equals the eager one, and generating
with its KV cache (eager, compiled, and under PyTorch) gives the full-prefix tokens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "gpt.py"


def _run(tmp_path, *extra: str) -> str:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(SCRIPT.parents[1])}
    args = ["--steps", "6", "--batch-size", "4", "--block-size", "16", "--quiet"]
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(tmp_path), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_gpt_example_trains_samples_and_compiles_exactly(tmp_path):
    pytest.importorskip("matplotlib")
    compiled = _run(tmp_path / "compiled")
    eager = _run(tmp_path / "eager", "--eager")
    for output in (compiled, eager):
        assert "before training:" in output and "greedy:" in output and "top-5:" in output
        assert re.search(r"\d+ steps/s", output)
    assert (tmp_path / "compiled" / "loss.png").exists()
    # Same seed, same batches: the replayed steps give the very same losses and samples.
    drop_speed = lambda text: re.sub(r"; \d+ steps/s", "", text)  # noqa: E731
    assert drop_speed(compiled).replace(str(tmp_path / "compiled"), "") == drop_speed(
        eager
    ).replace(str(tmp_path / "eager"), "")


@pytest.mark.slow
def test_the_model_and_the_data_move_to_the_device(tmp_path):
    # The strict stand-in device refuses any op that mixes it with the host, so a tensor the
    # example left on the CPU (a position, a cache, a batch) fails this run.
    output = _run(tmp_path, "--device", "strict")
    assert "greedy:" in output and "top-5:" in output


PORT = {
    "import tinyattn as torch": "import torch",
    "import tinyattn.nn as nn": "import torch.nn as nn",
    "import tinyattn.nn.functional as F": "import torch.nn.functional as F",
}


def _example(library: str) -> types.ModuleType:
    """examples/gpt.py as a module, with PyTorch's import lines when `library` is torch."""
    source = SCRIPT.read_text()
    if library == "torch":
        pytest.importorskip("torch")
        for ours, theirs in PORT.items():
            source = source.replace(ours, theirs)
    module = types.ModuleType(f"gpt_{library}")
    module.__file__ = str(SCRIPT)
    exec(compile(source, str(SCRIPT), "exec"), module.__dict__)  # noqa: S102
    return module


@pytest.mark.parametrize("library", ["tinyattn", "torch"])
@pytest.mark.parametrize("block_size", [32, 12], ids=["fits", "window-slides"])
def test_generation_with_the_kv_cache_gives_the_full_prefix_tokens(library, block_size):
    gpt = _example(library)
    gpt.torch.manual_seed(0)
    model = gpt.GPT(20, block_size, n_layer=2, n_head=4, n_embd=16).eval()
    with gpt.torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(30.0)  # spread the logits, so rounding cannot swap the argmax
    prompt = gpt.torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    full = model.generate(prompt, 14, kv_cache=False).tolist()
    assert model.generate(prompt, 14).tolist() == full
    if library == "tinyattn":  # the per-token step recorded once, then replayed
        assert model.generate(prompt, 14, compiled=True).tolist() == full
        with gpt.torch.no_grad():  # weights changed in place (as training does): no stale replay
            model.lm_head.weight.mul_(-1.0)
        full = model.generate(prompt, 14, kv_cache=False).tolist()
        assert model.generate(prompt, 14, compiled=True).tolist() == full


def test_cached_logits_equal_the_full_forward():
    gpt = _example("tinyattn")
    ta = gpt.torch
    ta.manual_seed(1)
    model = gpt.GPT(20, 16, n_layer=2, n_head=2, n_embd=16).double().eval()
    idx = ta.randint(0, 20, (2, 10))
    with ta.no_grad():
        full, _ = model(idx)
        caches = [gpt.KVCache(2, 2, 10, 8, "float64") for _ in model.h]
        prompt, _ = model(idx[:, :4], caches=caches)
        rows = [prompt] + [
            model(idx[:, t : t + 1], caches=caches, pos=ta.tensor([t]))[0] for t in range(4, 10)
        ]
    np.testing.assert_allclose(ta.cat(rows, dim=1).numpy(), full.numpy(), rtol=0, atol=1e-12)


def test_help_describes_every_option_with_its_default():
    parser = _example("tinyattn")._parser()
    text = " ".join(parser.format_help().split())  # argparse wraps the lines
    for action in parser._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{action.option_strings[0]} has no help"
        assert f"{action.help} (default: {action.default})" in text, action.option_strings[0]
