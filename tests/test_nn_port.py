"""PyTorch's nn surface on tinyattn, with torch as the oracle: containers and traversal,
state_dict keys and layouts (weights move both ways), buffers, deepcopy, loss and activation
modules, nn.init, nn.utils gradient clipping, PyTorch's MultiheadAttention, and
MultiHeadAttention's key_padding_mask. Skipped cleanly when torch is not importable.
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tinyattn as ta  # noqa: E402  (after the skip)
from tinyattn import nn  # noqa: E402

TOL = {"rtol": 1e-9, "atol": 1e-11}
RNG = np.random.default_rng(11)


def close(ours, theirs, what=""):
    theirs = theirs.detach().numpy() if isinstance(theirs, torch.Tensor) else theirs
    np.testing.assert_allclose(ours.detach().numpy(), theirs, **TOL, err_msg=what)


def pair(device, *shape, grad=True):
    values = RNG.standard_normal(shape)
    ours = ta.tensor(values, dtype="float64", device=device, requires_grad=grad)
    return ours, torch.tensor(values, dtype=torch.float64, requires_grad=grad)


def to_torch_state(module):
    return {key: torch.tensor(value.numpy()) for key, value in module.state_dict().items()}


# ------------------------------------------------------------------------- a shared module tree
def make_tree(lib):
    """The same module tree built from tinyattn's nn or torch's nn (`lib`)."""

    class Tree(lib.Module):
        def __init__(self):
            super().__init__()
            self.embed = lib.Embedding(7, 6)
            self.blocks = lib.ModuleList(
                [lib.Sequential(lib.LayerNorm(6), lib.Linear(6, 6), lib.GELU()) for _ in range(2)]
            )
            self.heads = lib.ModuleDict({"attn": lib.MultiheadAttention(6, 2, batch_first=True)})
            self.out = lib.Linear(6, 3, bias=False)
            self.register_buffer("scale", _tensor(lib, np.array([1.5, 2.0, 0.5])))
            self.register_buffer("cache", _tensor(lib, np.zeros(4)), persistent=False)

        def forward(self, idx):
            x = self.embed(idx)
            for block in self.blocks:
                x = x + block(x)
            x = x + self.heads["attn"](x, x, x, need_weights=False)[0]
            return self.out(x) * self.scale

    return Tree()


def _tensor(lib, values):
    return ta.tensor(values) if lib is nn else torch.tensor(values, dtype=torch.float32)


def test_state_dict_keys_and_layouts_equal_torch_and_move_both_ways(device):
    ta.manual_seed(0)
    ours = make_tree(nn).to("float64").to(device)
    theirs = make_tree(torch.nn).double()
    state = ours.state_dict()
    assert list(state) == list(theirs.state_dict())  # the same keys in the same order
    for key, value in theirs.state_dict().items():
        assert state[key].shape == tuple(value.shape), key
    assert "cache" not in state and "scale" in state
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    idx = RNG.integers(0, 7, (2, 5))
    theirs.load_state_dict(to_torch_state(ours))  # tinyattn -> torch
    close(ours(ta.tensor(idx, device=device)), theirs(torch.tensor(idx)), "forward")
    torch.manual_seed(1)
    fresh = make_tree(torch.nn).double()
    ours.load_state_dict({k: v.numpy() for k, v in fresh.state_dict().items()})  # torch -> ours
    close(ours(ta.tensor(idx, device=device)), fresh(torch.tensor(idx)), "after loading torch's")


def test_containers_index_iterate_and_slice():
    layers = [nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1)]
    seq = nn.Sequential(*layers)
    assert len(seq) == 3 and seq[0] is layers[0] and seq[-1] is layers[2]
    assert list(seq) == layers
    head = seq[:2]
    assert isinstance(head, nn.Sequential) and list(head) == layers[:2]
    with pytest.raises(IndexError, match="out of range"):
        seq[3]
    named = nn.Sequential({"fc": nn.Linear(2, 3), "act": nn.Tanh()})
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"]
    blocks = nn.ModuleList([nn.Linear(1, 1)])
    blocks.append(nn.Linear(1, 2)).extend([nn.Linear(2, 2)])
    blocks.insert(0, nn.Identity())
    assert [type(b).__name__ for b in blocks] == ["Identity", "Linear", "Linear", "Linear"]
    assert list(blocks.state_dict())[0] == "1.weight"
    del blocks[0]
    assert list(blocks.state_dict())[0] == "0.weight"
    table = nn.ModuleDict({"a": nn.Linear(1, 1)})
    table["b"] = nn.Tanh()
    assert list(table) == ["a", "b"] and "b" in table and len(table) == 2
    assert [k for k, _ in table.items()] == ["a", "b"]
    with pytest.raises(KeyError, match="keys"):
        table["c"]
    with pytest.raises(TypeError, match="not a Module"):
        nn.ModuleDict({"x": 3})


def test_traversal_apply_modes_and_zero_grad(device):
    model = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.1), nn.Sequential(nn.Linear(4, 2)))
    torch_model = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.Dropout(0.1), torch.nn.Sequential(torch.nn.Linear(4, 2))
    )
    assert [n for n, _ in model.named_children()] == [n for n, _ in torch_model.named_children()]
    assert len(list(model.children())) == 3 and len(list(model.modules())) == 5
    visited = []
    model.apply(lambda m: visited.append(type(m).__name__))
    torch_visited = []
    torch_model.apply(lambda m: torch_visited.append(type(m).__name__))
    assert visited == torch_visited  # children first, then the module itself
    assert model.eval() is model and not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())
    model.to(device)
    x = ta.randn(2, 3, device=device)
    model.eval()(x).sum().backward()
    model.zero_grad(set_to_none=False)
    for p in model.parameters():
        assert p.grad is not None and p.grad.shape == p.shape and not p.grad.numpy().any()
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    assert model.get_submodule("2.0") is model[2][0]
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())


def test_deepcopy_parameter_and_buffers(device):
    model = nn.Linear(3, 2)
    model.register_buffer("steps", ta.zeros(1, dtype="int64"))
    model.to(device)
    clone = copy.deepcopy(model)
    for (name, p), (_, q) in zip(model.named_parameters(), clone.named_parameters(), strict=True):
        assert p is not q and type(q) is nn.Parameter and q.requires_grad, name
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
    with ta.no_grad():
        nn.init.zeros_(clone.weight)
    assert model.weight.detach().numpy().any()  # the original kept its values
    where = ta.zeros(1, device=device).device
    assert clone.steps is not model.steps and clone.steps.device == where
    wrapped = nn.Parameter(ta.ones(2, 2))
    assert wrapped.requires_grad and wrapped.is_leaf and wrapped.shape == (2, 2)
    assert not nn.Parameter(ta.ones(2), requires_grad=False).requires_grad
    moved = nn.Linear(1, 1)
    moved.register_buffer("mask", ta.ones(3, dtype="bool"), persistent=False)
    moved.to(device)
    assert moved.mask.device == where and moved.weight.device == where


# -------------------------------------------------------------------------------- loss modules
LOSSES = [
    ("CrossEntropyLoss", {}, "logits"),
    ("CrossEntropyLoss", {"ignore_index": 1, "label_smoothing": 0.1}, "logits"),
    ("CrossEntropyLoss", {"reduction": "sum"}, "logits"),
    ("NLLLoss", {}, "logprobs"),
    ("NLLLoss", {"reduction": "none", "ignore_index": 0}, "logprobs"),
    ("MSELoss", {}, "float"),
    ("MSELoss", {"reduction": "sum"}, "float"),
    ("KLDivLoss", {"reduction": "batchmean"}, "probs"),
    ("KLDivLoss", {"reduction": "sum", "log_target": True}, "logprobs-target"),
    ("L1Loss", {}, "float"),
    ("BCEWithLogitsLoss", {"reduction": "sum"}, "unit"),
    ("BCELoss", {}, "unit-input"),
]


@pytest.mark.parametrize(("name", "options", "target_kind"), LOSSES)
def test_loss_modules_match_torch(device, name, options, target_kind):
    values = RNG.standard_normal((5, 4))
    if target_kind in ("logprobs", "probs", "logprobs-target"):
        values = values - np.log(np.exp(values).sum(-1, keepdims=True))
    if target_kind == "unit-input":
        values = 1.0 / (1.0 + np.exp(-values))
    if target_kind in ("logits", "logprobs"):
        target = RNG.integers(0, 4, (5,))
    elif target_kind in ("unit", "unit-input"):
        target = RNG.random((5, 4))
    else:
        target = RNG.standard_normal((5, 4))
        if target_kind == "probs":
            target = np.exp(target) / np.exp(target).sum(-1, keepdims=True)
        if target_kind == "logprobs-target":
            target = target - np.log(np.exp(target).sum(-1, keepdims=True))
    x = ta.tensor(values, dtype="float64", device=device, requires_grad=True)
    tx = torch.tensor(values, requires_grad=True)
    t = ta.tensor(target, device=device)
    loss = getattr(nn, name)(**options)(x, t)
    torch_loss = getattr(torch.nn, name)(**options)(tx, torch.tensor(target))
    close(loss, torch_loss, name)
    loss.sum().backward()
    torch_loss.sum().backward()
    close(x.grad, tx.grad, f"{name} gradient")


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (nn.ReLU(), torch.nn.ReLU()),
        (nn.GELU(), torch.nn.GELU()),
        (nn.Tanh(), torch.nn.Tanh()),
        (nn.Sigmoid(), torch.nn.Sigmoid()),
        (nn.SiLU(), torch.nn.SiLU()),
        (nn.Softmax(dim=0), torch.nn.Softmax(dim=0)),
        (nn.LogSoftmax(dim=1), torch.nn.LogSoftmax(dim=1)),
        (nn.Identity(3, unused=True), torch.nn.Identity(3, unused=True)),
        (nn.LeakyReLU(0.1), torch.nn.LeakyReLU(0.1)),
        (nn.Flatten(0), torch.nn.Flatten(0)),
    ],
    ids=lambda m: type(m).__name__,
)
def test_activation_modules_match_torch(device, ours, theirs):
    x, tx = pair(device, 3, 4)
    y, ty = ours(x), theirs(tx)
    close(y, ty)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    close(x.grad, tx.grad)


# --------------------------------------------------------------------------------------- init
def test_init_bounds_and_fans_match_torch(device):
    weight = nn.Parameter(ta.zeros(300, 200, dtype="float64", device=device))
    theirs = torch.empty(300, 200, dtype=torch.float64)
    fans = nn.init._calculate_fan_in_and_fan_out(weight)
    assert fans == torch.nn.init._calculate_fan_in_and_fan_out(theirs)
    conv_like = ta.zeros(4, 3, 5, 2)
    assert nn.init._calculate_fan_in_and_fan_out(conv_like) == (
        torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(4, 3, 5, 2))
    )
    for nonlinearity, param in [
        ("relu", None),
        ("tanh", None),
        ("leaky_relu", 0.2),
        ("selu", None),
    ]:
        assert nn.init.calculate_gain(nonlinearity, param) == pytest.approx(
            torch.nn.init.calculate_gain(nonlinearity, param)
        )
    # bound: the largest |value| over 60000 uniform draws sits just under the bound
    cases = [
        (lambda w: nn.init.xavier_uniform_(w, gain=2.0), math.sqrt(6 / 500) * 2.0),
        (
            lambda w: nn.init.kaiming_uniform_(w, a=math.sqrt(5)),
            math.sqrt(3 / 200) * math.sqrt(2 / 6),
        ),
        (
            lambda w: nn.init.kaiming_uniform_(w, mode="fan_out", nonlinearity="relu"),
            math.sqrt(6 / 300),
        ),
        (lambda w: nn.init.uniform_(w, -0.3, 0.3), 0.3),
    ]
    for init, bound in cases:
        identity = id(weight)
        out = init(weight)
        assert out is weight and id(weight) == identity
        values = np.abs(weight.detach().numpy())
        assert values.max() <= bound and values.max() > 0.99 * bound
    stds = [
        (lambda w: nn.init.normal_(w, 0.5, 0.02), 0.02, 0.5),
        (lambda w: nn.init.xavier_normal_(w), math.sqrt(2 / 500), 0.0),
        (lambda w: nn.init.kaiming_normal_(w, nonlinearity="relu"), math.sqrt(2 / 200), 0.0),
    ]
    for init, std, mean in stds:
        init(weight)
        assert weight.detach().numpy().std() == pytest.approx(std, rel=0.02)
        assert weight.detach().numpy().mean() == pytest.approx(mean, abs=4 * std / math.sqrt(60000))
    nn.init.trunc_normal_(weight, std=0.02, a=-0.03, b=0.03)
    values = weight.detach().numpy()
    assert values.min() >= -0.03 and values.max() <= 0.03
    torch_values = torch.nn.init.trunc_normal_(theirs, std=0.02, a=-0.03, b=0.03).numpy()
    assert values.std() == pytest.approx(torch_values.std(), rel=0.03)
    for init, expected in [(nn.init.zeros_, 0.0), (nn.init.ones_, 1.0)]:
        init(weight)
        assert (weight.detach().numpy() == expected).all()
    nn.init.constant_(weight, 0.25)
    assert (weight.detach().numpy() == 0.25).all() and weight.requires_grad and weight.grad is None


def test_init_is_seeded_and_refuses_bad_input(device):
    a, b = ta.zeros(3, 4, device=device), ta.zeros(3, 4, device=device)
    ta.manual_seed(3)
    nn.init.normal_(a)
    ta.manual_seed(3)
    nn.init.normal_(b)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert str(a.numpy().dtype) == "float32"
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        nn.init.xavier_uniform_(ta.zeros(3, device=device))
    with pytest.raises(TypeError, match="floating"):
        nn.init.normal_(ta.zeros(3, dtype="int64", device=device))
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.init.calculate_gain("swish")


def test_gpt_style_apply_init(device):
    """minGPT's `self.apply(self._init_weights)` pattern: isinstance checks, normal_, zeros_."""

    def init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    model = nn.Sequential(nn.Embedding(50, 40), nn.Linear(40, 50)).to(device)
    weight = model[1].weight
    model.apply(init_weights)
    assert model[1].weight is weight
    assert not model[1].bias.detach().numpy().any()
    assert model[0].weight.detach().numpy().std() == pytest.approx(0.02, rel=0.1)


# -------------------------------------------------------------------------------- clipping
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(device, norm_type, max_norm):
    grads = [RNG.standard_normal(s).astype(np.float32) for s in [(3, 4), (5,), (2, 2)]]
    ours = [ta.zeros(*g.shape, device=device, requires_grad=True) for g in grads]
    theirs = [torch.zeros(*g.shape, requires_grad=True) for g in grads]
    for p, tp, g in zip(ours, theirs, grads, strict=True):
        p.grad, tp.grad = ta.tensor(g, device=device), torch.tensor(g)
    total = nn.utils.clip_grad_norm_(ours, max_norm, norm_type=norm_type)
    torch_total = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type=norm_type)
    assert isinstance(total, ta.Tensor) and total.shape == ()
    np.testing.assert_allclose(total.numpy(), torch_total.numpy(), rtol=2e-6)
    for p, tp in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=2e-6, atol=1e-7)
        assert str(p.grad.numpy().dtype) == "float32"


def test_clip_grad_value_and_errors(device):
    g = RNG.standard_normal((4, 3))
    p = ta.zeros(4, 3, dtype="float64", device=device, requires_grad=True)
    tp = torch.zeros(4, 3, dtype=torch.float64, requires_grad=True)
    p.grad, tp.grad = ta.tensor(g, device=device), torch.tensor(g)
    nn.utils.clip_grad_value_([p], 0.5)
    torch.nn.utils.clip_grad_value_([tp], 0.5)
    close(p.grad, tp.grad)
    p.grad = ta.tensor(np.full((4, 3), np.inf), device=device)
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="max_norm"):
        nn.utils.clip_grad_norm_([p], -1.0)
    assert float(nn.utils.clip_grad_norm_([ta.zeros(2, requires_grad=True)], 1.0)) == 0.0


# ------------------------------------------------------------------- PyTorch's MultiheadAttention
def torch_mha_pair(device, batch_first, bias=True):
    ta.manual_seed(4)
    ours = nn.MultiheadAttention(6, 3, bias=bias, batch_first=batch_first).to("float64")
    ours.to(device)
    theirs = torch.nn.MultiheadAttention(
        6, 3, bias=bias, batch_first=batch_first, dtype=torch.float64
    )
    assert list(ours.state_dict()) == list(theirs.state_dict())
    theirs.load_state_dict(to_torch_state(ours))
    return ours, theirs


MHA_CASES = {
    "plain": {},
    "bool attn_mask": {"attn_mask": "bool"},
    "float attn_mask": {"attn_mask": "float"},
    "3-D attn_mask": {"attn_mask": "bool3"},
    "bool key_padding_mask": {"key_padding_mask": "bool"},
    "float key_padding_mask": {"key_padding_mask": "float"},
    "both masks, per-head weights": {
        "attn_mask": "bool",
        "key_padding_mask": "bool",
        "average_attn_weights": False,
    },
    "cross, sequence first": {"cross": True, "batch_first": False},
    "no weights": {"need_weights": False},
    "unbatched": {"unbatched": True, "key_padding_mask": "bool"},
    "no bias": {"bias": False},
}


def _masks(case, batch, heads, tq, tk):
    out, torch_out = {}, {}
    kind = case.get("attn_mask")
    if kind:
        shape = (batch * heads, tq, tk) if kind == "bool3" else (tq, tk)
        blocked = RNG.random(shape) > 0.6
        blocked[..., 0] = False  # every query keeps one key (torch gives NaN otherwise)
        value = blocked if kind.startswith("bool") else RNG.standard_normal(shape)
        out["attn_mask"], torch_out["attn_mask"] = value, torch.tensor(value)
    kind = case.get("key_padding_mask")
    if kind:
        padded = np.zeros((batch, tk), bool)
        padded[:, -1] = True
        padded[0, -2] = True
        value = padded if kind == "bool" else np.where(padded, -1e9, 0.0)
        if case.get("unbatched"):
            value = value[0]
        out["key_padding_mask"], torch_out["key_padding_mask"] = value, torch.tensor(value)
    return out, torch_out


@pytest.mark.parametrize("name", list(MHA_CASES))
def test_pytorch_multihead_attention_matches_torch(device, name):
    case = MHA_CASES[name]
    batch_first = case.get("batch_first", True)
    ours, theirs = torch_mha_pair(device, batch_first, bias=case.get("bias", True))
    batch, tq, tk = 2, 4, 5 if case.get("cross") else 4
    shape_q = (
        (tq, 6) if case.get("unbatched") else (batch, tq, 6) if batch_first else (tq, batch, 6)
    )
    shape_k = (
        (tk, 6) if case.get("unbatched") else (batch, tk, 6) if batch_first else (tk, batch, 6)
    )
    q, tq_ = pair(device, *shape_q)
    k, tk_ = pair(device, *shape_k) if case.get("cross") else (q, tq_)
    masks, torch_masks = _masks(case, 1 if case.get("unbatched") else batch, 3, tq, tk)
    masks = {key: ta.tensor(value, device=device) for key, value in masks.items()}
    options = {key: case[key] for key in ("need_weights", "average_attn_weights") if key in case}
    out, weights = ours(q, k, k, **masks, **options)
    torch_out, torch_weights = theirs(tq_, tk_, tk_, **torch_masks, **options)
    close(out, torch_out, "output")
    if case.get("need_weights", True):
        close(weights, torch_weights, "weights")
    else:
        assert weights is None and torch_weights is None
    cotangent = RNG.standard_normal(tuple(torch_out.shape))
    (out * ta.tensor(cotangent, dtype="float64", device=device)).sum().backward()
    (torch_out * torch.tensor(cotangent)).sum().backward()
    close(q.grad, tq_.grad, "query gradient")
    for (key, p), tp in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        close(p.grad, tp.grad, key)


def test_pytorch_multihead_attention_init_and_errors():
    ta.manual_seed(0)
    attn = nn.MultiheadAttention(64, 4)
    bound = math.sqrt(6 / (64 + 192))
    values = np.abs(attn.in_proj_weight.detach().numpy())
    assert values.max() <= bound and values.max() > 0.95 * bound
    assert (
        not attn.in_proj_bias.detach().numpy().any()
        and not attn.out_proj.bias.detach().numpy().any()
    )
    assert attn.in_proj_weight.shape == (192, 64)
    x = ta.randn(3, 2, 64)
    with pytest.raises(RuntimeError, match="is_causal"):
        attn(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match=r"key_padding_mask of shape \(3, 3\) must be \(2, 3\)"):
        attn(x, x, x, key_padding_mask=ta.zeros(3, 3, dtype="bool"))
    with pytest.raises(NotImplementedError, match="kdim"):
        nn.MultiheadAttention(8, 2, kdim=4)


# ---------------------------------------------------------------- MultiHeadAttention's padding
def mha_pair(device):
    ta.manual_seed(3)
    attn = nn.MultiHeadAttention(6, 3).to("float64").to(device)
    theirs = torch.nn.MultiheadAttention(6, 3, batch_first=True, dtype=torch.float64)
    state = to_torch_state(attn)
    theirs.load_state_dict(
        {
            "in_proj_weight": torch.cat([state[f"{n}_proj.weight"] for n in "qkv"]),
            "in_proj_bias": torch.cat([state[f"{n}_proj.bias"] for n in "qkv"]),
            "out_proj.weight": state["out_proj.weight"],
            "out_proj.bias": state["out_proj.bias"],
        }
    )
    return attn, theirs


@pytest.mark.parametrize("with_mask", [False, True])
def test_key_padding_mask_matches_torch(device, with_mask):
    """B == Tq == 3: the case where a padding mask passed as `mask` used to be misread."""
    attn, theirs = mha_pair(device)
    x, tx = pair(device, 3, 3, 6)
    padded = np.array([[False, False, True], [False, False, False], [False, True, True]])
    allowed = np.tril(np.ones((3, 3), bool))
    kwargs = {"mask": ta.tensor(allowed, device=device)} if with_mask else {}
    torch_kwargs = {"attn_mask": torch.tensor(~allowed)} if with_mask else {}
    out, weights = attn(
        x, key_padding_mask=ta.tensor(padded, device=device), need_weights=True, **kwargs
    )
    torch_out, torch_weights = theirs(
        tx,
        tx,
        tx,
        key_padding_mask=torch.tensor(padded),
        average_attn_weights=False,
        **torch_kwargs,
    )
    close(out, torch_out)
    close(weights, torch_weights)
    (out * out).sum().backward()
    (torch_out * torch_out).sum().backward()
    close(x.grad, tx.grad)
    unbatched = attn(x.detach()[1], key_padding_mask=padded[1], **kwargs)
    close(unbatched, torch_out[1])


def test_padding_mask_passed_as_mask_is_refused(device):
    attn, _ = mha_pair(device)
    x = ta.randn(3, 3, 6, dtype="float64", device=device)
    padding = ta.tensor(
        [[False, False, True], [False, False, False], [True, True, False]], device=device
    )
    with pytest.raises(ValueError, match="key_padding_mask="):
        attn(x, mask=padding)  # PyTorch's (B, Tk) padding mask, True = ignore
    blocked = ta.tensor(np.triu(np.ones((3, 3), bool), k=1), device=device)
    with pytest.raises(ValueError, match="no key allowed"):
        attn(x, mask=blocked)  # PyTorch's attn_mask polarity (True = blocked)
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        attn(x, key_padding_mask=ta.zeros(3, 3, device=device))
    with pytest.raises(ValueError, match=r"must be \(B, Tk\)"):
        attn(x, key_padding_mask=ta.zeros(2, 3, dtype="bool", device=device))


def test_layer_factory_keywords_and_padding_idx(device):
    ta.manual_seed(2)
    table = nn.Embedding(5, 3, padding_idx=-1, dtype="float64", device=device)
    theirs = torch.nn.Embedding(5, 3, padding_idx=4, dtype=torch.float64)
    theirs.load_state_dict(to_torch_state(table))
    assert table.padding_idx == 4 and not table.weight.detach().numpy()[4].any()
    idx = np.array([[4, 1, 2], [0, 4, 4]])
    out, torch_out = table(ta.tensor(idx, device=device)), theirs(torch.tensor(idx))
    close(out, torch_out)
    (out * out).sum().backward()
    (torch_out * torch_out).sum().backward()
    close(table.weight.grad, theirs.weight.grad)
    assert not table.weight.grad.numpy()[4].any()
    norm = nn.LayerNorm(4, bias=False)
    assert list(norm.state_dict()) == list(torch.nn.LayerNorm(4, bias=False).state_dict())
    linear = nn.Linear(2, 3, dtype="float64", device=device)
    assert str(linear.weight.detach().numpy().dtype) == "float64"
    assert linear.weight.device == ta.zeros(1, device=device).device


def test_transformer_block_key_padding_mask_matches_encoder_layer(device):
    ta.manual_seed(6)
    block = nn.TransformerBlock(6, 2, 10).to("float64").to(device)
    layer = torch.nn.TransformerEncoderLayer(
        6, 2, 10, dropout=0.0, batch_first=True, dtype=torch.float64
    )
    w = to_torch_state(block)
    layer.load_state_dict(
        {
            "self_attn.in_proj_weight": torch.cat([w[f"attn.{n}_proj.weight"] for n in "qkv"]),
            "self_attn.in_proj_bias": torch.cat([w[f"attn.{n}_proj.bias"] for n in "qkv"]),
            "self_attn.out_proj.weight": w["attn.out_proj.weight"],
            "self_attn.out_proj.bias": w["attn.out_proj.bias"],
            **{k: v for k, v in w.items() if not k.startswith("attn.")},
        }
    )
    layer.train()  # the eval fast path returns zeros at padded queries; the math path does not
    x, tx = pair(device, 3, 3, 6)
    padded = np.array([[False, False, True], [False, False, False], [False, True, True]])
    y = block(x, key_padding_mask=ta.tensor(padded, device=device))
    ty = layer(tx, src_key_padding_mask=torch.tensor(padded))
    close(y, ty)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    close(x.grad, tx.grad)


def test_state_dict_prefix_keep_vars_and_sharing():
    model = nn.Sequential(nn.Linear(2, 2))
    theirs = torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert list(model.state_dict(prefix="m.")) == list(theirs.state_dict(prefix="m."))
    kept = model.state_dict(keep_vars=True)
    assert kept["0.weight"] is model[0].weight
    snapshot = model.state_dict()
    nn.init.ones_(model[0].weight)  # in place, as in PyTorch: the snapshot shares the array
    assert (snapshot["0.weight"].numpy() == 1.0).all()


def test_parameter_containers_match_torch_keys(device):
    values = [np.ones((2, 3)), np.zeros(4)]
    ours = nn.Module()
    ours.scales = nn.ParameterList([ta.tensor(v) for v in values])
    ours.table = nn.ParameterDict({"w": ta.tensor(values[0]), "b": nn.Parameter(ta.zeros(1))})
    theirs = torch.nn.Module()
    theirs.scales = torch.nn.ParameterList([torch.tensor(v) for v in values])
    theirs.table = torch.nn.ParameterDict({"w": torch.tensor(values[0]), "b": torch.zeros(1)})
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert len(ours.scales) == 2 and ours.scales[1].shape == (4,) and ours.scales[0].requires_grad
    assert list(ours.table) == list(theirs.table) == ["b", "w"] and "w" in ours.table
    ours.to(device)
    assert ours.table["w"].device == ta.zeros(1, device=device).device
    if not ta.cuda.is_available():
        with pytest.raises((RuntimeError, ValueError), match="(?i)cuda|cupy"):
            nn.Linear(1, 1).cuda()
    assert nn.Linear(1, 1).cpu().weight.device == "cpu"


def test_key_padding_mask_on_the_blockwise_path_matches_torch(device, monkeypatch):
    """Long sequences take the block-wise path: the (B, 1, 1, Tk) padding mask goes with it."""
    monkeypatch.setattr(ta.functional, "BLOCKWISE_MIN_SCORES", 1)
    attn, theirs = mha_pair(device)
    x, tx = pair(device, 2, 5, 6)
    padded = np.zeros((2, 5), bool)
    padded[0, 3:] = True
    causal = np.tril(np.ones((5, 5), bool))
    out = attn(x, mask=ta.tensor(causal, device=device), key_padding_mask=padded)
    torch_out, _ = theirs(
        tx, tx, tx, key_padding_mask=torch.tensor(padded), attn_mask=torch.tensor(~causal)
    )
    close(out, torch_out)
    (out * out).sum().backward()
    (torch_out * torch_out).sum().backward()
    close(x.grad, tx.grad)
