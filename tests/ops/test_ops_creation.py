"""Creation functions, dtypes and type promotion, and ``repr`` -- checked alone and against torch."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs


def dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


# --------------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------------

def test_dtype_objects() -> None:
    for name in ("float32", "float64", "int64", "bool"):
        assert dtype_name(getattr(gs, name)) == name
    assert gs.float32 != gs.float64
    assert gs.tensor([1.0]).dtype == gs.float32


@pytest.mark.parametrize(("data", "expected"), [
    ([1.0, 2.0], "float32"),
    ([1, 2], "int64"),
    ([True, False], "bool"),
    ([1, 2.5], "float32"),
    (1.5, "float32"),
    (3, "int64"),
    (True, "bool"),
    ([[1.0], [2.0]], "float32"),
    (np.array([1.0, 2.0]), "float64"),
    (np.array([1.0, 2.0], dtype=np.float32), "float32"),
    (np.array([1, 2]), "int64"),
    (np.array([1, 2], dtype=np.int32), "int32"),
    (np.array([True]), "bool"),
    (np.float64(2.0), "float64"),
], ids=lambda v: type(v).__name__ if not isinstance(v, str) else v)
def test_tensor_dtype_inference(data: Any, expected: str) -> None:
    t = gs.tensor(data)
    assert dtype_name(t.dtype) == expected
    np.testing.assert_array_equal(t.numpy(), np.asarray(data))


PROMOTIONS: list[tuple[str, Callable[[Any], Any]]] = [
    ("f32+pyfloat", lambda T: T.tensor([1.0, 2.0]) + 0.5),
    ("i64+pyfloat", lambda T: T.tensor([1, 2]) + 0.5),
    ("i64*pyint", lambda T: T.tensor([1, 2]) * 2),
    ("i64/pyint", lambda T: T.tensor([1, 2]) / 2),
    ("i64/i64", lambda T: T.tensor([1, 2]) / T.tensor([2, 4])),
    ("i64**2", lambda T: T.tensor([1, 2]) ** 2),
    ("i64+f32", lambda T: T.tensor([1, 2]) + T.tensor([0.5, 0.5])),
    ("f32+f64", lambda T: T.tensor([1.0, 2.0]) + T.tensor(np.array([1.0, 2.0]))),
    ("f32+f64_0d", lambda T: T.tensor([1.0, 2.0]) + T.tensor(np.float64(1.0))),
    ("f64+pyfloat", lambda T: T.tensor(np.array([1.0, 2.0])) * 3.0),
    ("f64.exp", lambda T: T.tensor(np.array([1.0, 2.0])).exp()),
    ("f64_0d.exp+pyfloat", lambda T: T.tensor(np.float64(0.5)).exp() + 1.0),
    ("f64_0d*f64_0d*pyfloat", lambda T: T.tensor(np.float64(0.5)) * T.tensor(np.float64(3.0)) * 2.0),
    ("pyfloat/(f64_0d*f64_0d+1)", lambda T: 1.0 / (T.tensor(np.float64(1.3)) * T.tensor(np.float64(1.3)) + 1.0)),
    ("i64_0d*i64_0d+pyint", lambda T: T.tensor(3) * T.tensor(4) + 1),
    ("f32_0d*f32_0d+pyfloat", lambda T: T.tensor(0.5) * T.tensor(3.0) + 1.0),
    ("f64.mean", lambda T: T.tensor(np.array([1.0, 2.0])).mean()),
    ("f64@f64", lambda T: T.tensor(np.eye(2)) @ T.tensor(np.array([1.0, 2.0]))),
    ("i64.sum", lambda T: T.tensor([1, 2]).sum()),
    ("i64.neg", lambda T: -T.tensor([1, 2])),
    ("i64.sqrt", lambda T: T.sqrt(T.tensor([1, 4]))),
    ("i64.exp", lambda T: T.tensor([0, 1]).exp()),
    ("bool.sum", lambda T: T.tensor([True, True, False]).sum()),
    ("float()", lambda T: T.tensor([1, 2]).float()),
    ("double()", lambda T: T.tensor([1.0, 2.0]).double()),
    ("long()", lambda T: T.tensor([1.7, -2.7]).long()),
    ("to(float64)", lambda T: T.tensor([1.0, 2.0]).to(T.float64)),
    ("to(int64)", lambda T: T.tensor([1.5, 2.5]).to(T.int64)),
    ("where_f32_f32", lambda T: T.where(T.tensor([True, False]), T.tensor([1.0, 2.0]), T.tensor([3.0, 4.0]))),
    ("cat_f32", lambda T: T.cat([T.tensor([1.0]), T.tensor([2.0])])),
]


@pytest.mark.parametrize(("name", "make"), PROMOTIONS, ids=[p[0] for p in PROMOTIONS])
def test_result_dtype_matches_torch(name: str, make: Callable[[Any], Any]) -> None:
    torch = pytest.importorskip("torch")
    got, want = make(gs), make(torch)
    assert dtype_name(got.dtype) == dtype_name(want.dtype), name
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12 if dtype_name(want.dtype) == "float64" else 1e-6)


def test_float64_kept_through_ops_and_grads() -> None:
    x = gs.tensor(np.array([0.5, 1.5]), requires_grad=True)
    y = (x.exp() * 2.0 + x ** 2).sum()
    assert y.dtype == gs.float64
    y.backward()
    assert x.grad.dtype == gs.float64
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp([0.5, 1.5]) + 2 * np.array([0.5, 1.5]), rtol=1e-12)


# --------------------------------------------------------------------------------------------------
# creation functions
# --------------------------------------------------------------------------------------------------

def check(t: Any, dtype: Any, shape: tuple, values: Any = None) -> None:
    assert isinstance(t, gs.Tensor)
    assert t.dtype == dtype, f"dtype {t.dtype}, expected {dtype}"
    assert tuple(t.shape) == shape
    assert t.requires_grad is False and t.is_leaf
    if values is not None:
        np.testing.assert_allclose(t.numpy(), values, rtol=1e-6, atol=1e-7)


def test_tensor_copies_its_input() -> None:
    a = np.array([1.0, 2.0])
    t = gs.tensor(a)
    a[0] = 100.0
    assert t.numpy()[0] == 1.0


def test_tensor_of_tensor_list_and_dtype_keyword() -> None:
    check(gs.tensor([1, 2], dtype=gs.float32), gs.float32, (2,), [1.0, 2.0])
    check(gs.tensor([1.5], dtype=gs.float64), gs.float64, (1,), [1.5])
    check(gs.tensor([[1.0, 2.0], [3.0, 4.0]]), gs.float32, (2, 2), [[1, 2], [3, 4]])
    check(gs.tensor([]), gs.float32, (0,))


def test_as_tensor() -> None:
    check(gs.as_tensor([1.0, 2.0]), gs.float32, (2,), [1.0, 2.0])
    check(gs.as_tensor(np.array([1.0, 2.0])), gs.float64, (2,), [1.0, 2.0])
    check(gs.as_tensor([1, 2], dtype=gs.float64), gs.float64, (2,), [1.0, 2.0])
    t = gs.tensor([1.0, 2.0])
    assert gs.as_tensor(t) is t


def test_from_numpy_keeps_dtype_and_shares_memory() -> None:
    a = np.array([[1.0, 2.0]])
    t = gs.from_numpy(a)
    check(t, gs.float64, (1, 2), [[1.0, 2.0]])
    a[0, 0] = 5.0
    assert t[0, 0].item() == 5.0
    check(gs.from_numpy(np.arange(3)), gs.int64, (3,), [0, 1, 2])
    check(gs.from_numpy(np.zeros(2, dtype=np.float32)), gs.float32, (2,), [0.0, 0.0])


def test_zeros_ones_full_empty() -> None:
    check(gs.zeros(2, 3), gs.float32, (2, 3), np.zeros((2, 3)))
    check(gs.zeros((2, 3)), gs.float32, (2, 3), np.zeros((2, 3)))
    check(gs.zeros([4]), gs.float32, (4,), np.zeros(4))
    check(gs.zeros(()), gs.float32, (), 0.0)
    check(gs.ones(3), gs.float32, (3,), np.ones(3))
    check(gs.ones(2, 2, dtype=gs.int64), gs.int64, (2, 2), np.ones((2, 2)))
    check(gs.full((2, 2), 1.5), gs.float32, (2, 2), np.full((2, 2), 1.5))
    check(gs.full((2,), 3), gs.int64, (2,), [3, 3])
    check(gs.full((2,), True), gs.bool, (2,), [True, True])
    check(gs.full((2,), 3, dtype=gs.float64), gs.float64, (2,), [3.0, 3.0])
    check(gs.empty(2, 3), gs.float32, (2, 3))
    check(gs.empty((1, 4), dtype=gs.float64), gs.float64, (1, 4))


def test_arange_linspace_eye() -> None:
    check(gs.arange(5), gs.int64, (5,), np.arange(5))
    check(gs.arange(1, 4), gs.int64, (3,), [1, 2, 3])
    check(gs.arange(0, 10, 3), gs.int64, (4,), [0, 3, 6, 9])
    check(gs.arange(0, 1, 0.25), gs.float32, (4,), [0.0, 0.25, 0.5, 0.75])
    check(gs.arange(1.0, 4.0), gs.float32, (3,), [1.0, 2.0, 3.0])
    check(gs.arange(5, dtype=gs.float64), gs.float64, (5,), np.arange(5.0))
    check(gs.linspace(0, 1, 5), gs.float32, (5,), np.linspace(0, 1, 5))
    check(gs.linspace(-1, 1, steps=3), gs.float32, (3,), [-1.0, 0.0, 1.0])
    check(gs.eye(3), gs.float32, (3, 3), np.eye(3))
    check(gs.eye(2, 3), gs.float32, (2, 3), np.eye(2, 3))


def test_random_creation_shapes_dtypes_ranges() -> None:
    gs.manual_seed(123)
    r = gs.rand(200, 3)
    check(r, gs.float32, (200, 3))
    assert 0.0 <= r.numpy().min() and r.numpy().max() < 1.0
    check(gs.rand((2, 3)), gs.float32, (2, 3))
    check(gs.rand(2, dtype=gs.float64), gs.float64, (2,))
    n = gs.randn(10000)
    check(n, gs.float32, (10000,))
    assert abs(float(n.numpy().mean())) < 0.05 and abs(float(n.numpy().std()) - 1.0) < 0.05
    check(gs.randn(2, 3), gs.float32, (2, 3))
    k = gs.randint(0, 10, (500,))
    check(k, gs.int64, (500,))
    assert k.numpy().min() >= 0 and k.numpy().max() <= 9 and len(np.unique(k.numpy())) == 10
    k = gs.randint(3, (50,))
    check(k, gs.int64, (50,))
    assert k.numpy().min() >= 0 and k.numpy().max() <= 2


def test_like_functions() -> None:
    x64 = gs.tensor(np.ones((2, 3)))
    x32 = gs.ones(4)
    xi = gs.tensor([[1, 2]])
    check(gs.zeros_like(x64), gs.float64, (2, 3), np.zeros((2, 3)))
    check(gs.ones_like(x32), gs.float32, (4,), np.ones(4))
    check(gs.ones_like(x32, dtype=gs.float64), gs.float64, (4,), np.ones(4))
    check(gs.zeros_like(xi), gs.int64, (1, 2), [[0, 0]])
    check(gs.full_like(x32, 2.5), gs.float32, (4,), np.full(4, 2.5))
    check(gs.empty_like(x64), gs.float64, (2, 3))
    check(gs.rand_like(x32), gs.float32, (4,))
    check(gs.randn_like(x64), gs.float64, (2, 3))
    leaf = gs.ones(2, requires_grad=True)
    assert gs.zeros_like(leaf).requires_grad is False
    assert gs.zeros_like(x32, requires_grad=True).requires_grad is True


@pytest.mark.parametrize("make", [
    lambda: gs.tensor([1.0, 2.0], requires_grad=True),
    lambda: gs.zeros(2, requires_grad=True),
    lambda: gs.ones(2, requires_grad=True),
    lambda: gs.full((2,), 0.5, requires_grad=True),
    lambda: gs.rand(2, requires_grad=True),
    lambda: gs.randn(2, requires_grad=True),
    lambda: gs.empty(2, requires_grad=True),
    lambda: gs.arange(2.0, requires_grad=True),
    lambda: gs.linspace(0, 1, 2, requires_grad=True),
    lambda: gs.ones(2, dtype=gs.float64, requires_grad=True),
], ids=["tensor", "zeros", "ones", "full", "rand", "randn", "empty", "arange", "linspace", "ones_f64"])
def test_requires_grad_keyword_makes_a_leaf(make: Callable[[], Any]) -> None:
    t = make()
    assert t.requires_grad and t.is_leaf and t.grad_fn is None
    (t * 3.0).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), [3.0, 3.0])


def test_requires_grad_on_integer_tensor_raises() -> None:
    with pytest.raises(RuntimeError, match="(?i)floating point"):
        gs.tensor([1, 2], requires_grad=True)


def test_manual_seed_reproducibility() -> None:
    gs.manual_seed(0)
    a = (gs.rand(5).numpy(), gs.randn(5).numpy(), gs.randint(0, 100, (5,)).numpy())
    gs.manual_seed(0)
    b = (gs.rand(5).numpy(), gs.randn(5).numpy(), gs.randint(0, 100, (5,)).numpy())
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(gs.rand(5).numpy(), a[0])
    gs.manual_seed(1)
    assert not np.array_equal(gs.rand(5).numpy(), a[0])


DETERMINISTIC: list[tuple[str, Callable[[Any], Any]]] = [
    ("zeros", lambda T: T.zeros(2, 3)),
    ("ones_tuple", lambda T: T.ones((3,))),
    ("full_int", lambda T: T.full((2, 2), 7)),
    ("full_float", lambda T: T.full((2,), -1.5)),
    ("arange_int", lambda T: T.arange(2, 11, 3)),
    ("arange_float", lambda T: T.arange(0, 1, 0.25)),
    ("arange_float_end", lambda T: T.arange(3.0)),
    ("linspace", lambda T: T.linspace(-2, 2, 9)),
    ("linspace_one_step", lambda T: T.linspace(3, 5, 1)),
    ("eye_rect", lambda T: T.eye(3, 2)),
    ("tensor_nested", lambda T: T.tensor([[1, 2], [3, 4]])),
    ("tensor_0d", lambda T: T.tensor(2.5)),
    ("as_tensor_f64", lambda T: T.as_tensor(np.array([1.0, 2.0]))),
    ("from_numpy_i32", lambda T: T.from_numpy(np.array([1, 2], dtype=np.int32))),
    ("zeros_like_int", lambda T: T.zeros_like(T.tensor([1, 2]))),
    ("full_like_f64", lambda T: T.full_like(T.tensor(np.ones(2)), 4)),
]


@pytest.mark.parametrize(("name", "make"), DETERMINISTIC, ids=[d[0] for d in DETERMINISTIC])
def test_creation_matches_torch(name: str, make: Callable[[Any], Any]) -> None:
    torch = pytest.importorskip("torch")
    got, want = make(gs), make(torch)
    assert dtype_name(got.dtype) == dtype_name(want.dtype)
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


# --------------------------------------------------------------------------------------------------
# repr
# --------------------------------------------------------------------------------------------------

def test_repr_examples() -> None:
    assert repr(gs.tensor([1.0, 2.0], requires_grad=True)) == "tensor([1., 2.], requires_grad=True)"
    assert repr(gs.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(gs.tensor(3)) == "tensor(3)"
    assert repr(gs.tensor([True, False])) == "tensor([ True, False])"
    assert repr(gs.tensor([0.1, 0.25])) == "tensor([0.1000, 0.2500])"
    x = gs.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x * 2) == "tensor([2., 4.], grad_fn=<MulBackward0>)"
    assert repr(gs.tensor(np.array([1.0, 2.0]))).endswith("float64)")


REPRS: list[tuple[str, Callable[[Any], Any]]] = [
    ("float_vector_rg", lambda T: T.tensor([1.0, 2.0], requires_grad=True)),
    ("fractions", lambda T: T.tensor([0.1, 0.25, -3.5])),
    ("float_0d", lambda T: T.tensor(2.5)),
    ("int_0d", lambda T: T.tensor(3)),
    ("int_matrix", lambda T: T.tensor([[1, -20], [300, 4]])),
    ("float_matrix", lambda T: T.tensor([[1.5, -2.0], [3.0, 4.25]])),
    ("cube", lambda T: T.arange(12.0).reshape(2, 3, 2)),
    ("sci_small_large", lambda T: T.tensor([1e-5, 1e5])),
    ("sci_ratio", lambda T: T.tensor([0.001, 1000.0])),
    ("specials", lambda T: T.tensor([float("nan"), float("inf"), -float("inf"), 1.0])),
    ("bool", lambda T: T.tensor([True, False])),
    ("float64", lambda T: T.tensor(np.array([1.0, 2.0]))),
    ("float64_rg", lambda T: T.tensor(np.array([0.5]), requires_grad=True)),
    ("int32", lambda T: T.tensor(np.array([1, 2], dtype=np.int32))),
    ("empty", lambda T: T.tensor([])),
    ("zeros", lambda T: T.zeros(2, 3)),
    ("grad_fn_mul", lambda T: T.tensor([1.0, 2.0], requires_grad=True) * 2),
    ("grad_fn_sum", lambda T: T.tensor([1.0, 2.0], requires_grad=True).sum()),
    ("negative_zero_point_five", lambda T: T.tensor([-0.5, 0.0, 0.5])),
    ("many_digits", lambda T: T.tensor([1.23456789, 123.456])),
]


@pytest.mark.parametrize(("name", "make"), REPRS, ids=[r[0] for r in REPRS])
def test_repr_matches_torch(name: str, make: Callable[[Any], Any]) -> None:
    torch = pytest.importorskip("torch")
    got = repr(make(gs)).replace("gradscope.", "torch.")
    assert got == repr(make(torch))
