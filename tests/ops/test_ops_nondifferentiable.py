"""Ops whose results carry no gradient: comparisons, isnan/isinf/isfinite, any/all, argmax/argmin.

Their results must have ``requires_grad=False`` and no ``grad_fn`` even when the inputs require
grad, the right dtype (``gs.bool`` or ``gs.int64``) and the right values (numpy reference, and
torch when importable).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs


def halves(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Multiples of 0.5 in [-1, 1]: many exact ties, so == and != have both outcomes."""
    return rng.integers(-2, 3, size=shape) * 0.5


def with_specials(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    """Finite values with NaN, +Inf and -Inf mixed in."""
    values = rng.uniform(-2.0, 2.0, size=shape).reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, np.nan])
    values[: min(4, values.size)] = specials[: min(4, values.size)]
    rng.shuffle(values)
    return values.reshape(shape)


def distinct(rng: np.random.Generator, shape: tuple) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    return (rng.permutation(n) * 0.25 - n * 0.125).reshape(shape)


@dataclass(frozen=True)
class NonDiffOp:
    """name; fn(T, *tensors); numpy ref(*arrays); input shapes per case; sampler; result dtype name."""

    name: str
    fn: Callable[..., Any]
    ref: Callable[..., Any]
    shapes: tuple
    domain: Callable[[np.random.Generator, tuple], np.ndarray]
    dtype: str


PAIRS = (((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 3), ()))
SINGLE = (((3, 4),), ((),))

CATALOGUE = [
    NonDiffOp("lt", lambda T, x, y: x < y, np.less, PAIRS, halves, "bool"),
    NonDiffOp("le", lambda T, x, y: x <= y, np.less_equal, PAIRS, halves, "bool"),
    NonDiffOp("gt", lambda T, x, y: x > y, np.greater, PAIRS, halves, "bool"),
    NonDiffOp("ge", lambda T, x, y: x >= y, np.greater_equal, PAIRS, halves, "bool"),
    NonDiffOp("eq", lambda T, x, y: x == y, np.equal, PAIRS, halves, "bool"),
    NonDiffOp("ne", lambda T, x, y: x != y, np.not_equal, PAIRS, halves, "bool"),
    NonDiffOp("lt.scalar", lambda T, x: x < 0.5, lambda x: x < 0.5, SINGLE, halves, "bool"),
    NonDiffOp("ge.scalar", lambda T, x: x >= 0.0, lambda x: x >= 0.0, SINGLE, halves, "bool"),
    NonDiffOp("gt.reflected_scalar", lambda T, x: 0.5 > x, lambda x: 0.5 > x, SINGLE, halves, "bool"),
    NonDiffOp("eq.scalar", lambda T, x: x == 1.0, lambda x: x == 1.0, SINGLE, halves, "bool"),
    NonDiffOp("ne.scalar", lambda T, x: x != 1.0, lambda x: x != 1.0, SINGLE, halves, "bool"),
    NonDiffOp("lt.function", lambda T, x, y: T.lt(x, y), np.less, PAIRS[:2], halves, "bool"),
    NonDiffOp("eq.function", lambda T, x, y: T.eq(x, y), np.equal, PAIRS[:2], halves, "bool"),
    NonDiffOp("ge.method", lambda T, x, y: x.ge(y), np.greater_equal, PAIRS[:2], halves, "bool"),
    NonDiffOp("ne.method", lambda T, x, y: x.ne(y), np.not_equal, PAIRS[:2], halves, "bool"),
    NonDiffOp("isnan", lambda T, x: T.isnan(x), np.isnan, SINGLE, with_specials, "bool"),
    NonDiffOp("isnan.method", lambda T, x: x.isnan(), np.isnan, SINGLE, with_specials, "bool"),
    NonDiffOp("isinf", lambda T, x: T.isinf(x), np.isinf, SINGLE, with_specials, "bool"),
    NonDiffOp("isinf.method", lambda T, x: x.isinf(), np.isinf, SINGLE, with_specials, "bool"),
    NonDiffOp("isfinite", lambda T, x: T.isfinite(x), np.isfinite, SINGLE, with_specials, "bool"),
    NonDiffOp("isfinite.method", lambda T, x: x.isfinite(), np.isfinite, SINGLE, with_specials, "bool"),
    NonDiffOp("any", lambda T, x: (x > 0.5).any(), lambda x: np.any(x > 0.5), SINGLE, halves, "bool"),
    NonDiffOp("all", lambda T, x: (x > -1.0).all(), lambda x: np.all(x > -1.0), SINGLE, halves, "bool"),
    NonDiffOp("any.dim", lambda T, x: (x > 0.5).any(dim=1), lambda x: np.any(x > 0.5, axis=1),
              (((3, 4),),), halves, "bool"),
    NonDiffOp("all.dim_keepdim", lambda T, x: (x > -1.0).all(dim=0, keepdim=True),
              lambda x: np.all(x > -1.0, axis=0, keepdims=True), (((3, 4),),), halves, "bool"),
    NonDiffOp("any.function", lambda T, x: T.any(x > 0.5), lambda x: np.any(x > 0.5), SINGLE, halves, "bool"),
    NonDiffOp("all.function", lambda T, x: T.all(x > -1.0), lambda x: np.all(x > -1.0), SINGLE, halves, "bool"),
    NonDiffOp("any.float_input", lambda T, x: x.any(), lambda x: np.any(x != 0), SINGLE, halves, "bool"),
    NonDiffOp("argmax", lambda T, x: x.argmax(), lambda x: np.argmax(x), SINGLE + (((2, 3, 4),),), distinct,
              "int64"),
    NonDiffOp("argmax.dim", lambda T, x: x.argmax(dim=1), lambda x: np.argmax(x, axis=1), (((2, 3, 4),),),
              distinct, "int64"),
    NonDiffOp("argmax.function", lambda T, x: T.argmax(x, dim=-1), lambda x: np.argmax(x, axis=-1),
              (((3, 4),),), distinct, "int64"),
    NonDiffOp("argmin", lambda T, x: x.argmin(), lambda x: np.argmin(x), SINGLE, distinct, "int64"),
    NonDiffOp("argmin.dim_keepdim", lambda T, x: x.argmin(dim=0, keepdim=True),
              lambda x: np.argmin(x, axis=0, keepdims=True), (((2, 3, 4),),), distinct, "int64"),
    NonDiffOp("argmin.function", lambda T, x: T.argmin(x, dim=1), lambda x: np.argmin(x, axis=1),
              (((3, 4),),), distinct, "int64"),
    NonDiffOp("max_dim.indices", lambda T, x: x.max(dim=1).indices, lambda x: np.argmax(x, axis=1),
              (((3, 4),),), distinct, "int64"),
    NonDiffOp("min_dim.indices", lambda T, x: x.min(dim=0)[1], lambda x: np.argmin(x, axis=0),
              (((3, 4),),), distinct, "int64"),
]

CASES = [pytest.param(op, shapes, id=f"{op.name}[{'-'.join('x'.join(map(str, s)) or '0d' for s in shapes)}]")
         for op in CATALOGUE for shapes in op.shapes]


def make_inputs(op: NonDiffOp, shapes: tuple) -> list[np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(f"{op.name}{shapes}".encode()))
    return [np.asarray(op.domain(rng, shape), dtype=np.float32) for shape in shapes]


def dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


@pytest.mark.parametrize(("op", "shapes"), CASES)
def test_values_dtype_and_no_grad(op: NonDiffOp, shapes: tuple) -> None:
    arrays = make_inputs(op, shapes)
    inputs = [gs.tensor(a, requires_grad=True) for a in arrays]
    out = op.fn(gs, *inputs)
    expected = np.asarray(op.ref(*arrays))
    assert isinstance(out, gs.Tensor)
    assert out.requires_grad is False
    assert out.grad_fn is None
    assert out.is_leaf
    assert out.dtype == (gs.bool if op.dtype == "bool" else gs.int64)
    assert tuple(out.shape) == expected.shape
    np.testing.assert_array_equal(out.numpy(), expected)


@pytest.mark.parametrize(("op", "shapes"), CASES)
def test_matches_torch(op: NonDiffOp, shapes: tuple) -> None:
    torch = pytest.importorskip("torch")
    arrays = make_inputs(op, shapes)
    got = op.fn(gs, *[gs.tensor(a, requires_grad=True) for a in arrays])
    want = op.fn(torch, *[torch.tensor(a, requires_grad=True) for a in arrays])
    assert dtype_name(got.dtype) == dtype_name(want.dtype)
    assert tuple(got.shape) == tuple(want.shape)
    assert got.requires_grad == want.requires_grad
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_item_of_bool_reduction_is_python_bool() -> None:
    x = gs.tensor([1.0, float("nan")])
    assert gs.isnan(x).any().item() is True
    assert gs.isnan(x).all().item() is False
    assert type(x.argmax().item()) is int


def test_comparison_of_int_tensors_and_bool_tensors() -> None:
    a = gs.tensor([1, 2, 3])
    assert a.dtype == gs.int64
    assert (a > 1).dtype == gs.bool
    np.testing.assert_array_equal((a == 2).numpy(), [False, True, False])
    mask = gs.tensor([True, False, True])
    assert mask.dtype == gs.bool
    assert mask.any().item() is True and mask.all().item() is False


def test_max_with_dim_returns_named_values_and_indices() -> None:
    x = gs.tensor([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]], requires_grad=True)
    result = x.max(dim=1)
    values, indices = result
    assert result.values is values or np.array_equal(result.values.numpy(), values.numpy())
    np.testing.assert_array_equal(result.values.detach().numpy(), [5.0, 7.0])
    np.testing.assert_array_equal(result.indices.numpy(), [1, 0])
    assert indices.dtype == gs.int64 and not indices.requires_grad
    assert values.requires_grad
    low = x.min(dim=0)
    np.testing.assert_array_equal(low.values.detach().numpy(), [1.0, 0.0, 2.0])
    np.testing.assert_array_equal(low.indices.numpy(), [0, 1, 0])
