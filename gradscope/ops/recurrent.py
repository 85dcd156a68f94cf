"""The fused recurrent layer op: one RNN (tanh/relu), LSTM or GRU layer and direction as one
graph node, its forward loop and its backpropagation through time in numpy (like PyTorch's fused
CPU kernels); and the LSTM layer with a projection, composed from differentiable ops.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, results
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops.creation import zeros
from gradscope.ops.pointwise import where
from gradscope.ops.shape import stack


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


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
