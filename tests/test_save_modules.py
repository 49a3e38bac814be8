"""``ta.save(model, f)`` / ``ta.load(f)`` of whole modules, in the pickle-free object format.

Round trips of every built-in module class (same type, state dict, forward), a user class with
nested modules, tied weights and buffers, a function attribute; the loaded module trains,
moves, switches modes and runs hooks. Loading follows PyTorch's weights_only rules: a class
not allowlisted is refused by name, `safe_globals` allows it for one block and then restores
the list, `weights_only=False` imports what the file names. Old state-dict files still load;
hand-edited manifests fail clearly. PyTorch is the oracle for the module paths
(``nn.modules.linear.Linear``) and MultiheadAttention's out_proj class where it is installed.
"""

from __future__ import annotations

import importlib
import io
import json
import pickle
import sys
import zipfile

import numpy as np
import pytest

import tinyattn as ta
import tinyattn.nn.functional as F
from tinyattn import nn, optim
from tinyattn.serialization import UnsafeGlobalError

ALL_MODULE_CLASSES = [
    getattr(nn.modules, name) for name in nn.modules.__all__ if not name.startswith("_")
]


# ------------------------------------------------------------------- user classes (top level)
class TiedLM(nn.Module):
    """Embedding and decoder share one Parameter; a buffer, a non-persistent buffer, a function
    attribute, a plain tensor attribute and settings, as PyTorch's word language model has."""

    def __init__(self, vocab: int = 11, width: int = 6) -> None:
        super().__init__()
        self.encoder = nn.Embedding(vocab, width)
        self.body = nn.Sequential(nn.Linear(width, width), nn.Tanh())
        self.blocks = nn.ModuleList([nn.LayerNorm(width), nn.Dropout(0.0)])
        self.decoder = nn.Linear(width, vocab)
        self.decoder.weight = self.encoder.weight  # weight tying
        self.register_buffer("scale", ta.full((width,), 0.5))
        self.register_buffer("cache", ta.zeros(2), persistent=False)
        self.activation = F.relu
        self.mask = None
        self.settings = {"vocab": vocab, "tags": {"a", "b"}, "pair": (1, 2.5), 3: None}

    def forward(self, tokens: ta.Tensor) -> ta.Tensor:
        x = self.activation(self.body(self.encoder(tokens)) * self.scale)
        for block in self.blocks:
            x = block(x)
        return self.decoder(x)


class Holder:
    """A plain Python object (not a Module) that refers to itself."""

    def __init__(self) -> None:
        self.me = self
        self.numbers = [1, 2]


class Slotted:
    __slots__ = ("a", "__hidden")

    def __init__(self) -> None:
        self.a = 1
        self.__hidden = 2

    def hidden(self) -> int:
        return self.__hidden


def count_calls(module, args, output):  # a forward hook saved by its import path
    module.calls = getattr(module, "calls", 0) + 1


def _allowed(model: nn.Module) -> list:
    """The classes in `model` (what a program passes to safe_globals)."""
    return sorted({type(m) for m in model.modules()}, key=lambda c: c.__qualname__)


def _round_trip(obj, allow=(), **load_args):
    buffer = io.BytesIO()
    ta.save(obj, buffer)
    buffer.seek(0)
    with ta.serialization.safe_globals(list(allow)):
        return ta.load(buffer, **load_args)


# --------------------------------------------------------------------- built-in module classes
def _example(cls):
    """(a factory of a small instance of cls, the args of one forward call or None)."""
    x = ta.randn(2, 3, 4)
    features = ta.randn(4, 4)
    image = ta.randn(1, 2, 6, 6)
    volume = ta.randn(1, 2, 4, 4, 4)

    def pooled(pool, input):  # noqa: A002  (an unpool's arguments: values and indices)
        return pool(2, return_indices=True)(input)

    probs = ta.rand(4, 4) * 0.8 + 0.1
    classes = ta.tensor([0, 2, 1, 3])
    table = {
        nn.MultiheadAttention: (lambda: nn.MultiheadAttention(4, 2), (x, x, x)),
        nn.GLU: (lambda: nn.GLU(), (x,)),
        nn.Softmax: (lambda: nn.Softmax(dim=-1), (x,)),
        nn.LogSoftmax: (lambda: nn.LogSoftmax(dim=-1), (x,)),
        nn.Softmin: (lambda: nn.Softmin(dim=-1), (x,)),
        nn.BatchNorm1d: (lambda: nn.BatchNorm1d(4), (features,)),
        nn.BatchNorm2d: (lambda: nn.BatchNorm2d(2), (image,)),
        nn.Conv1d: (lambda: nn.Conv1d(3, 2, 3), (x,)),
        nn.Conv2d: (lambda: nn.Conv2d(2, 3, 3), (image,)),
        nn.ConvTranspose1d: (lambda: nn.ConvTranspose1d(3, 2, 3), (x,)),
        nn.ConvTranspose2d: (lambda: nn.ConvTranspose2d(2, 3, 3), (image,)),
        nn.MaxPool1d: (lambda: nn.MaxPool1d(2), (x,)),
        nn.MaxPool2d: (lambda: nn.MaxPool2d(2), (image,)),
        nn.AvgPool1d: (lambda: nn.AvgPool1d(2), (x,)),
        nn.AvgPool2d: (lambda: nn.AvgPool2d(2), (image,)),
        nn.AdaptiveAvgPool1d: (lambda: nn.AdaptiveAvgPool1d(2), (x,)),
        nn.AdaptiveAvgPool2d: (lambda: nn.AdaptiveAvgPool2d(2), (image,)),
        nn.BatchNorm3d: (lambda: nn.BatchNorm3d(2), (volume,)),
        nn.Conv3d: (lambda: nn.Conv3d(2, 3, 2), (volume,)),
        nn.ConvTranspose3d: (lambda: nn.ConvTranspose3d(2, 3, 2), (volume,)),
        nn.MaxPool3d: (lambda: nn.MaxPool3d(2), (volume,)),
        nn.AvgPool3d: (lambda: nn.AvgPool3d(2), (volume,)),
        nn.AdaptiveAvgPool3d: (lambda: nn.AdaptiveAvgPool3d(2), (volume,)),
        nn.MaxUnpool1d: (lambda: nn.MaxUnpool1d(2), pooled(nn.MaxPool1d, x)),
        nn.MaxUnpool2d: (lambda: nn.MaxUnpool2d(2), pooled(nn.MaxPool2d, image)),
        nn.MaxUnpool3d: (lambda: nn.MaxUnpool3d(2), pooled(nn.MaxPool3d, volume)),
        nn.Unflatten: (lambda: nn.Unflatten(2, (2, 2)), (x,)),
        nn.Flatten: (lambda: nn.Flatten(), (x,)),
        nn.Linear: (lambda: nn.Linear(4, 3), (x,)),
        nn.modules.linear.NonDynamicallyQuantizableLinear: (
            lambda: nn.modules.linear.NonDynamicallyQuantizableLinear(4, 3),
            (x,),
        ),
        nn.Embedding: (lambda: nn.Embedding(5, 3), (classes,)),
        nn.LayerNorm: (lambda: nn.LayerNorm(4), (x,)),
        nn.Dropout: (lambda: nn.Dropout(0.25), (x,)),
        nn.GRU: (lambda: nn.GRU(4, 3, 2), (x,)),
        nn.LSTM: (lambda: nn.LSTM(4, 3, 2), (x,)),
        nn.RNN: (lambda: nn.RNN(4, 3, nonlinearity="relu"), (x,)),
        nn.GRUCell: (lambda: nn.GRUCell(4, 3), (features,)),
        nn.LSTMCell: (lambda: nn.LSTMCell(4, 3), (features,)),
        nn.RNNCell: (lambda: nn.RNNCell(4, 3), (features,)),
        nn.Transformer: (
            lambda: nn.Transformer(4, 2, 1, 1, 8, dropout=0.0),
            (x, ta.randn(4, 3, 4)),
        ),
        nn.TransformerEncoderLayer: (lambda: nn.TransformerEncoderLayer(4, 2, 8, 0.0), (x,)),
        nn.TransformerDecoderLayer: (lambda: nn.TransformerDecoderLayer(4, 2, 8, 0.0), (x, x)),
        nn.TransformerEncoder: (
            lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 8, 0.0), 2),
            (x,),
        ),
        nn.TransformerDecoder: (
            lambda: nn.TransformerDecoder(nn.TransformerDecoderLayer(4, 2, 8, 0.0), 2),
            (x, x),
        ),
        nn.Upsample: (lambda: nn.Upsample(scale_factor=2), (x,)),
        nn.GroupNorm: (lambda: nn.GroupNorm(1, 2), (image,)),
        nn.InstanceNorm1d: (lambda: nn.InstanceNorm1d(3, affine=True), (x,)),
        nn.InstanceNorm2d: (lambda: nn.InstanceNorm2d(2, track_running_stats=True), (image,)),
        nn.InstanceNorm3d: (lambda: nn.InstanceNorm3d(2), (volume,)),
        nn.RMSNorm: (lambda: nn.RMSNorm(4), (x,)),
        nn.Dropout2d: (lambda: nn.Dropout2d(0.25), (image,)),
        nn.Dropout3d: (lambda: nn.Dropout3d(0.25), (volume,)),
        nn.Unfold: (lambda: nn.Unfold(2), (image,)),
        nn.Fold: (lambda: nn.Fold(3, 2), (ta.randn(1, 8, 4),)),
        nn.PixelShuffle: (lambda: nn.PixelShuffle(2), (ta.randn(1, 4, 2, 2),)),
        nn.PixelUnshuffle: (lambda: nn.PixelUnshuffle(2), (image,)),
        nn.Sequential: (lambda: nn.Sequential(nn.Linear(4, 2), nn.ReLU()), (x,)),
        nn.ModuleList: (lambda: nn.ModuleList([nn.Linear(4, 2)]), None),
        nn.ModuleDict: (lambda: nn.ModuleDict({"a": nn.Linear(4, 2)}), None),
        nn.ParameterList: (lambda: nn.ParameterList([ta.ones(2)]), None),
        nn.ParameterDict: (lambda: nn.ParameterDict({"w": ta.ones(2)}), None),
        nn.Module: (lambda: nn.Module(), None),
        nn.RNNBase: (lambda: nn.RNNBase("GRU", 4, 3), (x,)),
        nn.RNNCellBase: (lambda: nn.RNNCellBase(4, 3, True, 2, None, None), None),
        # tinyattn's own modules (no PyTorch path)
        nn.MultiHeadAttention: (lambda: nn.MultiHeadAttention(4, 2), (x,)),
        nn.TransformerBlock: (lambda: nn.TransformerBlock(4, 2, 8), (x,)),
        nn.SinusoidalPositionalEncoding: (lambda: nn.SinusoidalPositionalEncoding(8, 4), (x,)),
        nn.LearnedPositionalEmbedding: (lambda: nn.LearnedPositionalEmbedding(8, 4), (x,)),
    }
    if cls in table:
        return table[cls]
    if issubclass(cls, nn.modules.loss._Loss):
        if cls in (nn.CrossEntropyLoss, nn.NLLLoss):
            return (cls, (features, classes))
        return (cls, (probs, probs.detach()))
    return (cls, (x,))  # an activation without arguments


CLASSES = ALL_MODULE_CLASSES + [
    nn.MultiHeadAttention,
    nn.TransformerBlock,
    nn.SinusoidalPositionalEncoding,
    nn.LearnedPositionalEmbedding,
]


def _outputs(result) -> list:
    items = result if isinstance(result, tuple | list) else [result]
    out = []
    for item in items:
        out.extend(_outputs(item) if isinstance(item, tuple | list) else [item])
    return [item.detach().numpy() for item in out if isinstance(item, ta.Tensor)]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_every_builtin_module_round_trips(cls):
    make, args = _example(cls)
    ta.manual_seed(0)
    module = make().eval()
    loaded = _round_trip(module, allow=[*_allowed(module), F.relu])  # layers' activation
    assert type(loaded) is cls and loaded is not module
    assert loaded.training is False and repr(loaded) == repr(module)
    assert list(loaded.state_dict()) == list(module.state_dict())
    for key, value in module.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[key].numpy(), value.numpy(), key)
    assert all(type(p) is nn.Parameter and p.requires_grad for p in loaded.parameters())
    if args is not None:
        for got, expected in zip(_outputs(loaded(*args)), _outputs(module(*args)), strict=True):
            np.testing.assert_array_equal(got, expected)


# --------------------------------------------------------------------------- a user's model
def test_user_model_round_trips_with_tied_weights_buffers_and_a_function():
    ta.manual_seed(0)
    model = TiedLM()
    path_free = _round_trip(model, allow=[TiedLM, *_allowed(model), F.relu])
    assert type(path_free) is TiedLM
    assert path_free.decoder.weight is path_free.encoder.weight  # still tied
    assert len(list(path_free.parameters())) == len(list(model.parameters()))
    assert path_free.activation is F.relu and path_free.mask is None
    assert path_free.settings == model.settings
    assert isinstance(path_free.settings["tags"], set)
    assert path_free._non_persistent == {"cache"} and "cache" not in path_free.state_dict()
    np.testing.assert_array_equal(path_free.scale.numpy(), 0.5)
    tokens = ta.tensor([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(
        path_free(tokens).detach().numpy(), model(tokens).detach().numpy()
    )


def test_loaded_model_trains_moves_switches_modes_and_runs_hooks():
    ta.manual_seed(0)
    model = TiedLM()
    model.register_forward_hook(count_calls)
    loaded = _round_trip(model, allow=[TiedLM, *_allowed(model), F.relu, count_calls])
    tokens = ta.tensor([[1, 2, 3]])
    loaded(tokens)
    assert loaded.calls == 1  # the hook came back and runs
    opt = optim.SGD(loaded.parameters(), lr=0.1)
    before = loaded.encoder.weight.detach().numpy().copy()
    loaded(tokens).sum().backward()
    assert loaded.encoder.weight.grad is not None
    opt.step()
    assert not np.array_equal(loaded.encoder.weight.detach().numpy(), before)
    assert loaded.decoder.weight is loaded.encoder.weight
    loaded.eval()
    assert not any(m.training for m in loaded.modules())
    loaded.train()
    assert all(m.training for m in loaded.modules())
    loaded.to("float64")
    assert loaded(tokens).dtype == ta.float64 and loaded.scale.dtype == ta.float64
    fresh = TiedLM()
    fresh.to("float64").load_state_dict(loaded.state_dict())


def test_shared_modules_and_object_cycles_come_back_shared():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    loaded = _round_trip(model, allow=_allowed(model))
    assert loaded[0] is loaded[2]
    holder = _round_trip(Holder(), allow=[Holder])
    assert holder.me is holder and holder.numbers == [1, 2]
    slotted = _round_trip(Slotted(), allow=[Slotted])
    assert slotted.a == 1 and slotted.hidden() == 2


def test_a_loaded_parameter_in_a_plain_container_stays_a_parameter():
    weight = nn.Parameter(ta.ones(2))
    loaded = _round_trip({"w": weight, "again": weight, "t": ta.zeros(1, requires_grad=True)})
    assert type(loaded["w"]) is nn.Parameter and loaded["again"] is loaded["w"]
    assert loaded["t"].requires_grad and type(loaded["t"]) is ta.Tensor


def test_multihead_attention_out_proj_class_and_keys_match_pytorch():
    torch = pytest.importorskip("torch")
    ours = nn.MultiheadAttention(4, 2)
    theirs = torch.nn.MultiheadAttention(4, 2)
    assert type(ours.out_proj).__name__ == type(theirs.out_proj).__name__
    assert isinstance(ours.out_proj, nn.Linear)
    assert list(ours.state_dict()) == list(theirs.state_dict())


def test_module_paths_name_pytorch_classes_by_pytorch_names():
    torch = pytest.importorskip("torch")
    for submodule in nn.modules.SUBMODULES:
        short = submodule.__name__.rpartition(".")[2]
        theirs = importlib.import_module(f"torch.nn.modules.{short}")
        for name in submodule.__all__:
            assert hasattr(theirs, name), f"torch.nn.modules.{short} has no {name}"
            ours = getattr(submodule, name)
            assert ours is getattr(nn, name, ours)  # one class under every name, no copy
    assert torch.nn.modules.linear.NonDynamicallyQuantizableLinear.__name__ in dir(
        nn.modules.linear
    )


def test_nn_modules_is_reached_as_an_attribute():
    assert ta.nn.modules.rnn.LSTM is nn.LSTM
    assert ta.nn.modules.container.ModuleList is nn.ModuleList
    assert ta.nn.modules.Linear is nn.Linear


# ---------------------------------------------------------------------- the weights_only rules
def _saved(obj) -> io.BytesIO:
    buffer = io.BytesIO()
    ta.save(obj, buffer)
    buffer.seek(0)
    return buffer


def test_a_class_not_allowed_is_refused_by_name():
    buffer = _saved(TiedLM())
    with pytest.raises(UnsafeGlobalError, match=r"test_save_modules\.TiedLM") as info:
        ta.load(buffer)
    message = str(info.value)
    assert "add_safe_globals" in message and "weights_only=False" in message
    assert isinstance(info.value, pickle.UnpicklingError)  # PyTorch's exception type
    buffer.seek(0)
    with pytest.raises(
        UnsafeGlobalError, match=r"Embedding"
    ):  # the model class alone is not enough
        with ta.serialization.safe_globals([TiedLM]):
            ta.load(buffer)
    buffer.seek(0)
    with pytest.raises(UnsafeGlobalError, match="relu"):  # functions need allowing too
        with ta.serialization.safe_globals([TiedLM, *_allowed(TiedLM())]):
            ta.load(buffer)


def test_weights_only_false_imports_what_the_file_names():
    loaded = ta.load(_saved(TiedLM()), weights_only=False)
    assert type(loaded) is TiedLM and loaded.activation is F.relu


def test_safe_globals_restores_the_allowlist_after_the_block():
    before = ta.serialization.get_safe_globals()
    with ta.serialization.safe_globals([Holder]):
        assert Holder in ta.serialization.get_safe_globals()
    assert ta.serialization.get_safe_globals() == before
    with pytest.raises(KeyError), ta.serialization.safe_globals([Holder]):
        raise KeyError("inside")
    assert ta.serialization.get_safe_globals() == before
    with pytest.raises(UnsafeGlobalError):
        ta.load(_saved(Holder()))


def test_add_safe_globals_allows_for_every_later_load():
    saved = dict(ta.serialization.tree._safe_globals)
    try:
        ta.serialization.add_safe_globals([(Holder, f"{__name__}.Holder")])
        assert Holder in ta.serialization.get_safe_globals()
        assert type(ta.load(_saved(Holder()))) is Holder
        ta.serialization.clear_safe_globals()
        assert ta.serialization.get_safe_globals() == []
    finally:
        ta.serialization.tree._safe_globals.clear()
        ta.serialization.tree._safe_globals.update(saved)


def test_a_refused_load_imports_nothing(tmp_path):
    path = tmp_path / "evil.npz"
    _write_manifest(path, 2, {"object": {"id": 0, "class": "tinyattn_never_imported:Thing"}})
    with pytest.raises(UnsafeGlobalError, match="tinyattn_never_imported.Thing"):
        ta.load(path)
    assert "tinyattn_never_imported" not in sys.modules


# ----------------------------------------------------------------- old files and broken files
def _write_manifest(path, version, tree, arrays=None) -> None:
    manifest = json.dumps({"format": "tinyattn-checkpoint", "version": version, "tree": tree})
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in (arrays or {}).items():
            with archive.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, array)
        with archive.open("__metadata__.npy", "w") as member:
            np.lib.format.write_array(member, np.frombuffer(manifest.encode(), dtype=np.uint8))


def test_state_dict_files_keep_the_first_format_and_old_files_load(tmp_path):
    model = nn.Linear(3, 2)
    ta.save(model.state_dict(), tmp_path / "new.npz")
    with zipfile.ZipFile(tmp_path / "new.npz") as archive:
        manifest = np.lib.format.read_array(archive.open("__metadata__.npy")).tobytes()
    assert json.loads(manifest)["version"] == 1  # a plain tree: readable by older tinyattn
    tree = {"dict": [["weight", {"tensor": "weight"}], ["step", {"value": 3}]]}
    _write_manifest(tmp_path / "old.npz", 1, tree, {"weight": np.ones((2, 3), np.float32)})
    loaded = ta.load(tmp_path / "old.npz")
    assert loaded["step"] == 3 and type(loaded["weight"]) is ta.Tensor
    np.testing.assert_array_equal(loaded["weight"].numpy(), 1.0)


BROKEN = [
    ("a function as a class", {"object": {"id": 0, "class": "os:getcwd"}}, "not a class"),
    ("a missing module", {"global": "tinyattn_no_such_module:f"}, "cannot be imported"),
    ("a missing attribute", {"global": "os:no_such_function"}, "has no attribute"),
    ("a builtin class", {"object": {"id": 0, "class": "builtins:dict"}}, "not a plain Python"),
    ("a reference first", {"list": [{"ref": 4}]}, "refers to object 4 before defining it"),
    ("not a path", {"global": "os.getcwd"}, "not an import path"),
    ("a bad tensor class", {"tensor": ["w", "os:getcwd", False]}, "not a Tensor class"),
    ("a version-2 kind in version 1", {"set": []}, "unknown manifest node kind 'set'"),
]


@pytest.mark.parametrize("name,tree,fragment", BROKEN, ids=[b[0] for b in BROKEN])
def test_hand_edited_manifests_are_clear_errors(tmp_path, name, tree, fragment):
    path = tmp_path / "edited.npz"
    version = 1 if name.endswith("version 1") else 2
    _write_manifest(path, version, tree, {"w": np.ones(2, np.float32)})
    with pytest.raises(ValueError, match=r"^load: ") as info:
        ta.load(path, weights_only=False)
    assert fragment in str(info.value) and "edited.npz" in str(info.value)


def test_unsavable_values_are_refused_before_writing(tmp_path):
    def local() -> None:
        pass

    path = tmp_path / "m.npz"
    for value, fragment in [
        (local, "not reachable by its own"),
        (lambda: 0, "<lambda>"),
        (io.BytesIO(), "BytesIO"),
        (TiedLM().forward, "method"),
    ]:
        with pytest.raises(TypeError, match=r"^save: ") as info:
            ta.save({"x": value}, path)
        assert fragment in str(info.value)
    assert not path.exists()


# ------------------------------------------------------------------------- the rest of the port
def test_onnx_export_is_refused_with_the_way_out():
    import tinyattn.onnx  # noqa: PLC0415

    with pytest.raises(RuntimeError, match="no ONNX export.*safetensors"):
        tinyattn.onnx.export(nn.Linear(2, 2), (ta.ones(1, 2),), "model.onnx")
    assert ta.onnx.is_in_onnx_export() is False


def test_flatten_parameters_changes_nothing():
    lstm = nn.LSTM(3, 2)
    before = {k: v.numpy().copy() for k, v in lstm.state_dict().items()}
    params = list(lstm.parameters())
    assert lstm.flatten_parameters() is None
    assert list(lstm.parameters()) == params
    for key, value in lstm.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), before[key])


def _lm(lib):
    """The same model tree in tinyattn and in PyTorch: WLM's modules under a Sequential."""
    layer = lib.nn.TransformerEncoderLayer(4, 2, 8, 0.0)
    return lib.nn.Sequential(
        lib.nn.Embedding(7, 4),
        lib.nn.Dropout(0.1),
        lib.nn.LSTM(4, 4),
        lib.nn.TransformerEncoder(layer, 1),
        lib.nn.LayerNorm(4),
        lib.nn.Linear(4, 7),
    )


def test_a_saved_module_names_the_classes_pytorch_names():
    torch = pytest.importorskip("torch")
    theirs = io.BytesIO()
    torch.save(_lm(torch), theirs)
    theirs.seek(0)
    expected = set(torch.serialization.get_unsafe_globals_in_checkpoint(theirs))
    ours = ta.serialization.get_unsafe_globals_in_checkpoint(_saved(_lm(ta)))
    by_object = {}  # each of our globals under its nn.modules path, as PyTorch names it
    for name in ours:
        module, _, qualname = name.rpartition(".")
        obj = getattr(importlib.import_module(module), qualname)
        paths = [
            f"torch.nn.modules.{sub.__name__.rpartition('.')[2]}.{qualname}"
            for sub in nn.modules.SUBMODULES
            if getattr(sub, qualname, None) is obj
        ]
        by_object[name] = paths[0] if paths else f"torch.nn.functional.{qualname}"
    assert set(by_object.values()) == expected
