"""Sliding windows for convolution and pooling: im2col through ``as_strided`` windows, and
col2im (the adjoint) as one strided slice per kernel position, never a loop over pixels."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided


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
