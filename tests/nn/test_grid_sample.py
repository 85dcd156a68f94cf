"""``F.affine_grid`` and ``F.grid_sample`` (the spatial-transformer pair) against torch: grids,
sampled values and gradients for the input, the grid and theta, in both align_corners settings,
bilinear and nearest, zero and border padding."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

# translations keep every sampling point off the pixel lattice, where bilinear interpolation has a
# kink and the side a point falls on depends on rounding
THETA = np.array([[[0.9, 0.2, 0.113], [-0.1, 1.1, 0.057]], [[0.7, -0.3, 0.213], [0.25, 0.8, -0.093]]])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("mode,padding", [("bilinear", "zeros"), ("bilinear", "border"), ("nearest", "zeros"),
                                          ("nearest", "border")])
def test_spatial_transformer_matches_torch(mode: str, padding: str, align: bool, dtype: str) -> None:
    rng = np.random.default_rng(0)
    image = rng.standard_normal((2, 3, 5, 6)).astype(dtype)
    results = []
    for engine in (torch, gs):
        x = engine.tensor(image, requires_grad=True)
        theta = engine.tensor(THETA.astype(dtype), requires_grad=True)
        grid = engine.nn.functional.affine_grid(theta, (2, 3, 4, 7), align_corners=align)
        out = engine.nn.functional.grid_sample(x, grid * 1.3, mode=mode, padding_mode=padding, align_corners=align)
        weights = engine.tensor((np.arange(out.numel()).reshape(tuple(out.shape)) % 5).astype(dtype))
        (out * weights).sum().backward()
        theta_grad = theta.grad.numpy() if theta.grad is not None else np.zeros_like(THETA)
        results.append([grid.detach().numpy(), out.detach().numpy(), x.grad.numpy(), theta_grad])
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    for want, got in zip(*results):
        np.testing.assert_allclose(got, want, **tolerance)


def test_grid_gradient_matches_torch_for_a_free_grid() -> None:
    rng = np.random.default_rng(1)
    image, points = rng.standard_normal((1, 2, 3, 4)), rng.uniform(-1.3, 1.3, (1, 3, 2, 2))
    results = []
    for engine in (torch, gs):
        grid = engine.tensor(points, requires_grad=True)
        out = engine.nn.functional.grid_sample(engine.tensor(image), grid, align_corners=False)
        (out ** 2).sum().backward()
        results.append([out.detach().numpy(), grid.grad.numpy()])
    for want, got in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_default_align_corners_warns_and_unsupported_modes_raise() -> None:
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
        gs.nn.functional.affine_grid(gs.tensor(THETA[:1]), (1, 1, 2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotImplementedError, match="reflection"):
            gs.nn.functional.grid_sample(gs.zeros(1, 1, 2, 2), gs.zeros(1, 1, 1, 2), padding_mode="reflection")
        with pytest.raises(ValueError, match="Nx2x3"):
            gs.nn.functional.affine_grid(gs.zeros(1, 3, 3), (1, 1, 2, 2))
