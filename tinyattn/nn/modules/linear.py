"""PyTorch's ``torch.nn.modules.linear``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..layers import Identity, Linear, NonDynamicallyQuantizableLinear

__all__ = ["Identity", "Linear", "NonDynamicallyQuantizableLinear"]
