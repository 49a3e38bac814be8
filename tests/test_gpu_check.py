"""benchmarks/gpu_check.sh, the GPU check, rehearsed on the CPU at its smallest.

One run of ``gpu_check.sh --rehearse OUT -- --tiny --without-torch`` runs every part (tinyattn
on NumPy, a stand-in for CUDA-graph capture, PyTorch left out: importing it costs seconds per
part); the report must have every section and the raw numbers must parse and say what the parts
did. The verdict rules, the test-outcome counts and the time limit are checked on their own.
No timing is asserted (the machine is shared).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _load(name: str):
    """benchmarks/NAME.py as a module (the folder is not put on sys.path: its modules have
    common names such as bench and common)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


gpu_report = _load("gpu_report")  # first: gpu_check imports it
gpu_check = _load("gpu_check")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """(output folder, the script's output) of one tiny rehearsal."""
    missing = [tool for tool in ("bash", "timeout") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"gpu_check.sh needs {' and '.join(missing)}, not found here")
    out = tmp_path_factory.mktemp("gpu_check")
    command = ["bash", str(SCRIPT), "--rehearse", str(out), "--", "--tiny", "--without-torch"]
    env = os.environ | {"PYTHON": sys.executable}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


@pytest.mark.slow
def test_every_part_runs_and_the_report_has_every_section(rehearsal):
    out, printed = rehearsal
    report = (out / "report.md").read_text()
    assert "Rehearsal on the CPU" in report
    assert "project: run from the tree (rehearsal, nothing installed)" in report
    for key in gpu_report.ENV_KEYS:
        assert f"- {key}: " in report
    for name in gpu_report.PARTS:
        assert f"### {name}: ok, " in report, name
        assert f"[gpu_check] {name}: ok" in printed
    summary = report.split("## Summary")[1].split("## Parts")[0]
    rows = [line.strip("|").split(" | ") for line in summary.splitlines() if " | ok | " in line]
    assert {row[0].strip() for row in rows} == set(gpu_report.PARTS[1:])
    for part, _, result, _, verdict in rows:
        # the speed targets need PyTorch's numbers, left out here; correctness is judged
        speed = part.strip() in ("steps", "attention") or "PyTorch float32" in result
        expected = "no result" if speed else "met"
        assert verdict.strip() == expected, (part, result)
    assert "## Raw files" in report


@pytest.mark.slow
def test_the_raw_numbers_parse_and_say_what_ran(rehearsal):
    out, _ = rehearsal
    parts = {name: json.loads((out / f"{name}.json").read_text()) for name in gpu_report.PARTS}
    summary = json.loads((out / "summary.json").read_text())
    assert {summary[name]["status"] for name in gpu_report.PARTS} == {"ok"}
    assert parts["env"]["tinyattn"].startswith("0.")
    for model in gpu_report.MODELS:
        losses = parts["losses"]["models"][model]
        assert losses["bit_for_bit"] and losses["max_relative_difference"] == 0.0
        # the compiled training took the capture-and-launch path (the stand-in's graphs)
        assert losses["graphs"]["captures"] >= 1 and losses["graphs"]["launches"] >= 1
        step = parts["steps"]["models"][model]
        assert step["times"]["eager"]["ms"] > 0 and step["times"]["compiled"]["ms"] > 0
        assert "torch" not in step["times"]  # left out
        assert step["graphs"]["launches"] >= 1
    assert parts["attention"]["tinyattn_ms"] > 0 and "torch_ms" not in parts["attention"]
    autocast = parts["autocast"]  # on NumPy: CPU float16 autocast
    assert set(autocast["times"]) == {"float32", "autocast"} and autocast["close"]
    assert autocast["device_type"] == "cpu" and len(autocast["losses"]["autocast"]) == 4
    generation = parts["generate"]
    assert set(generation["modes"]) == {"cache", "compiled"} and generation["same_tokens"]
    assert all(len(m["tokens"]) == 3 + 2 for m in generation["modes"].values())
    assert generation["modes"]["compiled"]["ms_per_token"] > 0
    assert parts["copy"]["returncode"] == 0 and parts["copy"]["steps"] == 1.0
    assert parts["copy"]["token_accuracy_pct"] is not None
    tests = parts["tests"]
    assert tests["collected"] > 0 and tests["passed"] == tests["collected"] == tests["ran"]


def _results(**data) -> dict:
    return {name: {"status": "ok", "data": value} for name, value in data.items()}


def test_verdicts_against_the_targets():
    """Ratios at or under their target are met, over it are not; a rehearsal judges only
    correctness; a test run that skipped or failed anything does not meet its target."""
    steps = {
        "models": {
            "small": {"times": {}, "compiled/torch": 0.5, "eager/torch": 1.51},
            "bench": {"times": {}, "compiled/torch": 0.62, "eager/torch": 1.2},
        }
    }
    tests = {k: 0 for k in ("failed", "error", "xfail")} | {"timed_out": False}
    tests |= {"passed": 9, "skipped": 1, "collected": 10, "ran": 10}
    results = _results(steps=steps, attention={"T": 8192, "ratio": 2.4}, tests=tests)
    rows = gpu_report.summary_rows(results, gpu_check.GPU)
    verdicts = {row[2].split(":")[0]: row[4] for row in rows if row[0] in ("steps", "attention")}
    assert verdicts == {
        "small compiled": "met",
        "small eager": "NOT MET",
        "bench compiled": "NOT MET",
        "bench eager": "met",
        "T 8192": "NOT MET",
    }
    assert [row[4] for row in rows if row[0] == "tests"] == ["NOT MET"]
    assert [row[4] for row in rows if row[0] == "copy"] == ["no result"]  # not run
    rehearsed = gpu_report.summary_rows(results, gpu_check.REHEARSAL)
    assert {row[4] for row in rehearsed if row[0] == "steps"} == {"not judged (rehearsal)"}
    tests |= {"passed": 10, "skipped": 0}
    assert gpu_report.summary_rows(_results(tests=tests), gpu_check.GPU)[-1][4] == "met"


def test_test_outcomes_are_counted_per_test():
    records = [
        {"collected": 5},
        {"id": "a", "when": "setup", "outcome": "passed", "xfail": False, "message": ""},
        {"id": "a", "when": "call", "outcome": "passed", "xfail": False, "message": ""},
        {"id": "a", "when": "teardown", "outcome": "failed", "xfail": False, "message": "E"},
        {"id": "b", "when": "call", "outcome": "failed", "xfail": False, "message": "boom"},
        {"id": "c", "when": "setup", "outcome": "skipped", "xfail": False, "message": "no GPU"},
        {"id": "d", "when": "call", "outcome": "skipped", "xfail": True, "message": ""},
        {"id": "e", "when": "call", "outcome": "passed", "xfail": False, "message": ""},
    ]
    counts = gpu_check.count_outcomes("\n".join(json.dumps(r) for r in records))
    assert {k: counts[k] for k in ("passed", "failed", "error", "skipped", "xfail")} == {
        "passed": 1,
        "failed": 1,
        "error": 1,
        "skipped": 1,
        "xfail": 1,
    }
    assert (counts["collected"], counts["ran"]) == (5, 5)
    assert [(p["id"], p["message"]) for p in counts["problems"]] == [
        ("a", "E"),
        ("b", "boom"),
        ("c", "no GPU"),
    ]


def test_a_command_past_its_limit_is_stopped_with_its_children():
    missing = [tool for tool in ("bash", "sleep") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)}, not found here")
    start = time.monotonic()
    done = gpu_check.run_bounded(["bash", "-c", "sleep 60 & echo $!; wait"], 1.0)
    assert done["timed_out"] and time.monotonic() - start < 30
    grandchild = Path(f"/proc/{done['output'].split()[0]}/stat")
    if not Path("/proc/self/stat").exists():
        return
    deadline = time.monotonic() + 10
    while _running(grandchild):
        assert time.monotonic() < deadline, "the sleep outlived its group's limit"
        time.sleep(0.05)


def _running(stat: Path) -> bool:
    """Whether the process of /proc/PID/stat runs: gone, or a zombie waiting to be reaped,
    means the signal has landed."""
    try:
        return stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
