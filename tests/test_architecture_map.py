"""docs/architecture.md names every module of the package: its "Every module" table has a row
for each file under tinyattn/, and no row for a file that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_has_a_row_and_every_row_a_module():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = text.split("\n## Every module\n", 1)[1]
    rows = set(re.findall(r"^\| `([^`]+\.py)` \|", table, re.M))
    package = ROOT / "tinyattn"
    modules = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert not modules - rows, f"add rows to docs/architecture.md for {sorted(modules - rows)}"
    assert not rows - modules, f"rows for modules that are gone: {sorted(rows - modules)}"
