"""Statistics over tensors: covariance (``cov``), quantiles (``quantile``, ``nanquantile``) and the
most frequent value (``mode``), composed from differentiable ops (``mode`` gathers along a dimension).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, indexing, pointwise, reduce, shape, sorting
from gradscope.ops._util import _const
from gradscope.ops.sorting import ValuesIndices


def cov(input: Tensor, *, correction: int = 1, fweights: Tensor | None = None,
        aweights: Tensor | None = None) -> Tensor:
    """Covariance of the variables in ``input``'s rows (observations are the columns), as numpy.cov."""
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with "
                           f"{input.ndim} dimensions")
    x = shape.reshape(input, (1, -1)) if input.ndim < 2 else input
    weights = None
    if fweights is not None:
        weights = fweights
    if aweights is not None:
        weights = aweights if weights is None else arith.mul(weights, aweights)
    if weights is None:
        total = x.shape[1]
        mean = reduce.mean(x, 1, True)
        norm = total - correction
    else:
        weights = shape.to_dtype(weights, x._data.dtype.name)
        total = reduce.sum(weights)
        mean = arith.div(reduce.sum(arith.mul(x, weights), 1, True), total)
        if correction == 0:
            norm = total
        elif aweights is None:
            norm = arith.sub(total, correction)
        else:
            norm = arith.sub(total, arith.div(arith.mul(reduce.sum(arith.mul(weights, aweights)), correction),
                                              total))
    centred = arith.sub(x, mean)
    scaled = centred if weights is None else arith.mul(centred, weights)
    if isinstance(norm, (int, float)):
        norm = max(norm, 0)
    else:
        norm = pointwise.clamp(norm, min=0)
    out = arith.div(arith.matmul(scaled, shape.t(centred)), norm)
    return shape.reshape(out, ()) if x.shape[0] == 1 else out


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(input: Tensor, q: Any, dim: int | None, keepdim: bool, interpolation: str, ignore_nan: bool,
              name: str) -> Tensor:
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest. "
                           f"Found {interpolation}")
    if input._data.dtype.kind != "f":
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    q_values = np.asarray(q._data if isinstance(q, Tensor) else q, dtype=np.float64)
    if q_values.ndim > 1:
        raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
    if ((q_values < 0) | (q_values > 1)).any():
        raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
    if dim is None:
        moved = shape.reshape(input, (1, -1))
        kept_shape = (1,) * input.ndim if keepdim else ()
    else:
        dim %= max(input.ndim, 1)
        moved = shape.movedim(input, dim, -1) if input.ndim else shape.reshape(input, (1,))
        kept = list(input.shape)
        if kept:
            kept[dim] = 1
        kept_shape = tuple(kept) if keepdim else tuple(s for i, s in enumerate(input.shape) if i != dim)
        moved = shape.reshape(moved, (-1, moved.shape[-1]))
    if moved.shape[-1] == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    ordered = sorting.sort(moved, -1).values
    data = ordered._data
    nans = np.isnan(data)
    count = (~nans).sum(-1, keepdims=True) if ignore_nan else np.full((data.shape[0], 1), data.shape[-1])
    ranks = q_values.reshape(1, -1) * (count - 1)
    ranks = np.maximum(ranks, 0)
    if interpolation == "lower":
        ranks = np.floor(ranks)
    elif interpolation == "higher":
        ranks = np.ceil(ranks)
    elif interpolation == "nearest":
        ranks = np.round(ranks)
    lo = np.floor(ranks).astype(np.int64)
    hi = np.ceil(ranks).astype(np.int64)
    weight = ranks - lo
    if interpolation == "midpoint":
        weight = np.where(hi > lo, 0.5, 0.0)
    invalid = (count == 0) if ignore_nan else nans.any(-1, keepdims=True)
    last = data.shape[-1] - 1
    lo, hi = np.minimum(lo, last), np.minimum(hi, last)
    below = indexing.gather(ordered, 1, _const(lo))
    above = indexing.gather(ordered, 1, _const(hi))
    out = arith.add(below, arith.mul(arith.sub(above, below), _const(weight.astype(data.dtype))))
    if invalid.any():
        out = pointwise.where(_const(np.broadcast_to(invalid, out.shape).copy()), float("nan"), out)
    out = shape.reshape(shape.t(out), (q_values.size,) + kept_shape)
    return shape.reshape(out, kept_shape) if q_values.ndim == 0 else out


def quantile(input: Tensor, q: Any, dim: int | None = None, keepdim: bool = False, *,
             interpolation: str = "linear") -> Tensor:
    """The ``q``-quantiles along ``dim`` (all elements when None); NaN where a slice holds a NaN."""
    return _quantile(input, q, dim, keepdim, interpolation, False, "quantile")


def nanquantile(input: Tensor, q: Any, dim: int | None = None, keepdim: bool = False, *,
                interpolation: str = "linear") -> Tensor:
    """:func:`quantile` ignoring NaNs (NaN only where a slice is all NaN)."""
    return _quantile(input, q, dim, keepdim, interpolation, True, "nanquantile")


class ModeBackward0(sorting._TakeAlongBackward):
    __slots__ = ()


def mode(input: Tensor, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    """The most frequent value along ``dim`` (the smallest of equally frequent ones) and its last index."""
    data = input._data
    if data.ndim == 0:
        return sorting._take(ModeBackward0, input, 0, np.zeros((), dtype=np.int64))
    axis = dim % data.ndim
    moved = np.moveaxis(data, axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    best = np.empty(flat.shape[0], dtype=np.int64)
    for row, values in enumerate(flat):
        order = np.argsort(values, kind="stable")
        ordered = values[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        counts = np.diff(np.r_[starts, ordered.size])
        chosen = ordered[starts[np.argmax(counts)]]
        best[row] = np.flatnonzero(values == chosen)[-1]
    indices = np.expand_dims(best.reshape(moved.shape[:-1]), axis)
    return sorting._take(ModeBackward0, input, axis, indices, squeeze=not keepdim)
