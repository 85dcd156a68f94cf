"""IEEE special values: forward and backward at log(0), x/0, 0/0, exp overflow, ... match torch
(float32), and computing them emits no Python warnings (torch emits none)."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

SPECIAL: list[tuple[str, list[float], Callable[[Any], Any]]] = [
    ("log_negative", [-1.0, 2.0], lambda x: x.log()),
    ("log_zero", [0.0, 1.0], lambda x: x.log()),
    ("div_by_zero", [1.0, -1.0, 0.0], lambda x: x / (x * 0.0)),
    ("div_self_at_zero", [0.0, 2.0], lambda x: x / x),
    ("exp_overflow", [100.0, 1.0], lambda x: x.exp()),
    ("sqrt_negative", [-4.0, 4.0], lambda x: x.sqrt()),
    ("sqrt_zero", [0.0, 4.0], lambda x: x.sqrt()),
    ("pow_negative_base_fractional", [-8.0, 8.0], lambda x: x ** 0.5),
    ("tanh_large", [50.0, -50.0], lambda x: x.tanh()),
    ("sigmoid_large", [100.0, -100.0], lambda x: x.sigmoid()),
    ("softmax_large", [1000.0, 0.0, -1000.0], lambda x: x.softmax(dim=0)),
    ("log_softmax_large", [1000.0, 0.0, -1000.0], lambda x: x.log_softmax(dim=0)),
    ("logsumexp_large", [1000.0, 1000.0], lambda x: x.logsumexp(dim=0)),
    ("nan_input_mul", [float("nan"), 1.0], lambda x: x * 2.0),
    ("inf_minus_inf", [float("inf"), 1.0], lambda x: x - x),
    ("norm_at_zero", [0.0, 0.0], lambda x: x.norm()),
]


def run(T: Any, values: list[float], fn: Callable[[Any], Any]) -> list[np.ndarray]:
    x = T.tensor(np.asarray(values, dtype=np.float32), requires_grad=True)
    y = fn(x)
    y.backward(gradient=T.ones_like(y))
    return [np.asarray(y.detach().numpy()), np.asarray(x.grad.numpy())]


# Forward add/sub/mul are numpy's own ufuncs, called bare on the hot path (an errstate per op would
# double the cost of small ops), so inf - inf warns in the forward pass as numpy does; backward never warns.
QUIET = [s for s in SPECIAL if s[0] != "inf_minus_inf"]


def test_inf_minus_inf_warns_only_in_forward() -> None:
    x = gs.tensor(np.asarray([float("inf"), 1.0], dtype=np.float32), requires_grad=True)
    with pytest.warns(RuntimeWarning, match="invalid value"):
        y = x - x
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y.backward(gradient=gs.ones_like(y))
    assert caught == []


@pytest.mark.parametrize(("name", "values", "fn"), QUIET, ids=[s[0] for s in QUIET])
def test_special_values_emit_no_warnings(name: str, values: list[float], fn: Callable[[Any], Any]) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(gs, values, fn)
    assert [str(w.message) for w in caught] == []


@pytest.mark.parametrize(("name", "values", "fn"), SPECIAL, ids=[s[0] for s in SPECIAL])
def test_special_values_match_torch(name: str, values: list[float], fn: Callable[[Any], Any]) -> None:
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = run(gs, values, fn)
    want = run(torch, values, fn)
    for what, g, w in zip(("value", "grad"), got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("first", [0.0, -0.0])
def test_scalar_product_keeps_the_sign_of_zero(first: float) -> None:
    """``x * 0.0`` and ``x * -0.0`` differ in the sign of zero (forward and gradient), whichever
    comes first: a cached scalar must not stand in for the other one."""
    torch = pytest.importorskip("torch")
    for scalar in (first, -first):
        got = run(gs, [1.0, -2.0], lambda x: x * scalar)
        expected = run(torch, [1.0, -2.0], lambda x: x * scalar)
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(np.signbit(g), np.signbit(e))
            np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_select_or_zero_equals_where(dtype: Any) -> None:
    """The bitwise select used by masking backwards (ReLU) gives np.where's result bit for bit:
    NaN, inf and -0. outside the mask become +0., inside they are kept; strided views work."""
    from gradscope.ops._util import select_or_zero

    values = np.array([[1.5, np.nan, -np.inf, -0.0], [np.inf, -2.0, np.nan, 0.0], [3.0, -0.0, 1.0, -1.0]],
                      dtype=dtype)
    mask = np.array([[True, False, False, True], [True, True, True, False], [False, False, True, True]])
    for v, m in ((values, mask), (values.T, mask.T), (values[:, ::2], mask[:, ::2])):
        expected = np.where(m, v, np.zeros((), dtype))
        got = select_or_zero(m, v)
        assert got.dtype == dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)  # NaN matches NaN
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))
