"""Resampling (``interpolate``): nearest, nearest-exact, linear, bilinear, bicubic, trilinear, as
separable per-axis taps."""
from __future__ import annotations

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import float_input


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
