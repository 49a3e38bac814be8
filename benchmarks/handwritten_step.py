"""compiled.py's training steps written out by hand in NumPy: the floor of their compiled steps.

compiled.py's three models, as plain NumPy calls on float32 arrays: "small" (a minGPT-sized
causal LM: token and position embeddings, two pre-LN blocks with 2-head causal attention and an
exact-GELU MLP, a final LayerNorm, a linear head, AdamW), "bench" (bench.py's step: two post-LN
blocks with non-causal attention and a ReLU MLP, no final LayerNorm, Adam) and "gpt"
(examples/gpt.py: pre-LN blocks with one fused q, k, v projection, a bias-free head, gradient
clipping and AdamW with weight decay on the Linear matrices only). One class, `HandwrittenLM`,
runs all three from a `Recipe` that says where they differ.

The forward keeps what the backward needs, the backward is derived by hand, and the optimizer
updates one flat buffer that every parameter and gradient is a view of. No graph, no Tensor, no
per-op Python beyond the calls themselves; products fold the batch into rows (one GEMM each),
row sums go through a product with a vector of ones, the attention's q, k, v gradients land
from their products in the projection's layout (no copies), and GELU's normal CDF is tinyattn's
own table (`tinyattn.ops.special`), the cheapest exact one found, run on cache-sized pieces into
preallocated temporaries. It is the limit a replay of the same step by NumPy calls could reach;
compiled.py runs it as the "hand-written NumPy step" mode.

`check(model_name)` runs it beside tinyattn's eager step from the same weights and batches and
returns the largest relative difference of the losses (float32 rounding only). Run by hand:

    OPENBLAS_NUM_THREADS=1 python benchmarks/handwritten_step.py --check

prints that difference and the median time of the hand-written step for each model.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

F32 = np.float32
MODELS = ("small", "bench", "gpt")


@dataclass(frozen=True)
class Recipe:
    """Where compiled.py's models differ: the block, the head and the optimizer.

    The optimizer is Adam's rule with decoupled weight decay on the parameters `decays` picks:
    p = p (1 - lr wd), then the Adam step (with wd 0 that is Adam itself). With `clip`, the
    gradients are first scaled by min(1, clip / (||g|| + 1e-6)), ||g|| over all of them.
    `rename` maps parts of the model's state_dict names to the names this file uses (those of
    the small model; a fused projection is "attn.qkv_proj").
    """

    norm_first: bool = True  # pre-LN x + f(LN(x)); else post-LN LN(x + f(x))
    activation: str = "gelu"  # "gelu" (exact, x Phi(x)) or "relu"
    causal: bool = True
    fused_qkv: bool = False  # one (3C, C) projection split into q, k, v
    final_norm: bool = True
    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    decay_matrices_only: bool = False  # minGPT's split: 2-D Linear weights, not embeddings
    clip: float | None = None
    rename: dict[str, str] = field(default_factory=dict)

    def decays(self, name: str, shape: tuple) -> bool:
        """Whether weight decay applies to the parameter `name` (this file's names)."""
        if not self.weight_decay:
            return False
        if not self.decay_matrices_only:
            return True
        embedding = name.startswith(("token.", "position."))
        return name.endswith(".weight") and len(shape) == 2 and not embedding


RECIPES = {
    "small": Recipe(),  # AdamW's defaults but lr, one group
    "bench": Recipe(
        norm_first=False,
        activation="relu",
        causal=False,
        final_norm=False,
        lr=1e-3,
        weight_decay=0.0,  # Adam
    ),
    "gpt": Recipe(
        fused_qkv=True,
        betas=(0.9, 0.95),
        weight_decay=0.1,
        decay_matrices_only=True,
        clip=1.0,
        rename={
            "wte": "token",
            "wpe": "position",
            "h": "blocks",
            "ln_1": "norm1",
            "ln_2": "norm2",
            "c_attn": "qkv_proj",
            "c_proj": "out_proj",
            "mlp.0": "linear1",
            "mlp.2": "linear2",
            "ln_f": "norm",
            "lm_head": "head",
        },
    ),
}


def renamed(name: str, rename: dict[str, str]) -> str:
    """`name` with each whole dotted part (or run of parts) in `rename` replaced."""
    for old, new in rename.items():
        name = re.sub(rf"(?<![^.]){re.escape(old)}(?![^.])", new, name)
    return name


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, ones: np.ndarray) -> tuple:
    """y = x_hat * w + b, x_hat = (x - mean) * rstd, rstd = 1 / sqrt(var + 1e-5), over the last
    axis (width C); returns y and (x_hat, rstd). Shapes: x (N, C) -> y (N, C)."""
    width = x.shape[-1]
    centered = x - (x @ ones)[:, None] / width
    rstd = 1.0 / np.sqrt((centered * centered) @ ones / width + F32(1e-5))[:, None]
    centered *= rstd
    y = centered * w
    y += b
    return y, (centered, rstd)


def _layer_norm_back(dy: np.ndarray, w: np.ndarray, saved: tuple, ones: np.ndarray, out: tuple):
    """dL/dx = rstd (h - mean(h) - x_hat mean(h x_hat)), h = dy * w; dL/dw = sum(dy x_hat) and
    dL/db = sum(dy) over rows are written into `out`. Since h x_hat = (dy x_hat) w, the row
    sums of h x_hat are (dy x_hat) @ w: one product with dL/dw's operand instead of a pass.
    Shapes: dy (N, C) -> (N, C)."""
    x_hat, rstd = saved
    width = dy.shape[-1]
    dy_x_hat = dy * x_hat
    np.matmul(ones[: dy.shape[0]], dy_x_hat, out=out[0])
    np.matmul(ones[: dy.shape[0]], dy, out=out[1])
    dx = dy * w
    dx -= (dx @ ones[:width])[:, None] / width
    np.multiply(x_hat, ((dy_x_hat @ w) / width)[:, None], out=dy_x_hat)
    dx -= dy_x_hat
    dx *= rstd
    return dx


class _Gelu:
    """Exact GELU, y = x Phi(x), and its backward dL/dx = g (Phi(x) + x phi(x)), on pieces of
    32,768 values into preallocated temporaries, so that each pass stays in cache. Phi is
    tinyattn's table (ops/special.py): on [k, k + 1] / 128, a cubic in the offset t, gathered
    by node and evaluated by Horner's rule, the same calls and so the same bits."""

    PIECE = 32768

    def __init__(self) -> None:
        from tinyattn.ops import special  # the table, in float32

        self.terms = [np.asarray(t, F32) for t in special._cdf_table_terms()]
        steps = special._CDF_STEPS
        self.low, self.high, self.steps = special._CDF_LOW, special._CDF_HIGH, steps
        self.u, self.node, self.gathered = (np.empty(self.PIECE, F32) for _ in range(3))
        self.index, self.narrow = np.empty(self.PIECE, np.intp), np.empty(self.PIECE, np.int32)
        self.nan = np.empty(self.PIECE, bool)

    def forward(self, x: np.ndarray) -> tuple:
        """(Phi(x), x Phi(x)), two new arrays. Shapes: x any -> (x's shape, x's shape)."""
        low, steps, (constant, linear, square, cube) = self.low, self.steps, self.terms
        cdf, act = np.empty_like(x), np.empty_like(x)
        flat, cdf_flat, act_flat = x.reshape(-1), cdf.reshape(-1), act.reshape(-1)
        for start in range(0, flat.size, self.PIECE):
            piece = slice(start, start + self.PIECE)
            xs, c = flat[piece], cdf_flat[piece]
            n = xs.size
            u, node, gathered = self.u[:n], self.node[:n], self.gathered[:n]
            index, narrow = self.index[:n], self.narrow[:n]
            # clipped (NaN to the low end, so its index is valid), then t = offset in [0, 1]
            np.clip(xs, low / steps, self.high / steps, out=u)
            np.copyto(u, low / steps, where=np.isnan(u, out=self.nan[:n]))
            u *= steps
            np.floor(u, out=node)
            u -= node
            node -= low
            narrow[...] = node  # float32 -> int32 is one vector instruction, then to intp
            index[...] = narrow
            cube.take(index, out=c, mode="wrap")
            for term in (square, linear, constant):
                c *= u
                c += term.take(index, out=gathered, mode="wrap")
            np.multiply(xs, c, out=act_flat[piece])
        return cdf, act

    def backward(self, grad: np.ndarray, x: np.ndarray, cdf: np.ndarray) -> None:
        """grad *= Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi), in place."""
        flat, cdf_flat, grad_flat = x.reshape(-1), cdf.reshape(-1), grad.reshape(-1)
        scale = F32(1.0 / math.sqrt(2.0 * math.pi))
        for start in range(0, flat.size, self.PIECE):
            piece = slice(start, start + self.PIECE)
            xs = flat[piece]
            pdf = self.u[: xs.size]
            np.multiply(xs, xs, out=pdf)
            pdf *= F32(-0.5)
            np.exp(pdf, out=pdf)
            pdf *= scale
            pdf *= xs
            pdf += cdf_flat[piece]
            grad_flat[piece] *= pdf


class HandwrittenLM:
    """The training step of one of compiled.py's models on `state` (its state_dict's arrays,
    under its own names), as `recipe` describes it; `cfg` holds the sizes (vocab, T, C, H,
    d_ff, blocks, batch)."""

    def __init__(self, state: dict, cfg: dict, recipe: Recipe) -> None:
        self.cfg, self.recipe = cfg, recipe
        state = {renamed(n, recipe.rename): a for n, a in state.items()}
        # Decoupled weight decay scales only some parameters: they go first in the flat buffer,
        # so the decay is one in-place product on its leading `decayed` elements (no mask or
        # per-element scale array as large as the buffer, no pass over the others).
        names = sorted(state, key=lambda n: not recipe.decays(n, state[n].shape))
        sizes = [int(np.prod(state[n].shape)) for n in names]
        self.decayed = sum(s for n, s in zip(names, sizes) if recipe.decays(n, state[n].shape))
        size = sum(sizes)
        self.flat, self.grad_flat = np.empty(size, F32), np.zeros(size, F32)
        self.m, self.v = np.zeros(size, F32), np.zeros(size, F32)
        self.scratch, self.spare = np.empty(size, F32), np.empty(size, F32)
        self.p, self.g, start = {}, {}, 0
        for n, count in zip(names, sizes):
            self.p[n] = self.flat[start : start + count].reshape(state[n].shape)
            self.g[n] = self.grad_flat[start : start + count].reshape(state[n].shape)
            self.p[n][...] = state[n]
            start += count
        rows = cfg["batch"] * cfg["T"]
        self.ones = np.ones(max(rows, cfg["d_ff"], cfg["C"]), F32)
        self.eye = np.eye(cfg["vocab"], dtype=F32)
        t = cfg["T"]
        self.mask = np.triu(np.full((t, t), -np.inf, F32), k=1)  # future keys: -inf
        heads, d = cfg["H"], cfg["C"] // cfg["H"]
        # dL/dq, dL/dk, dL/dv land here straight from their products, as (3, B, H, T, D) views:
        # laid out as the fused projection's output (B, T, 3, H, D), or as three (N, C) blocks
        if recipe.fused_qkv:
            self.dqkv = np.empty((cfg["batch"], t, 3, heads, d), F32)
            self.dqkv_heads = self.dqkv.transpose(2, 0, 3, 1, 4)
        else:
            self.dqkv = np.empty((3, cfg["batch"], t, heads, d), F32)
            self.dqkv_heads = self.dqkv.transpose(0, 1, 3, 2, 4)
        if recipe.activation == "gelu":
            self.gelu = _Gelu()
        else:  # np.maximum against an array of zeros runs a vector loop, against the scalar
            # 0 a slower one (about 2x on a (1024, 256) array, measured at 1 thread)
            self.zeros = np.zeros((rows, cfg["d_ff"]), F32)
            self.positive = np.empty((rows, cfg["d_ff"]), bool)
        self.steps = 0

    # ------------------------------------------------------------------------------ layers
    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        """y = x W^T + b. Shapes: x (N, in) -> (N, out)."""
        y = x @ self.p[name + ".weight"].T
        bias = self.p.get(name + ".bias")
        if bias is not None:
            y += bias
        return y

    def _linear_back(self, dy: np.ndarray, x: np.ndarray, name: str) -> np.ndarray:
        """dL/dW = dy^T x and dL/db = sum(dy) over rows into the gradients; returns dL/dx = dy W."""
        np.matmul(dy.T, x, out=self.g[name + ".weight"])
        if name + ".bias" in self.g:
            np.matmul(self.ones[: dy.shape[0]], dy, out=self.g[name + ".bias"])
        return dy @ self.p[name + ".weight"]

    def _norm(self, x: np.ndarray, name: str) -> tuple:
        return _layer_norm(
            x, self.p[name + ".weight"], self.p[name + ".bias"], self.ones[: x.shape[1]]
        )

    def _norm_back(self, dy: np.ndarray, saved: tuple, name: str) -> np.ndarray:
        out = (self.g[name + ".weight"], self.g[name + ".bias"])
        return _layer_norm_back(dy, self.p[name + ".weight"], saved, self.ones, out)

    def _heads(self, y: np.ndarray) -> np.ndarray:
        """(N, C) -> (B, H, T, D), a view."""
        cfg = self.cfg
        d = cfg["C"] // cfg["H"]
        return y.reshape(cfg["batch"], cfg["T"], cfg["H"], d).transpose(0, 2, 1, 3)

    def _attention(self, h: np.ndarray, b: str) -> tuple:
        """out_proj(softmax(q k^T / sqrt(D) + M) v), M = -inf on future keys when causal.
        Shapes: h (N, C) -> (N, C); returns it and what the backward needs."""
        cfg = self.cfg
        batch, t, heads, width = cfg["batch"], cfg["T"], cfg["H"], cfg["C"]
        rows, d = batch * t, width // heads
        if self.recipe.fused_qkv:  # (N, 3C) -> q, k, v, each (B, H, T, D)
            qkv = self._linear(h, b + "attn.qkv_proj").reshape(batch, t, 3, heads, d)
            q, key, v = qkv.transpose(2, 0, 3, 1, 4)
        else:
            q, key, v = (self._heads(self._linear(h, b + f"attn.{n}_proj")) for n in "qkv")
        scores = q @ key.transpose(0, 1, 3, 2)
        scores *= F32(1.0 / math.sqrt(d))
        if self.recipe.causal:
            scores += self.mask
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores, out=scores)
        probs /= (probs.reshape(-1, t) @ self.ones[:t]).reshape(batch, heads, t, 1)
        o = np.empty((batch, t, heads, d), F32)  # heads side by side: out_proj's input
        np.matmul(probs, v, out=o.transpose(0, 2, 1, 3))
        o = o.reshape(rows, width)
        return self._linear(o, b + "attn.out_proj"), (h, q, key, v, probs, o)

    def _attention_back(self, dy: np.ndarray, saved: tuple, b: str) -> np.ndarray:
        """dL/dh from dL/d(attention output); softmax's dL/ds = P (dP - sum(dP P)) over keys."""
        cfg = self.cfg
        batch, t, heads, width = cfg["batch"], cfg["T"], cfg["H"], cfg["C"]
        rows, d = batch * t, width // heads
        h, q, key, v, probs, o = saved
        do = self._heads(self._linear_back(dy, o, b + "attn.out_proj"))
        dprobs = do @ v.transpose(0, 1, 3, 2)
        inner = ((dprobs * probs).reshape(-1, t) @ self.ones[:t]).reshape(batch, heads, t, 1)
        dscores = dprobs - inner
        dscores *= probs
        dscores *= F32(1.0 / math.sqrt(d))
        dq, dk, dv = self.dqkv_heads
        np.matmul(dscores, key, out=dq)
        np.matmul(dscores.transpose(0, 1, 3, 2), q, out=dk)
        np.matmul(probs.transpose(0, 1, 3, 2), do, out=dv)
        if self.recipe.fused_qkv:  # one (N, 3C) gradient of the fused projection
            return self._linear_back(self.dqkv.reshape(rows, 3 * width), h, b + "attn.qkv_proj")
        grads = [
            self._linear_back(g.reshape(rows, width), h, b + f"attn.{n}_proj")
            for n, g in zip("qkv", self.dqkv)
        ]
        grads[0] += grads[1]
        grads[0] += grads[2]
        return grads[0]

    def _mlp(self, h: np.ndarray, b: str) -> tuple:
        """linear2(act(linear1(h))), act GELU x Phi(x) or ReLU max(x, 0).
        Shapes: (N, C) -> (N, C)."""
        f = self._linear(h, b + "linear1")
        if self.recipe.activation == "relu":
            np.maximum(f, self.zeros, out=f)
            return self._linear(f, b + "linear2"), (h, f, None, f)
        cdf, act = self.gelu.forward(f)
        return self._linear(act, b + "linear2"), (h, f, cdf, act)

    def _mlp_back(self, dy: np.ndarray, saved: tuple, b: str) -> np.ndarray:
        """dL/dh; GELU' = Phi(x) + x phi(x), ReLU' = [x > 0]."""
        h, f, cdf, act = saved
        dact = self._linear_back(dy, act, b + "linear2")
        if cdf is None:
            np.multiply(dact, np.greater(f, F32(0.0), out=self.positive), out=dact)
        else:
            self.gelu.backward(dact, f, cdf)
        return self._linear_back(dact, h, b + "linear1")

    # -------------------------------------------------------------------------------- step
    def _block(self, x: np.ndarray, b: str) -> tuple:
        """Pre-LN: x + attn(LN1(x)), then x + mlp(LN2(x)); post-LN: LN1(x + attn(x)), then
        LN2(x + mlp(x)). Shapes: (N, C) -> (N, C)."""
        if self.recipe.norm_first:
            h, ln1 = self._norm(x, b + "norm1")
            a, attn = self._attention(h, b)
            x = x + a
            h2, ln2 = self._norm(x, b + "norm2")
            f, mlp = self._mlp(h2, b)
            return x + f, (ln1, attn, ln2, mlp)
        a, attn = self._attention(x, b)
        x, ln1 = self._norm(x + a, b + "norm1")
        f, mlp = self._mlp(x, b)
        x, ln2 = self._norm(x + f, b + "norm2")
        return x, (ln1, attn, ln2, mlp)

    def _block_back(self, dx: np.ndarray, saved: tuple, b: str) -> np.ndarray:
        ln1, attn, ln2, mlp = saved
        if self.recipe.norm_first:
            dx = dx + self._norm_back(self._mlp_back(dx, mlp, b), ln2, b + "norm2")
            return dx + self._norm_back(self._attention_back(dx, attn, b), ln1, b + "norm1")
        dx = self._norm_back(dx, ln2, b + "norm2")
        dx = dx + self._mlp_back(dx, mlp, b)
        dx = self._norm_back(dx, ln1, b + "norm1")
        return dx + self._attention_back(dx, attn, b)

    def step(self, idx: np.ndarray, targets: np.ndarray) -> float:
        """One training step on tokens `idx` and `targets` (B, T); returns the loss (before the
        update), mean cross-entropy over the B T positions."""
        cfg, p, ones = self.cfg, self.p, self.ones
        batch, t, width = cfg["batch"], cfg["T"], cfg["C"]
        rows = batch * t
        tokens = idx.reshape(-1)
        x = (p["token.weight"][tokens].reshape(batch, t, width) + p["position.weight"][:t]).reshape(
            rows, width
        )
        saved = []
        for k in range(cfg["blocks"]):
            x, kept = self._block(x, f"blocks.{k}.")
            saved.append(kept)
        if self.recipe.final_norm:
            x, lnf = self._norm(x, "norm")
        logits = self._linear(x, "head")
        # cross-entropy, mean over rows: loss = mean(logsumexp - logit[target])
        shifted = logits - logits.max(axis=1, keepdims=True)
        exps = np.exp(shifted)
        total = exps @ ones[: cfg["vocab"]]
        target = targets.reshape(-1)
        loss = float(np.mean(np.log(total) - shifted[np.arange(rows), target]))

        # backward: dL/dlogits = (softmax - onehot(target)) / rows
        dlogits = exps / total[:, None]
        dlogits[np.arange(rows), target] -= 1.0
        dlogits *= F32(1.0 / rows)
        dx = self._linear_back(dlogits, x, "head")
        if self.recipe.final_norm:
            dx = self._norm_back(dx, lnf, "norm")
        for k in reversed(range(cfg["blocks"])):
            dx = self._block_back(dx, saved[k], f"blocks.{k}.")
        # embeddings: the token rows through a one-hot product, the positions summed over batch
        np.matmul(self.eye[tokens].T, dx, out=self.g["token.weight"])
        np.matmul(
            ones[:batch],
            dx.reshape(batch, t * width),
            out=self.g["position.weight"][:t].reshape(-1),
        )
        if self.recipe.clip is not None:
            self._clip(self.recipe.clip)
        self._adam()
        return loss

    def _clip(self, max_norm: float) -> None:
        """g = g * min(1, max_norm / (||g|| + 1e-6)), ||g|| the L2 norm of all gradients."""
        norm = np.sqrt(self.grad_flat @ self.grad_flat)
        scale = F32(max_norm) / (norm + F32(1e-6))
        if scale < 1.0:
            self.grad_flat *= scale

    def _adam(self) -> None:
        """p = p (1 - lr wd) on the decayed parameters; m = m + (1 - b1) (g - m);
        v = b2 v + (1 - b2) g^2; p = p - lr / (1 - b1^t) m / (sqrt(v) / sqrt(1 - b2^t) + eps):
        tinyattn's flat Adam, operation for operation."""
        recipe = self.recipe
        lr, (b1, b2), eps = recipe.lr, recipe.betas, recipe.eps
        self.steps += 1
        param, grad, m, v, scratch, spare = (
            self.flat,
            self.grad_flat,
            self.m,
            self.v,
            self.scratch,
            self.spare,
        )
        if self.decayed:
            param[: self.decayed] *= F32(1.0 - lr * recipe.weight_decay)
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


# ---------------------------------------------------------------------- beside compiled.py
def _tinyattn_parts(model_name: str, seed: int, batches: int) -> tuple:
    """compiled.py's tinyattn eager step of the model, its batches and the model itself."""
    import compiled

    step, args = compiled._tinyattn_step(model_name, seed=seed, batches=batches)
    cells = dict(zip(step.__code__.co_freevars, step.__closure__))
    model = cells["model" if model_name == "gpt" else "forward"].cell_contents
    return step, args, model


def _sizes(model_name: str) -> dict:
    import compiled

    if model_name == "bench":
        return compiled._bench(allow_torch=False).STEP
    return {"small": compiled.SMALL, "gpt": compiled.GPT}[model_name]


def _handwritten(model_name: str, model) -> HandwrittenLM:
    state = {k: v.numpy() for k, v in model.state_dict().items()}
    return HandwrittenLM(state, _sizes(model_name), RECIPES[model_name])


def make_step(model_name: str = "small", seed: int = 0, batches: int = 8) -> tuple:
    """(step, argument tuples) for compiled.py: the hand-written step from the same weights and
    batches as compiled.py's tinyattn step of `model_name`."""
    _, args, model = _tinyattn_parts(model_name, seed, batches)
    lm = _handwritten(model_name, model)
    host = [(idx.numpy(), targets.numpy()) for idx, targets in args]
    return lm.step, host


def check(model_name: str = "small", steps: int = 12) -> float:
    """The largest relative difference between this step's losses and tinyattn's eager ones,
    over `steps` steps from the same weights, on the same batches."""
    step, args, model = _tinyattn_parts(model_name, 0, 8)
    lm = _handwritten(model_name, model)  # before tinyattn's first step changes the weights
    worst = 0.0
    for k in range(steps):
        idx, targets = args[k % len(args)]
        ours = lm.step(idx.numpy(), targets.numpy())
        theirs = float(step(idx, targets).item())
        worst = max(worst, abs(ours - theirs) / abs(theirs))
    return worst


def median_ms(model_name: str, repeats: int = 30, warmup: int = 5) -> float:
    """The median wall time of the hand-written step, in ms, after `warmup` untimed steps."""
    step, args = make_step(model_name)
    for k in range(warmup):
        step(*args[k % len(args)])
    times = []
    for k in range(repeats):
        start = time.perf_counter()
        step(*args[k % len(args)])
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="losses beside tinyattn's, timings")
    parser.add_argument("models", nargs="*", default=MODELS, help=f"any of {', '.join(MODELS)}")
    args = parser.parse_args()
    if not args.check:
        parser.print_help()
        return
    from common import blas_info

    threads = ", ".join(f"{b['internal_api']} {b['num_threads']} thread(s)" for b in blas_info())
    print(f"BLAS: {threads or 'threadpoolctl not installed'}")
    for model_name in args.models:
        worst = check(model_name)
        ms = median_ms(model_name)
        print(
            f"{model_name}: loss vs tinyattn eager, 12 steps: {worst:.3g} relative; "
            f"hand-written step {ms:.2f} ms (median of 30)"
        )


if __name__ == "__main__":
    main()
