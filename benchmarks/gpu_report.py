"""The GPU check's report: the parts in their order, the targets, and report.md itself.

gpu_check.py runs the parts and hands their results here: per part a status, its seconds and
time limit, and the data its process wrote (None when it wrote none); and its Plan, of which
only `rehearse`, `device` and `test_keyword` are read here. Only the correctness targets are
judged in a rehearsal; the speed targets need a GPU.
"""

from __future__ import annotations

from pathlib import Path

PARTS = ("env", "losses", "steps", "autocast", "attention", "generate", "copy", "tests")
MODELS = ("small", "bench")
# Targets: a ratio to PyTorch CUDA eager (lower is faster) must be at most this.
TARGETS = {"compiled": 0.5, "eager": 1.5, "attention": 2.0, "autocast": 0.5}
# The env part's keys, in the report's order.
ENV_KEYS = (
    "date",
    "gpu",
    "driver",
    "cuda_driver_api",
    "cuda_runtime",
    "cupy",
    "numpy",
    "torch",
    "torch_cuda",
    "python",
    "tinyattn",
    "machine",
)


def judged(value: float | None, target: float, plan) -> str:
    """A ratio's verdict against its target (at most `target`)."""
    if value is None:
        return "no result"
    if plan.rehearse:
        return "not judged (rehearsal)"
    return "met" if value <= target else "NOT MET"


def passed(ok: bool | None) -> str:
    return "no result" if ok is None else ("met" if ok else "NOT MET")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def summary_rows(results: dict, plan) -> list[list[str]]:
    """One row per target: part, status, result, target, verdict."""
    rows = []
    for name in PARTS[1:]:
        part = results.get(name, {"status": "not run", "data": None})
        data = part["data"] or {}
        for result, target, verdict in ROWS[name](data, plan):
            rows.append([name, part["status"].split(":")[0], result, target, verdict])
    return rows


def _loss_rows(data: dict, plan) -> list:
    rows = []
    for model in MODELS:
        got = data.get("models", {}).get(model)
        if got is None:
            rows.append([f"{model}: no result", "compiled == eager, bit for bit", "no result"])
            continue
        same = "bit for bit" if got["bit_for_bit"] else "differ"
        result = f"{model}: {same} over {data['steps']} steps (max relative difference "
        result += f"{got['max_relative_difference']:.3g})"
        rows.append([result, "compiled == eager, bit for bit", passed(got["bit_for_bit"])])
    return rows


def _step_rows(data: dict, plan) -> list:
    rows = []
    for model in MODELS:
        got = data.get("models", {}).get(model, {})
        times = got.get("times", {})
        for mode in ("compiled", "eager"):
            ms = times.get(mode, {}).get("ms")
            result = f"{model} {mode}: {_ms(ms)} vs PyTorch {_ms(times.get('torch', {}).get('ms'))}"
            result += f" = {_x(got.get(f'{mode}/torch'))}"
            target = f"<= {TARGETS[mode]}x PyTorch eager"
            rows.append([result, target, judged(got.get(f"{mode}/torch"), TARGETS[mode], plan)])
    return rows


def _autocast_rows(data: dict, plan) -> list:
    if data.get("skipped"):
        return [[f"skipped: {data['skipped']}", "float16 autocast trains", "no result"]]
    times = data.get("times", {})
    result = f"small: autocast {_ms(times.get('autocast', {}).get('ms'))} vs PyTorch float32 "
    result += f"{_ms(times.get('torch', {}).get('ms'))} = {_x(data.get('autocast/torch'))}"
    target = f"<= {TARGETS['autocast']}x PyTorch's float32 eager step"
    steps = len((data.get("losses") or {}).get("autocast", []))
    worst = data.get("max_relative_difference")
    close = f"{steps} steps: losses within {worst:.3g} of float32's" if steps else "no result"
    return [
        [result, target, judged(data.get("autocast/torch"), TARGETS["autocast"], plan)],
        [close, "finite, within 1e-2 relative of float32's", passed(data.get("close"))],
    ]


def _attention_rows(data: dict, plan) -> list:
    result = f"T {data.get('T', '-')}: {_ms(data.get('tinyattn_ms'))} vs SDPA "
    result += f"{_ms(data.get('torch_ms'))} = {_x(data.get('ratio'))}"
    target = f"<= {TARGETS['attention']}x SDPA"
    return [[result, target, judged(data.get("ratio"), TARGETS["attention"], plan)]]


def _generate_rows(data: dict, plan) -> list:
    modes = data.get("modes", {})
    cells = [f"{m} {modes[m]['ms_per_token']:.3f} ms" for m in modes]
    result = "per token: " + (", ".join(cells) or "-")
    result += f"; compiled/PyTorch {_x(data.get('compiled/torch'))}"
    return [
        [result, "same tokens in every mode (no speed target)", passed(data.get("same_tokens"))]
    ]


def _copy_rows(data: dict, plan) -> list:
    if not data:
        return [["no result", "trains on the device to the end", "no result"]]
    result = f"{data['steps']:.0f} steps at {data['steps_per_s']} steps/s; token accuracy "
    result += f"{data['token_accuracy_pct']}%"
    return [[result, "trains on the device to the end", passed(data["returncode"] == 0)]]


def _tests_rows(data: dict, plan) -> list:
    if not data:
        return [["no result", f"every {plan.test_keyword} case passes", "no result"]]
    result = ", ".join(f"{data[k]} {k}" for k in ("passed", "failed", "error", "skipped", "xfail"))
    result += f" of {data['collected']} collected"
    if data["timed_out"]:
        result += f" (stopped by the time limit after {data['ran']})"
    ok = data["collected"] is not None and data["passed"] + data["xfail"] == data["collected"]
    return [[result, f"every {plan.test_keyword} case passes", passed(ok)]]


ROWS = {
    "losses": _loss_rows,
    "steps": _step_rows,
    "autocast": _autocast_rows,
    "attention": _attention_rows,
    "generate": _generate_rows,
    "copy": _copy_rows,
    "tests": _tests_rows,
}


def render_report(results: dict, plan, out: Path) -> str:
    """The markdown report: the machine, a summary against the targets, then each part."""
    env = (results.get("env") or {}).get("data") or {}
    lines = ["# tinyattn GPU check", ""]
    if plan.rehearse:
        lines += [
            f"**Rehearsal on the CPU**: tinyattn on the `{plan.device}` device, PyTorch (when",
            "installed) on the CPU, tiny sizes, a stand-in for CUDA-graph capture. These numbers",
            "say nothing about a GPU; only the correctness targets are judged.",
            "",
        ]
    lines += [f"- {key}: {'-' if env.get(key) is None else env[key]}" for key in ENV_KEYS]
    install = out / "install.status"
    if install.exists():
        lines.append(f"- install: {install.read_text().strip()}")
    lines += [
        "",
        "## Summary",
        "",
        "| part | status | result | target | verdict |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in summary_rows(results, plan)]
    lines += ["", "## Parts", ""]
    for name in PARTS:
        part = results.get(name, {"status": "not run"})
        seconds = f", {part['seconds']:.1f} s of {part['limit']} s" if "seconds" in part else ""
        lines.append(f"### {name}: {part['status']}{seconds}")
        if part.get("data"):
            lines += [""] + DETAILS.get(name, lambda d: [])(part["data"])
        lines.append("")
    files = sorted(p.name for p in out.iterdir() if p.suffix in (".json", ".log", ".jsonl"))
    lines += ["## Raw files", "", ", ".join(files) or "-", ""]
    return "\n".join(lines)


def _step_details(data: dict) -> list[str]:
    lines = []
    for model, got in data.get("models", {}).items():
        sizes = data.get("sizes", {}).get(model, {})
        lines += [f"{model} model {sizes}; CUDA graphs {got['graphs']}", ""]
        lines += ["| mode | ms per step (median over rounds) | range |", "|---|---|---|"]
        for mode, t in got["times"].items():
            low, high = t["range_ms"]
            lines.append(f"| {mode} | {t['ms']:.3f} | {low:.3f} - {high:.3f} |")
        lines.append("")
    return lines


def _autocast_details(data: dict) -> list[str]:
    if data.get("skipped"):
        return [f"skipped: {data['skipped']}"]
    lines = [f"device type {data.get('device_type')}; PyTorch's own autocast step "
             f"{_x(data.get('torch_autocast/torch'))} of its float32 step", ""]  # fmt: skip
    lines += ["| mode | ms per step (median over rounds) | range |", "|---|---|---|"]
    for mode, t in data.get("times", {}).items():
        low, high = t["range_ms"]
        lines.append(f"| {mode} | {t['ms']:.3f} | {low:.3f} - {high:.3f} |")
    return lines


def _attention_details(data: dict) -> list[str]:
    return [f"shape (B, H, T, D) {data.get('shape')}; max |tinyattn - PyTorch|: "
            f"{data.get('max_abs_difference')}"]  # fmt: skip


def _generate_details(data: dict) -> list[str]:
    lines = [f"config {data.get('config')}; CUDA graphs {data.get('graphs')}", ""]
    lines += ["| mode | ms per call | ms per token |", "|---|---|---|"]
    for mode, got in data.get("modes", {}).items():
        lines.append(f"| {mode} | {got['ms_per_call']:.3f} | {got['ms_per_token']:.3f} |")
    return lines


def _copy_details(data: dict) -> list[str]:
    if not data:
        return []
    return [f"`{data['command']}`", "", "```", data["output"].strip(), "```"]


def _tests_details(data: dict) -> list[str]:
    problems = data.get("problems", [])
    lines = [f"{len(problems)} not passing" + (" (first 30):" if len(problems) > 30 else ":")]
    lines += [f"- {p['outcome']}: `{p['id']}`: {p['message']}" for p in problems[:30]]
    return lines if problems else []


DETAILS = {
    "losses": lambda data: [f"CUDA graphs per model: "
                            f"{ {m: g['graphs'] for m, g in data.get('models', {}).items()} }"],
    "steps": _step_details,
    "autocast": _autocast_details,
    "attention": _attention_details,
    "generate": _generate_details,
    "copy": _copy_details,
    "tests": _tests_details,
}  # fmt: skip
