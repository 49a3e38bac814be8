"""The one docs runner: every ```python block of README.md and docs/**/*.md runs and is true.

A page is found by glob, so a new page is tested as soon as it exists. For each page:

- its ``python`` blocks run in order in one namespace (a later block may use an earlier block's
  names), with the working directory set to an empty temporary folder;
- a ``python`` block followed, after nothing but blank lines, by a ``text`` block must print that
  text: line by line, words exactly, numbers within a relative 1e-6 or one unit in the last
  printed decimal (a rounding flip on another machine); integers exactly;
- the page's blocks, joined into one plain script, also run in a fresh Python process in an
  empty folder: nothing a block needs may come from this harness;
- a block that includes a file (``--8<-- "path"``, pymdownx.snippets) runs the file's text.

A block that cannot run here (it needs a GPU, the network, or minutes of time) starts with the
line ``# no-run: <why>``; it is skipped, and the reason stays visible to the reader.
"""

from __future__ import annotations

import ast
import contextlib
import fnmatch
import importlib
import io
import os
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NO_RUN = "# no-run:"
FENCE = re.compile(r"^```(\S*)")
# A number that stands alone (not the tail of a word such as float32 or a commit hash).
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w])")
RELATIVE = 1e-6


@dataclass
class Block:
    line: int  # 1-based line of the opening fence
    code: str
    expected: str | None  # the text block shown right after it, if any

    @property
    def runs(self) -> bool:
        return not self.code.lstrip().startswith(NO_RUN)


def fenced(text: str) -> list[tuple[int, str, str, int]]:
    """(opening line, language, body, closing line) of every fenced block, in order."""
    lines = text.splitlines()
    found, start, language = [], None, ""
    for number, line in enumerate(lines):
        match = FENCE.match(line)
        if not match:
            continue
        if start is None:
            start, language = number, match.group(1)
        elif line.strip() == "```":
            body = "\n".join(lines[start + 1 : number]) + "\n"
            found.append((start + 1, language, body, number + 1))
            start = None
    return found


# pymdownx.snippets' include line: a repository file, or lines first to last of it.
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::(\d+):(\d+))?"$', re.M)


def included(text: str) -> str:
    """`text` with each ``--8<-- "path"`` line replaced by the file (or the lines it names), as
    mkdocs renders it: a page's code block that includes source runs that source."""

    def lines(match: re.Match) -> str:
        found = (ROOT / match[1]).read_text(encoding="utf-8").splitlines()
        first, last = (int(match[2]), int(match[3])) if match[2] else (1, len(found))
        return "\n".join(found[first - 1 : last])

    return SNIPPET.sub(lines, text)


def blocks(path: Path) -> list[Block]:
    text = included(path.read_text(encoding="utf-8"))
    lines = text.splitlines()
    all_blocks = fenced(text)
    result = []
    for index, (line, language, body, end) in enumerate(all_blocks):
        if language != "python":
            continue
        expected = None
        if index + 1 < len(all_blocks):
            next_line, next_language, next_body, _ = all_blocks[index + 1]
            between = lines[end : next_line - 1]
            if next_language == "text" and not any(part.strip() for part in between):
                expected = next_body
        result.append(Block(line, body, expected))
    return result


def numbers_match(got: str, expected: str) -> bool:
    if "." not in expected and "e" not in expected.lower():
        return got == expected  # integers (shapes, counts) exactly
    a, b = float(got), float(expected)
    if abs(a - b) <= RELATIVE * max(abs(a), abs(b)):
        return True
    mantissa = expected.lower().split("e")[0]
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    exponent = int(expected.lower().split("e")[1]) if "e" in expected.lower() else 0
    return abs(a - b) <= 1.000001 * 10.0 ** (exponent - decimals)


# How many examples Hypothesis ran before and while shrinking depends on its version; the
# shrunk input and the report do not.
VERSION_DEPENDENT = re.compile(r"\d+ example\(s\) run")


def lines_match(got: str, expected: str) -> bool:
    got, expected = (VERSION_DEPENDENT.sub("N example(s) run", t) for t in (got, expected))
    if NUMBER.split(got) != NUMBER.split(expected):
        return False
    pairs = zip(NUMBER.findall(got), NUMBER.findall(expected))
    return all(numbers_match(a, b) for a, b in pairs)


def compare(printed: str, expected: str, where: str) -> None:
    got = [line.rstrip() for line in printed.rstrip("\n").splitlines()]
    want = [line.rstrip() for line in expected.rstrip("\n").splitlines()]
    assert len(got) == len(want) and all(map(lines_match, got, want)), (
        f"{where} printed something other than the page shows:\n"
        + "\n".join(got)
        + "\n--- the page shows ---\n"
        + "\n".join(want)
    )


def pages_with_code() -> list[Path]:
    return [page for page in PAGES if page.exists() and any(b.runs for b in blocks(page))]


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", pages_with_code(), ids=page_id)
def test_blocks_run_and_print_what_the_page_shows(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"doc_{path.stem.replace('-', '_')}"}
    for block in blocks(path):
        if not block.runs:
            continue
        where = f"{page_id(path)}, block at line {block.line}"
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block.code, where, "exec"), namespace)  # noqa: S102  (the point)
        if block.expected is not None:
            compare(printed.getvalue(), block.expected, where)


@pytest.mark.slow  # a second run of every page, in a process of its own
@pytest.mark.parametrize("path", pages_with_code(), ids=page_id)
def test_page_runs_as_a_plain_script(path, tmp_path):
    script = tmp_path / "page.py"
    script.write_text("\n".join(b.code for b in blocks(path) if b.runs), encoding="utf-8")
    workdir = tmp_path / "empty"
    workdir.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(script)], cwd=workdir, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{page_id(path)} fails as a plain script:\n{done.stderr[-3000:]}"
    # A reader runs the blocks in a checkout: what they write must not show as untracked there.
    left = sorted(p.name for p in workdir.iterdir() if not ignored_by_git(p.name))
    assert not left, f"{page_id(path)} writes {left}: add them to .gitignore"


def ignored_by_git(name: str) -> bool:
    """Whether a file of this name at the checkout's top is matched by .gitignore's patterns."""
    lines = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    patterns = [line.strip().strip("/") for line in lines if line.strip()[:1] not in ("", "#")]
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


# ------------------------------------------------------------------ the runner's own rules
def test_output_comparison_rules():
    assert lines_match("loss 0.973, grad 5.6e-03", "loss 0.973, grad 5.6e-03")
    assert lines_match("loss 0.974", "loss 0.973")  # a rounding flip in the last digit
    assert not lines_match("loss 0.975", "loss 0.973")
    assert not lines_match("shape (8, 767)", "shape (8, 768)")  # integers exactly
    assert lines_match("1.0000000001", "1.0")
    assert not lines_match("5.8e-03", "5.6e-03")
    assert not lines_match("grad 5.6e-03", "mean 5.6e-03")  # words exactly
    assert lines_match("float32", "float32") and not lines_match("float64", "float32")


def test_block_parsing(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(1)\n```\n\n```text\n1\n```\n"
        "prose\n```python\nx = 2\n```\nprose\n```text\nnot output\n```\n"
        "```python\n# no-run: needs a GPU\nimport cupy\n```\n",
        encoding="utf-8",
    )
    found = blocks(page)
    assert [b.expected for b in found] == ["1\n", None, None]
    assert [b.runs for b in found] == [True, True, False]


def test_includes_are_the_files_text():
    engine = (ROOT / "tinyattn" / "teaching" / "engine.py").read_text(encoding="utf-8")
    page = '```python\n--8<-- "tinyattn/teaching/engine.py"\n```\n'
    assert included(page) == f"```python\n{engine.rstrip(chr(10))}\n```\n"
    lines = '```python\n--8<-- "tinyattn/teaching/engine.py:2:3"\n```\n'
    assert included(lines) == "```python\n" + "\n".join(engine.splitlines()[1:3]) + "\n```\n"


def test_every_page_is_found():
    names = {page.name for page in pages_with_code()}
    assert {"README.md", "autograd.md", "attention.md", "errors.md"} <= names


# ------------------------------------------------------------------ the API reference pages
API_MODULES = [
    "tinyattn",
    "tinyattn.nn",
    "tinyattn.nn.functional",
    "tinyattn.functional",
    "tinyattn.optim",
    "tinyattn.optim.lr_scheduler",
    "tinyattn.func",
]


def statically_bound(module) -> set[str]:
    """Names a module binds in its own source: what the docs generator (it reads source) sees."""
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


@pytest.mark.parametrize("module_name", API_MODULES)
def test_api_reference_covers_every_public_name(module_name):
    module = importlib.import_module(module_name)
    directives = {
        line.removeprefix(":::").strip()
        for page in (ROOT / "docs" / "api").glob("*.md")
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith(":::")
    }
    assert module_name in directives, f"no API page has '::: {module_name}'"
    # Functions generated from Tensor methods are listed by name (`ta.exp`) on the tinyattn page.
    listed = set(re.findall(r"`ta\.(\w+)`", (ROOT / "docs" / "api" / "tinyattn.md").read_text()))
    visible = statically_bound(module)
    missing = []
    lazy = getattr(module, "_LAZY", {})  # names a package loads on first use (PEP 562)
    for name in module.__all__:
        source, attribute = lazy.get(name, (None, None))
        if source in API_MODULES and attribute is None:
            continue  # a module with its own page
        value = getattr(module, name)
        defined_in = f"{source or getattr(value, '__module__', '')}.{attribute or name}"
        generated = module_name == "tinyattn" and name in listed
        module_page = isinstance(value, types.ModuleType) and any(
            d == value.__name__ or d.startswith(value.__name__ + ".") for d in directives
        )
        if name not in visible and defined_in not in directives and not generated | module_page:
            missing.append(name)
    assert not missing, (
        f"{module_name}: {missing} are public but not in the API reference (the generator reads "
        f"the source, so it cannot see them): add '::: module.name' lines to docs/api/"
    )
