"""Pooling (2-D; the 1-D forms go through it): max, average, adaptive average, adaptive max."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import _shape_list, _tuple, float_input
from gradscope.ops.im2col import _window_slice


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pool_args(x: np.ndarray, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
               name: str, max_pool: bool) -> tuple:
    if x.ndim not in (3, 4):
        raise RuntimeError(f"{name}: Expected 3D or 4D (batch mode) tensor for input, but got: "
                           f"{_shape_list(x.shape)}")
    kernel = _tuple(kernel_size, 2, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else _tuple(stride, 2, "stride")
    pad = _tuple(padding, 2, "padding")
    dil = _tuple(dilation, 2, "dilation")
    for k, p, d in zip(kernel, pad, dil):
        if max_pool and p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p}, "
                               f"kernel_size={k} and dilation={d}")
        if not max_pool and p > k // 2:
            raise RuntimeError(f"pad should be at most half of kernel size, but got pad={p} and kernel_size={k}")
    out_hw = tuple(_pool_out(x.shape[-2 + i], kernel[i], stride[i], pad[i], dil[i], ceil_mode) for i in range(2))
    if out_hw[0] <= 0 or out_hw[1] <= 0:
        raise RuntimeError(f"Given input size: ({x.shape[-3]}x{x.shape[-2]}x{x.shape[-1]}). Calculated output "
                           f"size: ({x.shape[-3]}x{out_hw[0]}x{out_hw[1]}). Output size is too small")
    return kernel, stride, pad, dil, out_hw


def _pool_buffer_shape(x4: np.ndarray, kernel: tuple, stride: tuple, pad: tuple, dil: tuple,
                       out_hw: tuple) -> tuple:
    return x4.shape[:2] + tuple(max(x4.shape[2 + i] + 2 * pad[i], (out_hw[i] - 1) * stride[i] +
                                    dil[i] * (kernel[i] - 1) + 1) for i in range(2))


class MaxPool2DWithIndicesBackward0(Node):
    __slots__ = ("x_shape", "kernel", "stride", "pad", "dil", "out_hw", "argpos", "buffer_shape")

    def backward(self, g):
        g4 = g.reshape(self.argpos.shape)
        kh, kw = self.kernel
        overlapping = any(s < d * (k - 1) + 1 for s, d, k in zip(self.stride, self.dil, self.kernel))
        gxp = np.zeros(self.buffer_shape, dtype=g.dtype)
        for pos in range(kh * kw):
            target = gxp[_window_slice(pos // kw, pos % kw, self.out_hw, self.stride, self.dil)]
            if overlapping:
                target += g4 * (self.argpos == pos)
            else:
                np.multiply(g4, self.argpos == pos, out=target)
        ph, pw = self.pad
        h, w = self.x_shape[-2:]
        return gxp[:, :, ph:ph + h, pw:pw + w].reshape(self.x_shape)


def _window_argmax(xp: np.ndarray, kernel: tuple, out_hw: tuple, stride: tuple, dil: tuple) -> tuple:
    """Max of every window and the kernel position of its first maximum (PyTorch's choice: a NaN
    is a maximum, and the last NaN of a window wins)."""
    kh, kw = kernel
    views = [xp[_window_slice(pos // kw, pos % kw, out_hw, stride, dil)] for pos in range(kh * kw)]
    best = views[0].copy()
    for v in views[1:]:
        np.maximum(best, v, out=best)
    argpos = np.zeros(best.shape, dtype=np.int8 if kh * kw < 128 else np.int32)
    taken = views[0] == best
    for pos in range(1, kh * kw):
        hit = views[pos] == best
        hit &= ~taken
        argpos += hit.astype(argpos.dtype) * argpos.dtype.type(pos)
        taken |= hit
    nan = np.isnan(best)
    if nan.any():
        for pos, v in enumerate(views):
            np.copyto(argpos, pos, where=nan & np.isnan(v))
    return best, argpos


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """2-D max pooling over (N, C, H, W) or (C, H, W); the first maximum of a window wins."""
    x = input._data
    kernel, stride, pad, dil, out_hw = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode,
                                                  "max_pool2d", True)
    x4 = x.reshape((1,) * (x.ndim == 3) + x.shape)
    shape = _pool_buffer_shape(x4, kernel, stride, pad, dil, out_hw)
    if shape == x4.shape:
        xp = x4
    else:
        xp = np.full(shape, -np.inf, dtype=x.dtype)
        xp[:, :, pad[0]:pad[0] + x4.shape[2], pad[1]:pad[1] + x4.shape[3]] = x4
    best, argpos = _window_argmax(xp, kernel, out_hw, stride, dil)
    node = new_node(MaxPool2DWithIndicesBackward0, (input,))
    if node is not None:
        node.x_shape, node.kernel, node.stride, node.pad, node.dil = x.shape, kernel, stride, pad, dil
        node.out_hw, node.argpos, node.buffer_shape = out_hw, argpos, shape
    out = result(best.reshape(x.shape[:-2] + out_hw), node)
    if not return_indices:
        return out
    kw = kernel[1]
    rows = np.arange(out_hw[0]).reshape(-1, 1) * stride[0] - pad[0] + (argpos // kw) * dil[0]
    cols = np.arange(out_hw[1]) * stride[1] - pad[1] + (argpos % kw) * dil[1]
    indices = (rows.astype(np.int64) * x.shape[-1] + cols).reshape(out._data.shape)
    return out, Tensor._make(indices)


class AvgPool2DBackward0(Node):
    __slots__ = ("x_shape", "kernel", "stride", "pad", "out_hw", "divisor", "buffer_shape")

    def backward(self, g):
        g4 = g.reshape(self.buffer_shape[:2] + self.out_hw) / self.divisor
        gxp = np.zeros(self.buffer_shape, dtype=g.dtype)
        for i in range(self.kernel[0]):
            for j in range(self.kernel[1]):
                gxp[_window_slice(i, j, self.out_hw, self.stride, (1, 1))] += g4
        ph, pw = self.pad
        h, w = self.x_shape[-2:]
        return gxp[:, :, ph:ph + h, pw:pw + w].reshape(self.x_shape)


def _avg_divisor(size: tuple, kernel: tuple, stride: tuple, pad: tuple, out_hw: tuple,
                 count_include_pad: bool, divisor_override: Any, dtype: np.dtype) -> np.ndarray:
    if divisor_override is not None:
        if divisor_override == 0:
            raise RuntimeError("divisor must be not zero")
        return np.asarray(float(divisor_override), dtype=dtype)
    counts = []
    for i in range(2):
        start = np.arange(out_hw[i]) * stride[i] - pad[i]
        end = np.minimum(start + kernel[i], size[i] + pad[i])
        full = end - start
        valid = np.minimum(end, size[i]) - np.maximum(start, 0)
        counts.append(full if count_include_pad else valid)
    return (counts[0].reshape(-1, 1) * counts[1]).astype(dtype)


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: Any = None) -> Tensor:
    """2-D average pooling with PyTorch's divisor rules (``count_include_pad``, ``divisor_override``)."""
    x = input._data
    kernel, stride, pad, dil, out_hw = _pool_args(x, kernel_size, stride, padding, 1, ceil_mode,
                                                  "avg_pool2d", False)
    x4 = x.reshape((1,) * (x.ndim == 3) + x.shape)
    shape = _pool_buffer_shape(x4, kernel, stride, pad, dil, out_hw)
    xp = x4
    if shape != x4.shape:
        xp = np.zeros(shape, dtype=x.dtype)
        xp[:, :, pad[0]:pad[0] + x4.shape[2], pad[1]:pad[1] + x4.shape[3]] = x4
    total = xp[_window_slice(0, 0, out_hw, stride, dil)].copy()
    for pos in range(1, kernel[0] * kernel[1]):
        total += xp[_window_slice(pos // kernel[1], pos % kernel[1], out_hw, stride, dil)]
    divisor = _avg_divisor(x.shape[-2:], kernel, stride, pad, out_hw, count_include_pad, divisor_override,
                           x.dtype)
    total /= divisor
    node = new_node(AvgPool2DBackward0, (input,))
    if node is not None:
        node.x_shape, node.kernel, node.stride, node.pad = x.shape, kernel, stride, pad
        node.out_hw, node.divisor, node.buffer_shape = out_hw, divisor, shape
    return result(total.reshape(x.shape[:-2] + out_hw), node)


class AdaptiveAvgPool2DBackward0(Node):
    __slots__ = ("rows", "cols")

    def backward(self, g):
        return np.matmul(np.matmul(self.rows.T, g), self.cols)


def _adaptive_matrix(size: int, out: int, dtype: np.dtype) -> np.ndarray:
    """(out, size) matrix averaging the PyTorch adaptive windows [floor(i*n/o), ceil((i+1)*n/o))."""
    i = np.arange(out)
    start = (i * size) // out
    end = -((-(i + 1) * size) // out)
    pos = np.arange(size)
    inside = (pos >= start[:, None]) & (pos < end[:, None])
    return (inside / (end - start)[:, None]).astype(dtype)


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Adaptive average pooling to ``output_size`` (an int, a pair, or a pair with None entries)."""
    x = input._data
    if x.ndim not in (3, 4):
        raise RuntimeError(f"adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got {_shape_list(x.shape)}")
    sizes = (output_size, output_size) if isinstance(output_size, (int, np.integer)) or output_size is None \
        else tuple(output_size)
    out_hw = tuple(x.shape[-2 + i] if s is None else int(s) for i, s in enumerate(sizes))
    float_x = float_input(input)
    rows = _adaptive_matrix(x.shape[-2], out_hw[0], float_x.dtype)
    cols = _adaptive_matrix(x.shape[-1], out_hw[1], float_x.dtype)
    out = np.matmul(np.matmul(rows, float_x), cols.T)
    node = new_node(AdaptiveAvgPool2DBackward0, (input,))
    if node is not None:
        node.rows, node.cols = rows, cols
    return result(out, node)


# ====================================================================== adaptive max pooling


class _AdaptiveMaxPoolBackward(Node):
    __slots__ = ("x_shape", "flat_index")

    def backward(self, g):
        lead = int(np.prod(self.x_shape[:-2])) if len(self.x_shape) > 2 else 1
        grad = np.zeros((lead, self.x_shape[-2] * self.x_shape[-1]), dtype=g.dtype)
        rows = np.repeat(np.arange(lead), self.flat_index.size // max(lead, 1))
        np.add.at(grad, (rows, self.flat_index.reshape(-1)), g.reshape(-1))
        return grad.reshape(self.x_shape)


class AdaptiveMaxPool2DBackward0(_AdaptiveMaxPoolBackward):
    __slots__ = ()


def _adaptive_bounds(size: int, out: int) -> list:
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def adaptive_max_pool2d(input: Tensor, output_size: Any) -> tuple:
    """Adaptive max pooling of the last two dims; returns the output and the flat ``h * W + w`` indices."""
    x = input.numpy(force=True)
    if x.ndim not in (3, 4):
        raise RuntimeError(f"adaptive_max_pool2d(): Expected 3D or 4D tensor, but got {_shape_list(x.shape)}")
    sizes = (output_size, output_size) if isinstance(output_size, (int, np.integer)) or output_size is None \
        else tuple(output_size)
    out_hw = tuple(x.shape[-2 + i] if s is None else int(s) for i, s in enumerate(sizes))
    height, width = x.shape[-2:]
    flat = x.reshape(-1, height, width)
    values = np.empty((flat.shape[0],) + out_hw, dtype=x.dtype)
    index = np.empty((flat.shape[0],) + out_hw, dtype=np.int64)
    for i, (h0, h1) in enumerate(_adaptive_bounds(height, out_hw[0])):
        for j, (w0, w1) in enumerate(_adaptive_bounds(width, out_hw[1])):
            window = flat[:, h0:h1, w0:w1].reshape(flat.shape[0], -1)
            nan = np.isnan(window)
            best = np.where(nan.any(axis=1), np.argmax(nan, axis=1), np.argmax(window, axis=1))  # NaN wins
            values[:, i, j] = window[np.arange(window.shape[0]), best]
            index[:, i, j] = (h0 + best // (w1 - w0)) * width + w0 + best % (w1 - w0)
    shape = x.shape[:-2] + out_hw
    node = new_node(AdaptiveMaxPool2DBackward0, (input,))
    if node is not None:
        node.x_shape, node.flat_index = x.shape, index
    return result(values.reshape(shape), node), Tensor._make(index.reshape(shape))
