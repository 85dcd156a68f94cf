"""``MultivariateNormal`` and the linear algebra under it (``linalg.cholesky``, ``solve_triangular``,
``inv``) against torch: values and gradients in float64 (and float32 for the distribution),
broadcast batch shapes, each of the three parametrisations, and the argument errors."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(3)
M = RNG.standard_normal((2, 3, 3))
SPD = M @ M.transpose(0, 2, 1) + 3 * np.eye(3)


def _both(function: object, *arrays: np.ndarray, dtype: str = "float64") -> list:
    results = []
    for engine in (torch, gs):
        inputs = [engine.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
        out = function(engine, *inputs)
        weights = engine.tensor(np.linspace(-1, 1, out.numel()).reshape(tuple(out.shape)).astype(dtype))
        (out * weights).sum().backward()
        results.append([out.detach().numpy()] + [t.grad.numpy() for t in inputs])
    return results


def _assert_close(results: list, rtol: float = 1e-10, atol: float = 1e-12) -> None:
    for want, got in zip(*results):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_torch(upper: bool) -> None:
    _assert_close(_both(lambda e, a: e.linalg.cholesky(a, upper=upper), SPD))


@pytest.mark.parametrize("upper,left,unit", [(u, l, t) for u in (False, True) for l in (False, True)
                                             for t in (False, True)])
def test_solve_triangular_matches_torch(upper: bool, left: bool, unit: bool) -> None:
    tri = np.tril(RNG.standard_normal((2, 3, 3))) + 3 * np.eye(3)
    tri = tri.transpose(0, 2, 1) if upper else tri
    rhs = RNG.standard_normal((3, 2) if left else (2, 3))
    _assert_close(_both(lambda e, a, b: e.linalg.solve_triangular(a, b, upper=upper, left=left,
                                                                    unitriangular=unit), tri, rhs))


def test_inverse_matches_torch_and_singular_input_raises() -> None:
    _assert_close(_both(lambda e, a: e.linalg.inv(a), SPD))
    _assert_close(_both(lambda e, a: e.inverse(a), SPD[0]))
    with pytest.raises(RuntimeError, match="singular"):
        gs.linalg.inv(gs.zeros(2, 2))
    with pytest.raises(RuntimeError, match="not positive-definite"):
        gs.linalg.cholesky(-gs.eye(2))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("parametrisation", ["covariance_matrix", "scale_tril", "precision_matrix"])
def test_multivariate_normal_matches_torch(parametrisation: str, dtype: str) -> None:
    loc = RNG.standard_normal((4, 1, 3))
    value = RNG.standard_normal((4, 2, 3))
    matrix = np.linalg.cholesky(SPD) if parametrisation == "scale_tril" else SPD

    def statistics(engine: object, mean: object, mat: object, x: object) -> object:
        dist = engine.distributions.MultivariateNormal(mean, **{parametrisation: mat})
        assert tuple(dist.batch_shape) == (4, 2) and tuple(dist.event_shape) == (3,)
        return engine.stack([dist.log_prob(x), dist.entropy(), dist.variance.sum(-1),
                             dist.covariance_matrix.sum((-1, -2))])

    tolerance = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-9, atol=1e-11)
    _assert_close(_both(statistics, loc, matrix, value, dtype=dtype), **tolerance)


def test_rsample_is_loc_plus_scale_times_noise_and_has_gradients() -> None:
    loc = gs.tensor([1.0, -2.0], dtype=gs.float64, requires_grad=True)
    cov = gs.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=gs.float64)
    dist = gs.distributions.MultivariateNormal(loc, cov)
    gs.manual_seed(0)
    sample = dist.rsample((5,))
    gs.manual_seed(0)
    noise = gs.randn(5, 2, dtype=gs.float64)
    expected = loc.detach().numpy() + noise.numpy() @ np.linalg.cholesky(cov.numpy()).T
    np.testing.assert_allclose(sample.detach().numpy(), expected, rtol=1e-12)
    sample.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [5.0, 5.0])
    assert dist.sample().requires_grad is False


def test_multivariate_normal_argument_errors_match_torch() -> None:
    with pytest.raises(ValueError, match="Exactly one of covariance_matrix or precision_matrix or scale_tril"):
        gs.distributions.MultivariateNormal(gs.zeros(2))
    with pytest.raises(ValueError, match="loc must be at least one-dimensional"):
        gs.distributions.MultivariateNormal(gs.tensor(0.0), gs.eye(1))
    with pytest.raises(ValueError, match="covariance_matrix"):
        gs.distributions.MultivariateNormal(gs.zeros(2), -gs.eye(2), validate_args=True)


@pytest.mark.parametrize("vector", [False, True])
@pytest.mark.parametrize("left", [True, False])
def test_solve_matches_torch(vector: bool, left: bool) -> None:
    if vector and not left:
        pytest.skip("a vector right-hand side is for left=True")
    rhs = RNG.standard_normal((2, 3) if vector else ((3, 2) if left else (2, 4, 3)))
    _assert_close(_both(lambda e, a, b: e.linalg.solve(a, b, left=left), SPD, rhs))


def test_det_slogdet_logdet_match_torch() -> None:
    matrices = SPD * np.array([1.0, -1.0])[:, None, None]
    _assert_close(_both(lambda e, a: e.det(a), matrices))
    _assert_close(_both(lambda e, a: e.linalg.slogdet(a)[1], matrices))
    _assert_close(_both(lambda e, a: a.logdet(), SPD))
    sign = gs.linalg.slogdet(gs.tensor(matrices))[0]
    np.testing.assert_array_equal(sign.numpy(), torch.linalg.slogdet(torch.tensor(matrices))[0].numpy())
    with pytest.raises(RuntimeError, match="singular"):
        gs.linalg.solve(gs.zeros(2, 2), gs.ones(2))
