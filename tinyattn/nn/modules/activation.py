"""PyTorch's ``torch.nn.modules.activation``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..activation import (
    GLU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    Mish,
    ReLU6,
    Softmin,
    Softsign,
)
from ..attention import MultiheadAttention
from ..layers import (
    GELU,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Tanh,
)

__all__ = [
    "GELU",
    "GLU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "LeakyReLU",
    "LogSoftmax",
    "Mish",
    "MultiheadAttention",
    "ReLU",
    "ReLU6",
    "SELU",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softmin",
    "Softsign",
    "Tanh",
]
