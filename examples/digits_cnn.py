"""A small convolutional network learns scikit-learn's 8x8 handwritten digits.

The 1,797 digits of ``sklearn.datasets.load_digits`` (shipped with scikit-learn, no download)
are split 80/20 into training and test images. Two blocks of [Conv2d 3x3, BatchNorm2d, ReLU,
MaxPool2d 2x2] shrink each 8x8 image to 2x2 maps, and one Linear layer reads the class from
them. A run reports the test accuracy and saves a picture of the first layer's filters.

    python examples/digits_cnn.py                 # about 98% test accuracy in seconds on a CPU
    python examples/digits_cnn.py --compile       # the same steps, replayed by ta.compile
    python examples/digits_cnn.py --help

Read top to bottom: data, model, training, evaluation, then the picture and the command line.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

# Tiny matrices: BLAS threads cost more than they save on a busy machine. Set before NumPy
# loads; an explicit setting in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import numpy as np

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim


@dataclass
class Config:
    """Everything a run depends on; the defaults reach about 98% test accuracy."""

    epochs: int = 10
    batch: int = 32
    lr: float = 3e-3
    channels: int = 16  # filters in the first convolution; the second has twice as many
    test_fraction: float = 0.2
    seed: int = 0
    device: str = "cpu"
    compile: bool = False  # replay the training step with ta.compile


# ------------------------------------------------------------------------------------------- data
def load_data(config: Config) -> tuple[ta.Tensor, ta.Tensor, ta.Tensor, ta.Tensor]:
    """(train images, train labels, test images, test labels): images (N, 1, 8, 8) float32,
    standardised with the training set's mean and deviation; labels (N,) int64."""
    from sklearn.datasets import load_digits  # noqa: PLC0415  (an example dependency)

    digits = load_digits()
    images = digits.images.astype(np.float32)[:, None]  # (1797, 8, 8) -> (1797, 1, 8, 8)
    order = np.random.default_rng(config.seed).permutation(len(images))
    n_test = int(round(len(images) * config.test_fraction))
    test, train = order[:n_test], order[n_test:]
    mean, std = images[train].mean(), images[train].std()
    images = (images - mean) / std

    def tensor(array: np.ndarray) -> ta.Tensor:
        return ta.tensor(array, device=config.device)

    labels = digits.target.astype(np.int64)
    return tensor(images[train]), tensor(labels[train]), tensor(images[test]), tensor(labels[test])


# ------------------------------------------------------------------------------------------ model
def build_model(config: Config) -> nn.Module:
    """Two convolution blocks and a linear read-out. Shapes: (B, 1, 8, 8) -> (B, 10)."""
    ta.manual_seed(config.seed)
    c = config.channels
    model = nn.Sequential(
        nn.Conv2d(1, c, kernel_size=3, padding=1),  # (B, 1, 8, 8) -> (B, c, 8, 8)
        nn.BatchNorm2d(c),
        nn.ReLU(),
        nn.MaxPool2d(2),  # -> (B, c, 4, 4)
        nn.Conv2d(c, 2 * c, kernel_size=3, padding=1),  # -> (B, 2c, 4, 4)
        nn.BatchNorm2d(2 * c),
        nn.ReLU(),
        nn.MaxPool2d(2),  # -> (B, 2c, 2, 2)
        nn.Flatten(),  # -> (B, 8c)
        nn.Linear(8 * c, 10),
    )
    return model.to(config.device)


# --------------------------------------------------------------------------------------- training
def train(model: nn.Module, images: ta.Tensor, labels: ta.Tensor, config: Config) -> list[float]:
    """Adam on shuffled mini-batches for `config.epochs` epochs; returns each epoch's mean loss."""
    optimizer = optim.Adam(model.parameters(), lr=config.lr)
    scheduler = optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=config.epochs)

    def step(x: ta.Tensor, y: ta.Tensor) -> ta.Tensor:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    run = ta.compile(step) if config.compile else step
    rng = np.random.default_rng((config.seed, 1))
    n, losses = images.shape[0], []
    model.train()
    for _ in range(config.epochs):
        order = ta.tensor(rng.permutation(n), device=config.device)
        # Whole batches only: every step has the same shape, so a compiled step replays.
        batches = [
            order[i : i + config.batch] for i in range(0, n - config.batch + 1, config.batch)
        ]
        epoch = [run(images[index], labels[index]) for index in batches]
        losses.append(float(ta.stack(epoch).mean().item()))
        scheduler.step()
    return losses


def evaluate(model: nn.Module, images: ta.Tensor, labels: ta.Tensor) -> float:
    """The fraction of images whose largest logit is their label (eval mode, no graph)."""
    model.eval()
    with ta.no_grad():
        predicted = model(images).argmax(dim=1)
    return float((predicted == labels).float().mean().item())


# ---------------------------------------------------------------------------- picture and command
def plot_filters(model: nn.Module, path: Path) -> None:
    """The first convolution's 3x3 filters as a grid of grey images (dark = negative)."""
    import matplotlib  # noqa: PLC0415  (an example dependency)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    weights = model[0].weight.detach().numpy()[:, 0]  # (c, 3, 3)
    columns = 8
    rows = -(-len(weights) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(columns, rows + 0.4))
    limit = float(np.abs(weights).max())
    for k, axis in enumerate(np.ravel(axes)):
        axis.axis("off")
        if k < len(weights):
            axis.imshow(weights[k], cmap="gray", vmin=-limit, vmax=limit)
            axis.set_title(str(k), fontsize=8)
    figure.suptitle("first-layer filters (3x3), dark = negative weight")
    figure.savefig(path, dpi=80, bbox_inches="tight")
    plt.close(figure)


def parse_args(argv: list[str] | None) -> tuple[Config, Path]:
    defaults = Config()
    parser = argparse.ArgumentParser(
        description="Train a small CNN on scikit-learn's 8x8 digits and report test accuracy.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--epochs", type=int, default=defaults.epochs, help="passes over the training images")
    add("--batch", type=int, default=defaults.batch, help="images per step")
    add("--lr", type=float, default=defaults.lr, help="Adam learning rate (cosine-annealed)")
    add("--channels", type=int, default=defaults.channels, help="first-layer filters")
    add("--seed", type=int, default=defaults.seed, help="seed for the split, weights and order")
    add("--device", default=defaults.device, help="cpu or cuda")
    add("--compile", action="store_true", help="replay the training step with ta.compile")
    add("--out", type=Path, default=Path("runs/digits_cnn"), help="where filters.png goes")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch", "channels"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if not 0 < args.lr < 10:
        parser.error(f"--lr must be in (0, 10), got {args.lr}")
    config = Config(epochs=args.epochs, batch=args.batch, lr=args.lr, channels=args.channels,
                    seed=args.seed, device=args.device, compile=args.compile)  # fmt: skip
    return config, args.out


def main(argv: list[str] | None = None) -> float:
    config, out = parse_args(argv)
    start = time.perf_counter()
    train_x, train_y, test_x, test_y = load_data(config)
    model = build_model(config)
    losses = train(model, train_x, train_y, config)
    accuracy = evaluate(model, test_x, test_y)
    seconds = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    plot_filters(model, out / "filters.png")
    print(f"trained {config.epochs} epochs on {train_x.shape[0]} images in {seconds:.1f} s")
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"test accuracy {accuracy:.1%} on {test_x.shape[0]} held-out images")
    print(f"saved {out / 'filters.png'}")
    return accuracy


if __name__ == "__main__":
    main()
