"""``gradscope.nn.init``: formulas (fans, gains, bounds) against torch, distributions of the drawn values,
deterministic initialisers value-for-value, reproducibility with gradscope's generator, and in-place
behaviour on parameters (no graph, version bump)."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import gradscope as gs
from gradscope.nn import init


def big(*shape: int) -> gs.Tensor:
    return gs.nn.Parameter(gs.zeros(*shape))


@pytest.mark.parametrize("nonlinearity, param", [
    ("linear", None), ("conv1d", None), ("conv2d", None), ("conv_transpose2d", None), ("sigmoid", None),
    ("tanh", None), ("relu", None), ("leaky_relu", None), ("leaky_relu", 0.2), ("leaky_relu", math.sqrt(5)),
    ("selu", None),
])
def test_calculate_gain_matches_torch(nonlinearity: str, param: float | None) -> None:
    torch = pytest.importorskip("torch")
    assert init.calculate_gain(nonlinearity, param) == pytest.approx(torch.nn.init.calculate_gain(nonlinearity, param))


def test_calculate_gain_rejects_unknown_nonlinearity() -> None:
    with pytest.raises(ValueError, match="Unsupported nonlinearity gelu"):
        init.calculate_gain("gelu")


@pytest.mark.parametrize("shape", [(3, 4), (5, 2, 3), (6, 4, 3, 2), (2, 3, 1, 1, 2)])
def test_fans_match_torch(shape: tuple) -> None:
    torch = pytest.importorskip("torch")
    assert init._calculate_fan_in_and_fan_out(gs.zeros(*shape)) == \
        torch.nn.init._calculate_fan_in_and_fan_out(torch.zeros(*shape))


def test_fans_need_two_dims() -> None:
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init.xavier_uniform_(gs.zeros(5))


def test_uniform_and_normal_statistics() -> None:
    gs.manual_seed(0)
    u = init.uniform_(big(200, 200), -2.0, 3.0)._data
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.03 and abs(u.std() - 5.0 / 12 ** 0.5) < 0.01
    n = init.normal_(big(200, 200), 1.0, 0.5)._data
    assert abs(n.mean() - 1.0) < 0.01 and abs(n.std() - 0.5) < 0.01


@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
@pytest.mark.parametrize("nonlinearity, a", [("relu", 0), ("leaky_relu", math.sqrt(5)), ("tanh", 0)])
def test_kaiming_bounds_and_std(mode: str, nonlinearity: str, a: float) -> None:
    gs.manual_seed(1)
    shape = (120, 60, 3, 3)
    fan = 60 * 9 if mode == "fan_in" else 120 * 9
    std = init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    u = init.kaiming_uniform_(big(*shape), a=a, mode=mode, nonlinearity=nonlinearity)._data
    assert np.abs(u).max() <= math.sqrt(3) * std and abs(u.std() - std) < 0.02 * std
    n = init.kaiming_normal_(big(*shape), a=a, mode=mode, nonlinearity=nonlinearity)._data
    assert abs(n.std() - std) < 0.02 * std and abs(n.mean()) < 0.02 * std


def test_kaiming_rejects_bad_mode() -> None:
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(big(3, 3), mode="fan_avg")


def test_xavier_bounds_and_std() -> None:
    gs.manual_seed(2)
    gain = 1.7
    std = gain * math.sqrt(2.0 / (300 + 200))
    u = init.xavier_uniform_(big(200, 300), gain=gain)._data
    assert np.abs(u).max() <= math.sqrt(3) * std and abs(u.std() - std) < 0.02 * std
    n = init.xavier_normal_(big(200, 300), gain=gain)._data
    assert abs(n.std() - std) < 0.02 * std


def test_trunc_normal_stays_in_range() -> None:
    gs.manual_seed(3)
    values = init.trunc_normal_(big(100, 100), mean=0.5, std=2.0, a=-1.0, b=1.5)._data
    assert values.min() >= -1.0 and values.max() <= 1.5
    assert values.std() > 0.5


@pytest.mark.parametrize("shape, gain", [((6, 4), 1.0), ((4, 6), 2.0), ((5, 2, 3), 0.5)])
def test_orthogonal_rows_or_columns_are_orthonormal(shape: tuple, gain: float) -> None:
    gs.manual_seed(4)
    w = init.orthogonal_(big(*shape), gain=gain)._data.reshape(shape[0], -1).astype(np.float64)
    product = w.T @ w if shape[0] >= w.shape[1] else w @ w.T
    np.testing.assert_allclose(product, gain ** 2 * np.eye(product.shape[0]), atol=1e-5)


def test_orthogonal_needs_two_dims() -> None:
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
        init.orthogonal_(gs.zeros(3))


@pytest.mark.parametrize("name, args, shape", [
    ("constant_", (0.3,), (3, 4)), ("ones_", (), (2, 5)), ("zeros_", (), (4,)), ("eye_", (), (3, 5)),
    ("dirac_", (), (4, 3, 3, 3)), ("dirac_", (2,), (4, 2, 3)),
])
def test_deterministic_initialisers_match_torch(name: str, args: tuple, shape: tuple) -> None:
    torch = pytest.importorskip("torch")
    ours = getattr(init, name)(gs.nn.Parameter(gs.randn(*shape)), *args)
    theirs = getattr(torch.nn.init, name)(torch.nn.Parameter(torch.randn(*shape)), *args)
    np.testing.assert_allclose(ours._data, theirs.detach().numpy())


def test_initialisers_work_on_parameters_without_graph_and_bump_version() -> None:
    p = gs.nn.Parameter(gs.zeros(3, 4))
    for fn in (init.uniform_, init.normal_, init.xavier_uniform_, init.kaiming_normal_, init.orthogonal_,
               init.ones_, init.trunc_normal_):
        version = p._version
        out = fn(p)
        assert out is p and p.is_leaf and p.grad_fn is None and p.requires_grad
        assert p._version == version + 1
    assert gs.is_grad_enabled()


def test_reproducible_with_manual_seed_and_explicit_generator() -> None:
    gs.manual_seed(11)
    first = init.kaiming_uniform_(big(4, 5))._data.copy()
    gs.manual_seed(11)
    np.testing.assert_array_equal(init.kaiming_uniform_(big(4, 5))._data, first)
    generator = gs.Generator().manual_seed(7)
    a = init.normal_(big(6), generator=generator)._data.copy()
    b = init.normal_(big(6), generator=gs.Generator().manual_seed(7))._data
    np.testing.assert_array_equal(a, b)


def test_float64_tensor_keeps_dtype() -> None:
    t = gs.zeros(3, 3, dtype=gs.float64)
    assert init.xavier_normal_(t).dtype == gs.float64


def test_zero_element_kaiming_warns_and_is_a_no_op() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        init.kaiming_uniform_(gs.zeros(0, 3))
    assert any("zero-element tensors is a no-op" in str(w.message) for w in caught)
