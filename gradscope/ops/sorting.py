"""Ordering ops: sort, argsort, topk, kthvalue, median, cumulative products and maxima, unique
values (``unique``, ``unique_consecutive``)."""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops._util import normalize_dim

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])


class _TakeAlongBackward(Node):
    """Outputs picked from the input along ``axis`` at ``indices``: the gradient goes back there
    (summed where an index repeats, as cummax's running maximum does)."""

    __slots__ = ("shape", "axis", "indices")

    def backward(self, g):
        grad = np.zeros(self.shape, dtype=g.dtype)
        if grad.ndim == 0:
            return g.astype(g.dtype, copy=True).reshape(())
        moved_grad = np.moveaxis(grad, self.axis, -1)
        index = np.moveaxis(self.indices, self.axis, -1)
        rows = np.indices(index.shape)[:-1]
        np.add.at(moved_grad, (*rows, index), np.moveaxis(g, self.axis, -1))
        return grad


class SortBackward0(_TakeAlongBackward):
    __slots__ = ()


class TopkBackward0(_TakeAlongBackward):
    __slots__ = ()


class KthvalueBackward0(_TakeAlongBackward):
    __slots__ = ()


class MedianBackward1(_TakeAlongBackward):
    __slots__ = ()


class CummaxBackward0(_TakeAlongBackward):
    __slots__ = ()


class CumminBackward0(_TakeAlongBackward):
    __slots__ = ()


def _take(cls: type, input: Tensor, axis: int, indices: np.ndarray, squeeze: bool = False) -> ValuesIndices:
    data = input._data
    if data.ndim == 0:
        values = data.copy()
        indices = np.zeros((), dtype=np.int64)
        node = new_node(cls, (input,))
        if node is not None:
            node.shape, node.axis, node.indices = (), 0, indices
        return ValuesIndices(result(values, node), Tensor._make(indices))
    values = np.take_along_axis(data, indices, axis=axis)
    node = new_node(cls, (input,))
    if node is not None:
        node.shape, node.axis, node.indices = data.shape, axis, indices
    out, out_indices = result(values, node), Tensor._make(indices.astype(np.int64))
    if squeeze:
        from gradscope.ops.shape import squeeze as squeeze_op

        return ValuesIndices(squeeze_op(out, axis), squeeze_op(out_indices, axis))
    return ValuesIndices(out, out_indices)


def _order(data: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable ordering indices along ``axis``; NaN counts as the largest value, as in PyTorch."""
    if data.ndim == 0:
        return np.zeros((), dtype=np.int64)
    key = data
    if descending:
        if data.dtype.kind == "f":
            key = np.where(np.isnan(data), -np.inf, -data)
        else:
            key = -data.astype(np.int64)
    return np.argsort(key, axis=axis, kind="stable")


def sort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> ValuesIndices:
    """``(values, indices)`` sorted along ``dim`` (ties keep their order)."""
    axis = normalize_dim(dim, input._data.ndim)
    return _take(SortBackward0, input, axis, _order(input._data, axis, descending))


def argsort(input: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    axis = normalize_dim(dim, input._data.ndim)
    return Tensor._make(_order(input._data, axis, descending).astype(np.int64))


def msort(input: Tensor) -> Tensor:
    return sort(input, 0).values


def topk(input: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:
    """The ``k`` largest (or smallest) entries along ``dim`` and their indices."""
    data = input._data
    axis = normalize_dim(dim, data.ndim)
    length = data.shape[axis] if data.ndim else 1
    if not 0 <= k <= length:
        raise RuntimeError(f"selected index k out of range (k={k}, dimension size {length})")
    order = _order(data, axis, largest)
    indices = np.take(order, np.arange(k), axis=axis) if data.ndim else order
    return _take(TopkBackward0, input, axis, indices)


def kthvalue(input: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """The ``k``-th smallest entry (1-based) along ``dim``."""
    data = input._data
    axis = normalize_dim(dim, data.ndim)
    order = _order(data, axis, False)
    indices = np.take(order, [k - 1], axis=axis) if data.ndim else order
    return _take(KthvalueBackward0, input, axis, indices, squeeze=not keepdim and data.ndim > 0)


def median(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """The lower median of all entries, or ``(values, indices)`` along ``dim``."""
    data = input._data
    if dim is None:
        flat = input.reshape(-1)
        return kthvalue(flat, (flat._data.size + 1) // 2, 0).values
    axis = normalize_dim(dim, data.ndim)
    k = ((data.shape[axis] if data.ndim else 1) + 1) // 2
    values, indices = kthvalue(input, k, axis, keepdim)
    return ValuesIndices(values, indices)


def _cumulative_extreme(cls: type, input: Tensor, dim: int, better: Any) -> ValuesIndices:
    data = input._data
    axis = normalize_dim(dim, data.ndim)
    if data.ndim == 0:
        return _take(cls, input, 0, np.zeros((), dtype=np.int64))
    moved = np.moveaxis(data, axis, -1)
    index = np.zeros(moved.shape, dtype=np.int64)
    best = moved[..., 0].copy()
    for i in range(1, moved.shape[-1]):
        take = better(moved[..., i], best) | (moved[..., i] == best) | np.isnan(moved[..., i])
        take &= ~(np.isnan(best) if moved.dtype.kind == "f" else np.zeros(best.shape, bool))
        best = np.where(take, moved[..., i], best)
        index[..., i] = np.where(take, i, index[..., i - 1])
    return _take(cls, input, axis, np.moveaxis(index, -1, axis))


def cummax(input: Tensor, dim: int) -> ValuesIndices:
    """Running maximum along ``dim`` and where it was reached (the latest index on ties)."""
    return _cumulative_extreme(CummaxBackward0, input, dim, np.greater)


def cummin(input: Tensor, dim: int) -> ValuesIndices:
    """Running minimum along ``dim`` and where it was reached (the latest index on ties)."""
    return _cumulative_extreme(CumminBackward0, input, dim, np.less)


class CumprodBackward0(Node):
    __slots__ = ("axis",)

    def backward(self, g):
        x, out = self.saved()
        if x.ndim == 0:
            return g
        axis = self.axis
        if np.all(x != 0):
            # d out_j / d x_i = out_j / x_i for j >= i: a reversed cumulative sum of g * out
            weighted = np.flip(np.cumsum(np.flip(g * out, axis), axis), axis)
            return weighted / x
        # zeros present: d out_j / d x_i is the product of x_0..x_j without x_i (exact, O(n^2))
        xs = np.moveaxis(x, axis, -1)
        gs = np.moveaxis(g, axis, -1)
        grad = np.zeros_like(xs)
        n = xs.shape[-1]
        for i in range(n):
            without = xs.copy()
            without[..., i] = 1
            partial = np.cumprod(without, axis=-1)
            grad[..., i] = (gs[..., i:] * partial[..., i:]).sum(axis=-1)
        return np.moveaxis(grad, -1, axis)


def cumprod(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    """Running product along ``dim`` (exact gradient even where inputs are zero)."""
    from gradscope.autograd import dtypes

    data = input._data if dtype is None else input._data.astype(dtypes.to_numpy_dtype(dtype))
    if data.dtype.kind in "biu":
        data = data.astype(np.int64)
    axis = normalize_dim(dim, data.ndim)
    out = np.cumprod(data, axis=axis) if data.ndim else data.copy()
    node = new_node(CumprodBackward0, (input,))
    if node is not None:
        node.axis = axis
        node.save(input, Tensor._make(out))
    return result(out, node)


# ---------------------------------------------------------------- counting and bucketing (no gradient)
def unique(input: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False,
           dim: int | None = None) -> Any:
    """The distinct values (or slices along ``dim``), sorted, with optional inverse indices and counts."""
    data = input._data
    if dim is None:
        values, inverse, counts = np.unique(data.reshape(-1), return_inverse=True, return_counts=True)
        inverse = inverse.reshape(data.shape)
    else:
        axis = normalize_dim(dim, data.ndim)
        values, inverse, counts = np.unique(data, return_inverse=True, return_counts=True, axis=axis)
        inverse = inverse.reshape(-1)
    outputs = [Tensor._make(values)]
    if return_inverse:
        outputs.append(Tensor._make(inverse.astype(np.int64)))
    if return_counts:
        outputs.append(Tensor._make(counts.astype(np.int64)))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def bincount(input: Tensor, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """Occurrences of each non-negative integer in a 1-D tensor (weighted sums with ``weights``)."""
    data = input._data
    if data.ndim != 1 or data.dtype.kind not in "iu":
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if data.size and data.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    counts = np.bincount(data, None if weights is None else weights._data, minlength=minlength)
    if weights is None:
        return Tensor._make(counts.astype(np.int64))
    dtype = weights._data.dtype if weights._data.dtype.kind == "f" else np.float64
    return Tensor._make(counts.astype(dtype))


def searchsorted(sorted_sequence: Tensor, input: Any, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: Tensor | None = None) -> Tensor:
    """Insertion points of ``input`` into ``sorted_sequence`` (row by row for an N-D sequence)."""
    boundaries = sorted_sequence._data
    values = input._data if isinstance(input, Tensor) else np.asarray(input)
    side = side or ("right" if right else "left")
    if sorter is not None:
        boundaries = np.take_along_axis(boundaries, sorter._data, -1)
    if boundaries.ndim == 1:
        out = np.searchsorted(boundaries, values, side=side)
    else:
        rows = boundaries.reshape(-1, boundaries.shape[-1])
        queries = values.reshape(rows.shape[0], -1)
        out = np.stack([np.searchsorted(row, query, side=side) for row, query in zip(rows, queries)])
        out = out.reshape(values.shape)
    return Tensor._make(np.asarray(out).astype(np.int32 if out_int32 else np.int64))


def bucketize(input: Any, boundaries: Tensor, *, out_int32: bool = False, right: bool = False) -> Tensor:
    """The bucket of each value of ``input`` given 1-D sorted ``boundaries``."""
    if boundaries._data.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries._data.ndim})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def histc(input: Tensor, bins: int = 100, min: float = 0, max: float = 0) -> Tensor:  # noqa: A002
    """A histogram of ``bins`` equal-width bins over [min, max] (the data's range when both are 0)."""
    data = input._data.reshape(-1)
    low, high = float(min), float(max)
    if low == high and data.size:
        low, high = float(data.min()), float(data.max())
    if low == high:
        low, high = low - 1, high + 1
    counts, _ = np.histogram(data[(data >= low) & (data <= high)], bins=bins, range=(low, high))
    return Tensor._make(counts.astype(input._data.dtype))


# ============================== unique_consecutive
def unique_consecutive(input: Tensor, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None) -> Any:
    """Collapse runs of equal consecutive elements (of the flattened input, or of slices along ``dim``)."""
    data = input._data
    if dim is None:
        flat = data.reshape(-1)
        change = np.r_[True, flat[1:] != flat[:-1]] if flat.size else np.zeros(0, dtype=bool)
        values = flat[change]
        inverse_shape = data.shape
    else:
        axis = dim % data.ndim
        moved = np.moveaxis(data, axis, 0)
        rows = moved.reshape(moved.shape[0], -1)
        change = np.r_[True, (rows[1:] != rows[:-1]).any(axis=1)] if rows.shape[0] else np.zeros(0, dtype=bool)
        values = np.moveaxis(moved[change], 0, axis)
        inverse_shape = (data.shape[axis],)
    outputs = [Tensor._make(np.ascontiguousarray(values))]
    if return_inverse:
        outputs.append(Tensor._make((np.cumsum(change) - 1).astype(np.int64).reshape(inverse_shape)))
    if return_counts:
        starts = np.flatnonzero(change)
        outputs.append(Tensor._make(np.diff(np.r_[starts, change.size]).astype(np.int64)))
    return outputs[0] if len(outputs) == 1 else tuple(outputs)
