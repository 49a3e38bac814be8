"""Parity with PyTorch in float64: forward values and gradients agree to 1e-9 (most to ~1e-14).

Skipped cleanly when torch is not importable. Weights are copied from tinyattn into torch
(PyTorch's layouts, so state dicts map one to one; MultiheadAttention packs q/k/v into
in_proj_weight). Mask polarity differs between torch APIs: F.scaled_dot_product_attention's bool
mask is True = may attend (as tinyattn's), nn.MultiheadAttention's attn_mask is True = blocked.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tinyattn as ta  # noqa: E402  (after the skip)
import tinyattn.nn.functional as F  # noqa: E402
from tinyattn import nn, optim  # noqa: E402

TF = torch.nn.functional
TOL = {"rtol": 1e-9, "atol": 1e-10}
RNG = np.random.default_rng(2024)


def pair(device, *shape, grad=True):
    """The same float64 values as a tinyattn tensor on `device` and as a torch tensor."""
    values = RNG.standard_normal(shape)
    ours = ta.tensor(values, dtype="float64", device=device)
    theirs = torch.tensor(values, dtype=torch.float64)
    if grad:
        ours.requires_grad_()
        theirs.requires_grad_()
    return ours, theirs


def backward_both(ours, theirs):
    cotangent = RNG.standard_normal(tuple(theirs.shape))
    (ours * ta.tensor(cotangent, dtype="float64", device=ours.device)).sum().backward()
    (theirs * torch.tensor(cotangent)).sum().backward()


def close(ours, theirs, what=""):
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), **TOL, err_msg=what)


def copy_into_torch(module, torch_module, mapping=None):
    """Copy tinyattn parameters into a torch module by (possibly renamed) state-dict keys."""
    state = {}
    for name, param in module.named_parameters():
        state[(mapping or {}).get(name, name)] = torch.tensor(param.detach().numpy())
    torch_module.load_state_dict(state, strict=True)


# ------------------------------------------------------------------------------- functional
def test_softmax_log_softmax_gelu(device):
    for ours_fn, theirs_fn in [
        (lambda t: F.softmax(t, dim=-1), lambda t: torch.softmax(t, -1)),
        (lambda t: F.log_softmax(t, dim=-1), lambda t: torch.log_softmax(t, -1)),
        (F.gelu, TF.gelu),
        (lambda t: F.gelu(t, approximate="tanh"), lambda t: TF.gelu(t, approximate="tanh")),
    ]:
        x, tx = pair(device, 3, 7)
        y, ty = ours_fn(x * 3.0), theirs_fn(tx * 3.0)
        close(y, ty)
        backward_both(y, ty)
        close(x.grad, tx.grad)


def test_erf_gelu_exact_to_machine_precision(device):
    """Cody's erf makes exact GELU agree with torch far below the 1e-9 parity tolerance."""
    values = np.linspace(-8, 8, 801)
    ours = F.gelu(ta.tensor(values, dtype="float64", device=device)).numpy()
    theirs = TF.gelu(torch.tensor(values)).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-14, atol=1e-15)


def test_linear_and_layer_norm(device):
    ta.manual_seed(0)
    linear = nn.Linear(4, 3).to("float64").to(device)
    torch_linear = torch.nn.Linear(4, 3, dtype=torch.float64)
    copy_into_torch(linear, torch_linear)
    norm = nn.LayerNorm(3).to("float64").to(device)
    with ta.no_grad():
        norm.weight.array = (norm.weight * 1.5 + 0.1).array
    torch_norm = torch.nn.LayerNorm(3, dtype=torch.float64)
    copy_into_torch(norm, torch_norm)
    x, tx = pair(device, 2, 5, 4)
    y, ty = norm(linear(x)), torch_norm(torch_linear(tx))
    close(y, ty)
    backward_both(y, ty)
    close(x.grad, tx.grad)
    for (name, p), tp in zip(
        [*linear.named_parameters(), *norm.named_parameters()],
        [*torch_linear.parameters(), *torch_norm.parameters()],
        strict=True,
    ):
        close(p.grad, tp.grad, name)


def test_embedding_gradient_with_repeats(device):
    ta.manual_seed(0)
    embedding = nn.Embedding(6, 3).to("float64").to(device)
    torch_embedding = torch.nn.Embedding(6, 3, dtype=torch.float64)
    copy_into_torch(embedding, torch_embedding)
    indices = np.array([[1, 1, 5], [0, 1, 5]])
    y = embedding(ta.tensor(indices, device=device))
    ty = torch_embedding(torch.tensor(indices))
    close(y, ty)
    backward_both(y, ty)
    close(embedding.weight.grad, torch_embedding.weight.grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.15])
def test_cross_entropy(device, reduction, smoothing):
    logits, torch_logits = pair(device, 2, 4, 5)  # (B, T, C): torch wants classes on axis 1
    targets = np.array([[0, 4, -100, 2], [-100, 1, 1, 3]])
    loss = F.cross_entropy(  # the same call on both sides: classes on axis 1
        logits.permute(0, 2, 1),
        ta.tensor(targets, device=device),
        ignore_index=-100,
        label_smoothing=smoothing,
        reduction=reduction,
    )
    torch_loss = TF.cross_entropy(
        torch_logits.permute(0, 2, 1),
        torch.tensor(targets),
        ignore_index=-100,
        label_smoothing=smoothing,
        reduction=reduction,
    )
    close(loss, torch_loss)
    backward_both(loss, torch_loss)
    close(logits.grad, torch_logits.grad)


@pytest.mark.parametrize("recorded", [False, True], ids=["under no_grad", "in the graph"])
def test_cross_entropy_after_its_logits_change_in_place(device, recorded):
    """Logits written in place after the loss: PyTorch's log-softmax rule reads its output, so
    the gradient and, under create_graph, the gradient of the gradient are those of the values
    and the history the loss saw. tinyattn's one-node cross-entropy agrees."""
    logits, torch_logits = pair(device, 4, 3)
    targets = [0, 2, 1, 1]
    results = []
    for lib, fn, x, t in (
        (ta, F, logits, ta.tensor(targets, device=device)),
        (torch, TF, torch_logits, torch.tensor(targets)),
    ):
        h = x * 1.0
        loss = fn.cross_entropy(h, t, label_smoothing=0.1)
        with lib.set_grad_enabled(recorded):
            h.mul_(5.0)
        (g,) = lib.autograd.grad(loss, [x], create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), [x])
        results.append((g, gg))
    (g, gg), (torch_g, torch_gg) = results
    close(g, torch_g)
    close(gg, torch_gg)


@pytest.mark.parametrize("through", ["sum", "add then sum", "expand then sum"])
def test_a_broadcast_gradient_reaching_a_leaf(device, through):
    """A sum's gradient is a broadcast view. In .grad both libraries hand the leaf writable
    memory of its own (an in-place zero_ and mul_ work); grad() hands back the view itself,
    and an in-place write into it is a RuntimeError in both."""
    losses = {
        "sum": lambda w: w.sum(),
        "add then sum": lambda w: (w + 1.0).sum(),
        "expand then sum": lambda w: w.expand(4, 2, 3).sum(),
    }
    ours, theirs = pair(device, 2, 3)
    for w in (ours, theirs):
        losses[through](w).backward()
        w.grad.mul_(2.0)
    close(ours.grad, theirs.grad)
    ours.grad.zero_()
    theirs.grad.zero_()
    np.testing.assert_array_equal(ours.grad.numpy(), 0.0)
    if through != "sum":
        return  # (PyTorch's grad() of the other graphs need not be a view)
    ours_view = ta.autograd.grad(losses[through](ours), [ours])[0]
    theirs_view = torch.autograd.grad(losses[through](theirs), [theirs])[0]
    assert 0 in theirs_view.stride()
    close(ours_view, theirs_view)
    with pytest.raises(RuntimeError):
        theirs_view.mul_(2.0)
    with pytest.raises(RuntimeError):
        ours_view.mul_(2.0)


@pytest.mark.parametrize("case", ["plain", "bool-mask", "causal", "causal-cross"])
def test_scaled_dot_product_attention(device, case):
    tk = 7 if case == "causal-cross" else 5
    (q, tq_), (k, tk_), (v, tv_) = (
        pair(device, 2, 3, 5, 4),
        pair(device, 2, 3, tk, 4),
        pair(device, 2, 3, tk, 6),
    )
    mask = None
    if case == "bool-mask":
        mask = RNG.random((2, 1, 5, tk)) > 0.4
        mask[..., 0] = True  # torch gives NaN for fully masked rows; tinyattn gives 0
    causal = case.startswith("causal")
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=None if mask is None else ta.tensor(mask, device=device),
        is_causal=causal,
    )
    torch_out = TF.scaled_dot_product_attention(
        tq_, tk_, tv_, attn_mask=None if mask is None else torch.tensor(mask), is_causal=causal
    )
    close(out, torch_out)
    backward_both(out, torch_out)
    for ours, theirs in ((q, tq_), (k, tk_), (v, tv_)):
        close(ours.grad, theirs.grad)


# ---------------------------------------------------------------------------------- modules
def mha_pair(device, d_model=6, heads=3):
    ta.manual_seed(3)
    attn = nn.MultiHeadAttention(d_model, heads).to("float64").to(device)
    torch_attn = torch.nn.MultiheadAttention(d_model, heads, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        w = {name: torch.tensor(p.detach().numpy()) for name, p in attn.named_parameters()}
        torch_attn.in_proj_weight.copy_(
            torch.cat([w["q_proj.weight"], w["k_proj.weight"], w["v_proj.weight"]])
        )
        torch_attn.in_proj_bias.copy_(
            torch.cat([w["q_proj.bias"], w["k_proj.bias"], w["v_proj.bias"]])
        )
        torch_attn.out_proj.weight.copy_(w["out_proj.weight"])
        torch_attn.out_proj.bias.copy_(w["out_proj.bias"])
    return attn, torch_attn


def check_mha_grads(attn, torch_attn):
    stacked = ta.concat([attn.q_proj.weight.grad, attn.k_proj.weight.grad, attn.v_proj.weight.grad])
    close(stacked, torch_attn.in_proj_weight.grad, "in_proj_weight")
    stacked = ta.concat([attn.q_proj.bias.grad, attn.k_proj.bias.grad, attn.v_proj.bias.grad])
    close(stacked, torch_attn.in_proj_bias.grad, "in_proj_bias")
    close(attn.out_proj.weight.grad, torch_attn.out_proj.weight.grad, "out_proj.weight")
    close(attn.out_proj.bias.grad, torch_attn.out_proj.bias.grad, "out_proj.bias")


@pytest.mark.parametrize("case", ["self", "mask", "causal", "cross"])
def test_multihead_attention(device, case):
    attn, torch_attn = mha_pair(device)
    x, tx = pair(device, 2, 4, 6)
    memory, torch_memory = pair(device, 2, 5, 6)
    allowed = None
    if case == "mask":
        allowed = RNG.random((4, 4)) > 0.3
        allowed[:, 1] = True
    if case == "causal":
        allowed = np.tril(np.ones((4, 4), bool))
    key, torch_key = (memory, torch_memory) if case == "cross" else (x, tx)
    out, weights = attn(
        x,
        key,
        key,
        mask=None if allowed is None else ta.tensor(allowed, device=device),
        need_weights=True,
    )
    torch_out, torch_weights = torch_attn(
        tx,
        torch_key,
        torch_key,
        attn_mask=None if allowed is None else torch.tensor(~allowed),  # torch: True = blocked
        need_weights=True,
        average_attn_weights=False,
    )
    close(out, torch_out)
    close(weights, torch_weights)
    backward_both(out, torch_out)
    close(x.grad, tx.grad, "query")
    if case == "cross":
        close(memory.grad, torch_memory.grad, "memory")
    check_mha_grads(attn, torch_attn)


@pytest.mark.parametrize("case", ["self", "causal", "key padding"])
def test_self_attention_with_stacked_projections(device, monkeypatch, case):
    """No weights asked for: the fused path, whose q, k, v are one product of the stacked
    weights (as torch's in_proj_weight). Output and every gradient match torch; each
    projection's .grad is its own writable memory, as a separate torch Parameter's is."""
    from tinyattn import ops

    packed = []
    forward = ops.HeadsAttention.forward
    monkeypatch.setattr(
        ops.HeadsAttention,
        "forward",
        lambda self, *a, **k: packed.append(k.get("packed")) or forward(self, *a, **k),
    )
    attn, torch_attn = mha_pair(device)
    x, tx = pair(device, 2, 4, 6)
    padding = np.array([[False] * 3 + [True], [False] * 4])
    kwargs, torch_kwargs = {}, {}
    if case == "causal":
        kwargs, torch_kwargs = (
            {"is_causal": True},
            {
                "attn_mask": torch.tensor(~np.tril(np.ones((4, 4), bool))),
                "is_causal": True,
            },
        )
    if case == "key padding":
        kwargs = {"key_padding_mask": ta.tensor(padding, device=device)}
        torch_kwargs = {"key_padding_mask": torch.tensor(padding)}
    out = attn(x, **kwargs)
    torch_out, _ = torch_attn(tx, tx, tx, need_weights=False, **torch_kwargs)
    assert packed == [True]
    close(out, torch_out)
    backward_both(out, torch_out)
    close(x.grad, tx.grad, "query")
    check_mha_grads(attn, torch_attn)
    k_grad = attn.k_proj.weight.grad.numpy().copy()
    attn.q_proj.weight.grad.zero_()
    np.testing.assert_array_equal(attn.k_proj.weight.grad.numpy(), k_grad)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_block_matches_encoder_layer(device, norm_first):
    ta.manual_seed(4)
    block = nn.TransformerBlock(6, 2, 10, norm_first=norm_first).to("float64").to(device)
    layer = torch.nn.TransformerEncoderLayer(
        6, 2, 10, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64
    )
    w = {name: torch.tensor(p.detach().numpy()) for name, p in block.named_parameters()}
    state = {
        "self_attn.in_proj_weight": torch.cat([w[f"attn.{n}_proj.weight"] for n in "qkv"]),
        "self_attn.in_proj_bias": torch.cat([w[f"attn.{n}_proj.bias"] for n in "qkv"]),
        "self_attn.out_proj.weight": w["attn.out_proj.weight"],
        "self_attn.out_proj.bias": w["attn.out_proj.bias"],
        **{k: v for k, v in w.items() if not k.startswith("attn.")},
    }
    layer.load_state_dict(state)
    x, tx = pair(device, 2, 4, 6)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(4, dtype=torch.float64)
    layer.train()  # the eval fast path has no double backward and the same math
    y, ty = block(x, is_causal=True), layer(tx, src_mask=causal, is_causal=True)
    close(y, ty)
    backward_both(y, ty)
    close(x.grad, tx.grad)
    close(block.linear1.weight.grad, layer.linear1.weight.grad)
    close(block.norm1.weight.grad, layer.norm1.weight.grad)


# ------------------------------------------------------------------------------- optimizers
OPTIMIZERS = [
    ("sgd", lambda ps: optim.SGD(ps, lr=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1)),
    (
        "sgd-momentum",
        lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
    ),
    (
        "sgd-nesterov",
        lambda ps: optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
    ),
    (
        "adam",
        lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
        lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1),
    ),
    (
        "adam-small-betas",
        lambda ps: optim.Adam(ps, lr=0.02, betas=(0.3, 0.6), eps=1e-6),
        lambda ps: torch.optim.Adam(ps, lr=0.02, betas=(0.3, 0.6), eps=1e-6),
    ),
    (
        "adamw",
        lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.05),
        lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.05),
    ),
]


@pytest.mark.parametrize(("name", "ours", "theirs"), OPTIMIZERS, ids=[o[0] for o in OPTIMIZERS])
def test_optimizer_steps(device, name, ours, theirs):
    ta.manual_seed(5)
    model = nn.Sequential(nn.Linear(3, 4), nn.GELU(), nn.Linear(4, 2)).to("float64").to(device)
    torch_model = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.GELU(), torch.nn.Linear(4, 2)
    ).double()
    copy_into_torch(model, torch_model)
    opt, torch_opt = ours(list(model.parameters())), theirs(list(torch_model.parameters()))
    for step in range(5):
        x, tx = pair(device, 6, 3, grad=False)
        target, torch_target = pair(device, 6, 2, grad=False)
        opt.zero_grad()
        torch_opt.zero_grad()
        loss = ((model(x) - target) ** 2.0).mean()
        torch_loss = ((torch_model(tx) - torch_target) ** 2).mean()
        loss.backward()
        torch_loss.backward()
        if step == 3:
            norm = optim.clip_grad_norm(model.parameters(), 0.5)
            torch_norm = torch.nn.utils.clip_grad_norm_(torch_model.parameters(), 0.5)
            assert norm == pytest.approx(torch_norm.item(), rel=1e-12)
        opt.step()
        torch_opt.step()
        for (pname, p), tp in zip(model.named_parameters(), torch_model.parameters(), strict=True):
            close(p, tp, f"{name} step {step}: {pname}")
