"""Every ```python block in README.md and docs/*.md runs: a doc that lies fails CI.

Blocks of one file run in order in one namespace (later blocks may use earlier names), with the
working directory set to a temporary folder so examples can write files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(path: Path) -> list[str]:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", [p for p in DOCS if p.exists()], ids=lambda p: p.name)
def test_doc_code_blocks_run(path, tmp_path, monkeypatch):
    blocks = python_blocks(path)
    if not blocks:
        pytest.skip(f"{path.name} has no python blocks")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"doc_{path.stem}"}
    for number, source in enumerate(blocks, start=1):
        code = compile(source, f"{path.name}[block {number}]", "exec")
        exec(code, namespace)  # noqa: S102  (running the docs is the point)
