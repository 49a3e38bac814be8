"""docs/autograd.md runs: every ```python block, in order, in one namespace.

The page explains the engine with examples that assert what they claim, so a change in the
engine's behaviour (accumulation, retain_graph, tie splitting, freeing graphs) that the page
no longer describes fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "autograd.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[str]:
    return BLOCK.findall(DOC.read_text(encoding="utf-8"))


def test_the_page_has_examples():
    assert len(python_blocks()) >= 8


def test_blocks_run_in_order_in_one_namespace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "doc_autograd"}
    for number, source in enumerate(python_blocks(), start=1):
        code = compile(source, f"autograd.md[block {number}]", "exec")
        try:
            exec(code, namespace)  # noqa: S102  (running the docs is the point)
        except Exception as error:
            pytest.fail(f"docs/autograd.md block {number} failed: {type(error).__name__}: {error}")
