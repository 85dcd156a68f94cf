"""3-D (volumetric) convolution and pooling: ``conv3d``, ``conv_transpose3d``, ``max_pool3d``,
``avg_pool3d``, ``adaptive_avg_pool3d`` and ``adaptive_max_pool3d`` over (N, C, D, H, W) or (C, D, H, W).

The code is written for any number of spatial dims: im2col takes an ``as_strided`` view of the
kernel windows (one batched matmul per convolution), and col2im adds one strided slice per
kernel position. The 1-D and 2-D layers keep their tuned paths in ``convolution`` and ``pooling``.
"""
from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, reduce, shape
from gradscope.ops._util import _check_dtypes, _shape_list, _tuple, float_input
from gradscope.ops.convolution import _check_conv_input
from gradscope.ops.pooling import _pool_out

__all__ = ["adaptive_avg_pool3d", "adaptive_max_pool3d", "avg_pool3d", "conv3d", "conv_transpose3d", "max_pool3d"]

_ND = 3


def _windows(xp: np.ndarray, kernel: tuple, out: tuple, stride: tuple, dilation: tuple) -> np.ndarray:
    """Read-only view (N, C, *kernel, *out) of the kernel windows of an (N, C, *spatial) array."""
    spatial = xp.strides[2:]
    strides = xp.strides[:2] + tuple(s * d for s, d in zip(spatial, dilation)) + \
        tuple(s * st for s, st in zip(spatial, stride))
    return as_strided(xp, xp.shape[:2] + tuple(kernel) + tuple(out), strides, writeable=False)


def _window_slices(position: tuple, out: tuple, stride: tuple, dilation: tuple) -> tuple:
    """Index of the input positions that kernel ``position`` reads for every output element."""
    return (slice(None), slice(None)) + tuple(
        slice(p * d, p * d + s * (o - 1) + 1, s) for p, o, s, d in zip(position, out, stride, dilation))


def _col2im(cols: np.ndarray, target_shape: tuple, kernel: tuple, out: tuple, stride: tuple,
            dilation: tuple) -> np.ndarray:
    """Sum columns (N, C, *kernel, *out) into an array of ``target_shape`` (the adjoint of ``_windows``)."""
    target = np.zeros(target_shape, dtype=cols.dtype)
    for position in itertools.product(*(range(k) for k in kernel)):
        target[_window_slices(position, out, stride, dilation)] += cols[(slice(None), slice(None)) + position]
    return target


def _pad(x: np.ndarray, pads: tuple, value: float = 0.0) -> np.ndarray:
    """Pad the spatial dims by ``pads`` ((before, after) per dim) with ``value``."""
    if not any(b or a for b, a in pads):
        return x
    out = np.full(x.shape[:2] + tuple(s + b + a for s, (b, a) in zip(x.shape[2:], pads)), value, dtype=x.dtype)
    out[(slice(None), slice(None)) + tuple(slice(b, b + s) for s, (b, _) in zip(x.shape[2:], pads))] = x
    return out


def _crop(x: np.ndarray, starts: tuple, sizes: tuple) -> np.ndarray:
    return x[(slice(None), slice(None)) + tuple(slice(b, b + s) for b, s in zip(starts, sizes))]


def _batched(x: np.ndarray) -> tuple:
    """``x`` with a batch dim (added for unbatched (C, D, H, W) input) and whether one was added."""
    unbatched = x.ndim == _ND + 1
    return (x[None] if unbatched else x), unbatched


# ====================================================================== convolution
class ConvolutionBackward0(Node):
    """3-D convolution or transposed convolution; edges (input, weight, bias)."""

    __slots__ = ("x_shape", "stride", "dilation", "pads", "groups", "out", "transposed", "full")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_w, _), (node_b, _) = self._next
        x, w, cols = self.saved()
        x5, _ = _batched(x)
        g5 = g.reshape((x5.shape[0], -1) + self.out)
        gb = g5.sum(axis=(0,) + tuple(range(2, 2 + _ND))) if node_b is not None else None
        if self.transposed:
            gx, gw = self._transposed(g5, x5, w, node_x is not None, node_w is not None)
        else:
            gx, gw = self._direct(g5, x5, w, cols, node_x is not None, node_w is not None)
        return (None if gx is None else gx.reshape(self.x_shape)), gw, gb

    def _direct(self, g5, x5, w, cols, need_x, need_w):
        n, groups = x5.shape[0], self.groups
        out_c, kernel = w.shape[0], w.shape[2:]
        gm = g5.reshape(n, groups, out_c // groups, -1)
        gx = gw = None
        if need_w:
            gw = np.matmul(gm, cols.transpose(0, 1, 3, 2)).sum(axis=0).reshape(w.shape)
        if need_x:
            gcols = np.matmul(w.reshape(groups, out_c // groups, -1).transpose(0, 2, 1), gm)
            gcols = gcols.reshape((n, x5.shape[1]) + kernel + self.out)
            padded = x5.shape[:2] + tuple(s + b + a for s, (b, a) in zip(x5.shape[2:], self.pads))
            gxp = _col2im(gcols, padded, kernel, self.out, self.stride, self.dilation)
            gx = _crop(gxp, tuple(b for b, _ in self.pads), x5.shape[2:])
        return gx, gw

    def _transposed(self, g5, x5, w, need_x, need_w):
        n, in_c, groups = x5.shape[0], x5.shape[1], self.groups
        kernel = w.shape[2:]
        full = np.zeros(g5.shape[:2] + self.full, dtype=g5.dtype)
        full[(slice(None), slice(None)) + tuple(slice(b, b + o) for (b, _), o in zip(self.pads, self.out))] = g5
        cols = _windows(full, kernel, x5.shape[2:], self.stride, self.dilation)
        cols = cols.reshape(n, groups, -1, int(np.prod(x5.shape[2:])))
        gx = gw = None
        if need_x:
            gx = np.matmul(w.reshape(groups, in_c // groups, -1), cols)
        if need_w:
            xr = x5.reshape(n, groups, in_c // groups, -1)
            gw = np.matmul(xr, cols.transpose(0, 1, 3, 2)).sum(axis=0).reshape(w.shape)
        return gx, gw


def _conv_pads(padding: Any, kernel: tuple, dilation: tuple, stride: tuple) -> tuple:
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * _ND
        if padding != "same":
            raise ValueError(f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}")
        if any(s != 1 for s in stride):
            raise ValueError("padding='same' is not supported for strided convolutions")
        return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation))
    pads = _tuple(padding, _ND, "padding")
    if any(p < 0 for p in pads):
        raise RuntimeError("negative padding is not supported")
    return tuple((p, p) for p in pads)


def conv3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """3-D cross-correlation over (N, C, D, H, W) or (C, D, H, W); weight (C_out, C_in // groups, kd, kh, kw)."""
    x, w = input._data, weight._data
    unbatched = _check_conv_input(x, w, groups, _ND, False)
    _check_dtypes(x, (weight, bias), "expected scalar type {} but found {}")
    stride = _tuple(stride, _ND, "stride")
    dilation = _tuple(dilation, _ND, "dilation")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    kernel = w.shape[2:]
    pads = _conv_pads(padding, kernel, dilation, stride)
    x5, _ = _batched(x)
    xp = _pad(x5, pads)
    out = tuple((p - d * (k - 1) - 1) // s + 1 for p, k, s, d in zip(xp.shape[2:], kernel, stride, dilation))
    if min(out) <= 0:
        raise RuntimeError(f"Calculated padded input size per channel: ({' x '.join(map(str, xp.shape[2:]))}). "
                           f"Kernel size: ({' x '.join(str(d * (k - 1) + 1) for k, d in zip(kernel, dilation))})"
                           ". Kernel size can't be greater than actual input size")
    n, out_c = x5.shape[0], w.shape[0]
    cols = _windows(xp, kernel, out, stride, dilation).reshape(n, groups, -1, int(np.prod(out)))
    y = np.matmul(w.reshape(groups, out_c // groups, -1), cols).reshape((n, out_c) + out)
    if bias is not None:
        y += bias._data.reshape((1, -1) + (1,) * _ND)
    node = new_node(ConvolutionBackward0, (input, weight, bias))
    if node is not None:
        node.x_shape, node.stride, node.dilation, node.pads, node.groups = x.shape, stride, dilation, pads, groups
        node.out, node.transposed = out, False
        node.save(input, weight, Tensor._make(cols))
    return result(y[0] if unbatched else y, node)


def conv_transpose3d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """3-D transposed convolution (the adjoint of ``conv3d``); weight (C_in, C_out // groups, kd, kh, kw)."""
    x, w = input._data, weight._data
    unbatched = _check_conv_input(x, w, groups, _ND, True)
    _check_dtypes(x, (weight, bias), "expected scalar type {} but found {}")
    stride = _tuple(stride, _ND, "stride")
    dilation = _tuple(dilation, _ND, "dilation")
    pad = _tuple(padding, _ND, "padding")
    out_pad = _tuple(output_padding, _ND, "output_padding")
    for op, s, d in zip(out_pad, stride, dilation):
        if op >= s and op >= d:
            raise RuntimeError(f"output padding must be smaller than either stride or dilation, but got "
                               f"output_padding={list(out_pad)}, stride={list(stride)}, dilation={list(dilation)}")
    x5, _ = _batched(x)
    n, in_c = x5.shape[:2]
    sizes, kernel = x5.shape[2:], w.shape[2:]
    out_c = w.shape[1] * groups
    full = tuple((i - 1) * s + d * (k - 1) + 1 + op
                 for i, s, d, k, op in zip(sizes, stride, dilation, kernel, out_pad))
    out = tuple(f - 2 * p for f, p in zip(full, pad))
    if min(out) <= 0:
        raise RuntimeError(f"Given input size per channel: ({' x '.join(map(str, sizes))}). Calculated output size "
                           f"per channel: ({' x '.join(map(str, out))}). Output size is too small")
    wm = w.reshape(groups, in_c // groups, -1)
    cols = np.matmul(wm.transpose(0, 2, 1), x5.reshape(n, groups, in_c // groups, -1))
    cols = cols.reshape((n, out_c) + kernel + sizes)
    y = np.ascontiguousarray(_crop(_col2im(cols, (n, out_c) + full, kernel, sizes, stride, dilation), pad, out))
    if bias is not None:
        y += bias._data.reshape((1, -1) + (1,) * _ND)
    node = new_node(ConvolutionBackward0, (input, weight, bias))
    if node is not None:
        node.x_shape, node.stride, node.dilation, node.groups = x.shape, stride, dilation, groups
        node.pads, node.out, node.transposed, node.full = tuple((p, p) for p in pad), out, True, full
        node.save(input, weight, None)
    return result(y[0] if unbatched else y, node)


# ====================================================================== pooling
def _pool_args(x: np.ndarray, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
               name: str, max_pool: bool) -> tuple:
    if x.ndim not in (_ND + 1, _ND + 2):
        raise RuntimeError(f"{name}: Expected 4D or 5D (batch mode) tensor for input, but got: "
                           f"{_shape_list(x.shape)}")
    kernel = _tuple(kernel_size, _ND, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) \
        else _tuple(stride, _ND, "stride")
    pad = _tuple(padding, _ND, "padding")
    dil = _tuple(dilation, _ND, "dilation")
    for k, p, d in zip(kernel, pad, dil):
        limit = (d * (k - 1) + 1) // 2 if max_pool else k // 2
        if p > limit:
            raise RuntimeError(f"pad should be smaller than or equal to half of kernel size, but got "
                               f"padW = {p}, padH = {p}, kW = {k}, kH = {k}")
    sizes = x.shape[-_ND:]
    out = tuple(_pool_out(sizes[i], kernel[i], stride[i], pad[i], dil[i], ceil_mode) for i in range(_ND))
    if min(out) <= 0:
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, x.shape[-_ND - 1:]))}). Calculated output size: "
                           f"({'x'.join(map(str, (x.shape[-_ND - 1],) + out))}). Output size is too small")
    buffer = tuple(max(sizes[i] + 2 * pad[i], (out[i] - 1) * stride[i] + dil[i] * (kernel[i] - 1) + 1)
                   for i in range(_ND))
    pads = tuple((p, b - s - p) for p, b, s in zip(pad, buffer, sizes))
    return kernel, stride, pad, dil, out, pads


class MaxPool3DWithIndicesBackward0(Node):
    __slots__ = ("x_shape", "kernel", "stride", "pad", "dil", "out", "argpos", "buffer")

    def backward(self, g):
        g5 = g.reshape(self.argpos.shape)
        gxp = np.zeros(self.buffer, dtype=g.dtype)
        for pos, position in enumerate(itertools.product(*(range(k) for k in self.kernel))):
            gxp[_window_slices(position, self.out, self.stride, self.dil)] += np.where(self.argpos == pos, g5, 0)
        return _crop(gxp, self.pad, self.x_shape[-_ND:]).reshape(self.x_shape)


def max_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """3-D max pooling; the first maximum of a window wins (a NaN is a maximum, the last NaN wins)."""
    x = input._data
    kernel, stride, pad, dil, out, pads = _pool_args(x, kernel_size, stride, padding, dilation, ceil_mode,
                                                     "max_pool3d", True)
    x5 = x.reshape((-1, x.shape[-_ND - 1]) + x.shape[-_ND:])
    xp = _pad(x5, pads, -np.inf)
    windows = _windows(xp, kernel, out, stride, dil).reshape(x5.shape[:2] + (-1,) + out)
    argpos = np.argmax(windows, axis=2)
    nan = np.isnan(windows)
    if nan.any():
        last_nan = nan.shape[2] - 1 - np.argmax(nan[:, :, ::-1], axis=2)
        argpos = np.where(nan.any(axis=2), last_nan, argpos)
    best = np.take_along_axis(windows, argpos[:, :, None], axis=2)[:, :, 0]
    node = new_node(MaxPool3DWithIndicesBackward0, (input,))
    if node is not None:
        node.x_shape, node.kernel, node.stride, node.pad, node.dil = x.shape, kernel, stride, pad, dil
        node.out, node.argpos, node.buffer = out, argpos, xp.shape
    values = result(best.reshape(x.shape[:-_ND] + out), node)
    if not return_indices:
        return values
    offsets = np.unravel_index(argpos, kernel)
    coords = [np.arange(o).reshape([-1 if j == i else 1 for j in range(_ND)]) * s - p + off * d
              for i, (o, s, p, d, off) in enumerate(zip(out, stride, pad, dil, offsets))]
    indices = np.ravel_multi_index(tuple(np.broadcast_arrays(*coords)), x.shape[-_ND:])
    return values, Tensor._make(indices.astype(np.int64).reshape(values.shape))


class AvgPool3DBackward0(Node):
    __slots__ = ("x_shape", "kernel", "stride", "pad", "out", "divisor", "buffer")

    def backward(self, g):
        g5 = g.reshape(self.buffer[:2] + self.out) / self.divisor
        gxp = np.zeros(self.buffer, dtype=g.dtype)
        for position in itertools.product(*(range(k) for k in self.kernel)):
            gxp[_window_slices(position, self.out, self.stride, (1,) * _ND)] += g5
        return _crop(gxp, self.pad, self.x_shape[-_ND:]).reshape(self.x_shape)


def _avg_divisor(sizes: tuple, kernel: tuple, stride: tuple, pad: tuple, out: tuple, count_include_pad: bool,
                 divisor_override: Any, dtype: np.dtype) -> np.ndarray:
    if divisor_override is not None:
        if divisor_override == 0:
            raise RuntimeError("divisor must be not zero")
        return np.asarray(float(divisor_override), dtype=dtype)
    divisor = np.ones((1,) * _ND)
    for i in range(_ND):
        start = np.arange(out[i]) * stride[i] - pad[i]
        end = np.minimum(start + kernel[i], sizes[i] + pad[i])
        count = (end - start) if count_include_pad else (np.minimum(end, sizes[i]) - np.maximum(start, 0))
        divisor = divisor * count.reshape([-1 if j == i else 1 for j in range(_ND)])
    return divisor.astype(dtype)


def avg_pool3d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """3-D average pooling with PyTorch's divisor rules (``count_include_pad``, ``divisor_override``)."""
    x = float_input(input)
    kernel, stride, pad, _, out, pads = _pool_args(x, kernel_size, stride, padding, 1, ceil_mode, "avg_pool3d",
                                                   False)
    x5 = x.reshape((-1, x.shape[-_ND - 1]) + x.shape[-_ND:])
    xp = _pad(x5, pads)
    total = _windows(xp, kernel, out, stride, (1,) * _ND).sum(axis=tuple(range(2, 2 + _ND)))
    divisor = _avg_divisor(x.shape[-_ND:], kernel, stride, pad, out, count_include_pad, divisor_override, x.dtype)
    total = (total / divisor).astype(x.dtype, copy=False)
    node = new_node(AvgPool3DBackward0, (input,))
    if node is not None:
        node.x_shape, node.kernel, node.stride, node.pad = x.shape, kernel, stride, pad
        node.out, node.divisor, node.buffer = out, divisor, xp.shape
    return result(total.reshape(x.shape[:-_ND] + out), node)


def _output_sizes(x: np.ndarray, output_size: Any) -> tuple:
    sizes = (output_size,) * _ND if isinstance(output_size, (int, np.integer)) or output_size is None \
        else tuple(output_size)
    return tuple(x.shape[-_ND + i] if s is None else int(s) for i, s in enumerate(sizes))


def _adaptive_bounds(size: int, out: int) -> list:
    return [((i * size) // out, -((-(i + 1) * size) // out)) for i in range(out)]


def adaptive_avg_pool3d(input: Tensor, output_size: Any) -> Tensor:
    """Average over the adaptive windows [floor(i*n/o), ceil((i+1)*n/o)) of each of the last three dims."""
    x = input._data
    if x.ndim not in (_ND + 1, _ND + 2):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got {_shape_list(x.shape)}")
    out = _output_sizes(x, output_size)
    if out == (1,) * _ND:
        return reduce.mean(input, (-3, -2, -1), keepdim=True)
    dtype = float_input(input).dtype
    y = input
    for axis, (size, o) in enumerate(zip(x.shape[-_ND:], out)):
        matrix = np.zeros((size, o), dtype=dtype)
        for j, (start, end) in enumerate(_adaptive_bounds(size, o)):
            matrix[start:end, j] = 1.0 / (end - start)
        moved = shape.movedim(y, axis - _ND, -1)
        y = shape.movedim(arith.matmul(moved, Tensor._make(matrix)), -1, axis - _ND)
    return y


class AdaptiveMaxPool3DBackward0(Node):
    __slots__ = ("x_shape", "flat_index")

    def backward(self, g):
        spatial = int(np.prod(self.x_shape[-_ND:]))
        lead = int(np.prod(self.x_shape[:-_ND]))
        grad = np.zeros((lead, spatial), dtype=g.dtype)
        rows = np.repeat(np.arange(lead), self.flat_index.size // max(lead, 1))
        np.add.at(grad, (rows, self.flat_index.reshape(-1)), g.reshape(-1))
        return grad.reshape(self.x_shape)


def adaptive_max_pool3d(input: Tensor, output_size: Any) -> tuple:
    """Adaptive max pooling of the last three dims; the output and the flat ``(d * H + h) * W + w`` indices."""
    x = input._data
    if x.ndim not in (_ND + 1, _ND + 2):
        raise RuntimeError(f"adaptive_max_pool3d(): Expected 4D or 5D tensor, but got {_shape_list(x.shape)}")
    out = _output_sizes(x, output_size)
    spatial = x.shape[-_ND:]
    flat = x.reshape((-1,) + spatial)
    values = np.empty((flat.shape[0],) + out, dtype=x.dtype)
    index = np.empty((flat.shape[0],) + out, dtype=np.int64)
    bounds = [_adaptive_bounds(s, o) for s, o in zip(spatial, out)]
    for cell in itertools.product(*(range(o) for o in out)):
        ranges = [bounds[i][c] for i, c in enumerate(cell)]
        window = flat[(slice(None),) + tuple(slice(a, b) for a, b in ranges)]
        window_shape = window.shape[1:]
        window = window.reshape(flat.shape[0], -1)
        nan = np.isnan(window)
        best = np.where(nan.any(axis=1), np.argmax(nan, axis=1), np.argmax(window, axis=1))
        values[(slice(None),) + cell] = window[np.arange(window.shape[0]), best]
        local = np.unravel_index(best, window_shape)
        index[(slice(None),) + cell] = np.ravel_multi_index(
            tuple(loc + a for loc, (a, _) in zip(local, ranges)), spatial)
    result_shape = x.shape[:-_ND] + out
    node = new_node(AdaptiveMaxPool3DBackward0, (input,))
    if node is not None:
        node.x_shape, node.flat_index = x.shape, index
    return result(values.reshape(result_shape), node), Tensor._make(index.reshape(result_shape))
