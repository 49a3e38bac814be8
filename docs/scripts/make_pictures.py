"""Draw the pictures of the learner's pages from the pages' own examples.

Each picture comes from running a page's ``python`` blocks (in order, in one namespace, the way
the docs tests run them) up to the block that makes the example, then drawing what it made:

- docs/images/start_here_graph.svg: the graph of start-here.md section 4 after backward, with
  every node's value and gradient (Graphviz ``dot``);
- docs/images/autograd_after_backward.svg: autograd.md's worked example after backward: the
  structure, and the leaves' values and gradients (Graphviz ``dot``);
- docs/images/start_here_backward.html and docs/images/autograd_backward.html: the step-by-step
  pages of backward (``viz.animate_backward``) that start-here.md section 4 and
  autograd.md section 3 make, saved here instead of in a temporary folder (no program needed);
- docs/images/attention_one_query.png: the weights of attention.md's single-query walk-through;
- docs/images/attention_scale.png: softmax weights with and without the 1/sqrt(d) scale;
- docs/images/attention_copy_heads.png: the heads of the trained copy-task model
  (examples/copy_task.py, trained with its defaults).

Run from the repository root: ``python docs/scripts/make_pictures.py`` (all), or name some of
``graphs``, ``walks``, ``attention``. Needs Graphviz's ``dot`` for the graphs and matplotlib for
the attention pictures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
IMAGES = DOCS / "images"
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

import tinyattn.nn.functional as F  # noqa: E402
from tinyattn import viz  # noqa: E402

BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.S | re.M)  # also ```python title=...
WORDS = ["Your", "journey", "starts", "with", "one", "step"]
# pymdownx.snippets' include line (a repository file, or lines first to last of it): a page's
# block runs the source it shows, as tests/test_docs.py runs it.
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::(\d+):(\d+))?"$', re.M)


def _included_lines(match: re.Match) -> str:
    found = (ROOT / match[1]).read_text(encoding="utf-8").splitlines()
    first, last = (int(match[2]), int(match[3])) if match[2] else (1, len(found))
    return "\n".join(found[first - 1 : last])


def run_page(page: str, until: str) -> dict:
    """Run the page's python blocks in order, through the first one that contains `until`;
    returns their namespace. Their printing is swallowed."""
    namespace: dict = {"__name__": f"doc_{Path(page).stem}"}
    text = SNIPPET.sub(_included_lines, (DOCS / page).read_text(encoding="utf-8"))
    blocks = [block for block in BLOCK.findall(text) if not block.startswith("# no-run")]
    with tempfile.TemporaryDirectory() as folder, contextlib.redirect_stdout(io.StringIO()):
        here = os.getcwd()
        os.chdir(folder)  # examples may write files
        try:
            for number, source in enumerate(blocks, start=1):
                exec(compile(source, f"{page}[block {number}]", "exec"), namespace)  # noqa: S102
                if until in source:
                    return namespace
        finally:
            os.chdir(here)
    raise ValueError(f"{page}: no python block contains {until!r}")


def write_svg(dot_text: str, name: str) -> Path:
    dot = shutil.which("dot")
    if dot is None:
        raise SystemExit("the Graphviz 'dot' program is needed (apt-get install graphviz)")
    path = IMAGES / name
    subprocess.run([dot, "-Tsvg", "-o", str(path)], input=dot_text.encode(), check=True)
    return path


def graph_pictures() -> list[Path]:
    start_here = run_page("start-here.md", "picture = viz.to_dot")
    autograd = run_page("autograd.md", "loss.backward()")
    names = {name: autograd[name] for name in ("x", "w", "h", "y", "loss")}
    return [
        write_svg(start_here["picture"], "start_here_graph.svg"),
        write_svg(viz.to_dot(autograd["loss"], names), "autograd_after_backward.svg"),
    ]


def walk_pages() -> list[Path]:
    """The pages each example saves with ``walk.save(...)``, written into docs/images."""
    pages = [
        ("start-here.md", "start_here_backward.html"),
        ("autograd.md", "autograd_backward.html"),
    ]
    return [run_page(page, "animate_backward(")["walk"].save(IMAGES / name) for page, name in pages]


def _pyplot():
    import matplotlib  # noqa: PLC0415  (only this script plots)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def one_query_picture() -> Path:
    page = run_page("attention.md", "weights_2 = ")
    weights = page["weights_2"].numpy()
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(5.6, 2.6))
    bars = ax.bar(WORDS, weights, color="#4c72b0")
    ax.bar_label(bars, [f"{w:.4f}" for w in weights], fontsize=8)
    ax.set(ylabel="attention weight", ylim=(0, 0.3))
    ax.set_title('the query "journey" attends to every word (the weights sum to 1)', fontsize=9)
    figure.tight_layout()
    path = IMAGES / "attention_one_query.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def scale_picture() -> Path:
    page = run_page("attention.md", "for name, scale in")
    queries, keys, d = page["queries"][:6], page["keys"][:6], page["d"]
    scores = (queries @ keys.mT)[:, 0, :]  # (6 queries, 9 keys)
    panels = [("unscaled: q . k", 1.0), ("scaled: q . k / sqrt(d)", 1.0 / math.sqrt(d))]
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(8, 3.0))
    for ax, (title, scale) in zip(axes, panels):
        weights = F.softmax(scores * scale, dim=-1).numpy()
        image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0)
        ax.set_title(
            f"{title}\nlargest weight per row, mean {weights.max(-1).mean():.2f}", fontsize=9
        )
        ax.set(xlabel="key", ylabel="query")
    figure.colorbar(image, ax=list(axes), shrink=0.8, label="softmax weight")
    figure.suptitle(
        f"six queries, nine keys, d = {d}: without the scale each row is nearly one-hot", fontsize=9
    )
    path = IMAGES / "attention_scale.png"
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)
    return path


def copy_heads_picture() -> Path:
    """Train the copy task with its defaults and keep the attention maps it draws."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("copy_task", ROOT / "examples" / "copy_task.py")
    copy_task = importlib.util.module_from_spec(spec)
    sys.modules["copy_task"] = copy_task
    spec.loader.exec_module(copy_task)
    path = IMAGES / "attention_copy_heads.png"
    with tempfile.TemporaryDirectory() as folder:
        copy_task.main(["--quiet", "--out", folder])
        shutil.copyfile(Path(folder) / "attention.png", path)
    return path


def attention_pictures() -> list[Path]:
    return [one_query_picture(), scale_picture(), copy_heads_picture()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", nargs="*", help="graphs, walks, attention (default: all)")
    which = parser.parse_args(argv).which or ["graphs", "walks", "attention"]
    unknown = set(which) - {"graphs", "walks", "attention"}
    if unknown:
        parser.error(f"unknown pictures {sorted(unknown)}: choose graphs, walks, attention")
    written = []
    if "graphs" in which:
        written += graph_pictures()
    if "walks" in which:
        written += walk_pages()
    if "attention" in which:
        written += attention_pictures()
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
