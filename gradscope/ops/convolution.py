"""Convolution and transposed convolution (1-D and 2-D).

Convolutions use im2col through ``as_strided`` windows and one batched matmul; col2im (the
input gradient) adds one strided slice per kernel position, never a loop over pixels.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import _check_dtypes, _shape_list, _tuple
from gradscope.ops.im2col import _col2im, _col2im_flat, _im2col, _windows


class ConvolutionBackward0(Node):
    """Convolution (and transposed convolution) over 1 or 2 spatial dims; edges (input, weight, bias)."""

    __slots__ = ("x_shape", "w_shape", "x4_shape", "w4_shape", "stride", "dilation", "pads", "groups",
                 "out_hw", "transposed", "crop", "padded_shape")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_w, _), (node_b, _) = self._next
        x, w, cols = self.saved()
        x, w = x.reshape(self.x4_shape), w.reshape(self.w4_shape)
        n = x.shape[0]
        g4 = g.reshape((n, -1) + self.out_hw)
        gb = g4.sum(axis=(0, 2, 3)) if node_b is not None else None
        if self.transposed:
            gx, gw = self._transposed_grads(g4, x, w, node_x is not None, node_w is not None)
        else:
            gx, gw = self._grads(g4, x, w, cols, node_x is not None, node_w is not None)
        if gx is not None:
            gx = gx.reshape(self.x_shape)
        if gw is not None:
            gw = gw.reshape(self.w_shape)
        return gx, gw, gb

    def _grads(self, g4, x, w, cols, need_x, need_w):
        groups = self.groups
        n, out_c = g4.shape[:2]
        kernel = w.shape[2:]
        buffer_shape = self.padded_shape
        if self.stride == (1, 1):
            # wide rows: the gradient gets zero columns where the output has none (see _im2col)
            wide = np.zeros((n, out_c, self.out_hw[0], buffer_shape[3]), dtype=g4.dtype)
            wide[..., :self.out_hw[1]] = g4
            g4 = wide
        gm = g4.reshape(n, groups, out_c // groups, -1)
        gx = gw = None
        if need_w:
            gw = np.matmul(gm, cols.transpose(0, 1, 3, 2)).sum(axis=0)
        if need_x:
            wm = w.reshape(groups, out_c // groups, -1)
            gcols = np.matmul(wm.transpose(0, 2, 1), gm)
            if self.stride == (1, 1):
                gxp = _col2im_flat(gcols.reshape((n, x.shape[1]) + kernel + (-1,)), buffer_shape, self.dilation)
            else:
                gcols = gcols.reshape((n, x.shape[1]) + kernel + self.out_hw)
                gxp = _col2im(gcols, buffer_shape, kernel, self.out_hw, self.stride, self.dilation)
            top, _, left, _ = self.pads
            gx = gxp[:, :, top:top + x.shape[2], left:left + x.shape[3]]
        return gx, gw

    def _transposed_grads(self, g4, x, w, need_x, need_w):
        groups = self.groups
        n, in_c = x.shape[:2]
        kernel = w.shape[2:]
        top, left = self.crop
        full = np.zeros(g4.shape[:2] + self.padded_shape, dtype=g4.dtype)
        full[:, :, top:top + g4.shape[2], left:left + g4.shape[3]] = g4
        cols = _windows(full, kernel, x.shape[2:], self.stride, self.dilation)
        cols = cols.reshape(n, groups, -1, x.shape[2] * x.shape[3])
        gx = gw = None
        if need_x:
            gx = np.matmul(w.reshape(groups, in_c // groups, -1), cols)
        if need_w:
            xr = x.reshape(n, groups, in_c // groups, -1)
            gw = np.matmul(xr, cols.transpose(0, 1, 3, 2)).sum(axis=0)
        return gx, gw


def _conv_padding(padding: Any, kernel: tuple, dilation: tuple, stride: tuple, nd: int) -> tuple:
    """(top, bottom, left, right) zero padding for a 2-D view of the input."""
    if isinstance(padding, str):
        if padding == "valid":
            pairs = [(0, 0)] * nd
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ValueError("padding='same' is not supported for strided convolutions")
            pairs = []
            for k, d in zip(kernel[-nd:], dilation[-nd:]):
                total = d * (k - 1)
                pairs.append((total // 2, total - total // 2))
        else:
            raise ValueError(f"Invalid padding string '{padding}', should be one of {{'valid', 'same'}}")
    else:
        pairs = [(p, p) for p in _tuple(padding, nd, "padding")]
        if any(p < 0 for p, _ in pairs):
            raise RuntimeError("negative padding is not supported")
    if nd == 1:
        pairs = [(0, 0)] + pairs
    return pairs[0] + pairs[1]


def _check_conv_input(x: np.ndarray, w: np.ndarray, groups: int, nd: int, transposed: bool) -> bool:
    """Validate shapes; True when the input is unbatched."""
    if x.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to conv{nd}d, but "
                           f"got input of size: {_shape_list(x.shape)}")
    if w.ndim != nd + 2:
        raise RuntimeError(f"weight should have {nd + 2} dimensions, got {w.ndim}")
    unbatched = x.ndim == nd + 1
    channels = x.shape[0] if unbatched else x.shape[1]
    expected = w.shape[0] if transposed else w.shape[1] * groups
    if channels != expected:
        shown = _shape_list(x.shape)
        if transposed:
            raise RuntimeError(f"Given transposed=1, weight of size {_shape_list(w.shape)}, expected input"
                               f"{shown} to have {w.shape[0]} channels, but got {channels} channels instead")
        raise RuntimeError(f"Given groups={groups}, weight of size {_shape_list(w.shape)}, expected input"
                           f"{shown} to have {expected} channels, but got {channels} channels instead")
    if not transposed and w.shape[0] % groups:
        raise RuntimeError("Given groups=%d, expected weight to be divisible by %d at dimension 0, but got "
                           "weight of size %s instead" % (groups, groups, _shape_list(w.shape)))
    return unbatched


def convolution(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1, padding: Any = 0,
                dilation: Any = 1, groups: int = 1, *, nd: int = 2) -> Tensor:
    """Cross-correlation over ``nd`` (1 or 2) spatial dims, like ``torch.nn.functional.conv{nd}d``."""
    x, w = input._data, weight._data
    unbatched = _check_conv_input(x, w, groups, nd, False)
    _check_dtypes(x, (weight, bias), "expected scalar type {} but found {}")
    stride = _tuple(stride, nd, "stride")
    dilation = _tuple(dilation, nd, "dilation")
    pads = _conv_padding(padding, w.shape[2:], dilation, stride, nd)
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if nd == 1:
        stride, dilation = (1,) + stride, (1,) + dilation
    x4 = x.reshape((1,) * unbatched + x.shape)
    if nd == 1:
        x4 = x4[:, :, None, :]
    w4 = w[:, :, None, :] if nd == 1 else w
    n = x4.shape[0]
    kernel = w4.shape[2:]
    padded_hw = (x4.shape[2] + pads[0] + pads[1], x4.shape[3] + pads[2] + pads[3])
    out_hw = tuple((padded_hw[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2))
    if out_hw[0] <= 0 or out_hw[1] <= 0:
        raise RuntimeError(f"Calculated padded input size per channel: ({padded_hw[0]} x {padded_hw[1]}). "
                           f"Kernel size: ({(kernel[0] - 1) * dilation[0] + 1} x "
                           f"{(kernel[1] - 1) * dilation[1] + 1}). Kernel size can't be greater than actual "
                           "input size")
    out_c = w4.shape[0]
    cols, buffer_shape = _im2col(x4, pads, kernel, out_hw, stride, dilation, groups)
    out = np.matmul(w4.reshape(groups, out_c // groups, -1), cols).reshape(n, out_c, -1)
    if stride == (1, 1):
        item = out.itemsize
        out = np.ascontiguousarray(as_strided(out, (n, out_c) + out_hw, out.strides[:2] +
                                              (buffer_shape[3] * item, item)))
    else:
        out = out.reshape((n, out_c) + out_hw)
    if bias is not None:
        out += bias._data.reshape(1, -1, 1, 1)
    out_shape = ((out_c,) if unbatched else (n, out_c)) + (out_hw if nd == 2 else out_hw[1:])
    node = new_node(ConvolutionBackward0, (input, weight, bias))
    if node is not None:
        node.x_shape, node.w_shape = x.shape, w.shape
        node.stride, node.dilation, node.pads, node.groups = stride, dilation, pads, groups
        node.out_hw, node.transposed, node.padded_shape = out_hw, False, buffer_shape
        node.x4_shape, node.w4_shape = x4.shape, w4.shape
        node.save(input, weight, Tensor._make(cols))
    return result(out.reshape(out_shape), node)


def conv_transpose(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: Any = 1,
                   padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1, *,
                   nd: int = 2) -> Tensor:
    """Transposed convolution (the adjoint of ``convolution``) over ``nd`` (1 or 2) spatial dims."""
    x, w = input._data, weight._data
    unbatched = _check_conv_input(x, w, groups, nd, True)
    _check_dtypes(x, (weight, bias), "expected scalar type {} but found {}")
    stride = _tuple(stride, nd, "stride")
    dilation = _tuple(dilation, nd, "dilation")
    pad = _tuple(padding, nd, "padding")
    out_pad = _tuple(output_padding, nd, "output_padding")
    for op, s, d in zip(out_pad, stride, dilation):
        if op >= s and op >= d:
            raise RuntimeError("output padding must be smaller than either stride or dilation, but got "
                               f"output_padding_height: {out_pad[0]} output_padding_width: {out_pad[-1]} "
                               f"stride_height: {stride[0]} stride_width: {stride[-1]} dilation_height: "
                               f"{dilation[0]} dilation_width: {dilation[-1]}")
    if nd == 1:
        stride, dilation, pad, out_pad = (1,) + stride, (1,) + dilation, (0,) + pad, (0,) + out_pad
    x4 = x.reshape((1,) * unbatched + x.shape)
    if nd == 1:
        x4 = x4[:, :, None, :]
    w4 = w[:, :, None, :] if nd == 1 else w
    n, in_c, h, wd = x4.shape
    kernel = w4.shape[2:]
    out_c = w4.shape[1] * groups
    full_hw = tuple((size - 1) * s + d * (k - 1) + 1 + op
                    for size, s, d, k, op in zip((h, wd), stride, dilation, kernel, out_pad))
    out_hw = tuple(f - op - 2 * p for f, op, p in zip(full_hw, out_pad, pad))
    out_hw = tuple(o + op for o, op in zip(out_hw, out_pad))
    if out_hw[0] <= 0 or out_hw[1] <= 0:
        raise RuntimeError(f"Given input size per channel: ({h} x {wd}). Calculated output size per channel: "
                           f"({out_hw[0]} x {out_hw[1]}). Output size is too small")
    wm = w4.reshape(groups, in_c // groups, -1)
    cols = np.matmul(wm.transpose(0, 2, 1), x4.reshape(n, groups, in_c // groups, h * wd))
    cols = cols.reshape((n, out_c) + kernel + (h, wd))
    full = _col2im(cols, (n, out_c) + full_hw, kernel, (h, wd), stride, dilation)
    out = np.ascontiguousarray(full[:, :, pad[0]:pad[0] + out_hw[0], pad[1]:pad[1] + out_hw[1]])
    if bias is not None:
        out += bias._data.reshape(1, -1, 1, 1)
    out_shape = ((out_c,) if unbatched else (n, out_c)) + (out_hw if nd == 2 else out_hw[1:])
    node = new_node(ConvolutionBackward0, (input, weight, bias))
    if node is not None:
        node.x_shape, node.w_shape = x.shape, w.shape
        node.stride, node.dilation, node.groups = stride, dilation, groups
        node.out_hw, node.transposed, node.padded_shape, node.crop = out_hw, True, full_hw, pad
        node.x4_shape, node.w4_shape = x4.shape, w4.shape
        node.save(input, weight, None)
    return result(out.reshape(out_shape), node)
