"""The copy task's helpers: command line, progress bar, report, checkpoint, what the model
learned (the copy head, the decoding explained), and the pictures.

examples/copy_task.py is the lesson (data, model, training, evaluation, greedy decoding); this
module holds what a reader may skip. It never imports the lesson (it receives its objects) and
loads tqdm and matplotlib only when they are used.
"""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

import tinyattn as ta

SHADES = " .:-=+*#%@"  # the text heat-map, from weight 0 to weight 1
CHECKPOINT_KEYS = {"model", "config", "optimizer", "rng", "history"}  # see save_checkpoint


# ------------------------------------------------------------------------------------ command line
def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def learning_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 < value < 10.0:  # also rejects nan and inf
        raise argparse.ArgumentTypeError(f"expected a learning rate in (0, 10), got {value}")
    return value


def device_name(text: str) -> str:
    """cpu, cuda or cuda:N; 'strict' (the test-only array API device) is accepted but unlisted."""
    index = text.partition(":")[2]
    if text in ("cpu", "cuda", "strict") or (text.startswith("cuda:") and index.isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected 'cpu', 'cuda' or 'cuda:N', got {text!r}")


def parse_args(argv: list[str] | None, defaults: Any) -> tuple[Any, argparse.Namespace]:
    """The flags as (a copy of the `defaults` Config with the flags applied, all the flags)."""
    parser = argparse.ArgumentParser(
        description="Train a tiny causal Transformer to copy a1..an SEP a1..an (next-token "
        "prediction, scored on the copied half).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--seq-len", type=positive_int, default=defaults.seq_len, help="digits to copy (n)")
    add("--vocab", type=positive_int, default=defaults.vocab, help="number of distinct digits")
    add("--layers", type=positive_int, default=defaults.layers, help="Transformer blocks")
    add("--heads", type=positive_int, default=defaults.heads, help="attention heads per block")
    add("--width", type=positive_int, default=defaults.width, help="model width (d_model)")
    add("--batch", type=positive_int, default=defaults.batch, help="sequences per step")
    add(
        "--steps",
        type=positive_int,
        default=defaults.steps,
        help="the most training steps (stops early once held-out checks pass)",
    )
    add("--lr", type=learning_rate, default=defaults.lr, help="AdamW learning rate")
    add("--seed", type=non_negative_int, default=defaults.seed, help="seed for weights and data")
    add("--device", type=device_name, default=defaults.device, help="cpu or cuda")
    add("--no-attention", action="store_true", help="ablation: attention outputs zeros")
    add("--out", type=Path, default=Path("runs/copy_task"), help="output directory")
    add(
        "--resume",
        type=Path,
        default=None,
        metavar="CHECKPOINT",
        help="continue the run saved in this checkpoint.npz, bit for bit, up to --steps in all "
        "(its configuration wins over the other flags but --steps, --device and --out)",
    )
    add(
        "--quiet",
        action="store_true",
        help="no progress bar, heat-map or decoding (the report still prints)",
    )
    args = parser.parse_args(argv)
    if args.vocab < 2:
        parser.error(f"argument --vocab: needs at least 2 digits to be a task, got {args.vocab}")
    if args.width % args.heads:
        parser.error(f"--width {args.width} must be a multiple of --heads {args.heads}")
    if args.device.startswith("cuda") and ta.cupy_status()[0] is None:
        parser.error(f"--device {args.device}: {ta.cupy_status()[1]}")
    needed = ["matplotlib"] + ([] if args.quiet else ["tqdm"])  # say so now, not after training
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:
        parser.error(f"needs {' and '.join(missing)}: pip install -e '.[examples]'")
    fields = {name: getattr(args, name) for name in ("seq_len", "vocab", "layers", "heads")}
    fields.update({name: getattr(args, name) for name in ("width", "batch", "steps", "lr")})
    fields.update(seed=args.seed, device=args.device, attention=not args.no_attention)
    if args.resume is not None:  # the saved run's configuration, with the new --steps and --device
        try:
            checkpoint = ta.load(args.resume)
        except (OSError, ValueError) as exc:
            parser.error(f"--resume {args.resume}: not a checkpoint of this script ({exc})")
        missing = sorted(CHECKPOINT_KEYS - set(checkpoint if isinstance(checkpoint, dict) else {}))
        if missing:
            parser.error(f"--resume {args.resume}: not a checkpoint of this script (no {missing})")
        fields = {**checkpoint["config"], "steps": args.steps, "device": args.device}
    return replace(defaults, **fields), args


# -------------------------------------------------------------------------------------- training
@dataclass
class History:
    """What training records: per-step loss and token accuracy, and the held-out checks."""

    losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)
    checks: list[tuple[int, float, float]] = field(default_factory=list)  # step, exact, min_prob
    seconds: float = 0.0
    stopped_early: bool = False

    @property
    def steps(self) -> int:
        return len(self.losses)


class Progress:
    """A tqdm bar with the live loss and batch accuracy; does nothing when quiet."""

    def __init__(self, total: int, done: int, quiet: bool) -> None:
        self.bar = None
        if not quiet:
            from tqdm import tqdm  # noqa: PLC0415  (an example dependency, needed for the bar)

            self.bar = tqdm(
                total=total, initial=done, desc="training", unit="step", dynamic_ncols=True
            )

    def update(self, loss: float, accuracy: float) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4f}", acc=f"{accuracy:.1%}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ------------------------------------------------------------------------------------ checkpoint
def save_checkpoint(path: Path, model: Any, config: Any, state: Any) -> None:
    """The weights, the Config and all that a bit-exact resume needs: the optimizer's moments,
    the states of the two data streams and of tinyattn's generator (initialisation, dropout),
    and the history so far. `state` is the lesson's TrainingState."""
    rng = {"batches": state.batches.bit_generator.state, "checks": state.checks.bit_generator.state}
    rng["tinyattn"] = ta.get_rng_state()
    saved = {"model": model.state_dict(), "config": asdict(config), "rng": rng}
    saved.update(optimizer=state.optimizer.state_dict(), history=asdict(state.history))
    ta.save(saved, path)


def restore(checkpoint: dict, model: Any, state: Any) -> None:
    """Load a checkpoint into a model and TrainingState freshly built from its Config; training
    then goes on exactly as if it had never stopped."""
    model.load_state_dict(checkpoint["model"])
    state.optimizer.load_state_dict(checkpoint["optimizer"])
    state.batches.bit_generator.state = checkpoint["rng"]["batches"]
    state.checks.bit_generator.state = checkpoint["rng"]["checks"]
    ta.set_rng_state(checkpoint["rng"]["tinyattn"])  # last: building the model drew from it
    state.history = History(**checkpoint["history"])


def save_outputs(out: Path, model: Any, config: Any, state: Any, inputs: ta.Tensor) -> list[str]:
    """checkpoint.npz, loss.png and (with attention) attention.png of the example `inputs`."""
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(out / "checkpoint.npz", model, config, state)
    plot_history(state.history, out / "loss.png")
    written = ["checkpoint.npz", "loss.png"]
    if config.attention:
        maps = attention_maps(model, inputs)
        plot_attention(maps, token_names(inputs, config.sep), out / "attention.png")
        written.append("attention.png")
    return [f"wrote {', '.join(written)} to {out}"]


# ------------------------------------------------------------------------------------------ report
def report(config: Any, history: Any, result: dict[str, float], resumed: int = 0) -> list[str]:
    """The final report's lines, with chance levels so that numbers can be judged; `resumed`:
    the steps (and their seconds, in the history) that came from a checkpoint."""
    chance_token = 1.0 / config.vocab
    attention = "on" if config.attention else "OFF (--no-attention ablation)"
    stop = (
        f"stopped early: {config.patience} confident held-out checks in a row"
        if history.stopped_early
        else "no early stop"
    )
    lines = [
        f"copy task: n={config.seq_len}, vocab={config.vocab}, layers={config.layers}, "
        f"heads={config.heads}, width={config.width}, batch={config.batch}, lr={config.lr}, "
        f"seed={config.seed}, device={config.device}, attention {attention}",
        f"trained {history.steps} steps in {history.seconds:.1f} s "
        f"({history.steps / max(history.seconds, 1e-9):.1f} steps/s; {stop})"
        + (f", {resumed} of them in the run the checkpoint saved" if resumed else ""),
        f"held-out exact-sequence accuracy: {result['exact']:.2%} on {result['sequences']:,} "
        f"fresh sequences (chance {chance_token**config.seq_len:.0e})",
        f"held-out token accuracy: {result['token']:.2%} (chance {chance_token:.2%})",
    ]
    if not config.attention:
        near = abs(result["token"] - chance_token) < 0.05
        verdict = "near chance, as expected" if near else "NOT near chance: something leaks"
        lines.append(
            f"without attention no position can look back at the digits it must copy: "
            f"token accuracy {result['token']:.2%} vs chance {chance_token:.2%} is {verdict}"
        )
    return lines


def token_names(inputs: ta.Tensor, sep: int) -> list[str]:
    """The first sequence's tokens as text, SEP written '|'."""
    return ["|" if token == sep else str(token) for token in inputs.numpy()[0].tolist()]


def text_heatmap(weights: np.ndarray, names: list[str]) -> str:
    """One head's (T, T) weights as characters: rows are queries, columns keys, ' ' to '@'."""
    lines = ["     keys: " + " ".join(f"{name:>2}" for name in names)]
    for row, name in enumerate(names):
        cells = [SHADES[min(int(w * len(SHADES)), len(SHADES) - 1)] * 2 for w in weights[row]]
        lines.append((f"query {name:>2}:  " + " ".join(cells)).rstrip())
    return "\n".join(lines)


# ------------------------------------------------------------------------------ what it learned
def attention_maps(model: Any, inputs: ta.Tensor) -> list[np.ndarray]:
    """Every head's attention weights on the first example: one (H, T, T) array per layer."""
    maps, was_training = [], model.training
    model.eval()
    with ta.no_grad():
        x = model.embed(inputs[:1])  # (1, T, C)
        for block in model.blocks:
            seen = block.norm1(x) if block.norm_first else x  # what the block's attention reads
            _, weights = block.attn(seen, is_causal=True, need_weights=True)  # (1, H, T, T)
            maps.append(weights.numpy()[0])
            x = block(x, is_causal=True)
    model.train(was_training)
    return maps


def copy_head(maps: list[np.ndarray], seq_len: int) -> tuple[int, int, float]:
    """(layer, head, share) of the head that puts the most weight on the copy diagonal: position
    p (from n on) looking n positions back, at the token it must output next."""
    best = (0, 0, -1.0)
    rows = np.arange(seq_len, 2 * seq_len)  # the positions that predict the copied half
    for layer, heads in enumerate(maps):
        for head, weights in enumerate(heads):
            share = float(weights[rows, rows - seq_len].mean())
            if share > best[2]:
                best = (layer, head, share)
    return best


def decoding_rows(model: Any, config: Any, sequence: list[int]) -> tuple[int, int, list]:
    """For a greedy decoding `sequence` (2n + 1 tokens): the copy head (layer, head) and, per
    digit written, (query position p, digit written, key the head weighted most, its weight).

    Attention is causal, so one pass over the finished sequence gives every row exactly as it
    was when position p wrote token p + 1.
    """
    n = config.seq_len
    inputs = ta.tensor([sequence[:-1]], dtype="int64", device=config.device)  # (1, 2n)
    maps = attention_maps(model, inputs)
    layer, head, _ = copy_head(maps, n)
    weights = maps[layer][head]  # (2n, 2n): row p is what position p looked at
    rows = [
        (p, sequence[p + 1], int(weights[p].argmax()), float(weights[p].max()))
        for p in range(n, 2 * n)
    ]
    return layer, head, rows


def explain(model: Any, config: Any, inputs: ta.Tensor, sequence: list[int]) -> list[str]:
    """The terminal heat-map of the copy head on the example `inputs`, then the greedy decoding
    `sequence` of its first half, token by token, with the attention row behind each digit."""
    n, names = config.seq_len, token_names(inputs, config.sep)
    maps = attention_maps(model, inputs)
    layer, head, share = copy_head(maps, n)
    lines = [
        f"layer {layer}, head {head} on one example: {share:.0%} of its attention (from SEP on) "
        f"goes {n} positions back, to the digit it must output next",
        f"shades from weight 0 to 1: '{SHADES}' ('|' is SEP; row p may see keys 0..p)",
        text_heatmap(maps[layer][head], names),
    ]
    layer, head, rows = decoding_rows(model, config, sequence)
    shown = ["|" if token == config.sep else str(token) for token in sequence]
    lines.append(
        f"greedy decoding from the first half alone ({' '.join(shown[: n + 1])}): each digit "
        f"written, and where layer {layer}, head {head} looked (its largest weight) to fetch it"
    )
    for p, digit, key, weight in rows:
        lines.append(
            f"  position {p:>2} ({shown[p]}) writes {digit}  <- position {key:>2} "
            f"({shown[key]}, {p - key} back), weight {weight:.2f}"
        )
    right = sum(written == digit for written, digit in zip(sequence[n + 1 :], sequence[:n]))
    fetched = sum(shown[key] == str(digit) for _, digit, key, _ in rows)
    lines.append(
        f"copied {right} of {n} digits right; {fetched} of the {n} digits written are the token "
        f"at the key its head weighted most"
        + (f": it copies by looking {n} positions back" if fetched == right == n else "")
    )
    return lines


# ---------------------------------------------------------------------------------------- pictures
def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415  (only the example plots; `import tinyattn` never does)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def plot_history(history: Any, path: Path) -> None:
    """loss.png: the training loss (log scale) and the accuracies, per step."""
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = np.arange(1, history.steps + 1)
    left.semilogy(steps, history.losses, linewidth=1)
    left.set(title="training loss (copied half)", xlabel="step", ylabel="cross-entropy")
    right.plot(steps, history.accuracies, linewidth=1, label="token accuracy (training batch)")
    if history.checks:
        check_steps, exact, min_prob = zip(*history.checks, strict=True)
        right.plot(check_steps, exact, "o-", markersize=3, label="exact-sequence (held out)")
        right.plot(
            check_steps, min_prob, "s--", markersize=3, label="lowest p(correct digit), held out"
        )
    right.set(title="accuracy", xlabel="step", ylim=(-0.02, 1.02))
    right.legend(loc="center right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_attention(maps: list[np.ndarray], names: list[str], path: Path) -> None:
    """attention.png: one panel per layer and head, queries down, keys across."""
    plt = _pyplot()
    layers, heads = len(maps), maps[0].shape[0]
    figure, axes = plt.subplots(layers, heads, figsize=(3.4 * heads, 3.4 * layers), squeeze=False)
    ticks = np.arange(len(names))
    for layer, row in enumerate(axes):
        for head, ax in enumerate(row):
            ax.imshow(maps[layer][head], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_title(f"layer {layer}, head {head}", fontsize=9)
            ax.set_xticks(ticks, names, fontsize=7)
            ax.set_yticks(ticks, names, fontsize=7)
            ax.set_xlabel("key (attended to)", fontsize=8)
            ax.set_ylabel("query", fontsize=8)
    figure.suptitle("attention on one held-out example ('|' is SEP)", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
