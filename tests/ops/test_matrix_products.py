"""Two-matrix products (``matmul`` of 2-D operands, ``mm``, ``Linear``'s ``addmm``) against torch:
values for every dtype, transposed operands, their gradients and their errors."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
A = RNG.standard_normal((5, 3)).astype(np.float32)
B = RNG.standard_normal((3, 4)).astype(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32"])
def test_values_for_each_dtype(dtype: str) -> None:
    a = (A * 3).astype(dtype)
    b = (B * 3).astype(dtype)
    got = (gs.tensor(a) @ gs.tensor(b)).numpy()
    expected = (torch.tensor(a) @ torch.tensor(b)).numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_transposed_operands_and_their_gradients() -> None:
    results = []
    for lib in (gs, torch):
        a = lib.tensor(A.T.copy(), requires_grad=True)  # (3, 5), used transposed
        b = lib.tensor(B.T.copy(), requires_grad=True)  # (4, 3), used transposed
        out = lib.mm(a.t(), b.t())
        (out * out).sum().backward()
        results.append([out.detach().numpy(), a.grad.numpy(), b.grad.numpy(), a.grad.is_contiguous()])
    for got, expected in zip(*results):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_linear_gradients_match_torch() -> None:
    weight = RNG.standard_normal((4, 3)).astype(np.float32)
    bias = RNG.standard_normal(4).astype(np.float32)
    results = []
    for lib in (gs, torch):
        x = lib.tensor(A, requires_grad=True)
        w = lib.tensor(weight, requires_grad=True)
        c = lib.tensor(bias, requires_grad=True)
        out = lib.nn.functional.linear(x, w, c).tanh()
        out.sum().backward()
        results.append([out.detach().numpy(), x.grad.numpy(), w.grad.numpy(), c.grad.numpy()])
    for got, expected in zip(*results):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_errors_match_torch() -> None:
    for lib in (gs, torch):
        with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
            lib.ones(2, 3) @ lib.ones(4, 5)
        with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
            lib.ones(2, 3, dtype=lib.float64) @ lib.ones(3, 5)
