"""Neural-network ops with their own backward: linear, convolution, pooling, embedding, padding,
normalisation, activations and the core computations of the losses.

Convolutions use im2col through ``as_strided`` windows and one batched matmul; col2im (the
input gradient) adds one strided slice per kernel position, never a loop over pixels.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import F64, float_input, fused_multiply_add, select_or_zero, unbroadcast, wide_sum
from gradscope.ops.pointwise import _sigmoid_array, erf_array

# ====================================================================== helpers


def _tuple(value: Any, n: int, name: str = "value") -> tuple:
    """``value`` as an n-tuple of ints (an int is repeated)."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1 and n > 1:
        return value * n
    if len(value) != n:
        raise RuntimeError(f"expected {name} to be a single integer value or a list of {n} values to match "
                           f"the convolution dimensions, but got {name}={list(value)}")
    return value


def _shape_list(shape: tuple) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _windows(xp: np.ndarray, kernel: tuple, out: tuple, stride: tuple, dilation: tuple) -> np.ndarray:
    """Read-only view (N, C, kh, kw, oh, ow) of the kernel windows of a 4-D array."""
    n, c = xp.shape[:2]
    s0, s1, s2, s3 = xp.strides
    return as_strided(xp, (n, c, kernel[0], kernel[1], out[0], out[1]),
                      (s0, s1, s2 * dilation[0], s3 * dilation[1], s2 * stride[0], s3 * stride[1]),
                      writeable=False)


def _window_slice(i: int, j: int, out: tuple, stride: tuple, dilation: tuple) -> tuple:
    """Index of the input positions that kernel position (i, j) reads for every output pixel."""
    h0, w0 = i * dilation[0], j * dilation[1]
    return (slice(None), slice(None), slice(h0, h0 + stride[0] * (out[0] - 1) + 1, stride[0]),
            slice(w0, w0 + stride[1] * (out[1] - 1) + 1, stride[1]))


def _col2im(cols: np.ndarray, shape: tuple, kernel: tuple, out: tuple, stride: tuple,
            dilation: tuple) -> np.ndarray:
    """Sum columns (N, C, kh, kw, oh, ow) back into an array of ``shape`` (the adjoint of im2col)."""
    target = np.zeros(shape, dtype=cols.dtype)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            target[_window_slice(i, j, out, stride, dilation)] += cols[:, :, i, j]
    return target


def _pad_zeros(x: np.ndarray, pads: tuple) -> np.ndarray:
    """Zero-pad the last two axes by (top, bottom, left, right)."""
    top, bottom, left, right = pads
    if not (top or bottom or left or right):
        return x
    out = np.zeros(x.shape[:2] + (x.shape[2] + top + bottom, x.shape[3] + left + right), dtype=x.dtype)
    out[:, :, top:top + x.shape[2], left:left + x.shape[3]] = x
    return out


def _im2col(x: np.ndarray, pads: tuple, kernel: tuple, out_hw: tuple, stride: tuple, dilation: tuple,
            groups: int) -> tuple:
    """Columns (N, groups, C // groups * kh * kw, L) of a 4-D input, and the padded buffer's shape.

    With stride 1 the columns are "wide rows": column ``t`` reads the flat padded input at
    ``t + i * d * Wp + j * d``, so every copy is one contiguous run; ``L = oh * Wp`` and the
    ``Wp - ow`` extra columns of each output row are discarded (one spare zero row at the bottom
    keeps the last reads in bounds).
    """
    n, c = x.shape[:2]
    top, bottom, left, right = pads
    if stride == (1, 1):
        hp, wp = x.shape[2] + top + bottom, x.shape[3] + left + right
        xp = np.zeros((n, c, hp + 1, wp), dtype=x.dtype)
        xp[:, :, top:top + x.shape[2], left:left + x.shape[3]] = x
        item = xp.itemsize
        length = out_hw[0] * wp
        view = as_strided(xp, (n, c, kernel[0], kernel[1], length),
                          (xp.strides[0], xp.strides[1], dilation[0] * wp * item, dilation[1] * item, item),
                          writeable=False)
        return view.reshape(n, groups, -1, length), xp.shape
    xp = _pad_zeros(x, pads)
    cols = _windows(xp, kernel, out_hw, stride, dilation).reshape(n, groups, -1, out_hw[0] * out_hw[1])
    return cols, xp.shape


def _col2im_flat(cols: np.ndarray, shape: tuple, dilation: tuple) -> np.ndarray:
    """Adjoint of the wide-row ``_im2col``: cols (N, C, kh, kw, L) summed into ``shape``."""
    n, c, kh, kw, length = cols.shape
    wp = shape[3]
    target = np.zeros((n, c, shape[2] * wp), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            offset = i * dilation[0] * wp + j * dilation[1]
            target[:, :, offset:offset + length] += cols[:, :, i, j]
    return target.reshape(shape)


_SCALAR_NAMES = {"float16": "Half", "float32": "Float", "float64": "Double"}


def _scalar_name(a: np.ndarray) -> str:
    return _SCALAR_NAMES.get(a.dtype.name, a.dtype.name)


def _check_dtypes(x: np.ndarray, params: tuple, message: str) -> None:
    """Raise PyTorch's mixed-dtype error (``message`` formatted with the two type names)."""
    for p in params:
        if p is not None and p._data.dtype != x.dtype:
            raise RuntimeError(message.format(_scalar_name(x), _scalar_name(p._data)))


def _reduction_check(reduction: str) -> None:
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduce(loss: np.ndarray, reduction: str) -> np.ndarray:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum(), dtype=loss.dtype)
    return np.asarray(loss.mean() if loss.size else np.nan, dtype=loss.dtype)


def _reduced_grad(g: np.ndarray, shape: tuple, reduction: str) -> np.ndarray:
    """The gradient of each element of an unreduced loss of ``shape`` given the reduced one's."""
    if reduction == "none":
        return g
    if reduction == "mean":
        return np.broadcast_to(g / max(int(np.prod(shape)), 1), shape)
    return np.broadcast_to(g, shape)


# ====================================================================== linear
class AddmmBackward0(Node):
    """``bias + mat1 @ mat2``; edges (bias, mat1, mat2) as in PyTorch's addmm."""

    __slots__ = ("bias_shape",)
    _single_input = False

    def backward(self, g):
        (node_b, _), (node_1, _), (node_2, _) = self._next
        mat1, mat2 = self.saved()
        gb = None
        if node_b is not None:
            gb = g.sum(axis=0) if self.bias_shape == g.shape[1:] else unbroadcast(g, self.bias_shape)
            if gb is g:
                gb = g.copy()  # never hand one array to two consumers
        g1 = g.dot(mat2.T) if node_1 is not None else None  # (ndarray.dot: ``@`` with less dispatch)
        # the transpose of a fresh (out, in) product: Linear's weight gradient is then contiguous
        g2 = g.T.dot(mat1).T if node_2 is not None else None
        return gb, g1, g2


class TBackward0(Node):
    """The transposed weight of ``linear`` (private to it: its one consumer is AddmmBackward0 or
    MmBackward0). A gradient that is the transpose of a whole contiguous array is handed on as
    that array, so the weight's ``.grad`` needs no copy."""

    __slots__ = ()

    def backward(self, g):
        out = g.T
        base = g.base
        if (base is not None and self._extras is None
                and out.flags.c_contiguous and base.flags.c_contiguous and base.shape == out.shape
                and base.__array_interface__["data"][0] == out.__array_interface__["data"][0]):
            return base
        return out


def weight_t(weight: Tensor) -> Tensor:
    """``weight.t()`` for ``linear`` (a view sharing the weight's version counter)."""
    out = result(weight._data.T, new_node(TBackward0, (weight,)))
    out._vc = weight._version_counter()
    return out


def addmm(bias: Tensor, mat1: Tensor, mat2: Tensor) -> Tensor:
    """``bias + mat1 @ mat2`` for 2-D ``mat1``/``mat2`` and a broadcastable ``bias``."""
    a, b = mat1._data, mat2._data
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError("addmm: mat1 and mat2 must be matrices")
    _check_dtypes(a, (mat2, bias), "self and mat2 must have the same dtype, but got {} and {}")
    if a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                           f"{b.shape[0]}x{b.shape[1]})")
    out = a.dot(b)  # (``a @ b`` with less dispatch)
    out += bias._data
    node = new_node(AddmmBackward0, (bias, mat1, mat2))
    if node is not None:
        node.bias_shape = bias._data.shape
        # each matrix is needed only for the other's gradient (as PyTorch saves them)
        (_, _), (node_1, _), (node_2, _) = node._edges
        node.save(mat1 if node_2 is not None else None, mat2 if node_1 is not None else None)
    return result(out, node)


class TrilinearBackward0(Node):
    """``out[m, o] = sum_ij x1[m, i] w[o, i, j] x2[m, j]``; edges (input1, weight, input2)."""

    __slots__ = ()
    _single_input = False

    def backward(self, g):
        (node_1, _), (node_w, _), (node_2, _) = self._next
        x1, w, x2 = self.saved()
        g1 = g2 = gw = None
        if node_1 is not None or node_2 is not None:
            u = (g @ w.reshape(w.shape[0], -1)).reshape(g.shape[0], w.shape[1], w.shape[2])
            if node_1 is not None:
                g1 = np.einsum("mij,mj->mi", u, x2)
            if node_2 is not None:
                g2 = np.einsum("mij,mi->mj", u, x1)
        if node_w is not None:
            gw = np.einsum("mo,mi,mj->oij", g, x1, x2, optimize=True)
        return g1, gw, g2


def bilinear_product(input1: Tensor, input2: Tensor, weight: Tensor) -> Tensor:
    """``x1^T W_o x2`` for every output feature ``o``; 2-D inputs (batch, features)."""
    x1, w, x2 = input1._data, weight._data, input2._data
    out = np.einsum("moj,mj->mo", np.tensordot(x1, w, axes=([1], [1])), x2)
    node = new_node(TrilinearBackward0, (input1, weight, input2))
    if node is not None:
        node.save(input1, weight, input2)
    return result(out, node)


# ====================================================================== convolution
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


# ====================================================================== pooling
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


# ====================================================================== embedding, padding
class EmbeddingBackward0(Node):
    __slots__ = ("num_weights", "indices", "padding_idx", "scale_grad_by_freq")

    def backward(self, g):
        dim = g.shape[-1]
        flat = self.indices.reshape(-1)
        rows = g.reshape(-1, dim)
        if self.scale_grad_by_freq:
            counts = np.bincount(flat, minlength=self.num_weights)
            rows = rows / counts[flat].reshape(-1, 1).astype(g.dtype)
        grad = np.zeros((self.num_weights, dim), dtype=g.dtype)
        np.add.at(grad, flat, rows)
        if self.padding_idx is not None:
            grad[self.padding_idx] = 0
        return grad


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm: float | None = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of ``weight`` picked by the integer ``input``; row ``padding_idx`` gets no gradient."""
    idx = input._data
    if idx.dtype.kind not in "iu":
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar "
                           f"types: Long, Int; but got {input._type_name()} instead (while checking arguments "
                           "for embedding)")
    w = weight._data
    num = w.shape[0]
    if idx.size and (idx.min() < -num or idx.max() >= num):
        raise IndexError("index out of range in self")
    idx = np.where(idx < 0, idx + num, idx)
    if padding_idx is not None:
        if not -num <= padding_idx < num:
            raise AssertionError("Padding_idx must be within num_embeddings")
        padding_idx = padding_idx % num
    if max_norm is not None:
        _renorm_rows(weight, np.unique(idx), max_norm, norm_type)
    node = new_node(EmbeddingBackward0, (weight,))
    if node is not None:
        node.num_weights, node.indices, node.padding_idx = num, idx, padding_idx
        node.scale_grad_by_freq = scale_grad_by_freq
    return result(w[idx], node)


def _renorm_rows(weight: Tensor, rows: np.ndarray, max_norm: float, norm_type: float) -> None:
    """Rescale (in place, without grad) the given rows whose norm exceeds ``max_norm``."""
    data = weight._data
    picked = data[rows]
    norms = np.linalg.norm(picked.astype(np.float64), ord=norm_type, axis=1)
    scale = np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    data[rows] = (picked * scale[:, None]).astype(data.dtype)
    weight._bump_version()


class ConstantPadNdBackward0(Node):
    __slots__ = ("x_shape", "src", "dst")

    def backward(self, g):
        grad = np.zeros(self.x_shape, dtype=g.dtype)
        grad[self.src] = g[self.dst]
        return grad


def _pad_pairs(pad: Sequence[int], ndim: int) -> list:
    pad = [int(p) for p in pad]
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > ndim:
        raise RuntimeError("Padding length should be less than or equal to two times the input dimension "
                           f"but got padding length {len(pad)} and input of dimension {ndim}")
    pairs = [(0, 0)] * ndim
    for k in range(len(pad) // 2):
        pairs[ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return pairs


def constant_pad(input: Tensor, pad: Sequence[int], value: float = 0.0) -> Tensor:
    """Pad (or crop, for negative entries) with a constant; ``pad`` starts at the last dim."""
    x = input._data
    pairs = _pad_pairs(pad, x.ndim)
    shape, src, dst = [], [], []
    for size, (lo, hi) in zip(x.shape, pairs):
        new = size + lo + hi
        if new < 0:
            raise RuntimeError(f"The input size {size}, plus negative padding {lo} and {hi} resulted in a "
                               f"negative output size, which is invalid. Check dimension of your input.")
        start, stop = max(-lo, 0), size - max(-hi, 0)
        shape.append(new)
        src.append(slice(start, max(stop, start)))
        dst.append(slice(max(lo, 0), max(lo, 0) + max(stop - start, 0)))
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(dst)] = x[tuple(src)]
    node = new_node(ConstantPadNdBackward0, (input,))
    if node is not None:
        node.x_shape, node.src, node.dst = x.shape, tuple(src), tuple(dst)
    return result(out, node)


class _IndexPadBackward(Node):
    __slots__ = ("x_shape", "maps")

    def backward(self, g):
        for axis, idx in reversed(self.maps):
            moved = np.moveaxis(g, axis, 0)
            grad = np.zeros((self.x_shape[axis],) + moved.shape[1:], dtype=g.dtype)
            np.add.at(grad, idx, moved)
            g = np.moveaxis(grad, 0, axis)
        return g


def _index_pad_classes() -> dict:
    classes = {}
    for mode, stem in (("reflect", "ReflectionPad"), ("replicate", "ReplicationPad"), ("circular", "CircularPad")):
        for k in (1, 2, 3):
            name = f"{stem}{k}DBackward0"
            classes[(mode, k)] = type(name, (_IndexPadBackward,), {"__slots__": ()})
    return classes


_INDEX_PAD = _index_pad_classes()
_NUMPY_PAD_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def index_pad(input: Tensor, pad: Sequence[int], mode: str) -> Tensor:
    """Reflect, replicate or circular padding of the last ``len(pad) // 2`` dims."""
    x = input._data
    n_padded = len(pad) // 2
    if n_padded not in (1, 2, 3) or len(pad) % 2 or x.ndim not in (n_padded + 1, n_padded + 2):
        raise NotImplementedError(f"Padding size {len(pad)} is not supported for {x.ndim}D input tensor. "
                                  "Non-constant padding pads the last 1, 2 or 3 dims of a 2D-3D, 3D-4D or "
                                  "4D-5D input.")
    pairs = _pad_pairs(pad, x.ndim)
    maps = []
    out = x
    for axis, (lo, hi) in enumerate(pairs):
        if lo == 0 and hi == 0:
            continue
        size = x.shape[axis]
        if mode == "reflect" and (lo >= size or hi >= size):
            raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding input "
                               f"dimension, but got: padding ({lo}, {hi}) at dimension {axis} of input "
                               f"{_shape_list(x.shape)}")
        if mode == "circular" and (lo > size or hi > size):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if lo < 0 or hi < 0:
            raise RuntimeError(f"negative padding is not supported for mode '{mode}'")
        idx = np.pad(np.arange(size), (lo, hi), mode=_NUMPY_PAD_MODE[mode])
        maps.append((axis, idx))
        out = np.take(out, idx, axis=axis)
    node = new_node(_INDEX_PAD[(mode, n_padded)], (input,))
    if node is not None:
        node.x_shape, node.maps = x.shape, maps
    return result(np.ascontiguousarray(out), node)


# ====================================================================== normalisation
class NativeBatchNormBackward0(Node):
    """Edges (input, weight, bias). Saved: the input and the weight; ``mean`` and ``invstd`` per
    channel (the batch's in training, from the running statistics in evaluation).

    As torch's CPU kernel: the per-channel sums ``sum(dy)`` and ``sum((x - mean) * dy)`` are
    accumulated in float64, then ``dx = (dy - sum(dy) / n - (x - mean) * k) * invstd * w`` with
    ``k = sum((x - mean) * dy) * invstd**2 / n`` in the input's dtype."""

    __slots__ = ("axes", "mean", "invstd", "training", "count")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_w, _), (node_b, _) = self._next
        x, w = self.saved()
        shape = (1, -1) + (1,) * (g.ndim - 2)
        centred = x - self.mean.reshape(shape)
        dtype = x.dtype
        grad_sum = wide_sum(g, self.axes)
        need_dot = node_w is not None or (node_x is not None and self.training)
        dot = wide_sum(centred * g, self.axes) if need_dot else None
        gx = None
        if node_x is not None:
            scale = self.invstd if w is None else self.invstd * w
            if self.training:
                k = dot.astype(dtype) * self.invstd * self.invstd / np.asarray(self.count, dtype)
                grad_mean = (grad_sum / self.count).astype(dtype)
                gx = (g - grad_mean.reshape(shape) - centred * k.reshape(shape)) * scale.reshape(shape)
            else:
                gx = g * scale.reshape(shape)
        gw = (dot * self.invstd).astype(dtype) if node_w is not None else None
        gb = grad_sum.astype(dtype) if node_b is not None else None
        return gx, gw, gb


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over all dims but the channel dim 1; updates running stats in training.

    Computed as torch's CPU kernel computes it: the per-channel mean and sum of squared deviations
    are accumulated in float64 and rounded to the input's dtype, then ``x * alpha + beta`` (the
    fused multiply-add torch's vectorised loop compiles to, to within an ulp of the output) with
    ``alpha = invstd * weight`` and ``beta = bias - mean * alpha`` per channel."""
    x = float_input(input)
    if x.ndim < 2:
        raise ValueError(f"Expected 2D or more input (got {x.ndim}D input)")
    _check_dtypes(x, (weight, bias, running_mean, running_var), "mixed dtype (CPU): expect parameter to have scalar type of {}")
    axes = (0,) + tuple(range(2, x.ndim))
    channels = x.shape[1]
    shape = (1, channels) + (1,) * (x.ndim - 2)
    count = x.size // channels if channels else 0
    dtype = x.dtype
    if training:
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"gradscope.Size({list(x.shape)})")
        mean = (wide_sum(x, axes) / count).astype(dtype)
        centred = x - mean.reshape(shape)
        var_sum = wide_sum(centred * centred, axes).astype(dtype).astype(F64)
        invstd = (1.0 / np.sqrt(var_sum / count + eps)).astype(dtype)
        if running_mean is not None:
            rm = running_mean._data
            rm[...] = momentum * mean.astype(F64) + (1.0 - momentum) * rm
            running_mean._bump_version()
        if running_var is not None:
            rv = running_var._data
            rv[...] = momentum * var_sum / (count - 1) + (1.0 - momentum) * rv
            running_var._bump_version()
    else:
        if running_mean is None or running_var is None:
            raise RuntimeError("running_mean must be defined in evaluation mode")
        mean = running_mean._data.astype(dtype)
        with np.errstate(divide="ignore", invalid="ignore"):
            invstd = (1 / np.sqrt(running_var._data.astype(dtype) + np.asarray(eps, dtype))).astype(dtype)
    alpha = invstd * weight._data if weight is not None else invstd
    beta = fused_multiply_add(-mean, alpha, np.zeros((), dtype) if bias is None else bias._data)
    # x * alpha + beta, fused, is (x - mean) * alpha + (mean * alpha + beta): the second form in
    # the input's dtype keeps beta's rounding (far from 0 when mean * alpha is large), as torch
    # does, without a float64 copy of x; it differs from the fused result by an ulp of the output
    offset = (mean.astype(F64) * alpha + beta).astype(dtype)
    out = (x - mean.reshape(shape)) * alpha.reshape(shape)
    out += offset.reshape(shape)
    node = new_node(NativeBatchNormBackward0, (input, weight, bias))
    if node is not None:
        node.axes, node.mean, node.invstd, node.training, node.count = axes, mean, invstd, training, count
        node.save(input, weight)
    return result(out, node)


def _norm_backward(gxh: np.ndarray, xhat: np.ndarray, invstd: np.ndarray, axes: tuple) -> np.ndarray:
    """Input gradient of ``(x - mean) * invstd`` over ``axes`` given the gradient of the result."""
    mean_g = gxh.mean(axis=axes, keepdims=True)
    mean_gx = (gxh * xhat).mean(axis=axes, keepdims=True)
    return (gxh - mean_g - xhat * mean_gx) * invstd


def _normalise(x: np.ndarray, axes: tuple, eps: float) -> tuple:
    mean = x.mean(axis=axes, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=axes, keepdims=True)
    invstd = 1.0 / np.sqrt(var + eps)
    return centered * invstd, invstd


class NativeLayerNormBackward0(Node):
    __slots__ = ("axes", "invstd")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_w, _), (node_b, _) = self._next
        xhat, w = self.saved()
        lead = tuple(range(g.ndim - len(self.axes)))
        gx = gw = gb = None
        if node_x is not None:
            gx = _norm_backward(g if w is None else g * w, xhat, self.invstd, self.axes)
        if node_w is not None:
            gw = (g * xhat).sum(axis=lead)
        if node_b is not None:
            gb = g.sum(axis=lead)
        return gx, gw, gb


def layer_norm(input: Tensor, normalized_shape: Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift elementwise."""
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    normalized_shape = tuple(int(s) for s in normalized_shape)
    x = float_input(input)
    k = len(normalized_shape)
    if x.ndim < k or x.shape[x.ndim - k:] != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input with shape "
                           f"[*, {', '.join(str(s) for s in normalized_shape)}], but got input of size"
                           f"{_shape_list(x.shape)}")
    _check_dtypes(x, (weight, bias), "mixed dtype (CPU): expect parameter to have scalar type of {}")
    axes = tuple(range(x.ndim - k, x.ndim))
    xhat, invstd = _normalise(x, axes, eps)
    out = xhat * weight._data if weight is not None else xhat.copy()
    if bias is not None:
        out += bias._data
    node = new_node(NativeLayerNormBackward0, (input, weight, bias))
    if node is not None:
        node.axes, node.invstd = axes, invstd
        node.save(Tensor._make(xhat), weight)
    return result(out, node)


class NativeGroupNormBackward0(Node):
    __slots__ = ("groups", "invstd")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_w, _), (node_b, _) = self._next
        xhat, w = self.saved()
        n, c = g.shape[:2]
        shape = (1, c) + (1,) * (g.ndim - 2)
        axes = (0,) + tuple(range(2, g.ndim))
        gx = gw = gb = None
        if node_x is not None:
            gxh = (g if w is None else g * w.reshape(shape)).reshape(n, self.groups, -1)
            gx = _norm_backward(gxh, xhat.reshape(n, self.groups, -1), self.invstd, (2,)).reshape(g.shape)
        if node_w is not None:
            gw = (g * xhat).sum(axis=axes)
        if node_b is not None:
            gb = g.sum(axis=axes)
        return gx, gw, gb


def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalise each group of ``C // num_groups`` channels per sample, then scale and shift per channel."""
    x = float_input(input)
    if x.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {x.ndim}")
    n, c = x.shape[:2]
    if c % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input "
                           f"of shape {_shape_list(x.shape)} and num_groups={num_groups}")
    _check_dtypes(x, (weight, bias), "mixed dtype (CPU): expect parameter to have scalar type of {}")
    shape = (1, c) + (1,) * (x.ndim - 2)
    xhat, invstd = _normalise(x.reshape(n, num_groups, -1), (2,), eps)
    xhat = xhat.reshape(x.shape)
    out = xhat * weight._data.reshape(shape) if weight is not None else xhat.copy()
    if bias is not None:
        out += bias._data.reshape(shape)
    node = new_node(NativeGroupNormBackward0, (input, weight, bias))
    if node is not None:
        node.groups, node.invstd = num_groups, invstd
        node.save(Tensor._make(xhat), weight)
    return result(out, node)


# ====================================================================== activations
def fast_erf(x: np.ndarray) -> np.ndarray:
    """erf for float arrays: a Chebyshev fit of erfc (|error| < 1.2e-7, computed in the input's
    precision) for float32 and half, the exact ``math.erf`` for float64."""
    if x.dtype == np.float64:
        return erf_array(x)
    z = np.abs(x)
    t = z * 0.5
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * 0.17087277
    for coef in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196,
                 1.00002368):
        poly += coef
        poly *= t
    poly -= 1.26551223
    z *= z
    poly -= z
    np.exp(poly, out=poly)
    poly *= t  # erfc(|x|)
    np.subtract(1.0, poly, out=poly)
    return np.copysign(poly, x, out=poly)


def _softplus_array(x: np.ndarray) -> np.ndarray:
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))``."""
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _unary(cls: type, input: Tensor, out: np.ndarray, **attrs: Any) -> Tensor:
    """Result of an elementwise op whose node saves its input (or output, per ``cls``)."""
    node = new_node(cls, (input,))
    if node is not None:
        for key, value in attrs.items():
            setattr(node, key, value)
        if not cls._save_output:
            node.save(input)
    return result(out, node)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class GeluBackward0(Node):
    __slots__ = ("approximate",)

    def backward(self, g):
        x = self.saved()[0]
        if self.approximate == "tanh":
            inner = _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)
            t = np.tanh(inner)
            d_inner = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)
            return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner)
        cdf = self.saved()[1]
        pdf = np.exp(-0.5 * x * x) * _INV_SQRT_2PI
        return g * (cdf + x * pdf)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: exact (erf) or the tanh approximation."""
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    x = float_input(input)
    cdf = None
    if approximate == "tanh":
        out = 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    else:
        cdf = fast_erf(x * _INV_SQRT_2)
        cdf += 1.0
        cdf *= 0.5
        out = x * cdf
    node = new_node(GeluBackward0, (input,))
    if node is not None:
        node.approximate = approximate
        node.save(input, None if cdf is None else Tensor._make(cdf))
    return result(out, node)


class EluBackward0(Node):
    """ELU family ``scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1))`` (saves input)."""

    __slots__ = ("alpha", "scale", "input_scale")

    def backward(self, g):
        x = self.saved()[0]
        neg = self.scale * self.alpha * self.input_scale * np.exp(np.minimum(x, 0) * self.input_scale)
        return g * np.where(x > 0, np.asarray(self.scale, dtype=g.dtype), neg.astype(g.dtype))


class EluBackward1(EluBackward0):
    """The in-place form: the gradient comes from the saved output."""

    __slots__ = ()
    _save_output = True

    def backward(self, g):
        out = self.saved()[0]
        neg = self.input_scale * (out + self.scale * self.alpha)
        return g * np.where(out > 0, np.asarray(self.scale, dtype=g.dtype), neg.astype(g.dtype))


class CeluBackward0(EluBackward0):
    __slots__ = ()


class CeluBackward1(EluBackward1):
    __slots__ = ()


def elu(input: Tensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0, *,
        node_cls: type = EluBackward0) -> Tensor:
    """``scale * (x if x > 0 else alpha * (exp(input_scale * x) - 1))`` (ELU, SELU, CELU)."""
    x = float_input(input)
    with np.errstate(over="ignore"):
        neg = alpha * np.expm1(np.minimum(x, 0) * input_scale)
    out = (scale * np.where(x > 0, x, neg)).astype(x.dtype)
    return _unary(node_cls, input, out, alpha=alpha, scale=scale, input_scale=input_scale)


class LeakyReluBackward0(Node):
    __slots__ = ("slope",)

    def backward(self, g):
        return g * np.where(self.saved()[0] > 0, np.ones((), g.dtype), np.asarray(self.slope, g.dtype))


class LeakyReluBackward1(LeakyReluBackward0):
    __slots__ = ()
    _save_output = True


def leaky_relu(input: Tensor, negative_slope: float = 0.01, *, node_cls: type = LeakyReluBackward0) -> Tensor:
    x = input._data
    out = np.where(x > 0, x, x * negative_slope).astype(x.dtype, copy=False)
    return _unary(node_cls, input, out, slope=negative_slope)


class SoftplusBackward0(Node):
    __slots__ = ("beta", "threshold")

    def backward(self, g):
        z = self.saved()[0] * self.beta
        return g * np.where(z > self.threshold, np.ones((), g.dtype), _sigmoid_array(z))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """``log(1 + exp(beta * x)) / beta``, linear where ``beta * x > threshold``."""
    x = float_input(input)
    z = x * beta
    soft = _softplus_array(z) / beta
    out = np.where(z > threshold, x, soft).astype(x.dtype, copy=False)
    return _unary(SoftplusBackward0, input, out, beta=beta, threshold=threshold)


class SiluBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        s = _sigmoid_array(x)
        return g * (s * (1.0 + x * (1.0 - s)))


def silu(input: Tensor) -> Tensor:
    x = float_input(input)
    return _unary(SiluBackward0, input, x * _sigmoid_array(x))


class MishBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        t = np.tanh(_softplus_array(x))
        return g * (t + x * _sigmoid_array(x) * (1.0 - t * t))


def mish(input: Tensor) -> Tensor:
    x = float_input(input)
    return _unary(MishBackward0, input, x * np.tanh(_softplus_array(x)))


class HardtanhBackward0(Node):
    __slots__ = ("low", "high")

    def backward(self, g):
        x = self.saved()[0]
        return select_or_zero((x > self.low) & (x < self.high), g)


class HardtanhBackward1(HardtanhBackward0):
    __slots__ = ()
    _save_output = True


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, *,
             node_cls: type = HardtanhBackward0) -> Tensor:
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")
    x = input._data
    out = np.clip(x, min_val, max_val).astype(x.dtype, copy=False)
    return _unary(node_cls, input, out, low=min_val, high=max_val)


class HardsigmoidBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        # torch's kernel uses the float32 constant 1/6 for every dtype
        return select_or_zero((x > -3.0) & (x < 3.0), g * g.dtype.type(np.float32(1.0 / 6.0)))


def hardsigmoid(input: Tensor) -> Tensor:
    x = float_input(input)
    return _unary(HardsigmoidBackward0, input, (np.clip(x + 3.0, 0.0, 6.0) / 6.0).astype(x.dtype, copy=False))


class HardswishBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        x = self.saved()[0]
        middle = g * (x / 3.0 + 0.5)
        return np.where(x < -3.0, np.zeros((), g.dtype), np.where(x <= 3.0, middle, g))


def hardswish(input: Tensor) -> Tensor:
    x = float_input(input)
    return _unary(HardswishBackward0, input, (x * np.clip(x + 3.0, 0.0, 6.0) / 6.0).astype(x.dtype, copy=False))


class LogSigmoidBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        return g * _sigmoid_array(-self.saved()[0])


def logsigmoid(input: Tensor) -> Tensor:
    x = float_input(input)
    out = np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))
    return _unary(LogSigmoidBackward0, input, out.astype(x.dtype, copy=False))


class ThresholdBackward0(Node):
    __slots__ = ("threshold",)

    def backward(self, g):
        return select_or_zero(self.saved()[0] > self.threshold, g)


def threshold(input: Tensor, threshold: float, value: float) -> Tensor:
    x = input._data
    out = np.where(x > threshold, x, np.asarray(value, dtype=x.dtype))
    return _unary(ThresholdBackward0, input, out, threshold=threshold)


# ====================================================================== losses
class NllLossBackward0(Node):
    """Edge: the log-probabilities only (targets and class weights get no gradient)."""

    __slots__ = ("coef", "rows", "targets", "rows_shape", "moved_shape", "x_shape")

    def backward(self, g):
        grad = np.zeros(self.rows_shape, dtype=g.dtype)
        grad[self.rows, self.targets] = self.coef * g.reshape(-1) if g.ndim else self.coef * g
        if self.moved_shape is None:
            return grad.reshape(self.x_shape)
        return np.moveaxis(grad.reshape(self.moved_shape), -1, 1)


class NllLoss2DBackward0(NllLossBackward0):
    __slots__ = ()


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of the target classes: ``-input[n, target[n]] * weight[target[n]]``."""
    _reduction_check(reduction)
    x = input._data
    t = target._data
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"expected scalar type Long but found {target.dtype}")
    if x.ndim == 1:
        if t.ndim != 0:
            raise ValueError(f"Expected input batch_size (1) to match target batch_size ({t.shape[0]}).")
        rows_x = x.reshape(1, -1)
        moved_shape = None
    else:
        if t.shape[:1] != x.shape[:1]:
            raise ValueError(f"Expected input batch_size ({x.shape[0]}) to match target batch_size "
                             f"({t.shape[0] if t.ndim else 1}).")
        if t.shape != x.shape[:1] + x.shape[2:]:
            raise RuntimeError(f"Expected target size {_shape_list(x.shape[:1] + x.shape[2:])}, got "
                               f"{_shape_list(t.shape)}")
        if x.ndim == 2:
            rows_x, moved_shape = x, None
        else:
            moved = np.moveaxis(x, 1, -1)
            moved_shape = moved.shape
            rows_x = moved.reshape(-1, x.shape[1])
    classes = rows_x.shape[1]
    flat_t = t.reshape(-1)
    valid = flat_t != ignore_index
    bad = valid & ((flat_t < 0) | (flat_t >= classes))
    if bad.any():
        raise IndexError(f"Target {int(flat_t[bad][0])} is out of bounds.")
    safe_t = np.where(valid, flat_t, 0)
    if weight is not None:
        w_rows = weight._data[safe_t].astype(x.dtype) * valid
    else:
        w_rows = valid.astype(x.dtype)
    rows = np.arange(rows_x.shape[0])
    losses = -rows_x[rows, safe_t] * w_rows
    if reduction == "none":
        out = losses.reshape(t.shape)
        coef = -w_rows
    elif reduction == "sum":
        out = np.asarray(losses.sum(), dtype=x.dtype)
        coef = -w_rows
    else:
        total = w_rows.sum()
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.asarray(losses.sum() / total, dtype=x.dtype)
            coef = (-w_rows / total).astype(x.dtype)
    cls = NllLoss2DBackward0 if x.ndim == 4 else NllLossBackward0
    node = new_node(cls, (input,))
    if node is not None:
        node.coef, node.rows, node.targets = coef, rows, safe_t
        node.rows_shape, node.moved_shape, node.x_shape = rows_x.shape, moved_shape, x.shape
    return result(out, node)


class MseLossBackward0(Node):
    __slots__ = ("reduction", "shape_x", "shape_t")
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t, w = self.saved()
        diff = x - t
        grad = 2.0 * diff * _reduced_grad(g, diff.shape, self.reduction)
        if w is not None:
            grad = grad * w
        gx = unbroadcast(grad, self.shape_x) if node_x is not None else None
        gt = -unbroadcast(grad, self.shape_t) if node_t is not None else None
        return gx, gt


def _broadcast_warning(x: np.ndarray, t: np.ndarray) -> None:
    if x.shape != t.shape:
        import warnings

        warnings.warn(f"Using a target size (gradscope.Size({list(t.shape)})) that is different to the input "
                      f"size (gradscope.Size({list(x.shape)})). This will likely lead to incorrect results due "
                      "to broadcasting. Please ensure they have the same size.", UserWarning, stacklevel=4)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean", weight: Tensor | None = None) -> Tensor:
    """Mean squared error ``(input - target) ** 2`` (optionally weighted), reduced."""
    _reduction_check(reduction)
    x, t = input._data, target._data
    _broadcast_warning(x, t)
    diff = x - t
    loss = diff * diff
    if weight is not None:
        loss = loss * weight._data
    node = new_node(MseLossBackward0, (input, target))
    if node is not None:
        node.reduction, node.shape_x, node.shape_t = reduction, x.shape, t.shape
        node.save(input, target, weight)
    return result(_reduce(loss, reduction), node)


class SmoothL1LossBackward0(Node):
    """Smooth L1 (``beta``) and Huber (``delta``) share one derivative shape."""

    __slots__ = ("reduction", "shape_x", "shape_t", "beta")
    _single_input = False
    _huber = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t, w = self.saved()
        diff = x - t
        beta = self.beta
        if self._huber:
            local = np.clip(diff, -beta, beta)
        elif beta == 0:
            local = np.sign(diff)
        else:
            local = np.where(np.abs(diff) < beta, diff / beta, np.sign(diff))
        grad = local * _reduced_grad(g, diff.shape, self.reduction)
        if w is not None:
            grad = grad * w
        gx = unbroadcast(grad, self.shape_x) if node_x is not None else None
        gt = -unbroadcast(grad, self.shape_t) if node_t is not None else None
        return gx, gt


class HuberLossBackward0(SmoothL1LossBackward0):
    __slots__ = ()
    _huber = True


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """``0.5 d**2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``; reduced."""
    _reduction_check(reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    x, t = input._data, target._data
    _broadcast_warning(x, t)
    diff = np.abs(x - t)
    loss = diff if beta == 0 else np.where(diff < beta, 0.5 * diff * diff / beta, diff - 0.5 * beta)
    node = new_node(SmoothL1LossBackward0, (input, target))
    if node is not None:
        node.reduction, node.shape_x, node.shape_t, node.beta = reduction, x.shape, t.shape, beta
        node.save(input, target, None)
    return result(_reduce(loss.astype(diff.dtype, copy=False), reduction), node)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """``0.5 d**2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``; reduced."""
    _reduction_check(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    x, t = input._data, target._data
    _broadcast_warning(x, t)
    diff = np.abs(x - t)
    loss = np.where(diff < delta, 0.5 * diff * diff, delta * (diff - 0.5 * delta)).astype(diff.dtype, copy=False)
    if weight is not None:
        loss = loss * weight._data
    node = new_node(HuberLossBackward0, (input, target))
    if node is not None:
        node.reduction, node.shape_x, node.shape_t, node.beta = reduction, x.shape, t.shape, delta
        node.save(input, target, weight)
    return result(_reduce(loss, reduction), node)


class BinaryCrossEntropyBackward0(Node):
    __slots__ = ("reduction",)
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t, w = self.saved()
        scale = _reduced_grad(g, x.shape, self.reduction)
        if w is not None:
            scale = scale * w
        gx = gt = None
        if node_x is not None:
            gx = scale * (x - t) / np.maximum((1.0 - x) * x, 1e-12)
        if node_t is not None:
            with np.errstate(divide="ignore"):
                gt = scale * (np.maximum(np.log1p(-x), -100.0) - np.maximum(np.log(x), -100.0))
        return gx, gt


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """``-w (t log x + (1 - t) log(1 - x))`` with the logs clamped at -100, as PyTorch does."""
    _reduction_check(reduction)
    x, t = input._data, target._data
    if x.shape != t.shape:
        raise ValueError(f"Using a target size (gradscope.Size({list(t.shape)})) that is different to the "
                         f"input size (gradscope.Size({list(x.shape)})) is deprecated. Please ensure they have "
                         "the same size.")
    if x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1):
        raise RuntimeError("all elements of input should be between 0 and 1")
    with np.errstate(divide="ignore"):
        loss = -(t * np.maximum(np.log(x), -100.0) + (1.0 - t) * np.maximum(np.log1p(-x), -100.0))
    if weight is not None:
        loss = loss * weight._data
    node = new_node(BinaryCrossEntropyBackward0, (input, target))
    if node is not None:
        node.reduction = reduction
        node.save(input, target, None if weight is None else Tensor._make(np.broadcast_to(weight._data, x.shape)))
    return result(_reduce(loss.astype(x.dtype, copy=False), reduction), node)


class BinaryCrossEntropyWithLogitsBackward0(Node):
    __slots__ = ("reduction",)
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t, w, pw = self.saved()
        scale = _reduced_grad(g, x.shape, self.reduction)
        if w is not None:
            scale = scale * w
        gx = gt = None
        if node_x is not None:
            sig = _sigmoid_array(x)
            if pw is None:
                gx = scale * (sig - t)
            else:
                log_weight = (pw - 1.0) * t + 1.0
                gx = scale * ((1.0 - t) - log_weight * (1.0 - sig))
        if node_t is not None:
            if pw is None:
                gt = -scale * x
            else:
                softplus_neg = _softplus_array(-x)
                gt = scale * ((pw - 1.0) * softplus_neg - x)
        return gx, gt


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable expression; ``pos_weight`` weighs the positive term."""
    _reduction_check(reduction)
    x, t = input._data, target._data
    if x.shape != t.shape:
        raise ValueError(f"Target size (gradscope.Size({list(t.shape)})) must be the same as input size "
                         f"(gradscope.Size({list(x.shape)}))")
    softplus_neg = _softplus_array(-x)
    if pos_weight is None:
        loss = (1.0 - t) * x + softplus_neg
        pw = None
    else:
        pw = np.broadcast_to(pos_weight._data, x.shape)
        loss = (1.0 - t) * x + ((pw - 1.0) * t + 1.0) * softplus_neg
    w = None
    if weight is not None:
        w = np.broadcast_to(weight._data, x.shape)
        loss = loss * w
    node = new_node(BinaryCrossEntropyWithLogitsBackward0, (input, target))
    if node is not None:
        node.reduction = reduction
        node.save(input, target, None if w is None else Tensor._make(w), None if pw is None else Tensor._make(pw))
    return result(_reduce(loss.astype(x.dtype, copy=False), reduction), node)


class KlDivBackward0(Node):
    __slots__ = ("log_target",)
    _single_input = False

    def backward(self, g):
        (node_x, _), (node_t, _) = self._next
        x, t = self.saved()
        gx = gt = None
        if self.log_target:
            e = np.exp(t)
            gx = -g * e if node_x is not None else None
            gt = g * e * (t - x + 1.0) if node_t is not None else None
        else:
            gx = -g * t if node_x is not None else None
            if node_t is not None:
                with np.errstate(divide="ignore", invalid="ignore"):
                    gt = g * (np.where(t > 0, np.log(np.where(t > 0, t, 1.0)), 0.0) + 1.0 - x)
        return gx, gt


def kl_div_pointwise(input: Tensor, target: Tensor, log_target: bool = False) -> Tensor:
    """Elementwise ``target * (log target - input)`` (0 where target is 0), or its log-target form."""
    x, t = input._data, target._data
    if log_target:
        out = np.exp(t) * (t - x)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0) - t * x
    node = new_node(KlDivBackward0, (input, target))
    if node is not None:
        node.log_target = log_target
        node.save(input, target)
    return result(np.asarray(out).astype(np.result_type(x, t), copy=False), node)


# ====================================================================== resampling (interpolate)
def _resample_taps(mode: str, size: int, out: int, scale: float | None, align_corners: bool | None,
                   dtype: np.dtype) -> list:
    """The taps ``[(index, weight)]`` (each (out,)) of one spatial axis; ``weight`` None for nearest.

    ``scale`` is the user's scale factor (positions then map with ``1 / scale`` instead of
    ``size / out``). Positions are computed in PyTorch's precision: float32 for nearest, the
    input's dtype otherwise.
    """
    if mode in ("nearest", "nearest-exact"):
        f32 = np.float32
        ratio = f32(1.0 / scale) if scale is not None and scale > 0 else f32(size) / f32(out)
        offset = f32(0.5) if mode == "nearest-exact" else f32(0.0)
        position = (np.arange(out, dtype=f32) + offset) * ratio
        return [(np.minimum(np.floor(position).astype(np.int64), size - 1), None)]
    dst = np.arange(out, dtype=dtype)
    if align_corners:
        ratio = dtype.type(size - 1) / dtype.type(out - 1) if out > 1 else dtype.type(0.0)
        src = dst * ratio
    else:
        ratio = dtype.type(1.0 / scale) if scale is not None and scale > 0 else dtype.type(size) / dtype.type(out)
        src = (dst + dtype.type(0.5)) * ratio - dtype.type(0.5)
        if mode != "bicubic":
            src = np.maximum(src, dtype.type(0.0))
    floor = np.floor(src)
    base = floor.astype(np.int64)
    frac = src - floor
    if mode != "bicubic":
        base = np.minimum(base, size - 1)
        frac = np.clip(src - base.astype(dtype), 0, 1)
        upper = np.minimum(base + 1, size - 1)
        return [(base, 1 - frac), (upper, frac)]
    a = dtype.type(-0.75)  # PyTorch's bicubic convolution coefficient

    def near(t: np.ndarray) -> np.ndarray:
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t: np.ndarray) -> np.ndarray:
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a

    weights = (far(frac + 1), near(frac), near(1 - frac), far(2 - frac))
    return [(np.clip(base + k - 1, 0, size - 1), w) for k, w in enumerate(weights)]


def _apply_taps(x: np.ndarray, axis: int, taps: list) -> np.ndarray:
    out = None
    for index, weight in taps:
        picked = np.take(x, index, axis=axis)
        if weight is not None:
            shape = [1] * x.ndim
            shape[axis] = -1
            picked = picked * weight.astype(x.dtype).reshape(shape)
        out = picked if out is None else out + picked
    return out


def _apply_taps_adjoint(g: np.ndarray, axis: int, taps: list, size: int) -> np.ndarray:
    moved = np.moveaxis(g, axis, 0)
    grad = np.zeros((size,) + moved.shape[1:], dtype=g.dtype)
    for index, weight in taps:
        contribution = moved if weight is None else moved * weight.astype(g.dtype).reshape((-1,) + (1,) * (g.ndim - 1))
        np.add.at(grad, index, contribution)
    return np.moveaxis(grad, 0, axis)


class _ResampleBackward(Node):
    """Separable resampling: each spatial axis maps through a few (index, weight) taps."""

    __slots__ = ("axes_taps", "sizes")

    def backward(self, g):
        for (axis, taps), size in zip(reversed(self.axes_taps), reversed(self.sizes)):
            g = _apply_taps_adjoint(g, axis, taps, size)
        return g


_RESAMPLE_NAMES = {"nearest": "UpsampleNearest{}DBackward0", "nearest-exact": "UpsampleNearestExact{}DBackward0",
                   "linear": "UpsampleLinear1DBackward0", "bilinear": "UpsampleBilinear2DBackward0",
                   "trilinear": "UpsampleTrilinear3DBackward0", "bicubic": "UpsampleBicubic2DBackward0"}
_RESAMPLE_CLASSES: dict = {}


def _resample_class(mode: str, nd: int) -> type:
    name = _RESAMPLE_NAMES[mode].format(nd)
    cls = _RESAMPLE_CLASSES.get(name)
    if cls is None:
        cls = _RESAMPLE_CLASSES[name] = type(name, (_ResampleBackward,), {"__slots__": ()})
    return cls


def resample(input: Tensor, out_sizes: tuple, scales: tuple, mode: str, align_corners: bool | None) -> Tensor:
    """Resize the trailing ``len(out_sizes)`` dims of ``input`` with ``mode``'s taps (see ``interpolate``)."""
    x = float_input(input)
    nd = len(out_sizes)
    axes_taps, sizes = [], []
    out = x
    for k, (target, scale) in enumerate(zip(out_sizes, scales)):
        axis = x.ndim - nd + k
        taps = _resample_taps(mode, x.shape[axis], target, scale, align_corners, x.dtype)
        axes_taps.append((axis, taps))
        sizes.append(x.shape[axis])
        out = _apply_taps(out, axis, taps)
    node = new_node(_resample_class(mode, nd), (input,))
    if node is not None:
        node.axes_taps, node.sizes = axes_taps, sizes
    return result(np.ascontiguousarray(out, dtype=x.dtype), node)


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
