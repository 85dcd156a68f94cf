"""Recurrent layers: ``RNN`` (tanh/relu), ``LSTM``, ``GRU`` and their single-step cells.

Each layer and direction runs as one fused op (forward loop and backpropagation through time
in numpy, one graph node per layer and direction, like PyTorch's fused CPU kernels); the
cells run the same op for one time step. Parameter names, registration order, default
initialisation, shapes and error messages follow PyTorch.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, results
from gradscope.autograd.grad_mode import no_grad
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.nn.modules.module import Module
from gradscope.nn.parameter import Parameter
from gradscope.ops import inplace
from gradscope.ops.creation import zeros
from gradscope.nn.utils.rnn import PackedSequence, packed_row_index
from gradscope.ops.indexing import index_select
from gradscope.ops.pointwise import where
from gradscope.ops.shape import cat, reshape, squeeze, stack, transpose, unsqueeze

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


# ---------------------------------------------------------------- the fused layer op
class _RecurrentLayerBackward(Node):
    """Backpropagation through time for one layer and direction.

    Inputs (edges): x, h0, [c0 for LSTM], w_ih, w_hh, b_ih, b_hh. Outputs: the hidden state
    at every step (T, B, H), the last hidden state and, for LSTM, the last cell state.
    """

    __slots__ = ("reverse", "mask")
    _single_input = False
    mode = ""

    def backward(self, grad_out: Any, grad_h: Any, grad_c: Any = None) -> tuple:
        saved = self.saved()
        if self.mode == "LSTM":
            x, h0, c0, w_ih, w_hh, b_ih, b_hh, hs, gates, cs, tanh_cs = saved
        elif self.mode == "GRU":
            x, h0, w_ih, w_hh, b_ih, b_hh, hs, gates, hidden_n = saved
        else:
            x, h0, w_ih, w_hh, b_ih, b_hh, hs = saved
        steps, batch, _ = x.shape
        hidden = w_hh.shape[1]
        h_start = np.zeros((batch, hidden), hs.dtype) if h0 is None else h0
        prev_h = _previous(hs, h_start, self.reverse)
        order = range(steps) if self.reverse else range(steps - 1, -1, -1)
        grad_hidden = np.zeros_like(h_start) if grad_h is None else grad_h.copy()
        grad_gates_h = np.empty((steps, batch, w_hh.shape[0]), hs.dtype)
        grad_gates_x = grad_gates_h
        grad_cell = None
        mask = self.mask
        carry = carry_cell = 0.0
        if self.mode in ("RNN_TANH", "RNN_RELU"):
            for t in order:
                if grad_out is not None:
                    grad_hidden = grad_hidden + grad_out[t]
                if mask is not None:
                    grad_hidden, carry = _split_masked(grad_hidden, mask[t])
                h = hs[t]
                pre = grad_hidden * (1 - h * h) if self.mode == "RNN_TANH" else grad_hidden * (h > 0)
                grad_gates_h[t] = pre
                grad_hidden = pre @ w_hh + carry
        elif self.mode == "LSTM":
            c_start = np.zeros((batch, hidden), hs.dtype) if c0 is None else c0
            prev_c = _previous(cs, c_start, self.reverse)
            grad_cell = np.zeros_like(c_start) if grad_c is None else grad_c.copy()
            for t in order:
                if grad_out is not None:
                    grad_hidden = grad_hidden + grad_out[t]
                if mask is not None:
                    grad_hidden, carry = _split_masked(grad_hidden, mask[t])
                    grad_cell, carry_cell = _split_masked(grad_cell, mask[t])
                i, f, g, o = (gates[t, :, k * hidden:(k + 1) * hidden] for k in range(4))
                tanh_c = tanh_cs[t]
                grad_cell = grad_cell + grad_hidden * o * (1 - tanh_c * tanh_c)
                out = grad_gates_h[t]
                out[:, :hidden] = grad_cell * g * i * (1 - i)
                out[:, hidden:2 * hidden] = grad_cell * prev_c[t] * f * (1 - f)
                out[:, 2 * hidden:3 * hidden] = grad_cell * i * (1 - g * g)
                out[:, 3 * hidden:] = grad_hidden * tanh_c * o * (1 - o)
                grad_cell = grad_cell * f + carry_cell
                grad_hidden = out @ w_hh + carry
        else:
            grad_gates_x = np.empty_like(grad_gates_h)
            for t in order:
                if grad_out is not None:
                    grad_hidden = grad_hidden + grad_out[t]
                if mask is not None:
                    grad_hidden, carry = _split_masked(grad_hidden, mask[t])
                r, z, n = (gates[t, :, k * hidden:(k + 1) * hidden] for k in range(3))
                grad_n = grad_hidden * (1 - z) * (1 - n * n)
                grad_r = grad_n * hidden_n[t] * r * (1 - r)
                grad_z = grad_hidden * (prev_h[t] - n) * z * (1 - z)
                gx, gh = grad_gates_x[t], grad_gates_h[t]
                gx[:, :hidden] = gh[:, :hidden] = grad_r
                gx[:, hidden:2 * hidden] = gh[:, hidden:2 * hidden] = grad_z
                gx[:, 2 * hidden:] = grad_n
                gh[:, 2 * hidden:] = grad_n * r
                grad_hidden = grad_hidden * z + gh @ w_hh + carry
        return self._input_grads(x, w_ih, prev_h, grad_gates_x, grad_gates_h, grad_hidden, grad_cell)

    def _input_grads(self, x: np.ndarray, w_ih: np.ndarray, prev_h: np.ndarray, grad_gates_x: np.ndarray,
                     grad_gates_h: np.ndarray, grad_hidden: np.ndarray, grad_cell: Any) -> tuple:
        steps, batch, features = x.shape
        rows = steps * batch
        flat_x = grad_gates_x.reshape(rows, -1)
        flat_h = grad_gates_h.reshape(rows, -1)
        need = [edge[0] is not None for edge in self._next]
        grads: list = [(flat_x @ w_ih).reshape(x.shape) if need[0] else None,
                       grad_hidden if need[1] else None]
        if self.mode == "LSTM":
            grads.append(grad_cell if need[2] else None)
        offset = len(grads)
        grads.append(flat_x.T @ x.reshape(rows, features) if need[offset] else None)
        grads.append(flat_h.T @ prev_h.reshape(rows, -1) if need[offset + 1] else None)
        grads.append(flat_x.sum(0) if need[offset + 2] else None)
        grads.append(flat_h.sum(0) if need[offset + 3] else None)
        return tuple(grads)


class RnnTanhLayerBackward0(_RecurrentLayerBackward):
    __slots__ = ()
    mode = "RNN_TANH"


class RnnReluLayerBackward0(_RecurrentLayerBackward):
    __slots__ = ()
    mode = "RNN_RELU"


class LstmLayerBackward0(_RecurrentLayerBackward):
    __slots__ = ()
    mode = "LSTM"


class GruLayerBackward0(_RecurrentLayerBackward):
    __slots__ = ()
    mode = "GRU"


_NODES = {"RNN_TANH": RnnTanhLayerBackward0, "RNN_RELU": RnnReluLayerBackward0, "LSTM": LstmLayerBackward0,
          "GRU": GruLayerBackward0}


def _split_masked(grad: np.ndarray, valid: np.ndarray) -> tuple:
    """The gradient of a step's new state (rows of ``valid`` sequences) and the part that passes
    a padded step unchanged to the previous state."""
    keep = valid[:, None]
    return np.where(keep, grad, 0), np.where(keep, 0, grad)


def _previous(states: np.ndarray, start: np.ndarray, reverse: bool) -> np.ndarray:
    """The state entering each step: ``start`` for the first step, else the neighbour's output."""
    prev = np.empty_like(states)
    if reverse:
        prev[-1] = start
        prev[:-1] = states[1:]
    else:
        prev[0] = start
        prev[1:] = states[:-1]
    return prev


def recurrent_layer(mode: str, x: Tensor, h0: Tensor | None, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                    b_ih: Tensor | None, b_hh: Tensor | None, reverse: bool = False,
                    mask: np.ndarray | None = None) -> tuple:
    """Run one recurrent layer in one direction over a (T, B, I) sequence.

    Args:
        mode: ``"RNN_TANH"``, ``"RNN_RELU"``, ``"LSTM"`` or ``"GRU"``.
        x: the input sequence, (T, B, I).
        h0, c0: initial hidden (and LSTM cell) state, (B, H), or None for zeros.
        w_ih, w_hh, b_ih, b_hh: the layer's weights (gates stacked in PyTorch's order).
        reverse: process the sequence from the last step to the first.
        mask: (T, B) booleans, False where a (packed) sequence has ended: the state passes such
            steps unchanged, so each sequence starts and ends at its own length.

    Returns:
        ``(output, h_n, c_n)``: the hidden state at every step (T, B, H), the final hidden
        state and the final cell state (None unless LSTM).
    """
    xd, whh = x._data, w_hh._data
    steps, batch, features = xd.shape
    hidden = whh.shape[1]
    dtype = np.result_type(xd, w_ih._data)
    proj = (xd.reshape(steps * batch, features) @ w_ih._data.T).reshape(steps, batch, -1)
    if b_ih is not None:
        proj += b_ih._data
    bhh = b_hh._data if b_hh is not None else None
    h = np.zeros((batch, hidden), dtype) if h0 is None else h0._data
    c = None
    if mode == "LSTM":
        c = np.zeros((batch, hidden), dtype) if c0 is None else c0._data
    hs = np.empty((steps, batch, hidden), dtype)
    cache: list = []
    if mode == "LSTM":
        gates_all = np.empty((steps, batch, 4 * hidden), dtype)
        cs, tanh_cs = np.empty_like(hs), np.empty_like(hs)
        cache = [gates_all, cs, tanh_cs]
    elif mode == "GRU":
        gates_all = np.empty((steps, batch, 3 * hidden), dtype)
        hidden_n = np.empty_like(hs)
        cache = [gates_all, hidden_n]
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        h_prev, c_prev = h, c
        recurrent = h @ whh.T
        if bhh is not None:
            recurrent += bhh
        if mode == "RNN_TANH":
            h = np.tanh(proj[t] + recurrent)
        elif mode == "RNN_RELU":
            h = np.maximum(proj[t] + recurrent, 0)
        elif mode == "LSTM":
            pre = proj[t] + recurrent
            act = gates_all[t]
            act[:, :2 * hidden] = _sigmoid(pre[:, :2 * hidden])
            act[:, 2 * hidden:3 * hidden] = np.tanh(pre[:, 2 * hidden:3 * hidden])
            act[:, 3 * hidden:] = _sigmoid(pre[:, 3 * hidden:])
            c = act[:, hidden:2 * hidden] * c + act[:, :hidden] * act[:, 2 * hidden:3 * hidden]
            cs[t] = c
            tanh_cs[t] = np.tanh(c)
            h = act[:, 3 * hidden:] * tanh_cs[t]
        else:
            act = gates_all[t]
            act[:, :2 * hidden] = _sigmoid(proj[t, :, :2 * hidden] + recurrent[:, :2 * hidden])
            hidden_n[t] = recurrent[:, 2 * hidden:]
            act[:, 2 * hidden:] = np.tanh(proj[t, :, 2 * hidden:] + act[:, :hidden] * hidden_n[t])
            z, n = act[:, hidden:2 * hidden], act[:, 2 * hidden:]
            h = (1 - z) * n + z * h
        if mask is not None:
            keep = mask[t][:, None]
            h = np.where(keep, h, h_prev)
            if mode == "LSTM":
                c = np.where(keep, c, c_prev)
                cs[t] = c
        hs[t] = h
    last = 0 if reverse else steps - 1
    outs = [hs.copy(), hs[last].copy()]
    if mode == "LSTM":
        outs.append(cs[last].copy())
    inputs = (x, h0, c0, w_ih, w_hh, b_ih, b_hh) if mode == "LSTM" else (x, h0, w_ih, w_hh, b_ih, b_hh)
    node = new_node(_NODES[mode], inputs)
    if node is not None:
        node.reverse = reverse
        node.mask = mask
        node.save(*inputs, *(Tensor._make(a) for a in [hs] + cache))
    tensors = results(outs, node)
    return tensors[0], tensors[1], tensors[2] if mode == "LSTM" else None


def projected_lstm_layer(x: Tensor, h0: Tensor | None, c0: Tensor | None, w_ih: Tensor, w_hh: Tensor,
                         b_ih: Tensor | None, b_hh: Tensor | None, w_hr: Tensor, reverse: bool = False,
                         mask: np.ndarray | None = None) -> tuple:
    """One LSTM layer with a projection (``proj_size``): ``h_t = W_hr (o_t * tanh(c_t))``.

    Composed from differentiable ops step by step (the fused kernel assumes ``h`` and ``c`` have the
    same size); arguments and results as :func:`recurrent_layer`, with ``h`` of the projected size.
    """
    steps, batch = x._data.shape[:2]
    hidden, projected = w_hr._data.shape[1], w_hr._data.shape[0]
    h = zeros(batch, projected, dtype=x.dtype) if h0 is None else h0
    c = zeros(batch, hidden, dtype=x.dtype) if c0 is None else c0
    gates_x = x.matmul(w_ih.t())
    if b_ih is not None:
        gates_x = gates_x + b_ih
    outputs: list = [None] * steps
    order = range(steps - 1, -1, -1) if reverse else range(steps)
    for t in order:
        gates = gates_x[t] + h.matmul(w_hh.t())
        if b_hh is not None:
            gates = gates + b_hh
        i, f, g, o = gates.chunk(4, 1)
        c_new = f.sigmoid() * c + i.sigmoid() * g.tanh()
        h_new = (o.sigmoid() * c_new.tanh()).matmul(w_hr.t())
        if mask is not None:
            keep = Tensor._make(mask[t][:, None])
            h_new, c_new = where(keep, h_new, h), where(keep, c_new, c)
        h, c = h_new, c_new
        outputs[t] = h
    return stack(outputs, 0), h, c


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
