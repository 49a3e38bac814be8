"""examples/gpt.py runs end to end, and its compiled training equals the eager one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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
