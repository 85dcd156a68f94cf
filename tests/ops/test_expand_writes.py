"""Writes into an expanded tensor, as PyTorch allows and refuses them: a part without repeated
elements may be written (the write shows through every repeat); a write into repeated elements is
refused; advanced-index writes go through with PyTorch's deprecation warning."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

CASES = [
    "e = lib.zeros(1, 4).expand(3, 4); e[0] = 1",
    "e = lib.zeros(1, 4).expand(3, 4); e.add_(1)",
    "e = lib.zeros(1, 4).expand(3, 4); e[0] /= 0",
    "e = lib.zeros(1, 4).expand(3, 4); e[1:] = 2",
    "e = lib.zeros(4, 1).expand(4, 3); e[:, 0].mul_(2)",
    "e = lib.zeros(4, 1).expand(4, 3); e[:, 1] = lib.arange(4.0)",
    "e = lib.zeros(4).expand(2, 4); e.copy_(lib.ones(2, 4))",
    "e = lib.zeros(4).expand(2, 4); e.zero_()",
    "e = lib.zeros(4).expand(2, 4); e[0].fill_(3)",
    "e = lib.zeros(2, 1).expand(2, 3); e[lib.tensor([0])] = 5.0",
    "e = lib.zeros(3).expand(-1); e.add_(1)",
    "e = lib.zeros(1, 3).expand(0, 3)",
    "e = lib.zeros(3).expand(2, 2)",
    "base = lib.zeros(1, 3); e = base.expand(2, 3); e[1, 2] = 7.0; e = base",
]


def _run(lib, code: str):
    scope = {"lib": lib}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(code, scope)  # noqa: S102 - the same statements on both libraries
        except RuntimeError as exc:
            return "error", str(exc).split(" at non-singleton")[0].split(". Please")[0], []
    e = scope["e"]
    values = np.asarray(e.tolist(), dtype=float)
    return np.where(np.isnan(values), -999.0, values).tolist(), list(e.shape), sorted({type(w.message).__name__ for w in caught})


@pytest.mark.parametrize("code", CASES)
def test_expanded_writes_as_torch(code: str) -> None:
    ours, theirs = _run(gs, code), _run(torch, code)
    if theirs[0] == "error":
        assert ours[0] == "error", (code, ours)
        if "more than one element" in theirs[1]:
            assert ours[1] == theirs[1]
    else:
        assert ours == theirs, code


def test_backward_may_write_into_a_row_of_an_expanded_gradient() -> None:
    """PyTorch's anomaly test writes a NaN into one row of an expanded gradient in backward."""

    def grads(lib):
        class Func(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.sum(0, keepdim=True)

            @staticmethod
            def backward(ctx, g):
                grad = g.clone().expand(3, 4)
                grad[0] = 0
                grad[0] /= 0
                return grad

        x = lib.ones(3, 4, requires_grad=True)
        Func.apply(x).sum().backward()
        return np.isnan(np.asarray(x.grad.tolist())).tolist()

    assert grads(gs) == grads(torch)
