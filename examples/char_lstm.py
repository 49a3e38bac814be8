"""A character-level LSTM language model: it reads text one character at a time and learns to
predict the next one, then writes new text of its own.

The text is generated here, from a small grammar of English sentences ("The old man paints a
red hat by the river."), so nothing is downloaded. A model that ignores context can do no
better than the text's character frequencies (the unigram baseline, printed); the LSTM carries
a state (h, c) from character to character and gets far below it: it learns the spelling of
every word, and which words may follow which.

    python examples/char_lstm.py             # about 17 s on a 2-core CPU
    python examples/char_lstm.py --compile   # the same losses, training about 3x faster
    python examples/char_lstm.py --help

Read top to bottom: data, model, training, evaluation, sampling. The command line, the progress
bar, the report and the loss plot (to --out) live in char_lstm_extras.py.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# Small matrices: BLAS threads cost more than they save on a busy machine. Set before NumPy
# loads; an explicit setting in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the helpers sit beside this file

import char_lstm_extras as extras
import numpy as np

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim


@dataclass
class Config:
    """Everything a run depends on; the defaults run in about 17 s on a 2-core CPU."""

    sentences: int = 2000  # sentences of generated text (about 76,000 characters)
    seq_len: int = 32  # characters per training window (how far back gradients reach)
    batch: int = 32
    embed: int = 16
    hidden: int = 64
    layers: int = 1
    steps: int = 300
    lr: float = 1e-2
    seed: int = 0
    device: str = "cpu"
    sample_len: int = 300  # characters written at the end
    temperature: float = 0.8  # below 1: a sharper, more conservative sample
    compile: bool = False  # train through ta.compile (the same losses, faster)


# ------------------------------------------------------------------------------------------- data
SUBJECTS = ["the cat", "a dog", "the old man", "my sister", "the bird", "a child", "our teacher"]
VERBS = ["sees", "likes", "finds", "chases", "paints", "keeps", "carries"]
OBJECTS = ["the ball", "a red hat", "the moon", "an apple", "the small boat", "a green door"]
PLACES = ["in the garden", "by the river", "at night", "on the hill", "every morning", ""]


def make_text(sentences: int, seed: int) -> str:
    """`sentences` random sentences of the grammar subject verb object [place], capitalised and
    ended by a full stop, four to a line."""
    rng, lines = np.random.default_rng(seed), []
    for start in range(0, sentences, 4):
        line = []
        for _ in range(min(4, sentences - start)):
            words = [rng.choice(words) for words in (SUBJECTS, VERBS, OBJECTS, PLACES)]
            sentence = " ".join(word for word in words if word)
            line.append(sentence[0].upper() + sentence[1:] + ".")
        lines.append(" ".join(line))
    return "\n".join(lines) + "\n"


class Vocabulary:
    """The characters of a text, each with an integer id (sorted, so runs agree)."""

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.ids = {char: i for i, char in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        return np.array([self.ids[char] for char in text], dtype=np.int64)

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i] for i in ids)


def unigram_baseline(ids: np.ndarray, vocab: int) -> float:
    """The cross-entropy (nats per character) of always predicting the text's character
    frequencies: H = -sum_c p(c) log p(c), the best a model blind to context can score."""
    p = np.bincount(ids, minlength=vocab) / len(ids)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def grammar_floor(text: str, sentences: int) -> float:
    """The text's own entropy (nats per character): each sentence is one uniform choice among
    all subject-verb-object-place combinations and everything else (capitals, spaces, stops)
    follows from it, so no model can score below log(combinations) * sentences / characters."""
    combinations = len(SUBJECTS) * len(VERBS) * len(OBJECTS) * len(PLACES)
    return math.log(combinations) * sentences / len(text)


def make_batch(
    ids: np.ndarray, batch: int, seq_len: int, rng: np.random.Generator, device: str = "cpu"
) -> tuple[ta.Tensor, ta.Tensor]:
    """`batch` random windows of the text: inputs (B, T) and targets (B, T), the same characters
    shifted by one, so position t predicts character t + 1."""
    starts = rng.integers(0, len(ids) - seq_len - 1, size=batch)
    windows = np.stack([ids[s : s + seq_len + 1] for s in starts])  # (B, T + 1)
    inputs = ta.tensor(windows[:, :-1], device=device)
    return inputs, ta.tensor(windows[:, 1:], device=device)


# ------------------------------------------------------------------------------------------ model
class CharLSTM(nn.Module):
    """Embedding -> LSTM -> Linear. Shapes: tokens (B, T) integer, state (h, c) each
    (layers, B, H) or None -> logits (B, T, V), the new state."""

    def __init__(self, vocab: int, config: Config) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, config.embed)
        self.lstm = nn.LSTM(config.embed, config.hidden, config.layers, batch_first=True)
        self.head = nn.Linear(config.hidden, vocab)

    def forward(self, tokens: ta.Tensor, state: tuple | None = None) -> tuple[ta.Tensor, tuple]:
        x = self.embed(tokens)  # (B, T) -> (B, T, E)
        x, state = self.lstm(x, state)  # (B, T, E) -> (B, T, H); state: what it remembers
        return self.head(x), state  # (B, T, H) -> (B, T, V)


# --------------------------------------------------------------------------------------- training
def train(model: CharLSTM, ids: np.ndarray, config: Config, quiet: bool = False) -> extras.History:
    """Adam on random windows; records every step's loss (nats per character)."""
    optimizer = optim.Adam(model.parameters(), lr=config.lr)

    def step(inputs: ta.Tensor, targets: ta.Tensor) -> ta.Tensor:
        logits, _ = model(inputs)  # each window starts from a zero state
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()  # back through every time step of the window
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # an LSTM's gradients can spike
        optimizer.step()
        return loss

    if config.compile:  # record the step's array operations once, then replay them: same numbers
        step = ta.compile(step)
    rng, history = np.random.default_rng((config.seed, 0)), extras.History()
    bar, start = extras.Progress(config.steps, quiet), time.perf_counter()
    for _ in range(config.steps):
        inputs, targets = make_batch(ids, config.batch, config.seq_len, rng, config.device)
        history.losses.append(step(inputs, targets).item())
        bar.update(history.losses[-1])
    bar.close()
    history.seconds = time.perf_counter() - start
    return history


# ------------------------------------------------------------------------------------- evaluation
def evaluate(model: CharLSTM, ids: np.ndarray, config: Config, rows: int = 16) -> float:
    """Mean loss (nats per character) over held-out text: cut into `rows` equal pieces read side
    by side as one batch, in chunks of seq_len characters, the state carried from chunk to chunk
    (so each piece is read as one long sequence)."""
    length = (len(ids) - 1) // rows
    pieces = np.stack([ids[r * length : (r + 1) * length + 1] for r in range(rows)])  # (R, L+1)
    model.eval()
    total, state = 0.0, None
    with ta.no_grad():
        for start in range(0, length, config.seq_len):
            chunk = pieces[:, start : start + config.seq_len + 1]  # (R, T + 1)
            logits, state = model(ta.tensor(chunk[:, :-1], device=config.device), state)
            targets = ta.tensor(chunk[:, 1:].reshape(-1), device=config.device)  # (R * T,)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, reduction="sum")
            total += loss.item()
    model.train()
    return total / (rows * length)


# --------------------------------------------------------------------------------------- sampling
def sample(model: CharLSTM, vocab: Vocabulary, config: Config, prompt: str = "The") -> str:
    """Write config.sample_len characters after `prompt`, one at a time: feed the last character
    and the state, draw the next from softmax(logits / temperature)."""
    rng, model_was_training = np.random.default_rng((config.seed, 1)), model.training
    model.eval()
    ids, state = list(vocab.encode(prompt)), None
    inputs = ta.tensor([ids], device=config.device)  # (1, len(prompt)): read the prompt at once
    with ta.no_grad():
        for _ in range(config.sample_len):
            logits, state = model(inputs, state)  # state (h, c): all the model keeps of the past
            probs = F.softmax(logits[0, -1] / config.temperature, dim=-1).numpy().astype(float)
            ids.append(int(rng.choice(len(vocab), p=probs / probs.sum())))
            inputs = ta.tensor([[ids[-1]]], device=config.device)  # (1, 1): only the new one
    model.train(model_was_training)
    return vocab.decode(ids)


# ------------------------------------------------------------------------------------ the script
def main(argv: list[str] | None = None) -> int:
    config, args = extras.parse_args(argv, Config())
    text = make_text(config.sentences, config.seed)
    vocab = Vocabulary(text)
    ids = vocab.encode(text)
    split = int(0.9 * len(ids))  # the last tenth is held out
    ta.manual_seed(config.seed)  # host RNG: the same initial weights on every device
    model = CharLSTM(len(vocab), config).to(config.device)
    history = train(model, ids[:split], config, quiet=args.quiet)
    held_out = evaluate(model, ids[split:], config)
    baseline = unigram_baseline(ids[:split], len(vocab))
    floor = grammar_floor(text, config.sentences)
    lines = extras.report(config, len(text), len(vocab), history, held_out, baseline, floor)
    lines += ["sample:", sample(model, vocab, config)]
    lines += extras.save_outputs(args.out, history, baseline, floor)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
