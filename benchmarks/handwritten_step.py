"""The small LM's training step written out by hand in NumPy: the floor of its compiled step.

compiled.py's "small" model (a minGPT-sized causal LM: token and position embeddings, two
pre-LN blocks with 2-head causal attention and an exact-GELU MLP, a final LayerNorm, a linear
head, mean cross-entropy, AdamW) as plain NumPy calls on float32 arrays: the forward keeps what
the backward needs, the backward is derived by hand, and AdamW updates one flat buffer that
every parameter and gradient is a view of. No graph, no Tensor, no per-op Python beyond the
calls themselves; products fold the batch into rows (one GEMM each), row sums go through a
product with a vector of ones, and GELU's normal CDF is tinyattn's own table
(`tinyattn.ops.special`), the cheapest exact one found. It is the limit a replay of the same
step by NumPy calls could reach; compiled.py runs it as the "numpy step" column.

`check(steps)` runs it beside tinyattn's eager step from the same weights and batches and
returns the largest relative difference of the losses (float32 rounding only).
"""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, ones: np.ndarray) -> tuple:
    """y = x_hat * w + b over the last axis (width C); returns y and (x_hat, rstd)."""
    width = x.shape[-1]
    centered = x - (x @ ones)[:, None] / width
    rstd = 1.0 / np.sqrt((centered * centered) @ ones / width + F32(1e-5))[:, None]
    centered *= rstd
    y = centered * w
    y += b
    return y, (centered, rstd)


def _layer_norm_back(dy: np.ndarray, w: np.ndarray, saved: tuple, ones: np.ndarray, out: tuple):
    """dL/dx, with dL/dw and dL/db written into `out`."""
    x_hat, rstd = saved
    width = dy.shape[-1]
    np.matmul(ones[: dy.shape[0]], dy * x_hat, out=out[0])
    np.matmul(ones[: dy.shape[0]], dy, out=out[1])
    h = dy * w
    dx = h - (h @ ones[:width])[:, None] / width
    dx -= x_hat * ((h * x_hat) @ ones[:width])[:, None] / width
    dx *= rstd
    return dx


class HandwrittenLM:
    """The step on `state` (name -> array, tinyattn's state_dict names) with AdamW's defaults
    as compiled.py sets them (lr 3e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01)."""

    def __init__(self, state: dict, cfg: dict) -> None:
        from tinyattn.ops.special import _normal_cdf  # GELU's Phi: the table, on arrays

        self.phi = lambda x: _normal_cdf(np, x)
        self.cfg = cfg
        names = list(state)
        size = sum(int(np.prod(state[n].shape)) for n in names)
        self.flat, self.grad_flat = np.empty(size, F32), np.zeros(size, F32)
        self.m, self.v = np.zeros(size, F32), np.zeros(size, F32)
        self.scratch, self.spare = np.empty(size, F32), np.empty(size, F32)
        self.p, self.g, start = {}, {}, 0
        for n in names:
            count = int(np.prod(state[n].shape))
            self.p[n] = self.flat[start : start + count].reshape(state[n].shape)
            self.g[n] = self.grad_flat[start : start + count].reshape(state[n].shape)
            self.p[n][...] = state[n]
            start += count
        rows = cfg["batch"] * cfg["T"]
        self.ones = np.ones(max(rows, cfg["d_ff"], cfg["C"]), F32)
        self.eye = np.eye(cfg["vocab"], dtype=F32)
        t = cfg["T"]
        self.mask = np.triu(np.full((t, t), -np.inf, F32), k=1)  # future keys: -inf
        self.steps = 0

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = x @ self.p[name + ".weight"].T
        y += self.p[name + ".bias"]
        return y

    def _linear_back(self, dy: np.ndarray, x: np.ndarray, name: str) -> np.ndarray:
        np.matmul(dy.T, x, out=self.g[name + ".weight"])
        np.matmul(self.ones[: dy.shape[0]], dy, out=self.g[name + ".bias"])
        return dy @ self.p[name + ".weight"]

    def step(self, idx: np.ndarray, targets: np.ndarray) -> float:
        cfg, p, ones = self.cfg, self.p, self.ones
        batch, t, width, heads = cfg["batch"], cfg["T"], cfg["C"], cfg["H"]
        d = width // heads
        rows = batch * t
        tokens = idx.reshape(-1)
        x = (p["token.weight"][tokens].reshape(batch, t, width) + p["position.weight"][:t]).reshape(
            rows, width
        )
        saved = []
        for k in range(cfg["blocks"]):
            b = f"blocks.{k}."
            h, ln1 = _layer_norm(x, p[b + "norm1.weight"], p[b + "norm1.bias"], ones[:width])
            split = [
                self._linear(h, b + f"attn.{n}_proj")
                .reshape(batch, t, heads, d)
                .transpose(0, 2, 1, 3)
                for n in "qkv"
            ]
            q, key, v = split
            scores = q @ key.transpose(0, 1, 3, 2)
            scores *= F32(1.0 / math.sqrt(d))
            scores += self.mask
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores, out=scores)
            probs /= (probs.reshape(-1, t) @ ones[:t]).reshape(batch, heads, t, 1)
            o = (probs @ v).transpose(0, 2, 1, 3).reshape(rows, width)
            x = x + self._linear(o, b + "attn.out_proj")
            h2, ln2 = _layer_norm(x, p[b + "norm2.weight"], p[b + "norm2.bias"], ones[:width])
            f = self._linear(h2, b + "linear1")
            cdf = self.phi(f)
            gelu = f * cdf
            x = x + self._linear(gelu, b + "linear2")
            saved.append((h, ln1, q, key, v, probs, o, h2, ln2, f, cdf, gelu))
        hf, lnf = _layer_norm(x, p["norm.weight"], p["norm.bias"], ones[:width])
        logits = self._linear(hf, "head")
        # cross-entropy, mean over rows: loss = mean(logsumexp - logit[target])
        shifted = logits - logits.max(axis=1, keepdims=True)
        exps = np.exp(shifted)
        total = exps @ ones[: cfg["vocab"]]
        target = targets.reshape(-1)
        loss = float(np.mean(np.log(total) - shifted[np.arange(rows), target]))

        # backward
        dlogits = exps / total[:, None]
        dlogits[np.arange(rows), target] -= 1.0
        dlogits *= F32(1.0 / rows)
        dhf = self._linear_back(dlogits, hf, "head")
        out = (self.g["norm.weight"], self.g["norm.bias"])
        dx = _layer_norm_back(dhf, p["norm.weight"], lnf, ones, out)
        scale = F32(1.0 / math.sqrt(d))
        for k in reversed(range(cfg["blocks"])):
            b = f"blocks.{k}."
            h, ln1, q, key, v, probs, o, h2, ln2, f, cdf, gelu = saved[k]
            dgelu = self._linear_back(dx, gelu, b + "linear2")
            pdf = f * f
            pdf *= F32(-0.5)
            np.exp(pdf, out=pdf)
            pdf *= F32(1.0 / math.sqrt(2.0 * math.pi))
            pdf *= f
            pdf += cdf
            dgelu *= pdf
            dh2 = self._linear_back(dgelu, h2, b + "linear1")
            out = (self.g[b + "norm2.weight"], self.g[b + "norm2.bias"])
            dx = dx + _layer_norm_back(dh2, p[b + "norm2.weight"], ln2, ones, out)
            do = self._linear_back(dx, o, b + "attn.out_proj")
            do = do.reshape(batch, t, heads, d).transpose(0, 2, 1, 3)
            dprobs = do @ v.transpose(0, 1, 3, 2)
            dv = probs.transpose(0, 1, 3, 2) @ do
            inner = ((dprobs * probs).reshape(-1, t) @ ones[:t]).reshape(batch, heads, t, 1)
            dscores = dprobs - inner
            dscores *= probs
            dscores *= scale
            dq = dscores @ key
            dk = dscores.transpose(0, 1, 3, 2) @ q
            dh = np.zeros_like(h)
            for n, grad in zip("qkv", (dq, dk, dv)):
                dh += self._linear_back(
                    grad.transpose(0, 2, 1, 3).reshape(rows, width), h, b + f"attn.{n}_proj"
                )
            out = (self.g[b + "norm1.weight"], self.g[b + "norm1.bias"])
            dx = dx + _layer_norm_back(dh, p[b + "norm1.weight"], ln1, ones, out)
        # embeddings: the token rows through a one-hot product, the positions summed over batch
        np.matmul(self.eye[tokens].T, dx, out=self.g["token.weight"])
        np.matmul(
            ones[:batch], dx.reshape(batch, t * width), out=self.g["position.weight"].reshape(-1)
        )
        self._adamw()
        return loss

    def _adamw(self, lr: float = 3e-3, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
        self.steps += 1
        param, grad, m, v, scratch, spare = (
            self.flat,
            self.grad_flat,
            self.m,
            self.v,
            self.scratch,
            self.spare,
        )
        param *= F32(1.0 - lr * 0.01)
        np.subtract(grad, m, out=scratch)
        scratch *= F32(1.0 - b1)
        m += scratch
        v *= F32(b2)
        np.multiply(grad, grad, out=scratch)
        scratch *= F32(1.0 - b2)
        v += scratch
        np.sqrt(v, out=spare)
        spare /= F32(math.sqrt(1.0 - b2**self.steps))
        spare += F32(eps)
        np.divide(m, spare, out=spare)
        spare *= F32(-lr / (1.0 - b1**self.steps))
        param += spare


def make_step(seed: int = 0, batches: int = 8) -> tuple:
    """(step, argument tuples) for compiled.py: the hand-written step from the same weights and
    batches as compiled.py's tinyattn "small" step."""
    import compiled

    _, args, model = _tinyattn_parts(compiled, seed, batches)
    lm = HandwrittenLM({k: v.numpy() for k, v in model.state_dict().items()}, compiled.SMALL)
    host = [(idx.numpy(), targets.numpy()) for idx, targets in args]
    return lm.step, host


def _tinyattn_parts(compiled, seed: int, batches: int) -> tuple:
    step, args = compiled._tinyattn_step("small", seed=seed, batches=batches)
    cells = dict(zip(step.__code__.co_freevars, step.__closure__))
    return step, args, cells["forward"].cell_contents


def check(steps: int = 12) -> float:
    """The largest relative difference between this step's losses and tinyattn's eager ones."""
    import compiled

    step, args, model = _tinyattn_parts(compiled, 0, 8)
    lm = HandwrittenLM({k: v.numpy() for k, v in model.state_dict().items()}, compiled.SMALL)
    worst = 0.0
    for k in range(steps):
        idx, targets = args[k % len(args)]
        ours = lm.step(idx.numpy(), targets.numpy())
        theirs = float(step(idx, targets).item())
        worst = max(worst, abs(ours - theirs) / abs(theirs))
    return worst
