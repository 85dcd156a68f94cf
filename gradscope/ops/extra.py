"""More of torch's top-level tensor functions that real model code calls: products (``kron``,
``inner``, ``cross``, ``block_diag``, ``matrix_power``, ``multi_dot``), rearrangements (``rot90``,
``cartesian_prod``, ``combinations``), special functions (``lgamma``, ``logcumsumexp``, ``hypot``),
statistics (``cov``, ``quantile``, ``mode``) and the odd ones out (``renorm``, ``trapezoid``,
``masked_scatter``, ``heaviside``, ``signbit``, ``unique_consecutive``).

Most are compositions of differentiable ops, so their gradients come from those ops; ``lgamma``
and ``logcumsumexp`` have their own backward.
"""
from __future__ import annotations

import itertools
import math
import warnings
from typing import Any, Sequence

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, indexing, pointwise, reduce, shape, sorting
from gradscope.ops._util import float_input
from gradscope.ops.sorting import ValuesIndices

__all__ = ["block_diag", "cartesian_prod", "chain_matmul", "combinations", "cov", "cross", "heaviside", "hypot",
           "inner", "kron", "lgamma", "linalg_cross", "logcumsumexp", "masked_scatter", "matrix_power", "mode",
           "multi_dot", "nanquantile", "quantile", "renorm", "rot90", "signbit", "trapezoid", "trapz",
           "unique_consecutive"]


def _const(values: np.ndarray) -> Tensor:
    return Tensor._make(np.asarray(values))


# ====================================================================== products
def _cross_last(a: Tensor, b: Tensor, dim: int) -> Tensor:
    a, b = shape.broadcast_tensors(a, b)
    if a.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {a.shape[dim]} and "
                           f"{b.shape[dim]}")
    a1, a2, a3 = shape.unbind(a, dim)
    b1, b2, b3 = shape.unbind(b, dim)
    parts = [arith.sub(arith.mul(a2, b3), arith.mul(a3, b2)), arith.sub(arith.mul(a3, b1), arith.mul(a1, b3)),
             arith.sub(arith.mul(a1, b2), arith.mul(a2, b1))]
    return shape.stack(parts, dim)


def linalg_cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """Cross product of 3-vectors along ``dim`` (inputs broadcast), like ``torch.linalg.cross``."""
    return _cross_last(input, other, dim)


def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    """``torch.cross``: along ``dim``, or (deprecated, warns) along the first dim of length 3."""
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the "
                      "dim explicitly or simply use torch.linalg.cross.\nThe default value of dim will change "
                      "to agree with that of linalg.cross in a future release.", UserWarning, stacklevel=3)
        sizes = np.broadcast_shapes(tuple(input.shape), tuple(other.shape))
        dim = next((i for i, s in enumerate(sizes) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    return _cross_last(input, other, dim)


def kron(input: Tensor, other: Tensor) -> Tensor:
    """Kronecker product: block ``(i, j, ...)`` of the result is ``input[i, j, ...] * other``."""
    nd = max(input.ndim, other.ndim)
    a = shape.reshape(input, (1,) * (nd - input.ndim) + tuple(input.shape))
    b = shape.reshape(other, (1,) * (nd - other.ndim) + tuple(other.shape))
    a_sizes, b_sizes = tuple(a.shape), tuple(b.shape)
    a = shape.reshape(a, tuple(itertools.chain.from_iterable((s, 1) for s in a_sizes)))
    b = shape.reshape(b, tuple(itertools.chain.from_iterable((1, s) for s in b_sizes)))
    return shape.reshape(arith.mul(a, b), tuple(x * y for x, y in zip(a_sizes, b_sizes)))


def inner(input: Tensor, other: Tensor) -> Tensor:
    """Sum of products over the last dims: shape ``input.shape[:-1] + other.shape[:-1]``."""
    if input.ndim == 0 or other.ndim == 0:
        return arith.mul(input, other)
    n = input.shape[-1]
    if other.shape[-1] != n:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    flat = arith.matmul(shape.reshape(input, (-1, n)), shape.t(shape.reshape(other, (-1, n))))
    return shape.reshape(flat, tuple(input.shape[:-1]) + tuple(other.shape[:-1]))


def block_diag(*tensors: Tensor) -> Tensor:
    """A block-diagonal matrix of the given 0-, 1- or 2-D tensors (a 1-D one is a row)."""
    blocks = []
    for t in tensors:
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input "
                               f"{len(blocks)} has {t.ndim} dimensions")
        blocks.append(shape.reshape(t, (1, 1) if t.ndim == 0 else (1, -1) if t.ndim == 1 else tuple(t.shape)))
    if not blocks:
        return Tensor._make(np.zeros((0, 0), dtype=np.float32))
    floats = [b._data.dtype for b in blocks if b._data.dtype.kind == "f"]
    dtype = np.result_type(*floats) if floats else np.result_type(*[b._data.dtype for b in blocks])
    blocks = [shape.to_dtype(b, dtype.name) if b._data.dtype != dtype else b for b in blocks]
    total = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        r, c = b.shape
        parts = [_const(np.zeros((r, left), dtype)), b, _const(np.zeros((r, total - left - c), dtype))]
        rows.append(shape.cat(parts, 1))
        left += c
    return shape.cat(rows, 0)


def matrix_power(input: Tensor, n: int) -> Tensor:
    """``input`` (a batch of square matrices) multiplied by itself ``n`` times (the inverse's for n < 0)."""
    if input.ndim < 2 or input.shape[-1] != input.shape[-2]:
        raise RuntimeError("linalg.matrix_power: A must be batches of square matrices, but they are "
                           f"{input.shape[-2] if input.ndim >= 2 else 1} by {input.shape[-1]} matrices")
    if n == 0:
        eye = np.broadcast_to(np.eye(input.shape[-1], dtype=input._data.dtype), input.shape)
        return _const(eye.copy())
    from gradscope.ops.linalg import inv

    base = inv(input) if n < 0 else input
    n = abs(n)
    out = None
    while n:
        if n & 1:
            out = base if out is None else arith.matmul(out, base)
        n >>= 1
        if n:
            base = arith.matmul(base, base)
    return out


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    """The product of a chain of matrices; a 1-D first (last) operand is a row (column) vector."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first_vector, last_vector = tensors[0].ndim == 1, tensors[-1].ndim == 1
    if first_vector:
        tensors[0] = shape.unsqueeze(tensors[0], 0)
    if last_vector:
        tensors[-1] = shape.unsqueeze(tensors[-1], 1)
    for i, t in enumerate(tensors):
        if t.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    out = tensors[0]
    for t in tensors[1:]:
        out = arith.matmul(out, t)
    if first_vector:
        out = shape.squeeze(out, 0)
    if last_vector:
        out = shape.squeeze(out, -1)
    return out


def chain_matmul(*matrices: Tensor) -> Tensor:
    """Deprecated ``torch.chain_matmul`` (warns like torch): the product of 2-D matrices."""
    warnings.warn("torch.chain_matmul is deprecated and will be removed in a future PyTorch release. Use "
                  "torch.linalg.multi_dot instead, which accepts a list of two or more tensors rather than "
                  "multiple parameters.", UserWarning, stacklevel=2)
    if len(matrices) == 1:
        return shape.clone(matrices[0])
    return multi_dot(matrices)


# ====================================================================== rearrangements
def rot90(input: Tensor, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """Rotate by 90 degrees ``k`` times in the plane of ``dims`` (from the first towards the second)."""
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    d0, d1 = dims
    k %= 4
    if k == 1:
        return shape.transpose(shape.flip(input, [d1]), d0, d1)
    if k == 2:
        return shape.flip(input, [d0, d1])
    if k == 3:
        return shape.transpose(shape.flip(input, [d0]), d0, d1)
    return shape.clone(input)


def cartesian_prod(*tensors: Tensor) -> Tensor:
    """Every combination of one element from each 1-D tensor, as rows (one tensor: itself)."""
    if len(tensors) == 1:
        return tensors[0]
    grids = shape.meshgrid(*tensors, indexing="ij")
    return shape.stack([shape.reshape(g, (-1,)) for g in grids], 1)


def combinations(input: Tensor, r: int = 2, with_replacement: bool = False) -> Tensor:
    """The length-``r`` combinations of a 1-D tensor's elements, as rows (itertools order)."""
    if input.ndim != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return _const(np.zeros((0,), dtype=input._data.dtype))
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    index = np.array(list(pick(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if index.shape[0] == 0:
        return _const(np.zeros((0, r), dtype=input._data.dtype))
    return shape.reshape(indexing.index_select(input, 0, _const(index.reshape(-1))), (-1, r))


# ====================================================================== special functions
def _digamma(x: np.ndarray) -> np.ndarray:
    """The digamma function (reflection below 0.5, recurrence up to 6, then the asymptotic series)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    reflect = x < 0.5
    z = np.where(reflect, 1.0 - x, x)
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            small = z < 10.0
            if not small.any():
                break
            out -= np.where(small, 1.0 / z, 0.0)
            z = np.where(small, z + 1.0, z)
        inv2 = 1.0 / (z * z)
        series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 * (
            1 / 132 - inv2 * 691 / 32760)))))
        out += np.log(z) - 0.5 / z - series
        out = np.where(reflect, out - math.pi / np.tan(math.pi * x), out)
        poles = (x <= 0) & (x == np.floor(x))
    return np.where(x == 0, -np.inf, np.where(poles, np.nan, out))


_lgamma_array = np.vectorize(math.lgamma, otypes=[np.float64])


def _lgamma_values(x: np.ndarray) -> np.ndarray:
    flat = x.astype(np.float64).reshape(-1)
    out = np.full(flat.shape, np.inf)
    finite = np.isfinite(flat) & ~((flat <= 0) & (flat == np.floor(flat)))
    out[finite] = _lgamma_array(flat[finite]) if finite.any() else out[finite]
    out[np.isnan(flat)] = np.nan
    return out.reshape(x.shape)


class LgammaBackward0(Node):
    __slots__ = ()

    def backward(self, g):
        (x,) = self.saved()
        return (g * _digamma(x)).astype(g.dtype, copy=False)


def lgamma(input: Tensor) -> Tensor:
    """``log|Gamma(x)|`` (inf at the poles); the gradient is the digamma function."""
    x = float_input(input)
    out = _lgamma_values(x).astype(x.dtype)
    node = new_node(LgammaBackward0, (input,))
    if node is not None:
        node.save(input)
    return result(out, node)


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
    axis = dim % max(x.ndim, 1)
    data = x.reshape(1) if x.ndim == 0 else x
    out = np.logaddexp.accumulate(data, axis=axis).reshape(x.shape).astype(x.dtype, copy=False)
    node = new_node(LogcumsumexpBackward0, (input,))
    if node is not None:
        node.axis = axis
        node.save(Tensor._make(data), Tensor._make(out.reshape(data.shape)))
    return result(out, node)


def hypot(input: Tensor, other: Any) -> Tensor:
    """``sqrt(input**2 + other**2)`` elementwise (broadcast)."""
    return pointwise.sqrt(arith.add(arith.mul(input, input), arith.mul(other, other)))


class HeavisideBackward0(Node):
    __slots__ = ()
    _single_input = False

    def backward(self, g):
        raise RuntimeError("the derivative for 'heaviside' is not implemented.")


def heaviside(input: Tensor, values: Any) -> Tensor:
    """0 where ``input < 0``, 1 where ``input > 0`` and ``values`` where it is 0 (no derivative, as in torch)."""
    values = values if isinstance(values, Tensor) else Tensor._make(np.asarray(values, dtype=input._data.dtype))
    x, v = input._data, values._data
    if x.dtype != v.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    out = np.where(x == 0, v, (x > 0).astype(x.dtype)).astype(x.dtype)
    return result(out, new_node(HeavisideBackward0, (input, values)))


def signbit(input: Tensor) -> Tensor:
    """True where the sign bit is set (negative numbers and -0.0)."""
    return Tensor._make(np.signbit(input._data))


# ====================================================================== statistics and the rest
def renorm(input: Tensor, p: float, dim: int, maxnorm: float) -> Tensor:
    """Rescale each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` to norm ``maxnorm``."""
    if input.ndim <= 1:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.ndim} dimensions")
    dim %= input.ndim
    others = tuple(d for d in range(input.ndim) if d != dim)
    norms = reduce.norm(input, p, others, True)
    scale = pointwise.where(arith.gt(norms, maxnorm), arith.rdiv(arith.add(norms, 1e-7), maxnorm), 1.0)
    return arith.mul(input, scale)


def trapezoid(y: Tensor, x: Any = None, *, dx: float | None = None, dim: int = -1) -> Tensor:
    """Integral of ``y`` along ``dim`` by the trapezoid rule, with sample points ``x`` or spacing ``dx``."""
    n = y.shape[dim]
    if n == 0:
        return reduce.sum(y, dim)
    ends = arith.add(shape.narrow(y, dim, 1, n - 1), shape.narrow(y, dim, 0, n - 1))
    if x is None or not isinstance(x, Tensor):
        spacing = x if x is not None else (1.0 if dx is None else dx)
        return arith.mul(reduce.sum(ends, dim), spacing / 2)
    if x.ndim == 1:
        steps = shape.diff(x)
        view = [1] * y.ndim
        view[dim] = n - 1
        steps = shape.reshape(steps, tuple(view))
    else:
        steps = shape.diff(x, dim=dim)
    return arith.div(reduce.sum(arith.mul(ends, steps), dim), 2)


def trapz(y: Tensor, x: Any = None, *, dx: float | None = None, dim: int = -1) -> Tensor:
    """``torch.trapz``: the old name of :func:`trapezoid`."""
    return trapezoid(y, x, dx=dx, dim=dim)


def masked_scatter(input: Tensor, mask: Tensor, source: Tensor) -> Tensor:
    """``input`` with the positions where ``mask`` is true filled from ``source``'s leading elements, in order."""
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
