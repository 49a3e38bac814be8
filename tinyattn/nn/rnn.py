"""nn layer: recurrent layers as PyTorch has them (RNN, LSTM, GRU and their one-step cells).

Imports `tensor`, `functional`, `creation` and `nn.module`, `nn.init`, `nn.layers`. Invariants:
parameter names, shapes, gate order (LSTM i, f, g, o; GRU r, z, n) and initialisation
U(-1/sqrt(hidden), 1/sqrt(hidden)) are PyTorch's, so state dicts load both ways. Each layer is
built from ordinary ops (linear, sigmoid, tanh, indexing, stack, cat): the backward pass is the
engine's, through time, with no derivative code here.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from .. import backend
from .. import functional as F
from ..creation import zeros
from ..errors import TinyattnError
from ..methods.common import stack
from ..tensor import Tensor
from ..tensor_functions import cat
from . import init
from .layers import _check_sizes, _place, uniform
from .module import Module, Parameter

State = Any  # a hidden state h (B, H), or an LSTM's pair (h, c)


# ------------------------------------------------------------------------------- the cell steps
# One time step of each cell. `input_gates` = x @ weight_ih^T + bias_ih is passed in already
# computed: it does not depend on the previous state, so a layer computes it for every time step
# in one matmul before the loop. The loop then does only the work that must be sequential.


def rnn_tanh_step(input_gates: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Any) -> Tensor:
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh). Shapes: (B, H), (B, H) -> (B, H)."""
    return (input_gates + F.linear(h, weight_hh, bias_hh)).tanh()


def rnn_relu_step(input_gates: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Any) -> Tensor:
    """h' = relu(x W_ih^T + b_ih + h W_hh^T + b_hh). Shapes: (B, H), (B, H) -> (B, H)."""
    return (input_gates + F.linear(h, weight_hh, bias_hh)).relu()


def lstm_step(
    input_gates: Tensor, state: tuple[Tensor, Tensor], weight_hh: Tensor, bias_hh: Any
) -> tuple[Tensor, Tensor]:
    """i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the four (B, H) slices of the gates;
    c' = f * c + i * g (forget some memory, write some new), h' = o * tanh(c').
    Shapes: (B, 4H), ((B, H), (B, H)) -> ((B, H), (B, H))."""
    h, c = state
    gates = input_gates + F.linear(h, weight_hh, bias_hh)  # (B, 4H), PyTorch's order i, f, g, o
    i, f, g, o = gates.chunk(4, dim=-1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def gru_step(input_gates: Tensor, h: Tensor, weight_hh: Tensor, bias_hh: Any) -> Tensor:
    """r = sigmoid(x_r + h_r), z = sigmoid(x_z + h_z), n = tanh(x_n + r * h_n),
    h' = (1 - z) * n + z * h, where x_* and h_* are the input's and the state's (B, H) slices.
    The reset gate r scales the state's part of n only, bias included (PyTorch's GRU).
    Shapes: (B, 3H), (B, H) -> (B, H)."""
    x_r, x_z, x_n = input_gates.chunk(3, dim=-1)
    h_r, h_z, h_n = F.linear(h, weight_hh, bias_hh).chunk(3, dim=-1)  # (B, 3H) -> 3 x (B, H)
    r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return (1 - z) * n + z * h


# mode: (gates per hidden unit, the step, whether the state is a pair (h, c))
MODES: dict[str, tuple[int, Callable, bool]] = {
    "RNN_TANH": (1, rnn_tanh_step, False),
    "RNN_RELU": (1, rnn_relu_step, False),
    "LSTM": (4, lstm_step, True),
    "GRU": (3, gru_step, False),
}


def _rnn_mode(nonlinearity: str, op: str) -> str:
    if nonlinearity not in ("tanh", "relu"):
        raise TinyattnError(
            f"{op}: unknown nonlinearity {nonlinearity!r}; expected 'tanh' or 'relu'"
        )
    return "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"


def _shape(x: Any) -> tuple:
    return tuple(getattr(x, "shape", ()))


def _check_input(op: str, x: Any, input_size: int, dims: tuple[int, int], dtype: Any) -> None:
    """The public door: a Tensor of `dims` dimensions, the last input_size, of the weights'
    dtype. Inside, the ops trust what passed here."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: input must be a Tensor, got {type(x).__name__}")
    if x.ndim not in dims:
        raise TinyattnError(
            f"{op}: expected input of {dims[0]} (unbatched) or {dims[1]} dimensions, got "
            f"shape {_shape(x)}"
        )
    if x.shape[-1] != input_size:
        raise RuntimeError(
            f"{op}: input.size(-1) must equal input_size={input_size}, got input of shape "
            f"{_shape(x)}"
        )
    _check_dtype(op, "input", x, dtype)


def _check_dtype(op: str, name: str, x: Tensor, dtype: Any) -> None:
    if x.dtype != dtype:  # as PyTorch: no silent cast of the input or state
        raise RuntimeError(
            f"{op}: {name} is {backend.dtype_name(x.dtype)} but the parameters are "
            f"{backend.dtype_name(dtype)}; cast one with .to(dtype)"
        )


def _check_state(op: str, name: str, state: Any, expected: tuple[int, ...], dtype: Any) -> None:
    if not isinstance(state, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(state).__name__}")
    if tuple(state.shape) != expected:
        raise RuntimeError(f"{op}: expected {name} of shape {expected}, got {_shape(state)}")
    _check_dtype(op, name, state, dtype)


# ------------------------------------------------------------------------------------ the cells
class RNNCellBase(Module):
    """weight_ih (G*H, in), weight_hh (G*H, H), bias_ih and bias_hh (G*H,), for G gates."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool, gates: int, device: Any, dtype: Any
    ) -> None:
        super().__init__()
        op = type(self).__name__
        _check_sizes(op, input_size=input_size, hidden_size=hidden_size)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        bound = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = Parameter(uniform((gates * hidden_size, input_size), bound))
        self.weight_hh = Parameter(uniform((gates * hidden_size, hidden_size), bound))
        for name in ("bias_ih", "bias_hh"):
            value = Parameter(uniform((gates * hidden_size,), bound)) if bias else None
            self.register_parameter(name, value)
        _place(self, device, dtype)

    def reset_parameters(self) -> None:
        """Draw every parameter again from U(-1/sqrt(hidden), 1/sqrt(hidden))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def _batched(self, given: Any, hx: Any, pair: bool) -> tuple[Tensor, Any, bool]:
        """(input (B, in), state of (B, H) tensors, whether the input was unbatched)."""
        op = type(self).__name__
        _check_input(op, given, self.input_size, (1, 2), self.weight_ih.dtype)
        unbatched = given.ndim == 1
        x = given.unsqueeze(0) if unbatched else given
        expected = (x.shape[0], self.hidden_size)
        if hx is None:
            h = zeros(*expected, dtype=x.dtype, device=x.device)
            return x, ((h, h) if pair else h), unbatched
        states = hx if pair else (hx,)
        if pair and (not isinstance(hx, tuple | list) or len(hx) != 2):
            raise TypeError(f"{op}: hx must be a pair (h, c), got {type(hx).__name__}")
        for name, state in zip(("h", "c"), states):
            shape = expected[1:] if unbatched else expected
            _check_state(op, name if pair else "hx", state, shape, x.dtype)
        states = tuple(s.unsqueeze(0) if unbatched else s for s in states)
        return x, (states if pair else states[0]), unbatched

    def _step(self, step: Callable, given: Any, hx: Any, pair: bool) -> Any:
        x, state, unbatched = self._batched(given, hx, pair)
        state = step(F.linear(x, self.weight_ih, self.bias_ih), state, self.weight_hh, self.bias_hh)
        if not unbatched:
            return state
        return tuple(s.squeeze(0) for s in state) if pair else state.squeeze(0)

    def extra_repr(self) -> str:
        bias = "" if self.bias else ", bias=False"
        return f"{self.input_size}, {self.hidden_size}{bias}"


class RNNCell(RNNCellBase):
    """One Elman step, h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu), as PyTorch's.
    Shapes: input (B, in) or (in,), hx (B, H) or (H,) (zeros if None) -> h' of hx's shape."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        mode = _rnn_mode(nonlinearity, "RNNCell")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity, self._mode = nonlinearity, mode

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        return self._step(MODES[self._mode][1], input, hx, pair=False)


class LSTMCell(RNNCellBase):
    """One LSTM step (see `lstm_step`), as PyTorch's; hx = (h, c), zeros if None.
    Shapes: input (B, in) or (in,), h and c (B, H) or (H,) -> (h', c')."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Tensor]:  # noqa: A002
        return self._step(lstm_step, input, hx, pair=True)


class GRUCell(RNNCellBase):
    """One GRU step (see `gru_step`), as PyTorch's.
    Shapes: input (B, in) or (in,), hx (B, H) or (H,) (zeros if None) -> h' of hx's shape."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        return self._step(gru_step, input, hx, pair=False)


# ------------------------------------------------------------------------------- stacked layers
class RNNBase(Module):
    """`num_layers` layers of one cell over a sequence, each in one or two directions.

    Layer k, direction d holds weight_ih_l{k}, weight_hh_l{k}, bias_ih_l{k}, bias_hh_l{k}
    (suffix ``_reverse`` for the backward direction), as PyTorch names them. Layer 0 reads the
    input; layer k > 0 reads layer k - 1's output (both directions concatenated), through
    dropout in training. Shapes: input (T, B, in), or (B, T, in) with batch_first, or (T, in)
    unbatched -> output (T, B, D * H) (same layout), and states (D * num_layers, B, H).
    """

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        op = type(self).__name__
        if mode not in MODES:
            raise TinyattnError(f"{op}: unknown mode {mode!r}; expected one of {sorted(MODES)}")
        _check_sizes(op, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        if isinstance(dropout, bool) or not isinstance(dropout, int | float):
            raise TinyattnError(f"{op}: dropout must be a number in [0, 1], got {dropout!r}")
        if not 0.0 <= dropout <= 1.0:
            raise TinyattnError(f"{op}: dropout must be in [0, 1], got {dropout!r}")
        if proj_size:
            raise NotImplementedError(
                f"{op}: proj_size={proj_size} (LSTM with projections) is not supported; "
                "apply an nn.Linear to the output instead"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                f"{op}: dropout={dropout} acts between layers only, and num_layers=1",
                UserWarning,
                stacklevel=2,
            )
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, 0
        self._make_parameters()
        _place(self, device, dtype)

    @property
    def _directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _names(self, layer: int, direction: int) -> list[str]:
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else [])
        return [name + suffix for name in names]

    def _make_parameters(self) -> None:
        gates, hidden = MODES[self.mode][0] * self.hidden_size, self.hidden_size
        bound = 1.0 / math.sqrt(hidden)
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else hidden * self._directions
            shapes = [(gates, width), (gates, hidden), (gates,), (gates,)]
            for direction in range(self._directions):
                for name, shape in zip(self._names(layer, direction), shapes):
                    setattr(self, name, Parameter(uniform(shape, bound)))

    @property
    def _flat_weights_names(self) -> list[str]:
        return [
            name
            for layer in range(self.num_layers)
            for direction in range(self._directions)
            for name in self._names(layer, direction)
        ]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """Per layer and direction, its parameters in PyTorch's order (weights, then biases)."""
        return [
            [getattr(self, name) for name in self._names(layer, direction)]
            for layer in range(self.num_layers)
            for direction in range(self._directions)
        ]

    def reset_parameters(self) -> None:
        """Draw every parameter again from U(-1/sqrt(hidden), 1/sqrt(hidden))."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def flatten_parameters(self) -> None:
        """PyTorch packs the weights for cuDNN here; tinyattn keeps them apart: does nothing."""

    # --------------------------------------------------------------------------- forward
    def forward(self, input: Tensor, hx: Any = None) -> tuple[Tensor, Any]:  # noqa: A002
        x, state, unbatched = self._time_major(input, hx)  # x (T, B, in)
        pair = MODES[self.mode][2]
        finals = []  # the last state of each (layer, direction), in PyTorch's order
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self._directions):
                k = layer * self._directions + direction
                start = (state[0][k], state[1][k]) if pair else state[k]
                output, last = self._run(x, start, layer, direction)  # (T, B, H)
                outputs.append(output)
                finals.append(last)
            x = outputs[0] if len(outputs) == 1 else cat(outputs, dim=-1)  # (T, B, D * H)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        if pair:
            final = (stack([h for h, _ in finals]), stack([c for _, c in finals]))
        else:
            final = stack(finals)  # (D * num_layers, B, H)
        return self._restore_layout(x, final, unbatched)

    def _run(self, x: Tensor, state: State, layer: int, direction: int) -> tuple[Tensor, State]:
        """One direction of one layer over the whole sequence: (T, B, in) -> (T, B, H)."""
        weight_ih, weight_hh, *biases = (getattr(self, n) for n in self._names(layer, direction))
        bias_ih, bias_hh = biases if biases else (None, None)
        step, pair = MODES[self.mode][1], MODES[self.mode][2]
        input_gates = F.linear(x, weight_ih, bias_ih)  # (T, B, in) -> (T, B, G * H), one matmul
        # T pieces from one split node, whose backward concatenates their gradients once
        # (indexing input_gates[t] would scatter each step's gradient into a full (T, B, G * H)).
        pieces = [piece.squeeze(0) for piece in input_gates.split(1, dim=0)]  # T x (B, G * H)
        outputs = []
        for piece in reversed(pieces) if direction else pieces:
            state = step(piece, state, weight_hh, bias_hh)
            outputs.append(state[0] if pair else state)
        if direction:
            outputs.reverse()  # the output at time t is the state after reading x[t]
        return stack(outputs), state  # T x (B, H) -> (T, B, H)

    def _time_major(self, sequence: Any, hx: Any) -> tuple[Tensor, Any, bool]:
        """(input as (T, B, in), the initial state as (D * L, B, H) tensors, was it unbatched)."""
        op, pair = type(self).__name__, MODES[self.mode][2]
        _check_input(op, sequence, self.input_size, (2, 3), self.weight_ih_l0.dtype)
        unbatched = sequence.ndim == 2
        if unbatched:
            x = sequence.unsqueeze(1)  # (T, in) -> (T, 1, in)
        else:
            x = (
                sequence.transpose(0, 1) if self.batch_first else sequence
            )  # (B, T, in) -> (T, B, in)
        if x.shape[0] == 0:  # no step would run: no output and no final state to give
            raise RuntimeError(
                f"{op}: expected sequence length to be larger than 0, got input of shape "
                f"{_shape(sequence)} (batch_first={self.batch_first})"
            )
        expected = (self.num_layers * self._directions, x.shape[1], self.hidden_size)
        if hx is None:
            h = zeros(*expected, dtype=x.dtype, device=x.device)
            return x, ((h, h) if pair else h), unbatched
        if pair and (not isinstance(hx, tuple | list) or len(hx) != 2):
            raise TypeError(f"{op}: hx must be a pair (h_0, c_0), got {type(hx).__name__}")
        states = tuple(hx) if pair else (hx,)
        shape = (expected[0], expected[2]) if unbatched else expected
        for name, state in zip(("h_0", "c_0") if pair else ("h_0",), states):
            _check_state(op, name, state, shape, x.dtype)
        states = tuple(s.unsqueeze(1) for s in states) if unbatched else states
        return x, (states if pair else states[0]), unbatched

    def _restore_layout(self, output: Tensor, final: Any, unbatched: bool) -> tuple[Tensor, Any]:
        """Undo `_time_major`: batch_first or unbatched output, unbatched states."""
        if unbatched:
            if isinstance(final, tuple):  # (D * L, 1, H) -> (D * L, H)
                final = tuple(state.squeeze(1) for state in final)
            else:
                final = final.squeeze(1)
            return output.squeeze(1), final  # (T, 1, D * H) -> (T, D * H)
        if self.batch_first:
            output = output.transpose(0, 1)  # (T, B, D * H) -> (B, T, D * H)
        return output, final

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        for name, default in (("bias", True), ("batch_first", False), ("dropout", 0.0)):
            if getattr(self, name) != default:
                text += f", {name}={getattr(self, name)}"
        return text + (", bidirectional=True" if self.bidirectional else "")


class RNN(RNNBase):
    """Elman RNN, h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu), as PyTorch's
    nn.RNN; forward(input, h_0=None) -> (output, h_n). Shapes: see `RNNBase`."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        mode = _rnn_mode(nonlinearity, "RNN")
        super().__init__(
            mode,
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )
        self.nonlinearity = nonlinearity


class LSTM(RNNBase):
    """Long short-term memory (see `lstm_step`), as PyTorch's nn.LSTM:
    forward(input, (h_0, c_0)=None) -> (output, (h_n, c_n)). Shapes: see `RNNBase`."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(
            "LSTM",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            proj_size,
            device,
            dtype,
        )


class GRU(RNNBase):
    """Gated recurrent unit (see `gru_step`), as PyTorch's nn.GRU:
    forward(input, h_0=None) -> (output, h_n). Shapes: see `RNNBase`."""

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(
            "GRU",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )
