"""Differential tests of gradscope's differentiable tensor ops, driven by one catalogue.

Every catalogue entry (op x input shapes x keyword arguments) goes through three checks:

1. forward (float32) against a numpy reference written independently of gradscope;
2. backward (float64) against central finite differences of that numpy reference (a weighted sum
   of the outputs, so one backward covers every output), then the full Jacobian through
   ``gs.autograd.gradcheck`` (which this also exercises on every op);
3. values, dtypes and the gradients of every input against PyTorch (float32 and float64), when
   torch is importable.

An entry's ``fn(T, *tensors, **kwargs)`` is written once against the PyTorch API and is called with
``T = gradscope`` and, for check 3, ``T = torch``. Value domains keep finite differences away from
points where an op is not differentiable (``abs``/``relu`` at 0, ties of ``max``, ``clamp`` bounds).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

Sampler = Callable[[np.random.Generator, tuple], np.ndarray]


# --------------------------------------------------------------------------------------------------
# Value domains
# --------------------------------------------------------------------------------------------------

def uniform(lo: float = -2.0, hi: float = 2.0) -> Sampler:
    """Uniform values in ``[lo, hi)``."""
    def sample(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        return rng.uniform(lo, hi, size=shape)
    return sample


def away_from(*points: float, margin: float = 0.1, lo: float = -2.0, hi: float = 2.0) -> Sampler:
    """Uniform values in ``[lo, hi)`` at least ``margin`` away from every point in ``points``."""
    def sample(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        values = np.asarray(rng.uniform(lo, hi, size=shape), dtype=np.float64)
        while True:
            too_close = np.zeros(values.shape, dtype=bool)
            for point in points:
                too_close |= np.abs(values - point) < margin
            if not too_close.any():
                return values
            values = np.where(too_close, rng.uniform(lo, hi, size=shape), values)
    return sample


def signed(lo: float = 0.5, hi: float = 2.0) -> Sampler:
    """Magnitudes in ``[lo, hi)`` with random signs (e.g. for divisors)."""
    def sample(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        return rng.uniform(lo, hi, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return sample


def distinct() -> Sampler:
    """Pairwise different values at least 0.25 apart (no ties for max/min/argmax)."""
    def sample(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64))
        return (rng.permutation(n) * 0.25 - n * 0.125).reshape(shape).astype(np.float64)
    return sample


def grid(offset: float) -> Sampler:
    """Multiples of 0.2 plus ``offset``: grid(0.0) and grid(0.1) never tie with each other."""
    def sample(rng: np.random.Generator, shape: tuple) -> np.ndarray:
        return rng.integers(-8, 9, size=shape) * 0.2 + offset
    return sample


# --------------------------------------------------------------------------------------------------
# The catalogue
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Op:
    """One catalogue entry.

    Attributes:
        name: unique name, used in test ids.
        fn: ``fn(T, *tensors, **kwargs)`` -> tensor or tuple of tensors, written against the
            PyTorch API; ``T`` is the backend module.
        ref: ``ref(*arrays, **kwargs)`` -> ndarray or tuple of ndarrays, in plain numpy.
        shapes: input-shape combinations, one tuple of shapes per case.
        domain: a sampler for every input, or one sampler per input.
        kwargs: keyword-argument sets, one case per set (and per shape combination).
    """

    name: str
    fn: Callable[..., Any]
    ref: Callable[..., Any]
    shapes: tuple
    domain: Any = uniform()
    kwargs: tuple = ({},)


BINARY_SHAPES = (((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((), (2, 3)), ((2, 3), ()), ((), ()))
UNARY_SHAPES = (((3, 4),), ((),), ((2, 3, 4),))
CUBE = (((2, 3, 4),),)
MATRIX = (((3, 4),),)


def _axis(dim: Any) -> Any:
    return tuple(dim) if isinstance(dim, (tuple, list)) else dim


def np_sum(x, dim=None, keepdim=False):
    return np.sum(x, axis=_axis(dim), keepdims=keepdim)


def np_mean(x, dim=None, keepdim=False):
    return np.mean(x, axis=_axis(dim), keepdims=keepdim)


def np_var(x, dim=None, keepdim=False, unbiased=True, correction=None):
    ddof = correction if correction is not None else (1 if unbiased else 0)
    return np.var(x, axis=_axis(dim), ddof=ddof, keepdims=keepdim)


def np_std(x, dim=None, keepdim=False, unbiased=True, correction=None):
    return np.sqrt(np_var(x, dim, keepdim, unbiased, correction))


def np_max(x, dim=None, keepdim=False):
    if dim is None:
        return np.max(x)
    return np.max(x, axis=dim, keepdims=keepdim), np.argmax(x, axis=dim, keepdims=keepdim).astype(np.int64)


def np_min(x, dim=None, keepdim=False):
    if dim is None:
        return np.min(x)
    return np.min(x, axis=dim, keepdims=keepdim), np.argmin(x, axis=dim, keepdims=keepdim).astype(np.int64)


def np_amax(x, dim=None, keepdim=False):
    return np.max(x, axis=_axis(dim), keepdims=keepdim)


def np_amin(x, dim=None, keepdim=False):
    return np.min(x, axis=_axis(dim), keepdims=keepdim)


def np_logsumexp(x, dim, keepdim=False):
    return np.log(np.sum(np.exp(x), axis=_axis(dim), keepdims=keepdim))


def np_norm(x, p=2, dim=None, keepdim=False):
    return np.sum(np.abs(x) ** p, axis=_axis(dim), keepdims=keepdim) ** (1.0 / p)


def np_softmax(x, dim):
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def np_log_softmax(x, dim):
    shifted = x - np.max(x, axis=dim, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=dim, keepdims=True))


def np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_chunk(x, chunks, dim=0):
    size = -(-x.shape[dim] // chunks)
    return tuple(np.split(x, range(size, x.shape[dim], size), axis=dim))


def np_split(x, split_size, dim=0):
    if isinstance(split_size, int):
        return tuple(np.split(x, range(split_size, x.shape[dim], split_size), axis=dim))
    return tuple(np.split(x, np.cumsum(split_size)[:-1], axis=dim))


def _np_erf(x):
    import math
    return np.vectorize(math.erf)(x)


def np_sort(x, dim=-1, descending=False):
    order = np.argsort(-x if descending else x, axis=dim, kind="stable")
    return np.take_along_axis(x, order, dim), order.astype(np.int64)


def np_topk(x, k, dim=-1, largest=True):
    values, order = np_sort(x, dim, largest)
    return np.take(values, range(k), axis=dim), np.take(order, range(k), axis=dim)


def np_kth(x, k, dim):
    values, order = np_sort(x, dim)
    return np.take(values, k - 1, axis=dim), np.take(order, k - 1, axis=dim)


def np_cumextreme(x, dim, is_max):
    values = (np.maximum if is_max else np.minimum).accumulate(x, axis=dim)
    moved = np.moveaxis(values, dim, -1)
    source = np.moveaxis(x, dim, -1)
    index = np.zeros(moved.shape, dtype=np.int64)
    for i in range(moved.shape[-1]):
        index[..., i] = np.where(source[..., i] == moved[..., i], i, index[..., i - 1] if i else 0)
    return values, np.moveaxis(index, -1, dim)


def np_repeat_interleave(x, repeats, dim=None):
    return np.repeat(x.reshape(-1) if dim is None else x, repeats, axis=0 if dim is None else dim)


def np_scatter(x, dim, index, src):
    out = x.copy()
    np.put_along_axis(out, index, src[tuple(slice(0, n) for n in index.shape)], dim)
    return out


def np_scatter_add(x, dim, index, src):
    out = x.copy()
    grids = list(np.indices(index.shape, sparse=True))
    grids[dim] = index
    np.add.at(out, tuple(grids), src)
    return out


def np_index_add(x, dim, index, src):
    out = x.copy()
    np.add.at(np.moveaxis(out, dim, 0), index, np.moveaxis(src, dim, 0))
    return out


def np_cdist(x, y, p=2.0):
    diff = np.abs(x[..., :, None, :] - y[..., None, :, :])
    return np.sum(diff ** p, axis=-1) ** (1.0 / p)


MASK_34 = np.array([[True, False, True, True], [False, False, True, False], [True, True, False, True]])
ROWS_3 = np.array([True, False, True])

UNARY = {
    # name: (numpy reference, domain)
    "exp": (np.exp, uniform()),
    "log": (np.log, uniform(0.5, 3.0)),
    "sqrt": (np.sqrt, uniform(0.5, 3.0)),
    "abs": (np.abs, away_from(0.0)),
    "sin": (np.sin, uniform()),
    "cos": (np.cos, uniform()),
    "tanh": (np.tanh, uniform()),
    "sigmoid": (np_sigmoid, uniform(-4.0, 4.0)),
    "relu": (lambda x: np.maximum(x, 0.0), away_from(0.0)),
    "neg": (np.negative, uniform()),
}


def _unary_entries() -> list[Op]:
    entries = []
    for name, (ref, domain) in UNARY.items():
        entries.append(Op(f"{name}.function", lambda T, x, n=name: getattr(T, n)(x), ref, UNARY_SHAPES, domain))
        entries.append(Op(f"{name}.method", lambda T, x, n=name: getattr(x, n)(), ref, UNARY_SHAPES, domain))
    return entries


POSITIVE = uniform(0.5, 2.0)


def _more_unary_entries() -> list[Op]:
    table = {
        "reciprocal": (lambda x: 1.0 / x, signed()),
        "log2": (np.log2, POSITIVE),
        "log10": (np.log10, POSITIVE),
        "expm1": (np.expm1, uniform()),
        "tan": (np.tan, uniform(-1.2, 1.2)),
        "sinh": (np.sinh, uniform()),
        "cosh": (np.cosh, uniform()),
        "asin": (np.arcsin, uniform(-0.9, 0.9)),
        "acos": (np.arccos, uniform(-0.9, 0.9)),
        "atan": (np.arctan, uniform()),
        "asinh": (np.arcsinh, uniform()),
        "acosh": (np.arccosh, uniform(1.1, 3.0)),
        "atanh": (np.arctanh, uniform(-0.9, 0.9)),
        "square": (np.square, uniform()),
        "rsqrt": (lambda x: 1.0 / np.sqrt(x), POSITIVE),
        "log1p": (np.log1p, uniform(-0.5, 2.0)),
        "erf": (_np_erf, uniform()),
    }
    entries = []
    for name, (ref, domain) in table.items():
        entries.append(Op(f"{name}.function", lambda T, x, n=name: getattr(T, n)(x), ref, UNARY_SHAPES[:2], domain))
        entries.append(Op(f"{name}.method", lambda T, x, n=name: getattr(x, n)(), ref, UNARY_SHAPES[2:], domain))
    return entries
CLAMP_DOMAIN = away_from(-0.5, 0.5, margin=0.05)

CATALOGUE: list[Op] = [
    # ---- binary arithmetic, tensor with tensor (broadcasting, 0-d) ----
    Op("add", lambda T, x, y: x + y, np.add, BINARY_SHAPES),
    Op("sub", lambda T, x, y: x - y, np.subtract, BINARY_SHAPES),
    Op("mul", lambda T, x, y: x * y, np.multiply, BINARY_SHAPES),
    Op("div", lambda T, x, y: x / y, np.divide, BINARY_SHAPES, (uniform(), signed())),
    Op("pow", lambda T, x, y: x ** y, np.power, BINARY_SHAPES, (POSITIVE, uniform())),
    Op("add.function", lambda T, x, y: T.add(x, y), np.add, BINARY_SHAPES[:3]),
    Op("sub.function", lambda T, x, y: T.sub(x, y), np.subtract, BINARY_SHAPES[:3]),
    Op("mul.function", lambda T, x, y: T.mul(x, y), np.multiply, BINARY_SHAPES[:3]),
    Op("div.function", lambda T, x, y: T.div(x, y), np.divide, BINARY_SHAPES[:3], (uniform(), signed())),
    Op("pow.function", lambda T, x, y: T.pow(x, y), np.power, BINARY_SHAPES[:3], (POSITIVE, uniform())),
    Op("add.method", lambda T, x, y: x.add(y), np.add, BINARY_SHAPES[:3]),
    Op("sub.method", lambda T, x, y: x.sub(y), np.subtract, BINARY_SHAPES[:3]),
    Op("mul.method", lambda T, x, y: x.mul(y), np.multiply, BINARY_SHAPES[:3]),
    Op("div.method", lambda T, x, y: x.div(y), np.divide, BINARY_SHAPES[:3], (uniform(), signed())),
    Op("pow.method", lambda T, x, y: x.pow(y), np.power, BINARY_SHAPES[:3], (POSITIVE, uniform())),
    # ---- with python scalars, both sides ----
    Op("add.scalar", lambda T, x: x + 2.5, lambda x: x + 2.5, UNARY_SHAPES),
    Op("add.rscalar", lambda T, x: 2.5 + x, lambda x: 2.5 + x, UNARY_SHAPES),
    Op("add.int_scalar", lambda T, x: x + 2, lambda x: x + 2, UNARY_SHAPES),
    Op("sub.scalar", lambda T, x: x - 2.5, lambda x: x - 2.5, UNARY_SHAPES),
    Op("sub.rscalar", lambda T, x: 2.5 - x, lambda x: 2.5 - x, UNARY_SHAPES),
    Op("mul.scalar", lambda T, x: x * 2.5, lambda x: x * 2.5, UNARY_SHAPES),
    Op("mul.rscalar", lambda T, x: 2.5 * x, lambda x: 2.5 * x, UNARY_SHAPES),
    Op("mul.int_rscalar", lambda T, x: 3 * x, lambda x: 3 * x, UNARY_SHAPES),
    Op("div.scalar", lambda T, x: x / 2.5, lambda x: x / 2.5, UNARY_SHAPES),
    Op("div.int_scalar", lambda T, x: x / 4, lambda x: x / 4, UNARY_SHAPES),
    Op("div.rscalar", lambda T, x: 2.5 / x, lambda x: 2.5 / x, UNARY_SHAPES, signed()),
    Op("pow.scalar_2", lambda T, x: x ** 2.0, lambda x: x ** 2.0, UNARY_SHAPES),
    Op("pow.int_3", lambda T, x: x ** 3, lambda x: x ** 3, UNARY_SHAPES),
    Op("pow.scalar_half", lambda T, x: x ** 0.5, np.sqrt, UNARY_SHAPES, POSITIVE),
    Op("pow.scalar_negative", lambda T, x: x ** -1.5, lambda x: x ** -1.5, UNARY_SHAPES, POSITIVE),
    Op("pow.rscalar", lambda T, x: 2.0 ** x, lambda x: 2.0 ** x, UNARY_SHAPES),
    Op("pow.function_scalar_exponent", lambda T, x: T.pow(x, 2.0), lambda x: x ** 2.0, UNARY_SHAPES),
    Op("neg.operator", lambda T, x: -x, np.negative, UNARY_SHAPES),
    Op("abs.builtin", lambda T, x: abs(x), np.abs, UNARY_SHAPES, away_from(0.0)),
    Op("mixed_expression", lambda T, x, y: (x * y - x / 3.0) ** 2 + 1.0 / (y * y + 1.0),
       lambda x, y: (x * y - x / 3.0) ** 2 + 1.0 / (y * y + 1.0), BINARY_SHAPES),
    # ---- matmul ----
    Op("matmul", lambda T, x, y: x @ y, np.matmul,
       (((4,), (4,)), ((2, 3), (3, 4)), ((2, 2, 3), (2, 3, 4)), ((2, 2, 3), (3, 4)), ((3,), (3, 4)),
        ((2, 3), (3,)), ((3,), (2, 3, 4)), ((2, 1, 2, 3), (3, 3, 2)))),
    Op("matmul.function", lambda T, x, y: T.matmul(x, y), np.matmul, (((2, 3), (3, 4)), ((3,), (3, 4)))),
    Op("matmul.method", lambda T, x, y: x.matmul(y), np.matmul, (((2, 2, 3), (2, 3, 4)), ((4,), (4,)))),
    # ---- unary pointwise ----
    *_unary_entries(),
    # ---- clamp ----
    Op("clamp.min", lambda T, x: x.clamp(min=-0.5), lambda x: np.maximum(x, -0.5), UNARY_SHAPES, CLAMP_DOMAIN),
    Op("clamp.max", lambda T, x: x.clamp(max=0.5), lambda x: np.minimum(x, 0.5), UNARY_SHAPES, CLAMP_DOMAIN),
    Op("clamp.both", lambda T, x: x.clamp(-0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5), UNARY_SHAPES,
       CLAMP_DOMAIN),
    Op("clamp.function", lambda T, x: T.clamp(x, min=-0.5, max=0.5), lambda x: np.clip(x, -0.5, 0.5),
       UNARY_SHAPES, CLAMP_DOMAIN),
    # ---- maximum / minimum / where ----
    Op("maximum", lambda T, x, y: T.maximum(x, y), np.maximum, BINARY_SHAPES, (grid(0.0), grid(0.1))),
    Op("minimum", lambda T, x, y: T.minimum(x, y), np.minimum, BINARY_SHAPES, (grid(0.0), grid(0.1))),
    Op("maximum.method", lambda T, x, y: x.maximum(y), np.maximum, BINARY_SHAPES[:2], (grid(0.0), grid(0.1))),
    Op("minimum.method", lambda T, x, y: x.minimum(y), np.minimum, BINARY_SHAPES[:2], (grid(0.0), grid(0.1))),
    Op("where", lambda T, x, y: T.where(T.tensor(MASK_34), x, y), lambda x, y: np.where(MASK_34, x, y),
       (((3, 4), (3, 4)), ((1, 4), (3, 1)), ((3, 4), ()))),
    Op("where.scalar_other", lambda T, x: T.where(T.tensor(MASK_34), x, 0.0),
       lambda x: np.where(MASK_34, x, 0.0), (((3, 4),), ((4,),))),
    # ---- reductions ----
    Op("sum", lambda T, x, **kw: x.sum(**kw), np_sum, CUBE,
       kwargs=({}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)}, {"dim": (0, 2), "keepdim": True})),
    Op("sum.0d", lambda T, x: x.sum(), np_sum, (((),),)),
    Op("sum.function", lambda T, x, **kw: T.sum(x, **kw), np_sum, CUBE, kwargs=({}, {"dim": 0})),
    Op("mean", lambda T, x, **kw: x.mean(**kw), np_mean, CUBE,
       kwargs=({}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)}, {"dim": (0, 2), "keepdim": True})),
    Op("mean.function", lambda T, x, **kw: T.mean(x, **kw), np_mean, CUBE, kwargs=({}, {"dim": 2})),
    Op("var", lambda T, x, **kw: x.var(**kw), np_var, CUBE,
       kwargs=({}, {"dim": 1}, {"dim": 1, "unbiased": False}, {"dim": (0, 2), "keepdim": True},
               {"correction": 0}, {"dim": -1, "correction": 2})),
    Op("var.function", lambda T, x, **kw: T.var(x, **kw), np_var, CUBE, kwargs=({"dim": 0},)),
    Op("std", lambda T, x, **kw: x.std(**kw), np_std, CUBE,
       kwargs=({}, {"dim": 1}, {"dim": 1, "unbiased": False}, {"dim": (0, 2), "keepdim": True},
               {"correction": 0})),
    Op("std.function", lambda T, x, **kw: T.std(x, **kw), np_std, CUBE, kwargs=({"dim": -1},)),
    Op("max", lambda T, x, **kw: x.max(**kw), np_max, CUBE, distinct(),
       kwargs=({}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": 0})),
    Op("max.positional_dim", lambda T, x: x.max(1), lambda x: np_max(x, 1), MATRIX, distinct()),
    Op("max.function", lambda T, x, **kw: T.max(x, **kw), np_max, CUBE, distinct(), kwargs=({}, {"dim": 2})),
    Op("min", lambda T, x, **kw: x.min(**kw), np_min, CUBE, distinct(),
       kwargs=({}, {"dim": 1}, {"dim": -1, "keepdim": True})),
    Op("min.function", lambda T, x, **kw: T.min(x, **kw), np_min, CUBE, distinct(), kwargs=({"dim": 0},)),
    Op("amax", lambda T, x, **kw: x.amax(**kw), np_amax, CUBE, distinct(),
       kwargs=({}, {"dim": 1}, {"dim": (0, 2)}, {"dim": -1, "keepdim": True})),
    Op("amin", lambda T, x, **kw: x.amin(**kw), np_amin, CUBE, distinct(),
       kwargs=({"dim": 1}, {"dim": (0, 2), "keepdim": True})),
    Op("amax.function", lambda T, x, **kw: T.amax(x, **kw), np_amax, CUBE, distinct(), kwargs=({"dim": 0},)),
    Op("logsumexp", lambda T, x, **kw: x.logsumexp(**kw), np_logsumexp, CUBE,
       kwargs=({"dim": 1}, {"dim": (0, 2), "keepdim": True}, {"dim": -1})),
    Op("logsumexp.function", lambda T, x, **kw: T.logsumexp(x, **kw), np_logsumexp, CUBE, kwargs=({"dim": 0},)),
    Op("norm", lambda T, x, **kw: x.norm(**kw), np_norm, CUBE, away_from(0.0),
       kwargs=({}, {"dim": 1}, {"dim": (0, 2), "keepdim": True}, {"p": 1, "dim": -1})),
    Op("norm.function", lambda T, x: T.norm(x), np_norm, MATRIX, away_from(0.0)),
    # ---- softmax ----
    Op("softmax", lambda T, x, **kw: x.softmax(**kw), np_softmax, (((3, 4),), ((2, 3, 4),)),
       kwargs=({"dim": -1}, {"dim": 0})),
    Op("softmax.function", lambda T, x, **kw: T.softmax(x, **kw), np_softmax, CUBE, kwargs=({"dim": 1},)),
    Op("log_softmax", lambda T, x, **kw: x.log_softmax(**kw), np_log_softmax, (((3, 4),), ((2, 3, 4),)),
       kwargs=({"dim": -1}, {"dim": 0})),
    Op("log_softmax.function", lambda T, x, **kw: T.log_softmax(x, **kw), np_log_softmax, CUBE,
       kwargs=({"dim": 1},)),
    # ---- shape ops ----
    Op("reshape", lambda T, x: x.reshape(4, 6), lambda x: x.reshape(4, 6), CUBE),
    Op("reshape.tuple_infer", lambda T, x: x.reshape((-1, 2)), lambda x: x.reshape(-1, 2), CUBE),
    Op("reshape.function", lambda T, x: T.reshape(x, (6, 4)), lambda x: x.reshape(6, 4), CUBE),
    Op("reshape.to_0d", lambda T, x: x.reshape(()), lambda x: x.reshape(()), (((1, 1),),)),
    Op("view", lambda T, x: x.view(6, 4), lambda x: x.reshape(6, 4), CUBE),
    Op("view.infer", lambda T, x: x.view(-1), lambda x: x.reshape(-1), CUBE),
    Op("flatten", lambda T, x: x.flatten(), lambda x: x.reshape(-1), CUBE),
    Op("flatten.start_dim", lambda T, x: x.flatten(1), lambda x: x.reshape(2, 12), CUBE),
    Op("flatten.range", lambda T, x: x.flatten(0, 1), lambda x: x.reshape(6, 4), CUBE),
    Op("flatten.function", lambda T, x: T.flatten(x), lambda x: x.reshape(-1), CUBE),
    Op("squeeze", lambda T, x: x.squeeze(), lambda x: x.reshape(2, 3), (((2, 1, 3, 1),),)),
    Op("squeeze.dim", lambda T, x: x.squeeze(1), lambda x: x.reshape(2, 3, 1), (((2, 1, 3, 1),),)),
    Op("squeeze.negative_dim", lambda T, x: x.squeeze(-1), lambda x: x.reshape(2, 1, 3), (((2, 1, 3, 1),),)),
    Op("squeeze.function", lambda T, x: T.squeeze(x, 1), lambda x: x.reshape(2, 3, 1), (((2, 1, 3, 1),),)),
    Op("unsqueeze", lambda T, x: x.unsqueeze(0), lambda x: x[None], (((3, 4),), ((),))),
    Op("unsqueeze.negative", lambda T, x: x.unsqueeze(-1), lambda x: x[..., None], (((3, 4),),)),
    Op("unsqueeze.function", lambda T, x: T.unsqueeze(x, 1), lambda x: x[:, None], (((3, 4),),)),
    Op("permute", lambda T, x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1), CUBE),
    Op("permute.tuple", lambda T, x: x.permute((1, 2, 0)), lambda x: x.transpose(1, 2, 0), CUBE),
    Op("permute.function", lambda T, x: T.permute(x, (2, 1, 0)), lambda x: x.transpose(2, 1, 0), CUBE),
    Op("transpose", lambda T, x: x.transpose(0, 2), lambda x: np.swapaxes(x, 0, 2), CUBE),
    Op("transpose.negative", lambda T, x: x.transpose(-1, -2), lambda x: np.swapaxes(x, -1, -2), CUBE),
    Op("transpose.function", lambda T, x: T.transpose(x, 0, 1), lambda x: np.swapaxes(x, 0, 1), CUBE),
    Op("T", lambda T, x: x.T, lambda x: x.T, MATRIX),
    Op("expand", lambda T, x: x.expand(3, 4), lambda x: np.broadcast_to(x, (3, 4)), (((1, 4),),)),
    Op("expand.new_dims", lambda T, x: x.expand(2, 3, 4), lambda x: np.broadcast_to(x, (2, 3, 4)),
       (((3, 1),),)),
    Op("expand.keep", lambda T, x: x.expand(-1, 4), lambda x: np.broadcast_to(x, (3, 4)), (((3, 1),),)),
    Op("expand.0d", lambda T, x: x.expand(2, 3), lambda x: np.broadcast_to(x, (2, 3)), (((),),)),
    # ---- indexing: basic ----
    Op("index.int", lambda T, x: x[1], lambda x: x[1], MATRIX),
    Op("index.negative_int", lambda T, x: x[-1], lambda x: x[-1], MATRIX),
    Op("index.slice", lambda T, x: x[1:3], lambda x: x[1:3], MATRIX),
    Op("index.step", lambda T, x: x[::2], lambda x: x[::2], MATRIX),
    Op("index.column", lambda T, x: x[:, 1], lambda x: x[:, 1], MATRIX),
    Op("index.ellipsis", lambda T, x: x[..., 2], lambda x: x[..., 2], CUBE),
    Op("index.none", lambda T, x: x[None], lambda x: x[None], MATRIX),
    Op("index.none_slice", lambda T, x: x[:, None, 1:], lambda x: x[:, None, 1:], MATRIX),
    Op("index.to_0d", lambda T, x: x[0, 1, 2], lambda x: x[0, 1, 2], CUBE),
    Op("index.int_ellipsis_slice", lambda T, x: x[1, ..., 1:3], lambda x: x[1, ..., 1:3], CUBE),
    # ---- indexing: advanced ----
    Op("index.tensor_repeated", lambda T, x: x[T.tensor([0, 2, 2])], lambda x: x[np.array([0, 2, 2])], MATRIX),
    Op("index.tensor_2d", lambda T, x: x[T.tensor([[0, 1], [2, 2]])], lambda x: x[np.array([[0, 1], [2, 2]])],
       MATRIX),
    Op("index.tensor_columns", lambda T, x: x[:, T.tensor([3, 0, 3])], lambda x: x[:, np.array([3, 0, 3])],
       MATRIX),
    Op("index.tensor_pairs", lambda T, x: x[T.tensor([0, 2, 0]), T.tensor([1, 3, 1])],
       lambda x: x[np.array([0, 2, 0]), np.array([1, 3, 1])], MATRIX),
    Op("index.list", lambda T, x: x[[0, 2, 0]], lambda x: x[np.array([0, 2, 0])], MATRIX),
    Op("index.slice_and_tensor", lambda T, x: x[1:, T.tensor([0, 0])], lambda x: x[1:, np.array([0, 0])],
       MATRIX),
    Op("index.bool_mask", lambda T, x: x[T.tensor(MASK_34)], lambda x: x[MASK_34], MATRIX),
    Op("index.bool_rows", lambda T, x: x[T.tensor(ROWS_3)], lambda x: x[ROWS_3], MATRIX),
    # ---- joining and splitting ----
    Op("cat", lambda T, x, y: T.cat([x, y]), lambda x, y: np.concatenate([x, y]), (((2, 3), (1, 3)),)),
    Op("cat.dim1", lambda T, x, y: T.cat((x, y), dim=1), lambda x, y: np.concatenate([x, y], 1),
       (((2, 3), (2, 2)),)),
    Op("cat.three_negative_dim", lambda T, x, y, z: T.cat([x, y, z], dim=-1),
       lambda x, y, z: np.concatenate([x, y, z], -1), (((2, 1), (2, 2), (2, 3)),)),
    Op("stack", lambda T, x, y: T.stack([x, y]), lambda x, y: np.stack([x, y]), (((2, 3), (2, 3)), ((), ()))),
    Op("stack.dim1", lambda T, x, y: T.stack((x, y), dim=1), lambda x, y: np.stack([x, y], 1),
       (((2, 3), (2, 3)),)),
    Op("stack.three_negative_dim", lambda T, x, y, z: T.stack([x, y, z], dim=-1),
       lambda x, y, z: np.stack([x, y, z], -1), (((2, 3), (2, 3), (2, 3)),)),
    Op("split.int", lambda T, x: x.split(2), lambda x: np_split(x, 2), (((5, 3),),)),
    Op("split.list_dim1", lambda T, x: x.split([1, 3], dim=1), lambda x: np_split(x, [1, 3], 1), (((2, 4),),)),
    Op("split.function", lambda T, x: T.split(x, 2, dim=1), lambda x: np_split(x, 2, 1), (((3, 5),),)),
    Op("split.function_list", lambda T, x: T.split(x, [2, 1, 2]), lambda x: np_split(x, [2, 1, 2]), (((5,),),)),
    Op("chunk", lambda T, x: x.chunk(2, dim=1), lambda x: np_chunk(x, 2, 1), MATRIX),
    Op("chunk.uneven", lambda T, x: T.chunk(x, 3), lambda x: np_chunk(x, 3), (((5, 2),),)),
    Op("chunk.fewer_than_asked", lambda T, x: x.chunk(4), lambda x: np_chunk(x, 4), (((6,),),)),
    # ---- more elementwise math ----
    *_more_unary_entries(),
    Op("atan2", lambda T, x, y: T.atan2(x, y), np.arctan2, BINARY_SHAPES[:3], (uniform(), signed())),
    Op("lerp.scalar", lambda T, x, y: x.lerp(y, 0.3), lambda x, y: x + 0.3 * (y - x), BINARY_SHAPES[:3]),
    Op("lerp.tensor_weight", lambda T, x, y, w: T.lerp(x, y, w), lambda x, y, w: x + w * (y - x),
       (((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), (3, 4)))),
    Op("addcmul", lambda T, x, y, z: T.addcmul(x, y, z, value=0.5), lambda x, y, z: x + 0.5 * y * z,
       (((3, 4), (3, 4), (3, 4)), ((4,), (3, 1), (3, 4)))),
    Op("addcdiv.method", lambda T, x, y, z: x.addcdiv(y, z, value=-2.0), lambda x, y, z: x - 2.0 * y / z,
       (((3, 4), (3, 4), (3, 4)),), (uniform(), uniform(), signed())),
    Op("clamp.tensor_bounds", lambda T, x, lo, hi: x.clamp(min=lo, max=hi),
       lambda x, lo, hi: np.minimum(np.maximum(x, lo), hi), (((3, 4), (3, 4), (3, 4)),),
       (uniform(), uniform(-2.0, -0.05), uniform(0.05, 2.0))),
    Op("clamp_min", lambda T, x: x.clamp_min(0.3), lambda x: np.maximum(x, 0.3), UNARY_SHAPES, away_from(0.3)),
    Op("clamp_max.function", lambda T, x: T.clamp_max(x, -0.3), lambda x: np.minimum(x, -0.3), UNARY_SHAPES,
       away_from(-0.3)),
    Op("xlogy", lambda T, x, y: T.xlogy(x, y), lambda x, y: x * np.log(y), BINARY_SHAPES[:3], (uniform(), POSITIVE)),
    Op("logaddexp", lambda T, x, y: T.logaddexp(x, y), np.logaddexp, BINARY_SHAPES[:3]),
    Op("fmod", lambda T, x: T.fmod(x, 0.7), lambda x: np.fmod(x, 0.7), UNARY_SHAPES, away_from(0.0, 0.7, -0.7, 1.4, -1.4)),
    Op("frac", lambda T, x: x.frac(), lambda x: x - np.trunc(x), UNARY_SHAPES, away_from(0.0, 1.0, -1.0)),
    Op("logit", lambda T, x: x.logit(), lambda x: np.log(x / (1 - x)), UNARY_SHAPES, uniform(0.1, 0.9)),
    # ---- ordering ----
    Op("sort", lambda T, x, **kw: x.sort(**kw), lambda x, dim=-1, descending=False: np_sort(x, dim, descending),
       CUBE, distinct(), kwargs=({}, {"dim": 0}, {"dim": 1, "descending": True})),
    Op("sort.function", lambda T, x: T.sort(x, 0, True), lambda x: np_sort(x, 0, True), MATRIX, distinct()),
    Op("topk", lambda T, x, **kw: x.topk(2, **kw), lambda x, dim=-1, largest=True: np_topk(x, 2, dim, largest),
       CUBE, distinct(), kwargs=({}, {"dim": 0}, {"dim": 1, "largest": False})),
    Op("topk.function", lambda T, x: T.topk(x, 3), lambda x: np_topk(x, 3, -1, True), MATRIX, distinct()),
    Op("kthvalue", lambda T, x: x.kthvalue(2, 1), lambda x: np_kth(x, 2, 1), MATRIX, distinct()),
    Op("median.dim", lambda T, x: x.median(dim=-1), lambda x: np_kth(x, (x.shape[-1] + 1) // 2, -1), CUBE,
       distinct()),
    Op("median.all", lambda T, x: x.median(), lambda x: np.sort(x.reshape(-1))[(x.size - 1) // 2], CUBE, distinct()),
    Op("cummax", lambda T, x: x.cummax(1), lambda x: np_cumextreme(x, 1, True), CUBE, distinct()),
    Op("cummin.function", lambda T, x: T.cummin(x, 0), lambda x: np_cumextreme(x, 0, False), MATRIX, distinct()),
    Op("cumsum", lambda T, x, **kw: x.cumsum(**kw), lambda x, dim: np.cumsum(x, dim), CUBE,
       kwargs=({"dim": 0}, {"dim": -1})),
    Op("cumprod", lambda T, x, **kw: x.cumprod(**kw), lambda x, dim: np.cumprod(x, dim), CUBE,
       kwargs=({"dim": 0}, {"dim": -1})),
    Op("cumprod.with_zero", lambda T, x: T.cumprod(x * T.tensor([1.0, 0.0, 1.0, 1.0]), 1),
       lambda x: np.cumprod(x * np.array([1.0, 0.0, 1.0, 1.0]), 1), MATRIX),
    # ---- more shape ops ----
    Op("roll", lambda T, x, **kw: x.roll(**kw), lambda x, shifts, dims=None: np.roll(x, shifts, dims), CUBE,
       kwargs=({"shifts": 1, "dims": 0}, {"shifts": (1, -2), "dims": (1, 2)}, {"shifts": 3})),
    Op("roll.function", lambda T, x: T.roll(x, -1, 1), lambda x: np.roll(x, -1, 1), MATRIX),
    Op("flip", lambda T, x: x.flip((0, 2)), lambda x: np.flip(x, (0, 2)), CUBE),
    Op("flip.varargs", lambda T, x: x.flip(0, 2), lambda x: np.flip(x, (0, 2)), CUBE),
    Op("flip.function", lambda T, x: T.flip(x, [-1]), lambda x: np.flip(x, -1), MATRIX),
    Op("fliplr", lambda T, x: T.fliplr(x), np.fliplr, MATRIX),
    Op("repeat_interleave", lambda T, x, **kw: x.repeat_interleave(**kw), np_repeat_interleave, CUBE,
       kwargs=({"repeats": 2}, {"repeats": 2, "dim": 1}, {"repeats": 3, "dim": -1})),
    Op("repeat_interleave.counts", lambda T, x: T.repeat_interleave(x, T.tensor([1, 0, 2]), dim=0),
       lambda x: np.repeat(x, [1, 0, 2], axis=0), MATRIX),
    Op("tile", lambda T, x: x.tile((2, 1)), lambda x: np.tile(x, (2, 1)), MATRIX),
    Op("narrow", lambda T, x: x.narrow(1, 1, 2), lambda x: x[:, 1:3], MATRIX),
    Op("select", lambda T, x: x.select(2, -1), lambda x: x[:, :, -1], CUBE),
    Op("movedim", lambda T, x: x.movedim(0, -1), lambda x: np.moveaxis(x, 0, -1), CUBE),
    Op("diagonal", lambda T, x, **kw: x.diagonal(**kw), lambda x, offset=0, dim1=0, dim2=1:
       np.diagonal(x, offset, dim1, dim2), CUBE, kwargs=({}, {"offset": 1, "dim1": 1, "dim2": 2})),
    Op("diag.matrix", lambda T, x: T.diag(x, 1), lambda x: np.diag(x, 1), MATRIX),
    Op("diag.vector", lambda T, x: T.diag(x, -1), lambda x: np.diag(x, -1), (((3,),),)),
    Op("diag_embed", lambda T, x: T.diag_embed(x), lambda x: x[..., None] * np.eye(x.shape[-1]), (((2, 3),),)),
    Op("trace", lambda T, x: x.trace(), np.trace, MATRIX),
    Op("unfold", lambda T, x: x.unfold(1, 2, 1), lambda x: np.stack([x[:, i:i + 2] for i in range(3)], 1),
       MATRIX),
    Op("tensor_split", lambda T, x: T.tensor_split(x, 3, dim=1), lambda x: tuple(np.array_split(x, 3, 1)), MATRIX),
    Op("meshgrid", lambda T, x, y: T.meshgrid(x, y, indexing="ij"), lambda x, y: tuple(np.meshgrid(x, y, indexing="ij")),
       (((3,), (4,)),)),
    Op("broadcast_tensors", lambda T, x, y: T.broadcast_tensors(x, y), lambda x, y: tuple(np.broadcast_arrays(x, y)),
       (((3, 1), (4,)),)),
    Op("tril.offset", lambda T, x, **kw: x.tril(**kw), lambda x, diagonal=0: np.tril(x, diagonal), MATRIX,
       kwargs=({"diagonal": 1}, {"diagonal": -1})),
    Op("triu.offset", lambda T, x, **kw: T.triu(x, **kw), lambda x, diagonal=0: np.triu(x, diagonal), CUBE,
       kwargs=({"diagonal": 1}, {"diagonal": -2})),
    # ---- gather / scatter ----
    Op("gather", lambda T, x: x.gather(1, T.tensor([[0, 0], [3, 1], [2, 2]])),
       lambda x: np.take_along_axis(x, np.array([[0, 0], [3, 1], [2, 2]]), 1), MATRIX),
    Op("scatter.src", lambda T, x, s: x.scatter(1, T.tensor([[0, 3], [1, 2], [2, 0]]), s),
       lambda x, s: np_scatter(x, 1, np.array([[0, 3], [1, 2], [2, 0]]), s), (((3, 4), (3, 2)),)),
    Op("scatter.value", lambda T, x: T.scatter(x, 0, T.tensor([[2, 0, 1, 2]]), 0.5),
       lambda x: np_scatter(x, 0, np.array([[2, 0, 1, 2]]), np.full((1, 4), 0.5)), MATRIX),
    Op("scatter_add", lambda T, x, s: x.scatter_add(0, T.tensor([[0, 1, 0, 2], [0, 0, 2, 2]]), s),
       lambda x, s: np_scatter_add(x, 0, np.array([[0, 1, 0, 2], [0, 0, 2, 2]]), s), (((3, 4), (2, 4)),)),
    Op("index_add", lambda T, x, s: x.index_add(0, T.tensor([2, 0, 2]), s, alpha=2.0),
       lambda x, s: np_index_add(x, 0, np.array([2, 0, 2]), 2.0 * s), (((3, 4), (3, 4)),)),
    Op("index_fill", lambda T, x: x.index_fill(1, T.tensor([0, 2]), -1.0),
       lambda x: np.where(np.isin(np.arange(4), [0, 2]), -1.0, x), MATRIX),
    Op("masked_fill", lambda T, x: x.masked_fill(T.tensor(MASK_34), -1.0), lambda x: np.where(MASK_34, -1.0, x),
       MATRIX),
    Op("masked_select", lambda T, x: x.masked_select(T.tensor(ROWS_3[:, None])),
       lambda x: x[np.broadcast_to(ROWS_3[:, None], x.shape)], MATRIX),
    Op("take", lambda T, x: T.take(x, T.tensor([[0, 5], [11, 5]])), lambda x: x.reshape(-1)[np.array([[0, 5], [11, 5]])],
       MATRIX),
    # ---- products ----
    Op("bmm", lambda T, x, y: T.bmm(x, y), np.matmul, (((2, 3, 4), (2, 4, 5)),)),
    Op("baddbmm", lambda T, b, x, y: T.baddbmm(b, x, y, beta=0.5, alpha=2.0),
       lambda b, x, y: 0.5 * b + 2.0 * np.matmul(x, y), (((2, 3, 5), (2, 3, 4), (2, 4, 5)), ((5,), (2, 3, 4), (2, 4, 5)))),
    Op("baddbmm.method", lambda T, b, x, y: b.baddbmm(x, y), lambda b, x, y: b + np.matmul(x, y),
       (((2, 3, 5), (2, 3, 4), (2, 4, 5)),)),
    Op("addmm", lambda T, b, x, y: T.addmm(b, x, y, alpha=0.5), lambda b, x, y: b + 0.5 * (x @ y),
       (((3, 5), (3, 4), (4, 5)), ((5,), (3, 4), (4, 5)))),
    Op("outer", lambda T, x, y: T.outer(x, y), np.outer, (((3,), (4,)),)),
    Op("outer.method", lambda T, x, y: x.outer(y), np.outer, (((2,), (3,)),)),
    Op("einsum.matmul", lambda T, x, y: T.einsum("ij,jk->ik", x, y), lambda x, y: x @ y, (((2, 3), (3, 4)),)),
    Op("einsum.attention", lambda T, q, k: T.einsum("bhqd,bhkd->bhqk", q, k),
       lambda q, k: np.einsum("bhqd,bhkd->bhqk", q, k), (((2, 2, 3, 4), (2, 2, 5, 4)),)),
    Op("einsum.ellipsis", lambda T, x, y: T.einsum("...ij,...jk", x, y), np.matmul, (((2, 2, 3), (3, 4)),)),
    Op("einsum.list_outer_sum", lambda T, x, y: T.einsum("i,j->", [x, y]), lambda x, y: np.einsum("i,j->", x, y),
       (((3,), (4,)),)),
    Op("einsum.broadcast_one", lambda T, x, y: T.einsum("ij,ij->ij", x, y), lambda x, y: x * y,
       (((1, 4), (3, 4)),)),
    Op("einsum.diagonal", lambda T, x: T.einsum("ii->i", x), np.diag, (((3, 3),),)),
    Op("einsum.trace_times", lambda T, x, y: T.einsum("ii,j->j", x, y), lambda x, y: np.trace(x) * y,
       (((3, 3), (2,)),)),
    Op("tensordot", lambda T, x, y: T.tensordot(x, y, dims=([1, 2], [0, 1])),
       lambda x, y: np.tensordot(x, y, ([1, 2], [0, 1])), (((2, 3, 4), (3, 4, 2)),)),
    Op("cdist", lambda T, x, y, **kw: T.cdist(x, y, **kw), np_cdist, (((3, 4), (5, 4)), ((2, 3, 4), (2, 2, 4))),
       kwargs=({}, {"p": 1.0})),
]



def _cases() -> list:
    cases = []
    names = set()
    for op in CATALOGUE:
        assert op.name not in names, f"duplicate catalogue name {op.name}"
        names.add(op.name)
        for shapes in op.shapes:
            for kwargs in op.kwargs:
                shape_id = "-".join("x".join(map(str, s)) or "0d" for s in shapes)
                kw_id = ",".join(f"{k}={v}" for k, v in kwargs.items())
                case_id = f"{op.name}[{shape_id}]" + (f"{{{kw_id}}}" if kw_id else "")
                cases.append(pytest.param(op, shapes, kwargs, id=case_id))
    return cases


CASES = _cases()


# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------

def make_inputs(op: Op, shapes: tuple, kwargs: dict, dtype: Any) -> list[np.ndarray]:
    """Deterministic input arrays for one case (seeded from the case's identity)."""
    rng = np.random.default_rng(zlib.crc32(f"{op.name}{shapes}{kwargs}".encode()))
    domains = op.domain if isinstance(op.domain, tuple) else (op.domain,) * len(shapes)
    assert len(domains) == len(shapes), op.name
    return [np.asarray(domain(rng, shape), dtype=np.float64).astype(dtype) for domain, shape in zip(domains, shapes)]


def as_list(out: Any) -> list:
    """An op's outputs as a flat list (a tuple/list of outputs, or a single one)."""
    return list(out) if isinstance(out, (tuple, list)) else [out]


def dtype_name(dtype: Any) -> str:
    """'float32' for gs.float32, torch.float32 and numpy's float32 alike."""
    return str(dtype).rsplit(".", 1)[-1]


def to_numpy(t: Any) -> np.ndarray:
    return np.asarray(t.detach().numpy())


def weights_for(outputs: list, seed: int, dtype: Any) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(o.shape)).astype(dtype) for o in outputs]


def central_differences(f: Callable[..., float], arrays: list[np.ndarray], index: int,
                        eps: float = 1e-6) -> np.ndarray:
    """d f / d arrays[index] by central differences (float64)."""
    base = [a.copy() for a in arrays]
    x = base[index]
    grad = np.zeros_like(x)
    flat_x, flat_grad = x.reshape(-1), grad.reshape(-1)
    for i in range(flat_x.size):
        original = flat_x[i]
        flat_x[i] = original + eps
        plus = f(*base)
        flat_x[i] = original - eps
        minus = f(*base)
        flat_x[i] = original
        flat_grad[i] = (plus - minus) / (2 * eps)
    return grad


# --------------------------------------------------------------------------------------------------
# Check 1: forward vs numpy
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "shapes", "kwargs"), CASES)
def test_forward_matches_numpy(op: Op, shapes: tuple, kwargs: dict) -> None:
    arrays = make_inputs(op, shapes, kwargs, np.float32)
    outputs = as_list(op.fn(gs, *[gs.tensor(a) for a in arrays], **kwargs))
    expected = as_list(op.ref(*[a.astype(np.float64) for a in arrays], **kwargs))
    assert len(outputs) == len(expected)
    for k, (out, ref) in enumerate(zip(outputs, expected)):
        ref = np.asarray(ref)
        assert isinstance(out, gs.Tensor), f"output {k} is a {type(out).__name__}"
        assert tuple(out.shape) == ref.shape, f"output {k}: shape {tuple(out.shape)} != {ref.shape}"
        if ref.dtype.kind == "f":
            assert out.dtype == gs.float32, f"output {k}: dtype {out.dtype}, expected float32"
            np.testing.assert_allclose(out.numpy(), ref, rtol=1e-5, atol=2e-6, err_msg=f"output {k}")
        else:
            assert out.dtype == gs.int64, f"output {k}: dtype {out.dtype}, expected int64"
            assert not out.requires_grad
            np.testing.assert_array_equal(out.numpy(), ref, err_msg=f"output {k}")


# --------------------------------------------------------------------------------------------------
# Check 2: backward vs central finite differences (float64)
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("op", "shapes", "kwargs"), CASES)
def test_backward_matches_finite_differences(op: Op, shapes: tuple, kwargs: dict) -> None:
    arrays = make_inputs(op, shapes, kwargs, np.float64)
    inputs = [gs.tensor(a, requires_grad=True) for a in arrays]
    for t in inputs:
        assert t.dtype == gs.float64
    outputs = as_list(op.fn(gs, *inputs, **kwargs))
    differentiable = [k for k, o in enumerate(outputs) if o.dtype.is_floating_point]
    for k in differentiable:
        assert outputs[k].dtype == gs.float64, f"output {k}: float64 input gave {outputs[k].dtype}"
        assert outputs[k].requires_grad and outputs[k].grad_fn is not None
    weights = weights_for([outputs[k] for k in differentiable], seed=len(arrays), dtype=np.float64)
    gs.autograd.backward([outputs[k] for k in differentiable], [gs.tensor(w) for w in weights])

    def weighted_reference(*xs: np.ndarray) -> float:
        refs = as_list(op.ref(*xs, **kwargs))
        return float(sum(np.sum(np.asarray(refs[k]) * w) for k, w in zip(differentiable, weights)))

    for i, (t, a) in enumerate(zip(inputs, arrays)):
        assert t.grad is not None, f"input {i} got no gradient"
        assert tuple(t.grad.shape) == a.shape, f"input {i}: grad shape {tuple(t.grad.shape)} != {a.shape}"
        assert t.grad.dtype == gs.float64, f"input {i}: grad dtype {t.grad.dtype}"
        numeric = central_differences(weighted_reference, arrays, i)
        np.testing.assert_allclose(t.grad.numpy(), numeric, rtol=1e-5, atol=1e-6, err_msg=f"grad of input {i}")

    fresh = [gs.tensor(a, requires_grad=True) for a in arrays]
    assert gs.autograd.gradcheck(lambda *xs: op.fn(gs, *xs, **kwargs), fresh) is True


# --------------------------------------------------------------------------------------------------
# Check 3: values and gradients vs PyTorch (float32 and float64)
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize(("op", "shapes", "kwargs"), CASES)
def test_matches_torch(op: Op, shapes: tuple, kwargs: dict, dtype: Any) -> None:
    torch = pytest.importorskip("torch")
    arrays = make_inputs(op, shapes, kwargs, dtype)
    gs_inputs = [gs.tensor(a, requires_grad=True) for a in arrays]
    torch_inputs = [torch.tensor(a, requires_grad=True) for a in arrays]
    gs_outputs = as_list(op.fn(gs, *gs_inputs, **kwargs))
    torch_outputs = as_list(op.fn(torch, *torch_inputs, **kwargs))
    assert len(gs_outputs) == len(torch_outputs)
    for k, (g, t) in enumerate(zip(gs_outputs, torch_outputs)):
        assert tuple(g.shape) == tuple(t.shape), f"output {k}: shape"
        assert dtype_name(g.dtype) == dtype_name(t.dtype), f"output {k}: dtype {g.dtype} vs {t.dtype}"
        assert g.requires_grad == t.requires_grad, f"output {k}: requires_grad"
        np.testing.assert_allclose(to_numpy(g), to_numpy(t), rtol=1e-5, atol=1e-6, err_msg=f"output {k}")

    differentiable = [k for k, t in enumerate(torch_outputs) if t.requires_grad]
    weights = weights_for([torch_outputs[k] for k in differentiable], seed=7, dtype=dtype)
    gs.autograd.backward([gs_outputs[k] for k in differentiable], [gs.tensor(w) for w in weights])
    torch.autograd.backward([torch_outputs[k] for k in differentiable], [torch.tensor(w) for w in weights])
    for i, (g, t) in enumerate(zip(gs_inputs, torch_inputs)):
        assert (g.grad is None) == (t.grad is None), f"input {i}: grad presence"
        if t.grad is not None:
            assert dtype_name(g.grad.dtype) == dtype_name(t.grad.dtype)
            np.testing.assert_allclose(to_numpy(g.grad), to_numpy(t.grad), rtol=1e-5, atol=1e-6,
                                       err_msg=f"grad of input {i}")


def test_catalogue_is_not_trivially_small() -> None:
    assert len(CATALOGUE) >= 100
    assert len(CASES) >= 200
