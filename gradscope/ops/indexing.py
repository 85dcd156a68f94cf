"""Gather/scatter style ops: gather, scatter_add, index_select, masked_fill, masked_scatter, tril/triu."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops import pointwise
from gradscope.ops._util import _const, normalize_dim, operand


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


class ScatterBackward0(Node):
    """``scatter`` of a scalar: the overwritten positions get no gradient."""

    __slots__ = ("axis", "index")

    def backward(self, g):
        grad = g.copy()
        _put_along(grad, self.axis, self.index, np.zeros((), g.dtype))
        return grad


class ScatterBackward1(Node):
    """``scatter`` of a source tensor: ``src`` gets the gradient gathered at ``index``."""

    __slots__ = ("axis", "index")
    _single_input = False

    def backward(self, g):
        (node_self, _), (node_src, _) = self._next
        grad_self = None
        if node_self is not None:
            grad_self = g.copy()
            _put_along(grad_self, self.axis, self.index, np.zeros((), g.dtype))
        g_src = np.take_along_axis(g, self.index, axis=self.axis) if node_src is not None else None
        return grad_self, g_src


def _put_along(target: np.ndarray, axis: int, index: np.ndarray, values: Any) -> None:
    """target[..., index[i], ...] = values[i] along ``axis`` (the last write wins on repeats)."""
    grids = list(np.indices(index.shape, sparse=True))
    grids[axis] = index
    if isinstance(values, np.ndarray) and values.ndim:
        values = values[tuple(slice(0, n) for n in index.shape)]
    target[tuple(grids)] = values


def scatter(input: Tensor, dim: int, index: Tensor, src: Any = None, *, value: Any = None,
            reduce: str | None = None) -> Tensor:
    """A copy of ``input`` with ``src`` (a tensor, or a scalar ``value``) written at ``index``
    along ``dim``. ``reduce='add'``/``'multiply'`` combine instead of overwrite (no gradient)."""
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter() needs a src tensor or a value")
    axis = normalize_dim(dim, input._data.ndim)
    idx = index._data.astype(np.int64)
    out = input._data.copy()
    if reduce is not None:
        values = src._data if isinstance(src, Tensor) else np.asarray(src, dtype=out.dtype)
        values = np.broadcast_to(values, idx.shape) if values.ndim == 0 else values
        grids = list(np.indices(idx.shape, sparse=True))
        grids[axis] = idx
        ufunc = {"add": np.add, "multiply": np.multiply}.get(reduce)
        if ufunc is None:
            raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
        ufunc.at(out, tuple(grids), values[tuple(slice(0, n) for n in idx.shape)])
        return Tensor._make(out)
    if isinstance(src, Tensor):
        _put_along(out, axis, idx, src._data.astype(out.dtype, copy=False))
        node = new_node(ScatterBackward1, (input, src))
    else:
        _put_along(out, axis, idx, np.asarray(operand(src), dtype=out.dtype))
        node = new_node(ScatterBackward0, (input,))
    if node is not None:
        node.axis, node.index = axis, idx
    return result(out, node)


class IndexAddBackward0(Node):
    __slots__ = ("axis", "index", "alpha")
    _single_input = False

    def backward(self, g):
        (node_self, _), (node_source, _) = self._next
        g_source = None
        if node_source is not None:
            g_source = np.take(g, self.index, axis=self.axis)
            if self.alpha != 1:
                g_source = g_source * self.alpha
        return (g if node_self is not None else None), g_source


def index_add(input: Tensor, dim: int, index: Tensor, source: Tensor, *, alpha: Any = 1) -> Tensor:
    """A copy of ``input`` with ``alpha * source`` slices added at ``index`` along ``dim``."""
    axis = normalize_dim(dim, input._data.ndim)
    idx = index._data.astype(np.int64).reshape(-1)
    out = input._data.copy()
    addend = source._data if alpha == 1 else source._data * alpha
    np.add.at(np.moveaxis(out, axis, 0), idx, np.moveaxis(addend.astype(out.dtype, copy=False), axis, 0))
    node = new_node(IndexAddBackward0, (input, source))
    if node is not None:
        node.axis, node.index, node.alpha = axis, idx, alpha
    return result(out, node)


class IndexCopyBackward0(Node):
    """Slices at ``index`` came from ``source``: they take its gradient and ``input`` gets zeros there."""

    __slots__ = ("axis", "index")
    _single_input = False

    def backward(self, g):
        (node_self, _), (node_source, _) = self._next
        g_self = None
        if node_self is not None:
            g_self = g.copy()
            np.moveaxis(g_self, self.axis, 0)[self.index] = 0
        g_source = np.take(g, self.index, axis=self.axis) if node_source is not None else None
        return g_self, g_source


def index_copy(input: Tensor, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """A copy of ``input`` whose slices at ``index`` along ``dim`` are ``source``'s slices."""
    axis = normalize_dim(dim, input._data.ndim)
    idx = index._data.astype(np.int64).reshape(-1)
    if source._data.shape[axis] != idx.size:
        raise IndexError(f"index_copy_(): Number of indices ({idx.size}) should be equal to "
                         f"source.size(dim) ({source._data.shape[axis]})")
    out = input._data.copy()
    np.moveaxis(out, axis, 0)[idx] = np.moveaxis(source._data.astype(out.dtype, copy=False), axis, 0)
    node = new_node(IndexCopyBackward0, (input, source))
    if node is not None:
        node.axis, node.index = axis, idx
    return result(out, node)


def index_fill(input: Tensor, dim: int, index: Tensor, value: Any) -> Tensor:
    """A copy of ``input`` with whole slices at ``index`` along ``dim`` set to ``value``."""
    axis = normalize_dim(dim, input._data.ndim)
    mask = np.zeros(input._data.shape[axis] if input._data.ndim else 1, dtype=bool)
    mask[index._data.astype(np.int64).reshape(-1)] = True
    shape = [1] * input._data.ndim
    if shape:
        shape[axis] = mask.size
    return masked_fill(input, Tensor._make(mask.reshape(shape)), value)


def masked_select(input: Tensor, mask: Tensor) -> Tensor:
    """The 1-D tensor of ``input``'s values where ``mask`` (broadcast) is true."""
    from gradscope.ops.shape import expand, getitem

    m = operand(mask).astype(bool)
    shape = np.broadcast_shapes(input._data.shape, m.shape)
    expanded = expand(input, shape) if input._data.shape != shape else input
    return getitem(expanded, Tensor._make(np.broadcast_to(m, shape).copy()))


def nonzero(input: Tensor, *, as_tuple: bool = False) -> Any:
    """Indices of the nonzero entries: an (n, ndim) tensor, or one index tensor per dimension."""
    found = np.nonzero(np.atleast_1d(input._data))
    if as_tuple:
        if input._data.ndim == 0:
            return (Tensor._make(found[0].astype(np.int64)),)
        return tuple(Tensor._make(i.astype(np.int64)) for i in found)
    stacked = np.stack(found, axis=1).astype(np.int64)
    return Tensor._make(stacked if input._data.ndim else stacked[:, :0])


def argwhere(input: Tensor) -> Tensor:
    return nonzero(input)


def take(input: Tensor, index: Tensor) -> Tensor:
    """Entries of the flattened ``input`` at ``index`` (result has ``index``'s shape)."""
    from gradscope.ops.shape import reshape

    flat = index_select(reshape(input, -1), 0, index)
    return reshape(flat, tuple(index._data.shape))


def index_put(input: Tensor, indices: Any, values: Any, accumulate: bool = False) -> Tensor:
    """A copy of ``input`` with ``input[indices] = values`` (``+=`` with ``accumulate``, where repeated
    positions add up); ``indices`` is a tuple of index tensors for the leading dims."""
    from gradscope.ops.shape import broadcast_to, clone, reshape, setitem

    indices = tuple(indices)
    value = values if isinstance(values, Tensor) else Tensor._make(np.asarray(values, dtype=input._data.dtype))
    if value._data.dtype != input._data.dtype:
        names = {"float64": "Double", "float32": "Float", "float16": "Half", "int64": "Long", "int32": "Int",
                 "bool": "Bool", "uint8": "Byte"}
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{names.get(input._data.dtype.name, input._data.dtype.name)} for the destination and "
                           f"{names.get(value._data.dtype.name, value._data.dtype.name)} for the source.")
    if not accumulate:
        out = clone(input)
        setitem(out, indices, value)
        return out
    arrays = np.broadcast_arrays(*(np.asarray(i._data if isinstance(i, Tensor) else i) for i in indices))
    if arrays[0].dtype == np.bool_:
        arrays = list(np.nonzero(arrays[0]))
    lead = input._data.shape[:len(arrays)]
    flat = np.ravel_multi_index(tuple(a.astype(np.int64).reshape(-1) for a in arrays), lead, mode="wrap")
    rest = input._data.shape[len(arrays):]
    source = reshape(broadcast_to(value, arrays[0].shape + rest), (flat.size,) + rest)
    rows = reshape(input, (int(np.prod(lead)),) + rest)
    return reshape(index_add(rows, 0, Tensor._make(flat.astype(np.int64)), source), input._data.shape)


class ScatterReduceBackward0(Node):
    """Gradients of ``scatter_reduce``: sums pass through, means divide by the count, and amax/amin
    share the gradient evenly among the values equal to the result (PyTorch's rule)."""

    __slots__ = ("reduce", "targets", "src_view", "touched", "count", "self_share", "src_share")
    _single_input = False

    def backward(self, g):
        (node_self, _), (node_src, _) = self._next
        flat = g.reshape(-1)
        g_self = g_src = None
        if node_self is not None:
            g_self = (flat * self.self_share).reshape(g.shape)
        if node_src is not None:
            values = flat[self.targets] * self.src_share
            g_src = np.zeros(self.src_view[0], dtype=g.dtype)
            g_src[self.src_view[1]] = values.reshape(self.src_view[2])
        return g_self, g_src


def scatter_reduce(input: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, *,
                   include_self: bool = True) -> Tensor:
    """Reduce ``src`` into a copy of ``input`` at ``index`` along ``dim`` with ``sum``, ``mean``,
    ``amax`` or ``amin`` (``input``'s own values take part when ``include_self``)."""
    if reduce not in ("sum", "mean", "amax", "amin"):
        if reduce == "prod":
            raise NotImplementedError("scatter_reduce: reduce='prod' is not supported by gradscope "
                                      "(sum, mean, amax, amin are)")
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    data, idx, source = input._data, index._data.astype(np.int64), src._data
    axis = normalize_dim(dim, data.ndim)
    if idx.size and (idx.min() < 0 or idx.max() >= data.shape[axis]):
        bad = int(idx.max()) if idx.max() >= data.shape[axis] else int(idx.min())
        raise RuntimeError(f"index {bad} is out of bounds for dimension {axis} with size {data.shape[axis]}")
    region = tuple(slice(0, n) for n in idx.shape)
    coords = list(np.indices(idx.shape))
    coords[axis] = idx
    targets = np.ravel_multi_index(tuple(coords), data.shape).reshape(-1)
    values = source[region].reshape(-1).astype(data.dtype, copy=False)
    flat_in = data.reshape(-1)
    touched = np.zeros(flat_in.size, dtype=bool)
    touched[targets] = True
    dtype = data.dtype
    if reduce in ("sum", "mean"):
        out = flat_in.copy() if include_self else np.where(touched, 0, flat_in).astype(dtype)
        np.add.at(out, targets, values)
        count = np.zeros(flat_in.size, dtype=np.int64)
        np.add.at(count, targets, 1)
        count = count + (1 if include_self else 0)
        count = np.where(touched, count, 1)
        if reduce == "mean":
            out = np.where(touched, out / count, out).astype(dtype)
        self_share = np.where(touched, (1.0 if include_self else 0.0) / (count if reduce == "mean" else 1), 1.0)
        src_share = 1.0 / count[targets] if reduce == "mean" else np.ones(targets.size)
    else:
        better = np.maximum if reduce == "amax" else np.minimum
        fill = -np.inf if reduce == "amax" else np.inf
        out = flat_in.copy() if include_self else np.where(touched, fill, flat_in).astype(dtype)
        better.at(out, targets, values)
        ties = np.zeros(flat_in.size, dtype=np.int64)
        np.add.at(ties, targets, values == out[targets])
        self_wins = (flat_in == out) & (include_self | ~touched)
        ties = ties + self_wins
        self_share = np.where(self_wins, 1.0 / np.maximum(ties, 1), 0.0)
        src_share = (values == out[targets]) / np.maximum(ties[targets], 1)
    node = new_node(ScatterReduceBackward0, (input, src))
    if node is not None:
        node.targets = targets
        node.self_share = self_share.astype(dtype)
        node.src_share = np.asarray(src_share, dtype=dtype)
        node.src_view = (source.shape, region, idx.shape)
    return result(out.reshape(data.shape).astype(dtype, copy=False), node)


# ============================== masked_scatter
def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """``input`` with the positions where ``mask`` is true filled from ``source``'s leading elements, in order."""
    from gradscope.ops import shape
    if mask._data.dtype != np.bool_:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{mask._type_name()}")
    bits = np.broadcast_to(mask._data, input.shape)
    count = int(bits.sum())
    if count > source._data.size:
        raise RuntimeError("masked_scatter: expected source to have at least as many elements as ones in mask")
    positions = np.where(bits, np.cumsum(bits.reshape(-1)).reshape(bits.shape) - 1, 0)
    if source._data.size == 0:
        return shape.clone(input)
    picked = shape.getitem(shape.reshape(source, (-1,)), _const(positions.astype(np.int64)))
    return pointwise.where(_const(bits.copy()), picked, input)
