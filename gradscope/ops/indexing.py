"""Gather/scatter style ops: gather, scatter_add, index_select, masked_fill, tril/triu."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import normalize_dim, operand


class GatherBackward0(Node):
    __slots__ = ("shape", "axis", "index")

    def backward(self, g):
        grad = np.zeros(self.shape, dtype=g.dtype)
        _scatter_add_into(grad, self.axis, self.index, g)
        return grad


def _scatter_add_into(target: np.ndarray, axis: int, index: np.ndarray, src: np.ndarray) -> None:
    """target[..., index[i], ...] += src[i] along ``axis`` (repeated indices accumulate)."""
    grids = list(np.indices(index.shape, sparse=True))
    grids[axis] = index
    np.add.at(target, tuple(grids), src[tuple(slice(0, n) for n in index.shape)])


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:
    """Values of ``input`` at ``index`` along ``dim``."""
    axis = normalize_dim(dim, input._data.ndim)
    idx = index._data.astype(np.int64)
    out = np.take_along_axis(input._data, idx, axis=axis)
    node = new_node(GatherBackward0, (input,))
    if node is not None:
        node.shape, node.axis, node.index = input._data.shape, axis, idx
    return result(out, node)


class ScatterAddBackward0(Node):
    __slots__ = ("axis", "index")
    _single_input = False

    def backward(self, g):
        (node_self, _), (node_src, _) = self._next
        g_src = np.take_along_axis(g, self.index, axis=self.axis) if node_src is not None else None
        return (g if node_self is not None else None, g_src)


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """A copy of ``input`` with ``src`` added at ``index`` along ``dim``."""
    axis = normalize_dim(dim, input._data.ndim)
    idx = index._data.astype(np.int64)
    out = input._data.copy()
    _scatter_add_into(out, axis, idx, src._data)
    node = new_node(ScatterAddBackward0, (input, src))
    if node is not None:
        node.axis, node.index = axis, idx
    return result(out, node)


class IndexSelectBackward0(Node):
    __slots__ = ("shape", "axis", "index")

    def backward(self, g):
        grad = np.zeros(self.shape, dtype=g.dtype)
        moved = np.moveaxis(grad, self.axis, 0)
        np.add.at(moved, self.index, np.moveaxis(g, self.axis, 0))
        return grad


def index_select(input: Tensor, dim: int, index: Tensor) -> Tensor:
    axis = normalize_dim(dim, input._data.ndim)
    idx = index._data.astype(np.int64).reshape(-1)
    node = new_node(IndexSelectBackward0, (input,))
    if node is not None:
        node.shape, node.axis, node.index = input._data.shape, axis, idx
    return result(np.take(input._data, idx, axis=axis), node)


class MaskedFillBackward0(Node):
    __slots__ = ("mask", "shape")

    def backward(self, g):
        from gradscope.ops._util import unbroadcast

        return unbroadcast(np.where(self.mask, np.zeros((), g.dtype), g), self.shape)


def masked_fill(input: Tensor, mask: Any, value: Any) -> Tensor:
    """``input`` with ``value`` where ``mask`` is true (mask broadcasts)."""
    m = operand(mask).astype(bool)
    v = value.item() if isinstance(value, Tensor) else value
    out = np.where(m, np.asarray(v, dtype=input._data.dtype), input._data)
    node = new_node(MaskedFillBackward0, (input,))
    if node is not None:
        node.mask, node.shape = m, input._data.shape
    return result(out, node)


class TrilBackward0(Node):
    __slots__ = ("keep",)

    def backward(self, g):
        return g * self.keep


class TriuBackward0(TrilBackward0):
    __slots__ = ()


def _triangle(input: Tensor, diagonal: int, lower: bool) -> Tensor:
    rows, cols = input._data.shape[-2:]
    keep = np.tri(rows, cols, diagonal, dtype=bool) if lower else ~np.tri(rows, cols, diagonal - 1, dtype=bool)
    node = new_node(TrilBackward0 if lower else TriuBackward0, (input,))
    if node is not None:
        node.keep = keep
    return result(np.where(keep, input._data, np.zeros((), input._data.dtype)), node)


def tril(input: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(input, diagonal, True)


def triu(input: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(input, diagonal, False)
