"""A pytest plugin for gpu_check.py: appends every test's outcome to a JSON-lines file as it
happens, so that counts survive a run stopped by its time limit (pytest's own summary does not).

Loaded with ``-p pytest_outcomes`` (benchmarks/ on the path); the file is named by the
environment variable GPU_CHECK_OUTCOMES. Lines: ``{"collected": N}`` once, then one
``{"id", "when", "outcome", "xfail", "message"}`` per setup, call and teardown report.
"""

from __future__ import annotations

import json
import os


def _write(record: dict) -> None:
    path = os.environ.get("GPU_CHECK_OUTCOMES")
    if path:
        with open(path, "a") as file:
            file.write(json.dumps(record) + "\n")


def pytest_collection_finish(session) -> None:
    _write({"collected": len(session.items)})


def pytest_runtest_logreport(report) -> None:
    message = ""
    if report.failed:  # the last line of the failure: the exception and its message
        text = str(report.longrepr).strip().splitlines()
        message = text[-1][:300] if text else ""
    elif report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])[:300]  # (path, line, reason)
    _write(
        {
            "id": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "xfail": hasattr(report, "wasxfail"),
            "message": message,
        }
    )
