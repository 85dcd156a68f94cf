"""Padding: constant, and the index paddings (reflect, replicate, circular)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import _shape_list


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
