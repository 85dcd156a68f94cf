"""Lazy modules: parameters are uninitialised until the first call, which infers their shapes from the
input, initialises them like the eager class and turns the module into that class; afterwards the
module trains like the eager one (checked against torch with the same weights)."""
from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn
from gradscope.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy

CASES = [
    ("LazyLinear", (5,), {}, (3, 7), "Linear"),
    ("LazyLinear", (4,), {"bias": False}, (2, 3, 6), "Linear"),
    ("LazyConv1d", (4, 3), {"padding": 1}, (2, 3, 8), "Conv1d"),
    ("LazyConv2d", (6, 3), {"stride": 2, "groups": 2}, (2, 4, 7, 7), "Conv2d"),
    ("LazyConv2d", (3, 3), {}, (2, 6, 6), "Conv2d"),
    ("LazyConv3d", (2, 2), {"bias": False}, (1, 3, 4, 4, 4), "Conv3d"),
    ("LazyConvTranspose1d", (3, 2), {"stride": 2}, (2, 4, 5), "ConvTranspose1d"),
    ("LazyConvTranspose2d", (4, 3), {"stride": 2, "output_padding": 1}, (2, 3, 4, 4), "ConvTranspose2d"),
    ("LazyConvTranspose3d", (2, 2), {}, (1, 3, 2, 3, 2), "ConvTranspose3d"),
    ("LazyBatchNorm1d", (), {}, (4, 5), "BatchNorm1d"),
    ("LazyBatchNorm2d", (), {"momentum": None}, (3, 4, 2, 2), "BatchNorm2d"),
    ("LazyBatchNorm3d", (), {"affine": False}, (2, 3, 2, 2, 2), "BatchNorm3d"),
    ("LazyInstanceNorm2d", (), {"affine": True, "track_running_stats": True}, (2, 3, 4, 4), "InstanceNorm2d"),
    ("LazyInstanceNorm1d", (), {}, (2, 3, 5), "InstanceNorm1d"),
]


@pytest.mark.parametrize("name, args, kwargs, shape, becomes", CASES)
def test_first_call_infers_shapes_initialises_and_matches_torch(name: str, args: tuple, kwargs: dict,
                                                                 shape: tuple, becomes: str) -> None:
    torch = pytest.importorskip("torch")
    ours, theirs = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert all(is_lazy(p) for p in ours.parameters())
    assert ours.has_uninitialized_params() == theirs.has_uninitialized_params()
    x = np.random.default_rng(0).normal(size=shape)
    gs.manual_seed(0)
    ours(gs.tensor(x, dtype=gs.float32))
    theirs(torch.tensor(x, dtype=torch.float32))
    assert type(ours).__name__ == type(theirs).__name__ == becomes
    assert repr(ours) == repr(theirs)
    assert not ours.has_uninitialized_params() if hasattr(ours, "has_uninitialized_params") else True
    assert not ours._forward_pre_hooks
    for (n1, p1), (n2, p2) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert n1 == n2 and type(p1) is nn.Parameter and tuple(p1.shape) == tuple(p2.shape)
    for (n1, b1), (n2, b2) in zip(ours.named_buffers(), theirs.named_buffers()):
        assert n1 == n2 and tuple(b1.shape) == tuple(b2.shape)
    # initialised like the eager class: weights within the eager bounds, biases/affine as torch's rules
    if "Norm" in name:
        for p1, p2 in zip(ours.parameters(), theirs.parameters()):
            np.testing.assert_array_equal(p1.detach().numpy(), p2.detach().numpy())
    else:
        fan_in = ours.weight.shape[1] * int(np.prod(ours.weight.shape[2:]))
        for p1 in ours.parameters():
            values = p1.detach().numpy()
            assert np.abs(values).max() <= 1 / np.sqrt(fan_in) and values.std() > 0
    # with the same weights, output and gradients match torch
    ours.load_state_dict({k: gs.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    xo, xt = gs.tensor(x, dtype=gs.float32, requires_grad=True), torch.tensor(x, dtype=torch.float32,
                                                                               requires_grad=True)
    yo, yt = ours(xo), theirs(xt)
    (yo * yo).sum().backward()
    (yt * yt).sum().backward()
    np.testing.assert_allclose(yo.detach().numpy(), yt.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    for p1, p2 in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p1.grad.numpy(), p2.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_dry_run_then_optimizer_trains_a_lazy_mlp() -> None:
    model = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(1))
    x, y = gs.randn(16, 5), gs.randn(16, 1)
    model(x)
    assert [tuple(p.shape) for p in model.parameters()] == [(8, 5), (8,), (1, 8), (1,)]
    optimizer = gs.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(20):
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_uninitialised_parameters_refuse_shape_and_repr_like_torch() -> None:
    param = nn.LazyLinear(3).weight
    assert isinstance(param, UninitializedParameter) and isinstance(param, nn.Parameter)
    with pytest.raises(RuntimeError, match="Can't access the shape of an uninitialized parameter"):
        param.shape
    assert repr(param) == "<class 'gradscope.nn.parameter.UninitializedParameter'>"
    assert isinstance(nn.LazyBatchNorm1d().running_mean, UninitializedBuffer)


def test_loading_a_state_dict_materialises_a_lazy_module() -> None:
    eager = nn.Linear(4, 3)
    lazy = nn.LazyLinear(3)
    lazy.load_state_dict(eager.state_dict())
    np.testing.assert_array_equal(lazy.weight.detach().numpy(), eager.weight.detach().numpy())
    x = gs.randn(2, 4)
    np.testing.assert_allclose(lazy(x).detach().numpy(), eager(x).detach().numpy())
    assert type(lazy) is nn.Linear


def test_lazy_state_dict_before_the_first_call_keeps_uninitialised_entries() -> None:
    state = nn.LazyLinear(3).state_dict()
    assert list(state) == ["weight", "bias"] and all(is_lazy(v) for v in state.values())


def test_deepcopy_before_the_first_call_gives_an_independent_lazy_module() -> None:
    first = nn.LazyConv2d(2, 3)
    second = copy.deepcopy(first)
    second(gs.randn(1, 4, 5, 5))
    assert type(second) is nn.Conv2d and tuple(second.weight.shape) == (2, 4, 3, 3)
    assert type(first) is nn.LazyConv2d and is_lazy(first.weight)
    first(gs.randn(1, 1, 5, 5))
    assert tuple(first.weight.shape) == (2, 1, 3, 3)


@pytest.mark.parametrize("make, shape, message", [
    (lambda: nn.LazyConv2d(4, 3, groups=2), (1, 3, 5, 5), "in_channels must be divisible by groups"),
    (lambda: nn.LazyConv2d(4, 3), (5, 5), "Expected 3D \\(unbatched\\) or 4D \\(batched\\) input to LazyConv2d"),
])
def test_errors_like_torch(make: Callable[[], Any], shape: tuple, message: str) -> None:
    with pytest.raises((ValueError, RuntimeError), match=message):
        make()(gs.randn(*shape))
