"""Recurrent layers: ``RNN`` (tanh/relu), ``LSTM``, ``GRU`` and their single-step cells.

Each layer and direction runs as one fused op (``gradscope.ops.recurrent``: forward loop and
backpropagation through time in numpy, one graph node per layer and direction, like PyTorch's
fused CPU kernels); the cells run the same op for one time step. Parameter names, registration
order, default initialisation, shapes and error messages follow PyTorch.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from gradscope.autograd.grad_mode import no_grad
from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.nn.modules.module import Module
from gradscope.nn.parameter import Parameter
from gradscope.ops import inplace
from gradscope.ops.creation import zeros
from gradscope.nn.utils.rnn import PackedSequence, packed_row_index
from gradscope.ops.indexing import index_select
from gradscope.ops.recurrent import projected_lstm_layer, recurrent_layer
from gradscope.ops.shape import cat, reshape, squeeze, stack, transpose, unsqueeze

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---------------------------------------------------------------- modules
def _init_uniform(module: Module, hidden_size: int) -> None:
    bound = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
    with no_grad():
        for weight in module.parameters():
            inplace.uniform_(weight, -bound, bound)


def _new_parameter(*shape: int, dtype: Any = None) -> Parameter:
    return Parameter(zeros(*shape, dtype=dtype))


class RNNBase(Module):
    """Shared machinery of ``RNN``, ``LSTM`` and ``GRU``: parameters, checks and the layer loop.

    Args:
        mode: ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``.
        input_size: features per step of the input.
        hidden_size: features of the hidden state.
        num_layers: stacked layers.
        bias: whether the layers have ``bias_ih``/``bias_hh``.
        batch_first: inputs and outputs are (B, T, F) instead of (T, B, F).
        dropout: dropout probability on the outputs of every layer but the last (training only).
        bidirectional: also run every layer backwards in time (``..._reverse`` parameters).
    """

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 proj_size: int = 0, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an "
                             "element being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and "
                          f"num_layers={num_layers}", stacklevel=3)
        if not isinstance(hidden_size, int) or isinstance(hidden_size, bool):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if isinstance(proj_size, bool) or not isinstance(proj_size, int) or proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size or hidden_size
        self._flat_weights_names: list[str] = []
        self._all_weights: list[list[str]] = []
        for layer in range(num_layers):
            for direction in range(directions):
                layer_input = input_size if layer == 0 else real_hidden * directions
                suffix = "_reverse" if direction == 1 else ""
                names = [f"weight_ih_l{layer}{suffix}", f"weight_hh_l{layer}{suffix}"]
                shapes = [(gate_size, layer_input), (gate_size, real_hidden)]
                if bias:
                    names += [f"bias_ih_l{layer}{suffix}", f"bias_hh_l{layer}{suffix}"]
                    shapes += [(gate_size,), (gate_size,)]
                if proj_size:
                    names.append(f"weight_hr_l{layer}{suffix}")
                    shapes.append((proj_size, hidden_size))
                for name, shape in zip(names, shapes):
                    setattr(self, name, _new_parameter(*shape, dtype=dtype))
                self._flat_weights_names.extend(names)
                self._all_weights.append(names)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        _init_uniform(self, self.hidden_size)

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, name, None) for name in self._flat_weights_names]

    @property
    def all_weights(self) -> list[list[Parameter]]:
        """The parameters grouped per layer and direction."""
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def flatten_parameters(self) -> None:
        """No-op (PyTorch compacts cuDNN weights here)."""

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            text += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if self.bias is not True:
            text += f", bias={self.bias}"
        if self.batch_first is not False:
            text += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            text += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            text += f", bidirectional={self.bidirectional}"
        return text

    def _layer_weights(self, layer: int, direction: int) -> tuple:
        suffix = "_reverse" if direction == 1 else ""
        w_ih = getattr(self, f"weight_ih_l{layer}{suffix}")
        w_hh = getattr(self, f"weight_hh_l{layer}{suffix}")
        if not self.bias:
            return w_ih, w_hh, None, None
        return w_ih, w_hh, getattr(self, f"bias_ih_l{layer}{suffix}"), getattr(self, f"bias_hh_l{layer}{suffix}")

    def _check_input(self, input: Tensor) -> None:
        if input.dim() not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.dim()}D instead")
        weight = self.weight_ih_l0
        if input._data.dtype != weight._data.dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype ({weight.dtype}). "
                             f"Convert input: input.to({weight.dtype}), or convert model: model.to({input.dtype})")
        if input._data.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input._data.shape[-1]}")

    def _check_hidden(self, hx: Tensor, batch: int, what: str = "Expected hidden size") -> None:
        features = self.proj_size if self.proj_size and what != "Expected hidden[1] size" else self.hidden_size
        expected = (self.num_layers * (2 if self.bidirectional else 1), batch, features)
        if tuple(hx._data.shape) != expected:
            raise RuntimeError(f"{what} {expected}, got {list(hx._data.shape)}")

    def _run(self, input: Tensor, hx: Tensor | None, cx: Tensor | None, mask: np.ndarray | None = None) -> tuple:
        """The layer loop on a batched (T, B, F) input; returns output, h_n and c_n (or None).

        ``mask`` (T, B) marks the steps of each sequence of a packed batch."""
        if input._data.shape[0] == 0:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        directions = 2 if self.bidirectional else 1
        layer_input = input
        last_h, last_c = [], []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                index = layer * directions + direction
                h0 = hx[index] if hx is not None else None
                c0 = cx[index] if cx is not None else None
                if self.proj_size:
                    suffix = "_reverse" if direction == 1 else ""
                    out, h_n, c_n = projected_lstm_layer(layer_input, h0, c0, *self._layer_weights(layer, direction),
                                                         getattr(self, f"weight_hr_l{layer}{suffix}"),
                                                         reverse=direction == 1, mask=mask)
                else:
                    out, h_n, c_n = recurrent_layer(self.mode, layer_input, h0, c0,
                                                    *self._layer_weights(layer, direction),
                                                    reverse=direction == 1, mask=mask)
                outputs.append(out)
                last_h.append(h_n)
                last_c.append(c_n)
            layer_input = outputs[0] if directions == 1 else cat(outputs, 2)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        h_n = stack(last_h, 0)
        c_n = stack(last_c, 0) if self.mode == "LSTM" else None
        return layer_input, h_n, c_n

    def _run_packed(self, packed: PackedSequence, hx: Tensor | None, cx: Tensor | None) -> tuple:
        """Run on a ``PackedSequence``: returns the packed output, h_n and c_n in the caller's batch order."""
        data, batch_sizes, sorted_indices, unsorted_indices = packed
        if data.dim() != 2:
            raise ValueError(f"{type(self).__name__}: Expected packed data to be 2D, got {data.dim()}D instead")
        self._check_input(data)
        rows = packed_row_index(batch_sizes.numpy(force=True).astype(np.int64))
        steps, batch = rows.shape
        if sorted_indices is not None:
            hx = None if hx is None else index_select(hx, 1, sorted_indices)
            cx = None if cx is None else index_select(cx, 1, sorted_indices)
        for state, what in ((hx, "Expected hidden size"), (cx, "Expected hidden[1] size")):
            if state is not None:
                self._check_hidden(state, batch, what)
        count, features = data.numpy(force=True).shape
        gather = Tensor._make(np.where(rows >= 0, rows, count).reshape(-1))
        padded = cat([data, zeros(1, features, dtype=data.dtype)], 0)[gather]
        output, h_n, c_n = self._run(reshape(padded, (steps, batch, features)), hx, cx, rows >= 0)
        step_index, slot = np.nonzero(rows >= 0)
        flat = reshape(output, (steps * batch, -1))
        packed_output = PackedSequence(flat[Tensor._make(step_index * batch + slot)], batch_sizes, sorted_indices,
                                       unsorted_indices)
        if unsorted_indices is not None:
            h_n = index_select(h_n, 1, unsorted_indices)
            c_n = None if c_n is None else index_select(c_n, 1, unsorted_indices)
        return packed_output, h_n, c_n

    def _prepare(self, input: Tensor) -> tuple[Tensor, bool]:
        self._check_input(input)
        batched = input.dim() == 3
        if not batched:
            input = unsqueeze(input, 1)
        elif self.batch_first:
            input = transpose(input, 0, 1)
        return input, batched

    def _finish(self, output: Tensor, batched: bool) -> Tensor:
        if not batched:
            return squeeze(output, 1)
        return transpose(output, 0, 1) if self.batch_first else output


class RNN(RNNBase):
    """Elman RNN: ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` with tanh or relu.

    ``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
    batch_first=False, dropout=0.0, bidirectional=False)``; ``forward(input, hx=None)``
    returns ``(output, h_n)``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if len(args) > 3:
            self.nonlinearity = args[3]
            args = args[:3] + args[4:]
        else:
            self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{self.nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, *args, **kwargs)

    def forward(self, input: Tensor | PackedSequence, hx: Tensor | None = None) -> tuple:
        if isinstance(input, PackedSequence):
            output, h_n, _ = self._run_packed(input, hx, None)
            return output, h_n
        input, batched = self._prepare(input)
        if hx is not None:
            if hx.dim() != (3 if batched else 2):
                kind = "batched 3-D" if batched else "unbatched 2-D"
                raise RuntimeError(f"For {kind} input, hx should also be {3 if batched else 2}-D but got "
                                   f"{hx.dim()}-D tensor")
            if not batched:
                hx = unsqueeze(hx, 1)
            self._check_hidden(hx, input._data.shape[1])
        output, h_n, _ = self._run(input, hx, None)
        return self._finish(output, batched), (h_n if batched else squeeze(h_n, 1))


class GRU(RNNBase):
    """Gated recurrent unit (gates r, z, n; ``h_t = (1 - z) * n + z * h_{t-1}``).

    Same arguments as ``RNN`` without ``nonlinearity``; ``forward(input, hx=None)`` returns
    ``(output, h_n)``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    forward = RNN.forward


class LSTM(RNNBase):
    """Long short-term memory (gates i, f, g, o).

    Same arguments as ``GRU``; ``forward(input, hx=None)`` takes ``hx = (h_0, c_0)`` and
    returns ``(output, (h_n, c_n))``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)

    def forward(self, input: Tensor | PackedSequence, hx: tuple[Tensor, Tensor] | None = None) -> tuple:
        if isinstance(input, PackedSequence):
            h0, c0 = hx if hx is not None else (None, None)
            output, h_n, c_n = self._run_packed(input, h0, c0)
            return output, (h_n, c_n)
        input, batched = self._prepare(input)
        h0 = c0 = None
        if hx is not None:
            h0, c0 = hx
            dims = 3 if batched else 2
            if h0.dim() != dims or c0.dim() != dims:
                kind = "batched 3-D" if batched else "unbatched 2-D"
                raise RuntimeError(f"For {kind} input, hx and cx should also be {dims}-D but got "
                                   f"({h0.dim()}-D, {c0.dim()}-D) tensors")
            if not batched:
                h0, c0 = unsqueeze(h0, 1), unsqueeze(c0, 1)
            self._check_hidden(h0, input._data.shape[1], "Expected hidden[0] size")
            self._check_hidden(c0, input._data.shape[1], "Expected hidden[1] size")
        output, h_n, c_n = self._run(input, h0, c0)
        if not batched:
            h_n, c_n = squeeze(h_n, 1), squeeze(c_n, 1)
        return self._finish(output, batched), (h_n, c_n)


# ---------------------------------------------------------------- cells
class RNNCellBase(Module):
    """Shared parameters of the cells: ``weight_ih`` (G*H, I), ``weight_hh`` (G*H, H),
    ``bias_ih`` and ``bias_hh`` (G*H), drawn from U(-1/sqrt(H), 1/sqrt(H))."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.weight_ih = _new_parameter(num_chunks * hidden_size, input_size, dtype=dtype)
        self.weight_hh = _new_parameter(num_chunks * hidden_size, hidden_size, dtype=dtype)
        if bias:
            self.bias_ih = _new_parameter(num_chunks * hidden_size, dtype=dtype)
            self.bias_hh = _new_parameter(num_chunks * hidden_size, dtype=dtype)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        _init_uniform(self, self.hidden_size)

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            text += f", bias={self.bias}"
        nonlinearity = getattr(self, "nonlinearity", "tanh")
        if nonlinearity != "tanh":
            text += f", nonlinearity={nonlinearity}"
        return text

    def _check(self, input: Tensor, states: tuple) -> bool:
        name = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        for state in states:
            if state is not None and state.dim() not in (1, 2):
                raise ValueError(f"{name}: Expected hidden to be 1D or 2D, got {state.dim()}D instead")
        batched = input.dim() == 2
        features = input._data.shape[-1]
        if features != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {features} expected {self.input_size}")
        batch = input._data.shape[0] if batched else 1
        for index, state in enumerate(states):
            if state is None:
                continue
            shape = state._data.shape if batched else (1,) + state._data.shape
            if len(shape) != 2 or shape[0] != batch:
                raise RuntimeError(f"Input batch size {batch} doesn't match hidden{index} batch size {shape[0]}")
            if shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{index} has inconsistent hidden_size: got {shape[1]}, expected "
                                   f"{self.hidden_size}")
        return batched

    def _step(self, mode: str, input: Tensor, hx: Tensor | None, cx: Tensor | None, batched: bool) -> tuple:
        if not batched:
            input = unsqueeze(input, 0)
            hx = unsqueeze(hx, 0) if hx is not None else None
            cx = unsqueeze(cx, 0) if cx is not None else None
        _, h, c = recurrent_layer(mode, unsqueeze(input, 0), hx, cx, self.weight_ih, self.weight_hh, self.bias_ih,
                                  self.bias_hh)
        if not batched:
            h = squeeze(h, 0)
            c = squeeze(c, 0) if c is not None else None
        return h, c


class RNNCell(RNNCellBase):
    """One step of an Elman RNN: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``.

    ``RNNCell(input_size, hidden_size, bias=True, nonlinearity='tanh')``;
    ``forward(input, hx=None) -> h'``.
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        batched = self._check(input, (hx,))
        if self.nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif self.nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        return self._step(mode, input, hx, None, batched)[0]


class LSTMCell(RNNCellBase):
    """One LSTM step. ``LSTMCell(input_size, hidden_size, bias=True)``;
    ``forward(input, hx=None)`` with ``hx = (h, c)`` returns ``(h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Tensor, hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if hx is not None and not isinstance(hx, (tuple, list)):
            raise TypeError(f"lstm_cell(): argument 'hx' (position 2) must be tuple of Tensors, not "
                            f"{type(hx).__name__}")
        h0, c0 = hx if hx is not None else (None, None)
        batched = self._check(input, (h0, c0))
        return self._step("LSTM", input, h0, c0, batched)


class GRUCell(RNNCellBase):
    """One GRU step. ``GRUCell(input_size, hidden_size, bias=True)``; ``forward(input, hx=None) -> h'``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        batched = self._check(input, (hx,))
        return self._step("GRU", input, hx, None, batched)[0]
