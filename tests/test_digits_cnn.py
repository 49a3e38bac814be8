"""examples/digits_cnn.py: a short run learns the digits and draws the filters; a compiled run
trains the same model; the command line lists every option with its default.

Runs go through a child process that loads the example before NumPy (its one-BLAS-thread
setting must come first), on a smaller budget than the defaults. No timing is asserted (the
machine is shared).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "digits_cnn.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(*flags: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), *flags],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _accuracy(stdout: str) -> float:
    found = re.search(r"test accuracy ([0-9.]+)% on (\d+) held-out images", stdout)
    assert found, stdout
    assert int(found.group(2)) == 359  # 20% of the 1,797 digits
    return float(found.group(1)) / 100


@pytest.mark.slow
def test_a_short_run_learns_the_digits_and_draws_the_filters(tmp_path):
    stdout = _run("--epochs", "3", "--out", str(tmp_path))
    assert _accuracy(stdout) >= 0.95, stdout  # chance is 10%; the default 10 epochs reach ~98%
    first, last = map(float, re.search(r"loss ([0-9.]+) -> ([0-9.]+)", stdout).groups())
    assert last < first / 4, stdout
    picture = (tmp_path / "filters.png").read_bytes()
    assert picture.startswith(PNG_MAGIC) and len(picture) > 2000  # 16 drawn filters, not blank


@pytest.mark.slow
def test_a_compiled_run_trains_the_same_model(tmp_path):
    eager = _run("--epochs", "1", "--channels", "4", "--out", str(tmp_path / "eager"))
    compiled = _run("--epochs", "1", "--channels", "4", "--compile", "--out", str(tmp_path))
    same_lines = [line for line in eager.splitlines() if line.startswith(("loss", "test"))]
    assert len(same_lines) == 2
    assert same_lines == [
        line for line in compiled.splitlines() if line.startswith(("loss", "test"))
    ]


def test_help_lists_every_option_with_its_default():
    stdout = _run("--help")
    for option in ("--epochs", "--batch", "--lr", "--channels", "--seed", "--device", "--compile",
                   "--out"):  # fmt: skip
        assert option in stdout
    assert stdout.count("(default:") == 8
    bad = subprocess.run(
        [sys.executable, str(EXAMPLE), "--epochs", "0"], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 2 and "--epochs must be positive, got 0" in bad.stderr
