"""Reductions and normalisations: sum, mean, var/std, max/min, logsumexp, norm, softmax, cumulative
sums (``cumsum``, ``logcumsumexp``), ``renorm``, and integration along a dimension (``trapezoid``)."""
from __future__ import annotations

import builtins as _builtins
from collections import namedtuple
from typing import Any

import numpy as np

from gradscope.autograd import dtypes
from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, pointwise, shape
from gradscope.ops._util import F64, accurate_mean, float_input, normalize_dim, wide_sum

MaxMin = namedtuple("MaxMin", ["values", "indices"])


def _axes(dim: Any, ndim: int) -> tuple | None:
    d = normalize_dim(dim, ndim)
    if d is None:
        return None
    axes = d if isinstance(d, tuple) else (d,)
    if ndim == 0:
        return None
    return axes if axes else None


def _expand(g: np.ndarray, shape: tuple, axes: tuple | None, keepdim: bool) -> np.ndarray:
    """Broadcast a reduced gradient back to the input ``shape``."""
    if axes is None:
        return np.broadcast_to(g.reshape((1,) * len(shape)) if shape else g, shape)
    if not keepdim:
        g = np.expand_dims(g, tuple(sorted(axes)))
    return np.broadcast_to(g, shape)


class SumBackward0(Node):
    __slots__ = ("shape", "axes", "keepdim")

    def backward(self, g):
        return _expand(g, self.shape, self.axes, self.keepdim)


class SumBackward1(SumBackward0):
    __slots__ = ()


def sum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None, axis: Any = None) -> Tensor:
    """Sum over all elements or over ``dim`` (int or tuple; ``axis`` is numpy's name for it)."""
    if axis is not None:
        dim = axis
    data = input._data
    axes = _axes(dim, data.ndim)
    np_dtype = dtypes.to_numpy_dtype(dtype) if dtype is not None else None
    if np_dtype is None and data.dtype.kind in "biu":
        np_dtype = np.dtype(np.int64)
    kd = keepdim if axes is not None else False
    if np_dtype is None and data.dtype.kind in "fc":  # accumulated wide, rounded once (torch's cascade sum)
        out = wide_sum(data, axes, kd).astype(data.dtype, copy=False)
    else:
        out = np.asarray(data.sum(axis=axes, keepdims=kd, dtype=np_dtype))
    node = new_node(SumBackward0 if dim is None else SumBackward1, (input,))
    if node is not None:
        node.shape, node.axes, node.keepdim = data.shape, axes, keepdim
    return result(out, node)


class MeanBackward0(Node):
    __slots__ = ("shape", "axes", "keepdim", "count")

    def backward(self, g):
        return _expand(g / self.count, self.shape, self.axes, self.keepdim)


class MeanBackward1(MeanBackward0):
    __slots__ = ()


def _count(shape: tuple, axes: tuple | None) -> int:
    if axes is None:
        return int(np.prod(shape)) if shape else 1
    return int(np.prod([shape[a] for a in axes]))


def mean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None, axis: Any = None) -> Tensor:
    """Mean over all elements or over ``dim`` (``axis`` is numpy's name for it)."""
    if axis is not None:
        dim = axis
    data = input._data
    if data.dtype.kind not in "fc" and dtype is None:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a floating "
                           f"point or complex dtype. Got: {input.dtype.name.capitalize()}")
    if dtype is not None:
        data = data.astype(dtypes.to_numpy_dtype(dtype))
    axes = _axes(dim, data.ndim)
    out = accurate_mean(data, axes, keepdim if axes is not None else False)
    node = new_node(MeanBackward0 if dim is None else MeanBackward1, (input,))
    if node is not None:
        node.shape, node.axes, node.keepdim = data.shape, axes, keepdim
        node.count = _count(data.shape, axes)
    return result(out.astype(data.dtype, copy=False), node)


class VarBackward0(Node):
    __slots__ = ("axes", "keepdim", "ddof")

    def backward(self, g):
        (x,) = self.saved()
        return _var_backward(g, x, self.axes, self.keepdim, self.ddof)


def _var_backward(g: np.ndarray, x: np.ndarray, axes: tuple | None, keepdim: bool, ddof: float) -> np.ndarray:
    """torch's ``var_backward``: ``2 / (n - ddof) * g * (x - mean(x))``, in ``x``'s dtype."""
    n = _count(x.shape, axes)
    g = _expand(g, x.shape, axes, keepdim)
    if n - ddof <= 0:
        return g * np.nan
    return (2.0 / (n - ddof)) * g * (x - accurate_mean(x, axes, keepdims=True))


class StdBackward0(Node):
    __slots__ = ("axes", "keepdim", "ddof")
    _save_output = False

    def backward(self, g):
        x, std = self.saved()
        with np.errstate(divide="ignore", invalid="ignore"):  # torch: no gradient where std is 0
            grad_var = np.where(std == 0, np.zeros((), g.dtype), g / (std * 2))
        return _var_backward(grad_var, x, self.axes, self.keepdim, self.ddof)


def _ddof(unbiased: Any, correction: Any) -> float:
    if correction is not None:
        return float(correction)
    if unbiased is None:
        return 1.0
    return 1.0 if unbiased else 0.0


def _spread_args(input: Tensor, dim: Any, unbiased: Any, correction: Any) -> tuple:
    """``(data, axes, ddof)`` of ``var``/``std``; ``var(x, False)`` means ``unbiased=False`` in
    PyTorch's positional signature."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    data = float_input(input)
    return data, _axes(dim, data.ndim), _ddof(unbiased, correction)


def _wide_var(data: np.ndarray, axes: tuple | None, ddof: float, keepdim: bool) -> np.ndarray:
    """The variance computed in float64 (complex128) from the input's values, as torch's CPU
    kernel accumulates float32 (Welford's algorithm in double)."""
    wide = data.astype(np.complex128 if data.dtype.kind == "c" else F64, copy=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(wide.var(axis=axes, ddof=ddof, keepdims=keepdim if axes is not None else False))


def var(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    """Variance with Bessel's correction by default (``unbiased``/``correction`` as PyTorch)."""
    data, axes, ddof = _spread_args(input, dim, unbiased, correction)
    out = _wide_var(data, axes, ddof, keepdim).astype(data.real.dtype, copy=False)
    node = new_node(VarBackward0, (input,))
    if node is not None:
        node.axes, node.keepdim, node.ddof = axes, keepdim, ddof
        node.save(input)
    return result(out, node)


def std(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
        correction: Any = None) -> Tensor:
    """Standard deviation (see ``var``)."""
    data, axes, ddof = _spread_args(input, dim, unbiased, correction)
    with np.errstate(invalid="ignore"):
        out = np.sqrt(_wide_var(data, axes, ddof, keepdim)).astype(data.real.dtype, copy=False)
    node = new_node(StdBackward0, (input,))
    if node is not None:
        node.axes, node.keepdim, node.ddof = axes, keepdim, ddof
        node.save(input, Tensor._make(out))
    return result(out, node)


class VarMeanBackward0(Node):
    """``var_mean``: one node with two outputs, as in PyTorch (a node pre-hook sees both
    gradients; a hook of an output that got none is called with None)."""

    __slots__ = ("axes", "keepdim", "ddof", "shape", "count")
    _slow = True
    _spread = VarBackward0

    def backward(self, g_spread, g_mean):
        grad = None if g_spread is None else self._spread.backward(self, g_spread)
        if g_mean is not None:
            from_mean = MeanBackward0.backward(self, g_mean)
            grad = from_mean if grad is None else grad + from_mean
        return grad


class StdMeanBackward0(VarMeanBackward0):
    __slots__ = ()
    _spread = StdBackward0


def _spread_mean(node_class: type, spread: Any, input: Tensor, dim: Any, unbiased: Any, keepdim: bool,
                 correction: Any) -> tuple:
    """``(spread(input), mean(input))`` as the two outputs of one ``node_class`` node."""
    from gradscope.autograd import grad_mode
    from gradscope.autograd.function import results

    data, axes, ddof = _spread_args(input, dim, unbiased, correction)
    with grad_mode.no_grad():
        spread_out = spread(input, dim, unbiased, keepdim, correction=correction)._data
        mean_out = mean(input, dim if not isinstance(dim, bool) else None, keepdim)._data
    node = new_node(node_class, (input,))
    if node is not None:
        node.axes, node.keepdim, node.ddof = axes, keepdim, ddof
        node.shape, node.count = data.shape, _count(data.shape, axes)
        if node_class is StdMeanBackward0:
            node.save(input, Tensor._make(spread_out))
        else:
            node.save(input)
    return results([spread_out, mean_out], node)


def var_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple:
    """``(var, mean)`` over ``dim``, from one node (see ``var``)."""
    return _spread_mean(VarMeanBackward0, var, input, dim, unbiased, keepdim, correction)


def std_mean(input: Tensor, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *,
             correction: Any = None) -> tuple:
    """``(std, mean)`` over ``dim``, from one node (see ``std``)."""
    return _spread_mean(StdMeanBackward0, std, input, dim, unbiased, keepdim, correction)


# ---------------------------------------------------------------- max / min
class MaxBackward1(Node):
    """Full reduction: the gradient is shared evenly among tied maxima."""

    __slots__ = ("axes", "keepdim")

    def backward(self, g):
        x, out = self.saved()
        out_b = _expand(out, x.shape, self.axes, self.keepdim)
        mask = (x == out_b)
        count = mask.sum(axis=self.axes, keepdims=True)
        return _expand(g, x.shape, self.axes, self.keepdim) * mask / count


class MinBackward1(MaxBackward1):
    __slots__ = ()


class AmaxBackward0(MaxBackward1):
    __slots__ = ()


class AminBackward0(MaxBackward1):
    __slots__ = ()


class MaxBackward0(Node):
    """Reduction along ``dim``: the gradient goes to the returned index."""

    __slots__ = ("shape", "axis", "keepdim", "indices")

    def backward(self, g):
        grad = np.zeros(self.shape, dtype=g.dtype)
        idx = self.indices if self.keepdim else np.expand_dims(self.indices, self.axis)
        gk = g if self.keepdim else np.expand_dims(g, self.axis)
        np.put_along_axis(grad, idx, gk, axis=self.axis)
        return grad


class MinBackward0(MaxBackward0):
    __slots__ = ()


def _extreme(input: Tensor, dim: Any, keepdim: bool, is_max: bool) -> Any:
    data = input._data
    if isinstance(dim, Tensor):
        from gradscope.ops.pointwise import maximum, minimum

        return (maximum if is_max else minimum)(input, dim)
    if data.size == 0:
        raise RuntimeError(f"{'max' if is_max else 'min'}(): Expected reduction dim to be specified for "
                           "input.numel() == 0. Specify the reduction dim with the 'dim' argument.")
    if dim is None:
        out = np.asarray(data.max() if is_max else data.min())
        node = new_node(MaxBackward1 if is_max else MinBackward1, (input,))
        if node is not None:
            node.axes, node.keepdim = None, False
            node.save(input, Tensor._make(out))
        return result(out, node)
    axis = normalize_dim(dim, data.ndim)
    if data.ndim == 0:
        return MaxMin(result(data.copy(), None), Tensor._make(np.zeros((), dtype=np.int64)))
    indices = (np.argmax if is_max else np.argmin)(data, axis=axis)
    if data.dtype.kind == "f":
        nan_rows = np.isnan(data).any(axis=axis)
        if nan_rows.any():
            indices = np.where(nan_rows, np.argmax(np.isnan(data), axis=axis), indices)
    values = np.take_along_axis(data, np.expand_dims(indices, axis), axis=axis)
    if not keepdim:
        values = values.squeeze(axis)
    else:
        indices = np.expand_dims(indices, axis)
    node = new_node(MaxBackward0 if is_max else MinBackward0, (input,))
    if node is not None:
        node.shape, node.axis, node.keepdim, node.indices = data.shape, axis, keepdim, indices
    return MaxMin(result(values, node), Tensor._make(indices.astype(np.int64)))


def max(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """Maximum of all elements, or ``(values, indices)`` along ``dim``, or elementwise vs a tensor."""
    return _extreme(input, dim, keepdim, True)


def min(input: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """Minimum of all elements, or ``(values, indices)`` along ``dim``, or elementwise vs a tensor."""
    return _extreme(input, dim, keepdim, False)


def _amax(input: Tensor, dim: Any, keepdim: bool, is_max: bool) -> Tensor:
    data = input._data
    axes = _axes(dim if dim != () else None, data.ndim)
    out = np.asarray((data.max if is_max else data.min)(axis=axes, keepdims=keepdim if axes is not None else False))
    node = new_node(AmaxBackward0 if is_max else AminBackward0, (input,))
    if node is not None:
        node.axes, node.keepdim = axes, keepdim
        node.save(input, Tensor._make(out))
    return result(out, node)


def amax(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (all dims by default); ties share the gradient evenly."""
    return _amax(input, dim, keepdim, True)


def amin(input: Tensor, dim: Any = (), keepdim: bool = False) -> Tensor:
    """Minimum over ``dim`` (all dims by default); ties share the gradient evenly."""
    return _amax(input, dim, keepdim, False)


def argmax(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Index of the maximum (of the flattened input when ``dim`` is None), as int64."""
    return _arg_extreme(np.argmax, input, dim, keepdim)


def argmin(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    """Index of the minimum (of the flattened input when ``dim`` is None), as int64."""
    return _arg_extreme(np.argmin, input, dim, keepdim)


def _arg_extreme(find: Any, input: Tensor, dim: Any, keepdim: bool) -> Tensor:
    data = input._data
    if dim is None:
        return Tensor._make(np.asarray(find(data), dtype=np.int64))
    axis = normalize_dim(dim, data.ndim)
    return Tensor._make(find(data, axis=axis, keepdims=keepdim).astype(np.int64))


def any(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    axes = _axes(dim, input._data.ndim)
    return Tensor._make(np.asarray(np.any(input._data, axis=axes, keepdims=keepdim if axes is not None else False)))


def all(input: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
    axes = _axes(dim, input._data.ndim)
    return Tensor._make(np.asarray(np.all(input._data, axis=axes, keepdims=keepdim if axes is not None else False)))


def count_nonzero(input: Tensor, dim: Any = None) -> Tensor:
    axes = _axes(dim, input._data.ndim)
    return Tensor._make(np.asarray(np.count_nonzero(input._data, axis=axes), dtype=np.int64))


# ---------------------------------------------------------------- logsumexp, norm
class LogsumexpBackward0(Node):
    __slots__ = ("axes", "keepdim")

    def backward(self, g):
        x, out = self.saved()
        out_b = _expand(out, x.shape, self.axes, self.keepdim)
        return _expand(g, x.shape, self.axes, self.keepdim) * np.exp(x - out_b)


def logsumexp(input: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    """``log(sum(exp(x)))`` along ``dim``, computed stably."""
    data = float_input(input)
    axes = _axes(dim, data.ndim)
    with np.errstate(invalid="ignore", over="ignore"):
        m = data.max(axis=axes, keepdims=True) if data.size else np.zeros((1,) * data.ndim, data.dtype)
        m = np.where(np.isfinite(m), m, 0)
        out = np.log(np.exp(data - m).sum(axis=axes, keepdims=True)) + m
    if not keepdim and axes is not None:
        out = out.squeeze(axis=axes)
    elif axes is None:
        out = out.reshape(())
    out = np.asarray(out).astype(data.dtype, copy=False)
    node = new_node(LogsumexpBackward0, (input,))
    if node is not None:
        node.axes, node.keepdim = axes, keepdim
        node.save(input, Tensor._make(out))
    return result(out, node)


class LinalgVectorNormBackward0(Node):
    __slots__ = ("axes", "keepdim", "ord")

    def backward(self, g):
        x, out = self.saved()
        p = self.ord
        g = _expand(g, x.shape, self.axes, self.keepdim)
        n = _expand(out, x.shape, self.axes, self.keepdim)
        with np.errstate(divide="ignore", invalid="ignore"):
            if p == 2:
                return np.where(n == 0, 0, g * x / n)
            if p == 1:
                return g * np.sign(x)
            if p == np.inf or p == -np.inf:
                mask = np.abs(x) == n
                count = mask.sum(axis=self.axes, keepdims=True)
                return g * np.sign(x) * mask / count
            if p == 0:
                return np.zeros_like(x)
            return np.where(n == 0, 0, g * np.sign(x) * np.abs(x) ** (p - 1) / n ** (p - 1))


def norm(input: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
    """Vector p-norm over all elements or over ``dim`` (``'fro'`` is the 2-norm)."""
    ord_ = 2.0 if p in ("fro", None) else float(p)
    data = float_input(input)
    axes = _axes(dim, data.ndim)
    a = np.abs(data)
    kd = keepdim if axes is not None else False
    if ord_ == np.inf:
        out = a.max(axis=axes, keepdims=kd)
    elif ord_ == -np.inf:
        out = a.min(axis=axes, keepdims=kd)
    elif ord_ == 0:
        out = (a != 0).sum(axis=axes, keepdims=kd).astype(data.dtype)
    elif ord_ == 2:
        out = np.sqrt((data * data).sum(axis=axes, keepdims=kd))
    elif ord_ == 1:
        out = a.sum(axis=axes, keepdims=kd)
    else:
        out = (a ** ord_).sum(axis=axes, keepdims=kd) ** (1.0 / ord_)
    out = np.asarray(out).astype(data.dtype, copy=False)
    node = new_node(LinalgVectorNormBackward0, (input,))
    if node is not None:
        node.axes, node.keepdim, node.ord = axes, keepdim, ord_
        node.save(input, Tensor._make(out))
    return result(out, node)


# ---------------------------------------------------------------- softmax family
class SoftmaxBackward0(Node):
    __slots__ = ("axis",)
    _save_output = True

    def backward(self, g):
        y = self.saved()[0]
        return y * (g - (g * y).sum(axis=self.axis, keepdims=True))


class LogSoftmaxBackward0(Node):
    __slots__ = ("axis",)
    _save_output = True

    def backward(self, g):
        y = self.saved()[0]
        return g - np.exp(y) * g.sum(axis=self.axis, keepdims=True)


def _softmax_dim(dim: Any, ndim: int) -> int:
    if dim is None:
        dim = 0 if ndim in (0, 1, 3) else 1
    return normalize_dim(dim, ndim)


def _cast(input: Tensor, dtype: Any) -> Tensor:
    if dtype is None:
        return input
    from gradscope.ops.shape import to_dtype

    return to_dtype(input, dtype)


def softmax(input: Tensor, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """Softmax along ``dim``."""
    input = _cast(input, dtype)
    data = float_input(input)
    axis = _softmax_dim(dim, data.ndim)
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = data - data.max(axis=axis, keepdims=True) if data.size else data
        e = np.exp(shifted)
        out = e / e.sum(axis=axis, keepdims=True)
    node = new_node(SoftmaxBackward0, (input,))
    if node is not None:
        node.axis = axis
    return result(out, node)


def log_softmax(input: Tensor, dim: Any = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """Log of softmax along ``dim``, computed stably."""
    input = _cast(input, dtype)
    data = float_input(input)
    axis = _softmax_dim(dim, data.ndim)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        shifted = data - data.max(axis=axis, keepdims=True) if data.size else data
        out = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
    node = new_node(LogSoftmaxBackward0, (input,))
    if node is not None:
        node.axis = axis
    return result(out, node)


class ProdBackward0(Node):
    __slots__ = ("axes", "keepdim")

    def backward(self, g):
        x, out = self.saved()
        g = _expand(g, x.shape, self.axes, self.keepdim)
        if np.all(x != 0):
            return g * _expand(out, x.shape, self.axes, self.keepdim) / x
        # Product of the other elements, without dividing by zero.
        axis = self.axes[0] if self.axes else None
        flat = x.reshape(-1) if axis is None else np.moveaxis(x, axis, -1)
        left = np.cumprod(np.concatenate([np.ones_like(flat[..., :1]), flat[..., :-1]], -1), -1)
        right = np.flip(np.cumprod(np.concatenate([np.ones_like(flat[..., :1]), np.flip(flat, -1)[..., :-1]], -1), -1), -1)
        others = left * right
        others = others.reshape(x.shape) if axis is None else np.moveaxis(others, -1, axis)
        return g * others


def prod(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    data = input._data
    axes = _axes(dim, data.ndim)
    out = np.asarray(data.prod(axis=axes, keepdims=keepdim if axes is not None else False))
    node = new_node(ProdBackward0, (input,))
    if node is not None:
        node.axes, node.keepdim = axes, keepdim
        node.save(input, Tensor._make(out))
    return result(out, node)


class CumsumBackward0(Node):
    __slots__ = ("axis",)

    def backward(self, g):
        return np.flip(np.cumsum(np.flip(g, self.axis), axis=self.axis), self.axis)


def cumsum(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:
    axis = normalize_dim(dim, input._data.ndim)
    out = np.cumsum(input._data, axis=axis)
    node = new_node(CumsumBackward0, (input,))
    if node is not None:
        node.axis = axis
    return result(out, node)


def nansum(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``sum`` treating NaN as zero."""
    from gradscope.ops.indexing import masked_fill

    return sum(masked_fill(input, Tensor._make(np.isnan(input._data)), 0.0), dim, keepdim, dtype=dtype)


def nanmean(input: Tensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:
    """``mean`` over the values that are not NaN."""
    from gradscope.ops import arith

    count = np.sum(~np.isnan(input._data), axis=None if dim is None else _axes(dim, input._data.ndim),
                   keepdims=keepdim)
    total = nansum(input, dim, keepdim, dtype=dtype)
    return arith.div(total, Tensor._make(np.asarray(count, dtype=total._data.dtype)))


# ============================== logcumsumexp, renorm, trapezoid
class LogcumsumexpBackward0(Node):
    __slots__ = ("axis",)

    def backward(self, g):
        x, out = self.saved()
        axis = self.axis
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            log_abs = np.log(np.abs(g)) - out

            def reverse_lse(values: np.ndarray) -> np.ndarray:
                flipped = np.flip(values, axis)
                return np.flip(np.logaddexp.accumulate(flipped, axis=axis), axis)

            positive = reverse_lse(np.where(g > 0, log_abs, -np.inf))
            negative = reverse_lse(np.where(g < 0, log_abs, -np.inf))
            grad = np.exp(x + positive) - np.exp(x + negative)
        return grad.astype(g.dtype, copy=False)


def logcumsumexp(input: Tensor, dim: int) -> Tensor:
    """``log(cumsum(exp(input)))`` along ``dim``, computed without overflow."""
    x = float_input(input)
    axis = dim % _builtins.max(x.ndim, 1)
    data = x.reshape(1) if x.ndim == 0 else x
    out = np.logaddexp.accumulate(data, axis=axis).reshape(x.shape).astype(x.dtype, copy=False)
    node = new_node(LogcumsumexpBackward0, (input,))
    if node is not None:
        node.axis = axis
        node.save(Tensor._make(data), Tensor._make(out.reshape(data.shape)))
    return result(out, node)


def renorm(input: Tensor, p: float, dim: int, maxnorm: float) -> Tensor:
    """Rescale each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` to norm ``maxnorm``."""
    if input.ndim <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.ndim} dimensions")
    dim %= input.ndim
    others = tuple(d for d in range(input.ndim) if d != dim)
    norms = norm(input, p, others, True)
    scale = pointwise.where(arith.gt(norms, maxnorm), arith.rdiv(arith.add(norms, 1e-7), maxnorm), 1.0)
    return arith.mul(input, scale)


def trapezoid(y: Tensor, x: Any = None, *, dx: float | None = None, dim: int = -1) -> Tensor:
    """Integral of ``y`` along ``dim`` by the trapezoid rule, with sample points ``x`` or spacing ``dx``."""
    n = y.shape[dim]
    if n == 0:
        return sum(y, dim)
    ends = arith.add(shape.narrow(y, dim, 1, n - 1), shape.narrow(y, dim, 0, n - 1))
    if x is None or not isinstance(x, Tensor):
        spacing = x if x is not None else (1.0 if dx is None else dx)
        return arith.mul(sum(ends, dim), spacing / 2)
    if x.ndim == 1:
        steps = shape.diff(x)
        view = [1] * y.ndim
        view[dim] = n - 1
        steps = shape.reshape(steps, tuple(view))
    else:
        steps = shape.diff(x, dim=dim)
    return arith.div(sum(arith.mul(ends, steps), dim), 2)


def trapz(y: Tensor, x: Any = None, *, dx: float | None = None, dim: int = -1) -> Tensor:
    """``torch.trapz``: the old name of :func:`trapezoid`."""
    return trapezoid(y, x, dx=dx, dim=dim)
