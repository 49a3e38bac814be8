"""PyTorch's ``torch.nn.modules.rnn``: the same classes as ``tinyattn.nn``, under the path
PyTorch programs and saved modules name them by. Defines nothing."""

from ..rnn import (
    GRU,
    LSTM,
    RNN,
    GRUCell,
    LSTMCell,
    RNNBase,
    RNNCell,
    RNNCellBase,
)

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase"]
