"""The character LSTM's helpers: command line, progress bar, report and the loss plot.

examples/char_lstm.py is the lesson (data, model, training, evaluation, sampling); this module
holds what a reader may skip. It never imports the lesson (it receives its objects) and loads
tqdm and matplotlib only when they are used. The argument types are the copy task's.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from copy_task_extras import device_name, learning_rate, non_negative_int, positive_int

import tinyattn as ta

OPTIONS = ("sentences", "seq_len", "batch", "embed", "hidden", "layers", "steps", "lr", "seed")


def temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < math.inf:  # also rejects nan
        raise argparse.ArgumentTypeError(f"expected a temperature > 0, got {value}")
    return value


def parse_args(argv: list[str] | None, defaults: Any) -> tuple[Any, argparse.Namespace]:
    """The flags as (a copy of the `defaults` Config with the flags applied, all the flags)."""
    parser = argparse.ArgumentParser(
        description="Train a character-level LSTM language model on generated sentences, "
        "compare it with the unigram baseline, and sample text from it.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--sentences", type=positive_int, default=defaults.sentences, help="sentences of text")
    add("--seq-len", type=positive_int, default=defaults.seq_len, help="characters per window")
    add("--batch", type=positive_int, default=defaults.batch, help="windows per step")
    add("--embed", type=positive_int, default=defaults.embed, help="character embedding size")
    add("--hidden", type=positive_int, default=defaults.hidden, help="LSTM hidden size")
    add("--layers", type=positive_int, default=defaults.layers, help="stacked LSTM layers")
    add("--steps", type=positive_int, default=defaults.steps, help="training steps")
    add("--lr", type=learning_rate, default=defaults.lr, help="Adam learning rate")
    add("--seed", type=non_negative_int, default=defaults.seed, help="seed for text and weights")
    add("--device", type=device_name, default=defaults.device, help="cpu or cuda")
    add("--sample-len", type=positive_int, default=defaults.sample_len, help="characters sampled")
    add("--temperature", type=temperature, default=defaults.temperature, help="sampling")
    add("--out", type=Path, default=Path("runs/char_lstm"), help="output directory (loss.png)")
    add("--compile", action="store_true", help="train through ta.compile (same losses, faster)")
    add("--quiet", action="store_true", help="no progress bar (the report still prints)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and ta.cupy_status()[0] is None:
        parser.error(f"--device {args.device}: {ta.cupy_status()[1]}")
    needed = ["matplotlib"] + ([] if args.quiet else ["tqdm"])  # say so now, not after training
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        parser.error(f"needs {' and '.join(missing)}: pip install -e '.[examples]'")
    fields = {name: getattr(args, name) for name in OPTIONS}
    fields.update(device=args.device, sample_len=args.sample_len, temperature=args.temperature)
    fields.update(compile=args.compile)
    return replace(defaults, **fields), args


@dataclass
class History:
    """What training records: per-step loss, and the time it took."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0


class Progress:
    """A tqdm bar with the live loss; does nothing when quiet."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.bar = None
        if not quiet:
            from tqdm import tqdm  # noqa: PLC0415  (an example dependency, needed for the bar)

            self.bar = tqdm(total=total, desc="training", unit="step", dynamic_ncols=True)

    def update(self, loss: float) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def report(
    config: Any,
    chars: int,
    vocab: int,
    history: History,
    held_out: float,
    baseline: float,
    floor: float,
) -> list[str]:
    """The final report's lines: the run, its speed, the held-out loss against the baseline."""
    last = history.losses[-min(20, len(history.losses)) :]
    return [
        f"char LSTM: {chars:,} characters ({vocab} distinct), embed={config.embed}, "
        f"hidden={config.hidden}, layers={config.layers}, seq_len={config.seq_len}, "
        f"batch={config.batch}, lr={config.lr}, seed={config.seed}, device={config.device}"
        + (", compiled" if config.compile else ""),
        f"trained {len(history.losses)} steps in {history.seconds:.1f} s "
        f"({len(history.losses) / max(history.seconds, 1e-9):.1f} steps/s); "
        f"training loss {sum(last) / len(last):.3f} (mean of the last {len(last)} steps)",
        f"unigram baseline (character frequencies alone): {baseline:.3f} nats/char",
        f"held-out loss: {held_out:.3f} nats/char ({held_out / baseline:.0%} of the baseline; "
        f"perplexity {math.exp(held_out):.2f} against {math.exp(baseline):.2f})",
        f"the grammar's own entropy, the floor no model beats on average: {floor:.3f} nats/char",
    ]


def save_outputs(out: Path, history: History, baseline: float, floor: float) -> list[str]:
    """loss.png: the training loss per step, the unigram baseline and the grammar's floor."""
    import matplotlib  # noqa: PLC0415  (only the example plots; `import tinyattn` never does)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    figure, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot(range(1, len(history.losses) + 1), history.losses, linewidth=1, label="training loss")
    ax.axhline(baseline, color="gray", linestyle="--", label="unigram baseline")
    ax.axhline(floor, color="green", linestyle=":", label="the grammar's entropy (floor)")
    ax.set(title="character LSTM", xlabel="step", ylabel="cross-entropy (nats/char)")
    ax.legend()
    figure.tight_layout()
    figure.savefig(out / "loss.png", dpi=110)
    plt.close(figure)
    return [f"wrote loss.png to {out}"]
