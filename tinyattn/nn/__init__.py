"""nn layer: modules with parameters, built on `functional`.

A package because one file would pass ~400 lines; the parts import in this order:
module (Module, Parameter, containers) -> layers (Linear, Embedding, LayerNorm, Dropout,
activations) -> activation (more activations: ReLU6, SELU, Mish, GLU, ...) -> attention
(MultiHeadAttention, PyTorch's MultiheadAttention) -> transformer (positional encodings,
TransformerBlock) -> encoder_decoder (PyTorch's Transformer, TransformerEncoder(Layer),
TransformerDecoder(Layer)) -> loss; normalization (GroupNorm, InstanceNorm, RMSNorm), dropout
(channel and alpha dropout) and rearrange (Unfold, Fold, PixelShuffle) beside conv (convolution,
pooling, batch norm). `nn.functional`, `nn.init` and `nn.utils` are
PyTorch's submodules of the same names. Imports `backend`, `autograd`, `tensor` and
`functional`, never `optim`. `nn.modules` (PyTorch's class paths, such as
``nn.modules.linear.Linear``) is loaded on first use.
"""

from . import functional, init, parallel, utils
from .activation import GLU, SELU, Hardsigmoid, Hardswish, Hardtanh, Mish, ReLU6, Softmin, Softsign
from .attention import KVCache, MultiHeadAttention, MultiheadAttention
from .conv import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    BatchNorm1d,
    BatchNorm2d,
    BatchNorm3d,
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    MaxUnpool1d,
    MaxUnpool2d,
    MaxUnpool3d,
    Unflatten,
)
from .dropout import AlphaDropout, Dropout1d, Dropout2d, Dropout3d, FeatureAlphaDropout
from .encoder_decoder import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from .layers import (
    GELU,
    Dropout,
    Embedding,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .module import (
    IncompatibleKeys,
    Module,
    ModuleDict,
    ModuleList,
    Parameter,
    ParameterDict,
    ParameterList,
    Sequential,
)
from .normalization import GroupNorm, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, RMSNorm
from .rearrange import Fold, PixelShuffle, PixelUnshuffle, Unfold
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .transformer import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TransformerBlock
from .upsample import Upsample

__all__ = [
    "GLU",
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
    "RNN",
    "RNNBase",
    "RNNCell",
    "RNNCellBase",
    "SELU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "HuberLoss",
    "Mish",
    "ReLU6",
    "SmoothL1Loss",
    "Softmin",
    "Softsign",
    "BCELoss",
    "BCEWithLogitsLoss",
    "Flatten",
    "L1Loss",
    "LeakyReLU",
    "GELU",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Identity",
    "IncompatibleKeys",
    "KLDivLoss",
    "KVCache",
    "LayerNorm",
    "LearnedPositionalEmbedding",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "Module",
    "ModuleDict",
    "ModuleList",
    "MultiHeadAttention",
    "MultiheadAttention",
    "NLLLoss",
    "Parameter",
    "ParameterDict",
    "ParameterList",
    "ReLU",
    "SiLU",
    "Sequential",
    "Sigmoid",
    "SinusoidalPositionalEncoding",
    "Softmax",
    "Tanh",
    "Transformer",
    "TransformerBlock",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "functional",
    "init",
    "parallel",
    "utils",
]
__all__ += [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
    "Unflatten",
]
__all__ += ["Upsample"]
__all__ += [
    "AlphaDropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "FeatureAlphaDropout",
    "Fold",
    "GroupNorm",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "PixelShuffle",
    "PixelUnshuffle",
    "RMSNorm",
    "Unfold",
]


def __getattr__(name: str):
    # PEP 562: `nn.modules` loads on first use (re-exports only; most programs never touch it).
    if name == "modules":
        import importlib  # noqa: PLC0415

        return importlib.import_module("tinyattn.nn.modules")
    raise AttributeError(f"module 'tinyattn.nn' has no attribute {name!r}")
