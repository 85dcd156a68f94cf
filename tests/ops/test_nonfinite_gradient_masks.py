"""Ops whose backward keeps only part of the incoming gradient select it, as torch does: a NaN or
Inf arriving where the op's derivative is 0 becomes an exact 0 (multiplying by a 0/1 mask would
give NaN, and would report NaN gradients torch never produces)."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs
import gradscope.nn.functional as GF

torch = pytest.importorskip("torch")
TF = pytest.importorskip("torch.nn.functional")

VALUES = np.array([-2.0, -0.5, 0.0, 0.5, 2.0, 7.0])
UPSTREAM = np.array([np.nan, np.inf, np.nan, 1.0, np.nan, -np.inf])

CASES = {
    "relu": (lambda t: t.relu(), lambda t: t.relu()),
    "clamp": (lambda t: t.clamp(-1, 1), lambda t: t.clamp(-1, 1)),
    "clamp_min": (lambda t: t.clamp(min=0), lambda t: t.clamp(min=0)),
    "clamp_max": (lambda t: t.clamp(max=0.5), lambda t: t.clamp(max=0.5)),
    "hardtanh": (TF.hardtanh, GF.hardtanh),
    "relu6": (TF.relu6, GF.relu6),
    "threshold": (lambda t: TF.threshold(t, 0.1, 0.0), lambda t: GF.threshold(t, 0.1, 0.0)),
    "hardsigmoid": (TF.hardsigmoid, GF.hardsigmoid),
    "hardswish": (TF.hardswish, GF.hardswish),
    "leaky_relu": (lambda t: TF.leaky_relu(t, 0.1), lambda t: GF.leaky_relu(t, 0.1)),
    "maximum": (lambda t: torch.maximum(t, torch.zeros_like(t)), lambda t: gs.maximum(t, gs.zeros_like(t))),
    "minimum": (lambda t: torch.minimum(t, torch.zeros_like(t)), lambda t: gs.minimum(t, gs.zeros_like(t))),
    "where": (lambda t: torch.where(t > 0, t, torch.zeros_like(t)), lambda t: gs.where(t > 0, t, gs.zeros_like(t))),
    "masked_fill": (lambda t: t.masked_fill(t < 0, 0.0), lambda t: t.masked_fill(t < 0, 0.0)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_nonfinite_upstream_gradient_matches_torch(name: str, dtype: str) -> None:
    torch_fn, gradscope_fn = CASES[name]
    x_torch = torch.tensor(VALUES.astype(dtype), requires_grad=True)
    torch_fn(x_torch).backward(torch.tensor(UPSTREAM.astype(dtype)))
    x_gs = gs.tensor(VALUES.astype(dtype), requires_grad=True)
    with np.errstate(invalid="ignore"):
        gradscope_fn(x_gs).backward(gs.tensor(UPSTREAM.astype(dtype)))
    np.testing.assert_array_equal(x_gs.grad.numpy(), x_torch.grad.numpy())
