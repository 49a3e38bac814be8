"""A character-level GPT in minGPT's shape, trained on tinyattn's own documentation.

The model is what minGPT builds: token and position embeddings, pre-LayerNorm Transformer blocks
with causal self-attention and a GELU MLP, a final LayerNorm and a linear head over the
characters. It trains with AdamW (no weight decay on biases, LayerNorms and embeddings), gradient
clipping and a warm-up schedule, then writes text greedily and by top-k sampling, keeping each
layer's keys and values (a KV cache) so that every new character runs through the model alone:

    python examples/gpt.py                  # 500 steps, under a minute on 2 CPU cores
    python examples/gpt.py --steps 3000     # longer: the samples start to look like the docs
    python examples/gpt.py --device cuda    # on an NVIDIA GPU (tinyattn needs CuPy for it)

It prints samples before and after training, its speed in steps/s, and saves a loss plot to
runs/gpt/loss.png (when matplotlib is installed). Written with PyTorch's names throughout: with
its three tinyattn import lines swapped for PyTorch's, the same file runs under PyTorch.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

# Small matrices: BLAS threads cost more than they save (several times fewer steps per second on
# a busy 2-core machine). Set before NumPy loads; an explicit setting in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import tinyattn as torch
import tinyattn.nn as nn
import tinyattn.nn.functional as F

DOCS = Path(__file__).resolve().parent.parent / "docs"


class KVCache:
    """One layer's keys and values of the positions seen so far, for generation.

    The buffers have a fixed size (B, H, L, D) and are written in place. A new position p is
    written by selecting row p, and attends to keys 0..p through a mask row looked up in a table:
    the per-token step does the same work with the same shapes for every token, which is what
    lets ta.compile record it once and replay it (concatenating would grow the shapes).
    """

    def __init__(self, B: int, n_head: int, max_len: int, head_dim: int, dtype, device=None):
        self.k = torch.zeros(B, n_head, max_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros(B, n_head, max_len, head_dim, dtype=dtype, device=device)
        keys = torch.arange(max_len, device=device)
        self.row_at = keys.view(-1, 1) == keys  # (L, L): row p is True at key p only
        self.keys_upto = keys.view(-1, 1) >= keys  # (L, L): row p is True at keys 0..p

    def prefill(self, k, v):
        """Write the prompt's k, v (B, H, T, D) at positions 0..T-1; return its (T, L) mask."""
        T = k.size(2)
        self.k[:, :, :T] = k
        self.v[:, :, :T] = v
        return self.keys_upto[:T]

    def update(self, k, v, pos):
        """Write one position's k, v (B, H, 1, D) at pos (1,); return its (1, L) mask."""
        at = self.row_at[pos].view(1, 1, -1, 1)  # (1, 1, L, 1): True at row pos only
        self.k.copy_(torch.where(at, k, self.k))  # (B, H, L, D)
        self.v.copy_(torch.where(at, v, self.v))
        return self.keys_upto[pos]  # (1, L)


class CausalSelfAttention(nn.Module):
    """Multi-head attention where position t sees positions <= t (one fused q, k, v projection)."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head = n_head

    def forward(self, x, cache=None, pos=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        else:  # the new positions attend to the cached ones and to themselves
            allowed = cache.prefill(k, v) if pos is None else cache.update(k, v, pos)  # (T, L)
            y = F.scaled_dot_product_attention(q, cache.k, cache.v, attn_mask=allowed)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)


class Block(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x, cache=None, pos=None):
        x = x + self.attn(self.ln_1(x), cache, pos)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, n_layer=2, n_head=4, n_embd=64) -> None:
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.apply(self._init_weights)
        self._decoders = {}  # (B, L, dtype, compiled) or compiled -> generation steps

    @staticmethod
    def _init_weights(module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None, caches=None, pos=None):
        """When generating: caches, one KVCache per block, and pos (1,), the position of a
        single new token in idx (B, 1); without pos, idx is a prompt at positions 0..T-1."""
        B, T = idx.size()
        positions = torch.arange(T, device=idx.device) if pos is None else pos  # (T,)
        x = self.wte(idx) + self.wpe(positions.unsqueeze(0))  # (B, T, C)
        for i, block in enumerate(self.h):
            x = block(x, None if caches is None else caches[i], pos)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, top_k=None, kv_cache=True, compiled=False):
        """Greedy when top_k is None, else sample among the k most likely characters.

        With kv_cache, each new character runs through the model alone, attending to the keys
        and values kept from the earlier positions; without, the whole sequence runs again for
        every character (minGPT's way). compiled records the per-token step once and replays it
        (ta.compile). Sampling stays outside the step: the step returns logits.
        """
        next_logits = self._full_prefix
        if kv_cache:
            next_logits = self._decoder(idx.size(0), idx.size(1), max_new_tokens, compiled)
        for _ in range(max_new_tokens):
            logits = next_logits(idx)  # (B, V): the next character
            if top_k is None:
                idx_next = logits.argmax(dim=-1, keepdim=True)
            else:
                v, _ = torch.topk(logits, top_k)
                logits = logits.masked_fill(logits < v[:, [-1]], float("-inf"))
                idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx

    def _full_prefix(self, idx):
        return self._last_logits(idx[:, -self.block_size :])

    def _last_logits(self, idx):
        logits, _ = self(idx)
        return logits[:, -1, :]

    def _decoder(self, B: int, T: int, max_new_tokens: int, compiled: bool):
        """next_logits(idx) that runs only the positions the caches do not hold yet."""
        L = min(self.block_size, T + max_new_tokens)  # the longest sequence the caches see
        step, per_token = self._steps(B, L, compiled)
        window = self._window(compiled)

        def next_logits(idx):
            n = idx.size(1)
            if n > L:  # past the block, the window slides and every position moves: the
                # whole window runs again, always block_size long (so a compiled one replays)
                return window(idx[:, -self.block_size :])
            if n == T:  # the prompt, all at once
                return step(idx)
            return per_token(idx[:, -1:], torch.tensor([n - 1], device=idx.device))  # newest

        return next_logits

    def _window(self, compiled: bool):
        """The last position's logits of a full window, compiled once when asked (its input is
        always (B, block_size) once the window slides, so the recording is replayed)."""
        if compiled not in self._decoders:
            self._decoders[compiled] = (
                torch.compile(self._last_logits) if compiled else self._last_logits
            )
        return self._decoders[compiled]

    def _steps(self, B: int, L: int, compiled: bool):
        """The (prompt, per-token) steps over caches of L positions, kept for later calls with
        the same sizes: a compiled step records once. Stale rows need no clearing, as a
        position never attends to keys after it."""
        key = (B, L, self.wte.weight.dtype, compiled)
        if key not in self._decoders:
            n_head, C = self.h[0].attn.n_head, self.wte.weight.size(1)
            weight = self.wte.weight
            caches = [KVCache(B, n_head, L, C // n_head, key[2], weight.device) for _ in self.h]

            def step(idx, pos=None):  # a prompt (B, T), or one token (B, 1) at pos -> (B, V)
                logits, _ = self(idx, caches=caches, pos=pos)
                return logits[:, -1, :]

            fast = torch.compile(step) if compiled else step  # one tape per input shape
            self._decoders[key] = fast, fast
        return self._decoders[key]


def optimizer_for(model: GPT, lr: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices of Linear layers only (minGPT's split)."""
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() == 2]
    decay = [p for p in decay if all(p is not e.weight for e in (model.wte, model.wpe))]
    others = [p for p in model.parameters() if all(p is not d for d in decay)]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": others, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def _positive(kind: type) -> Callable[[str], int | float]:
    """An argparse type: a number of `kind` above 0, or a message naming what was given."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="After training it prints a greedy and a top-5 sample continuing 'The engine '. "
        "It trains on the docs as they are, so its losses and samples change whenever a page "
        "does: after the default 500 steps the samples are word-shaped, not yet text; with "
        "--steps 3000 (six times the training time) they are the docs' words in loose order.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add = parser.add_argument
    add("--steps", type=_positive(int), default=500, help="training steps")
    add("--batch-size", type=_positive(int), default=32, help="sequences per step")
    add(
        "--block-size",
        type=_positive(int),
        default=32,
        help="characters per sequence: the longest context",
    )
    add(
        "--lr",
        type=_positive(float),
        default=3e-3,
        help="AdamW learning rate, scaled by a linear warm-up over the first tenth of the steps "
        "and a cosine decay to 0",
    )
    add("--seed", type=int, default=0, help="seed for the weights, the batches and the sampling")
    add("--out", default="runs/gpt", help="folder for the loss plot (loss.png)")
    add("--quiet", action="store_true", help="no progress bar")
    add(
        "--device",
        default="cpu",
        help="where the model and the data live: cpu, or cuda (an NVIDIA GPU; tinyattn runs "
        "there on CuPy)",
    )
    add(
        "--eager",
        action="store_true",
        help="run every training step through the graph instead of compiling it (ta.compile)",
    )
    return parser


def main() -> None:
    parser = _parser()
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: no usable GPU here (tinyattn needs CuPy for one)")

    torch.manual_seed(args.seed)
    text = "\n".join(p.read_text() for p in sorted(DOCS.glob("*.md")))
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], device=device)
    decode = lambda ids: "".join(chars[i] for i in ids)  # noqa: E731
    model = GPT(len(chars), args.block_size).to(device)
    optimizer = optimizer_for(model, args.lr)
    warmup = max(1, args.steps // 10)
    cosine = lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * s / args.steps))  # noqa: E731
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{len(text):,} characters, vocabulary {len(chars)}, {n_params:,} parameters")

    prompt = torch.tensor([[stoi[c] for c in "The engine "]], device=device)
    model.eval()
    print("before training:", repr(decode(model.generate(prompt, 60)[0].tolist())))

    offsets = torch.arange(args.block_size + 1, device=device)  # (T + 1,)
    steps = range(args.steps)
    try:
        from tqdm import tqdm

        steps = steps if args.quiet else tqdm(steps, desc="training", unit="step")
    except ImportError:
        pass

    def train_step(x, y):
        _, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        return loss

    # ta.compile records the step's array work on its first two calls, then replays it without
    # building a graph (docs/performance.md); --eager runs every step through the graph.
    step = train_step if args.eager else torch.compile(train_step)
    model.train()
    losses, start = [], time.perf_counter()
    for _ in steps:
        starts = torch.randint(
            0, len(data) - args.block_size - 1, (args.batch_size, 1), device=device
        )
        chunk = data[starts + offsets]  # (B, T + 1)
        losses.append(step(chunk[:, :-1], chunk[:, 1:]).item())
    elapsed = time.perf_counter() - start
    print(
        f"loss {losses[0]:.2f} -> {sum(losses[-20:]) / len(losses[-20:]):.2f}; "
        f"{args.steps / elapsed:.0f} steps/s"
    )

    model.eval()
    print("greedy:", repr(decode(model.generate(prompt, 80, compiled=not args.eager)[0].tolist())))
    print("top-5: ", repr(decode(model.generate(prompt, 80, top_k=5)[0].tolist())))
    _plot(losses, Path(args.out))


def _plot(losses: list[float], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no loss plot")
        return
    out.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot(losses, linewidth=0.8)
    axes.set(xlabel="step", ylabel="cross-entropy (nats/char)", title="char-level GPT")
    figure.tight_layout()
    figure.savefig(out / "loss.png", dpi=100)
    print(f"loss plot: {out / 'loss.png'}")


if __name__ == "__main__":
    main()
