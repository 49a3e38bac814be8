"""docs/attention.md is executable: its python blocks run in order in one namespace, and a block
followed directly by a ```text block must print exactly that text (the page shows real output).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[1] / "docs" / "attention.md"
# A python block, optionally followed (after one blank line) by the text block of its output.
BLOCK = re.compile(
    r"^```python\n(?P<code>.*?)^```\n(?:\n```text\n(?P<output>.*?)^```\n)?", re.S | re.M
)


def blocks() -> list[tuple[str, str | None]]:
    return [(m["code"], m["output"]) for m in BLOCK.finditer(PAGE.read_text(encoding="utf-8"))]


def test_every_block_runs_and_prints_what_the_page_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "doc_attention"}
    found = blocks()
    assert len(found) >= 10 and sum(output is not None for _, output in found) >= 10
    for number, (code, expected) in enumerate(found, start=1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"attention.md[block {number}]", "exec"), namespace)  # noqa: S102
        if expected is not None:
            got = [line.rstrip() for line in printed.getvalue().rstrip("\n").splitlines()]
            assert got == [line.rstrip() for line in expected.rstrip("\n").splitlines()], (
                f"block {number} printed something other than the page shows"
            )


@pytest.mark.parametrize(
    "topic",
    [
        "(L, 768)",
        "Why divide by sqrt(d)",
        "Multi-head attention is a split of the width",
        "Cross-attention",
        "permutation property",
        "Positional encodings",
        'True means "may attend"',
        "Your journey starts with one step",
        "A softmax over one number is always\nexactly 1",
        "normalised **over all the keys**",
    ],
)
def test_page_covers_the_issue_topics(topic):
    text = PAGE.read_text(encoding="utf-8")
    assert topic.lower() in text.lower()
