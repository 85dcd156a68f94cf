"""gradscope.distributions against torch.distributions: values, gradients, shapes, validation."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

DTYPES = [np.float32, np.float64]


def _leaves(arrays: list) -> tuple[list, list]:
    return [gs.tensor(a, requires_grad=True) for a in arrays], [torch.tensor(a, requires_grad=True) for a in arrays]


def _compare(build, value_of, arrays: list, rtol: float = 1e-5) -> None:
    """Build a distribution from leaves on both sides, compare ``value_of(T, dist)`` and its gradients."""
    gs_leaves, torch_leaves = _leaves(arrays)
    gs_out = value_of(gs, build(gs, *gs_leaves))
    torch_out = value_of(torch, build(torch, *torch_leaves))
    np.testing.assert_allclose(gs_out.detach().numpy(), torch_out.detach().numpy(), rtol=rtol, atol=1e-6)
    weights = np.random.default_rng(1).standard_normal(tuple(torch_out.shape)).astype(arrays[0].dtype)
    (gs_out * gs.tensor(weights)).sum().backward()
    (torch_out * torch.tensor(weights)).sum().backward()
    for g, t in zip(gs_leaves, torch_leaves):
        assert (g.grad is None) == (t.grad is None)
        if t.grad is not None:
            np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("what", ["log_prob", "entropy", "cdf", "kl"])
def test_normal(dtype, what) -> None:
    rng = np.random.default_rng(0)
    loc = rng.standard_normal((3, 2)).astype(dtype)
    scale = rng.uniform(0.5, 2.0, (3, 2)).astype(dtype)
    value = rng.standard_normal((4, 3, 2)).astype(dtype)

    def value_of(T, d):
        if what == "log_prob":
            return d.log_prob(T.tensor(value))
        if what == "cdf":
            return d.cdf(T.tensor(value))
        if what == "kl":
            return T.distributions.kl_divergence(d, T.distributions.Normal(T.zeros(3, 2, dtype=d.loc.dtype), 1.5))
        return d.entropy()

    _compare(lambda T, m, s: T.distributions.Normal(m, s), value_of, [loc, scale])


@pytest.mark.parametrize("dtype", DTYPES)
def test_normal_rsample_is_reparameterised(dtype) -> None:
    loc = gs.tensor(np.array([0.5, -1.0], dtype=dtype), requires_grad=True)
    scale = gs.tensor(np.array([2.0, 0.5], dtype=dtype), requires_grad=True)
    d = gs.distributions.Normal(loc, scale)
    assert d.has_rsample
    gs.manual_seed(0)
    sample = d.rsample((5,))
    assert tuple(sample.shape) == (5, 2) and sample.dtype == loc.dtype and sample.requires_grad
    sample.sum().backward()
    np.testing.assert_allclose(loc.grad.numpy(), [5.0, 5.0])
    gs.manual_seed(0)
    eps = gs.randn(5, 2, dtype=loc.dtype).numpy()
    np.testing.assert_allclose(scale.grad.numpy(), eps.sum(0), rtol=1e-6)
    assert not d.sample((3,)).requires_grad
    assert d.mean is loc and d.stddev is scale
    np.testing.assert_allclose(d.variance.detach().numpy(), [4.0, 0.25])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("param", ["probs", "logits"])
@pytest.mark.parametrize("what", ["log_prob", "entropy", "kl", "probs", "logits"])
def test_categorical(dtype, param, what) -> None:
    rng = np.random.default_rng(2)
    raw = rng.uniform(0.1, 1.0, (2, 4)).astype(dtype) if param == "probs" else rng.standard_normal((2, 4)).astype(dtype)
    value = np.array([[3, 0], [1, 1], [2, 3]])

    def value_of(T, d):
        if what == "log_prob":
            return d.log_prob(T.tensor(value))
        if what == "kl":
            other = T.distributions.Categorical(logits=T.tensor(np.linspace(-1, 1, 8).reshape(2, 4).astype(dtype)))
            return T.distributions.kl_divergence(d, other)
        if what in ("probs", "logits"):
            return getattr(d, what)
        return d.entropy()

    _compare(lambda T, p: T.distributions.Categorical(**{param: p}), value_of, [raw])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("param", ["probs", "logits"])
@pytest.mark.parametrize("what", ["log_prob", "entropy", "kl", "mean", "variance"])
def test_bernoulli(dtype, param, what) -> None:
    rng = np.random.default_rng(3)
    raw = rng.uniform(0.1, 0.9, (3,)).astype(dtype) if param == "probs" else rng.standard_normal((3,)).astype(dtype)
    value = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]], dtype=dtype)

    def value_of(T, d):
        if what == "log_prob":
            return d.log_prob(T.tensor(value))
        if what == "kl":
            return T.distributions.kl_divergence(d, T.distributions.Bernoulli(probs=T.tensor([0.3, 0.5, 0.8],
                                                                                               dtype=d.probs.dtype)))
        if what in ("mean", "variance"):
            return getattr(d, what)
        return d.entropy()

    _compare(lambda T, p: T.distributions.Bernoulli(**{param: p}), value_of, [raw])


@pytest.mark.parametrize("what", ["log_prob", "entropy", "kl"])
def test_independent_normal(what) -> None:
    rng = np.random.default_rng(4)
    loc = rng.standard_normal((3, 2)).astype(np.float64)
    scale = rng.uniform(0.5, 2.0, (3, 2)).astype(np.float64)
    value = rng.standard_normal((3, 2))

    def build(T, m, s):
        return T.distributions.Independent(T.distributions.Normal(m, s), 1)

    def value_of(T, d):
        assert tuple(d.batch_shape) == (3,) and tuple(d.event_shape) == (2,)
        if what == "log_prob":
            return d.log_prob(T.tensor(value))
        if what == "kl":
            prior = T.distributions.Independent(T.distributions.Normal(T.zeros(3, 2, dtype=T.float64),
                                                                       T.ones(3, 2, dtype=T.float64)), 1)
            return T.distributions.kl_divergence(d, prior)
        return d.entropy()

    _compare(build, value_of, [loc, scale])


@pytest.mark.parametrize("T", [gs, torch], ids=["gradscope", "torch"])
def test_sample_shapes_and_dtypes(T) -> None:
    D = T.distributions
    cat = D.Categorical(logits=T.zeros(2, 5))
    assert tuple(cat.sample().shape) == (2,) and cat.sample().dtype == T.int64
    assert tuple(cat.sample((3, 4)).shape) == (3, 4, 2)
    assert int(cat.sample((100,)).max()) < 5
    bern = D.Bernoulli(probs=T.tensor([0.0, 1.0]))
    assert bern.sample((3,)).tolist() == [[0.0, 1.0]] * 3
    normal = D.Normal(T.zeros(2), T.ones(2))
    assert tuple(normal.sample((6,)).shape) == (6, 2) and tuple(normal.batch_shape) == (2,)
    assert tuple(D.Normal(0.0, 1.0).sample().shape) == ()
    assert tuple(D.Independent(normal, 1).sample((4,)).shape) == (4, 2)
    assert cat.enumerate_support().tolist() == [[0, 0], [1, 1], [2, 2], [3, 3], [4, 4]]


def test_categorical_sampling_follows_probabilities() -> None:
    gs.manual_seed(0)
    samples = gs.distributions.Categorical(probs=gs.tensor([0.1, 0.0, 0.9])).sample((4000,))
    counts = np.bincount(samples.numpy(), minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.1, 0.0, 0.9], atol=0.03)


@pytest.mark.parametrize("T", [gs, torch], ids=["gradscope", "torch"])
def test_argument_validation(T) -> None:
    D = T.distributions
    with pytest.raises(ValueError, match="scale .* to satisfy the constraint GreaterThan"):
        D.Normal(0.0, -1.0)
    with pytest.raises(ValueError, match="probs .* to satisfy the constraint Simplex"):
        D.Categorical(probs=T.tensor([0.5, -0.1]))
    with pytest.raises(ValueError, match="Either `probs` or `logits` must be specified, but not both"):
        D.Categorical(probs=T.tensor([0.5, 0.5]), logits=T.tensor([0.0, 0.0]))
    with pytest.raises(ValueError, match="probs .* Interval"):
        D.Bernoulli(probs=T.tensor([1.5]))
    with pytest.raises(ValueError, match="within the support"):
        D.Categorical(logits=T.zeros(3)).log_prob(T.tensor(3))
    with pytest.raises(ValueError, match="within the support"):
        D.Bernoulli(probs=T.tensor([0.5])).log_prob(T.tensor([0.5]))
    D.Normal(0.0, -1.0, validate_args=False)
