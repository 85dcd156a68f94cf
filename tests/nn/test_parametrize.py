"""``nn.utils.parametrize`` and ``nn.utils.parametrizations`` against torch: names (parameters, buffers,
state_dict keys), the class swap and repr, values and gradients through the parametrization over
several optimizer steps, ``right_inverse`` on assignment, stacking, ``cached``, removal."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn
from gradscope.nn.utils import parametrize as P

torch = pytest.importorskip("torch")


def _symmetric(T: Any) -> type:
    class Symmetric(T.nn.Module):
        def forward(self, X: Any) -> Any:
            return X.triu() + X.triu(1).transpose(-1, -2)

        def right_inverse(self, A: Any) -> Any:
            return A.triu()

    return Symmetric


def _scale(T: Any) -> type:
    class Scale(T.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.factor = T.nn.Parameter(T.tensor(1.5))

        def forward(self, X: Any) -> Any:
            return X * self.factor

    return Scale


def _weight_norm(T: Any, module: Any) -> Any:
    return T.nn.utils.parametrizations.weight_norm(module)


BUILDERS: dict[str, Callable[[Any], Any]] = {
    "weight_norm_linear": lambda T: _weight_norm(T, T.nn.Linear(4, 3)),
    "weight_norm_conv_dim_none": lambda T: T.nn.utils.parametrizations.weight_norm(T.nn.Conv1d(2, 3, 3), dim=None),
    "weight_norm_dim1": lambda T: T.nn.utils.parametrizations.weight_norm(T.nn.Linear(4, 3), dim=1),
    "spectral_norm_linear": lambda T: T.nn.utils.parametrizations.spectral_norm(T.nn.Linear(4, 5)),
    "spectral_norm_conv_transpose": lambda T: T.nn.utils.parametrizations.spectral_norm(
        T.nn.ConvTranspose1d(3, 2, 3), n_power_iterations=2),
    "symmetric": lambda T: T.nn.utils.parametrize.register_parametrization(T.nn.Linear(4, 4), "weight",
                                                                          _symmetric(T)()),
    "stacked_with_parameters": lambda T: T.nn.utils.parametrize.register_parametrization(
        T.nn.utils.parametrize.register_parametrization(T.nn.Linear(4, 4), "weight", _symmetric(T)()),
        "weight", _scale(T)()),
    "two_tensors": lambda T: T.nn.utils.parametrize.register_parametrization(
        _weight_norm(T, T.nn.Linear(3, 3)), "bias", _scale(T)()),
}

INPUTS = {"weight_norm_linear": (5, 4), "weight_norm_conv_dim_none": (2, 2, 6), "weight_norm_dim1": (5, 4),
          "spectral_norm_linear": (5, 4), "spectral_norm_conv_transpose": (2, 3, 5), "symmetric": (5, 4),
          "stacked_with_parameters": (5, 4), "two_tensors": (5, 3)}


def _pair(name: str) -> tuple:
    torch.manual_seed(0)
    theirs = BUILDERS[name](torch).double()
    ours = BUILDERS[name](gs).double()
    ours.load_state_dict({k: gs.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours, theirs


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_names_repr_and_training_match_torch(name: str) -> None:
    ours, theirs = _pair(name)
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    assert type(ours).__name__ == type(theirs).__name__
    x = np.random.default_rng(1).normal(size=INPUTS[name])
    opt_ours = gs.optim.SGD(ours.parameters(), lr=0.1)
    opt_theirs = torch.optim.SGD(theirs.parameters(), lr=0.1)
    for _ in range(3):
        for module, T, opt in ((ours, gs, opt_ours), (theirs, torch, opt_theirs)):
            opt.zero_grad()
            (module(T.tensor(x)) ** 2).mean().backward()
            opt.step()
        for (n1, p1), (n2, p2) in zip(ours.named_parameters(), theirs.named_parameters()):
            np.testing.assert_allclose(p1.grad.numpy(), p2.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=n1)
            np.testing.assert_allclose(p1.detach().numpy(), p2.detach().numpy(), rtol=1e-9, atol=1e-12)
        for (n1, b1), (_, b2) in zip(ours.named_buffers(), theirs.named_buffers()):
            np.testing.assert_allclose(b1.numpy(), b2.numpy(), rtol=1e-9, atol=1e-12, err_msg=n1)
    ours.eval()
    theirs.eval()
    np.testing.assert_allclose(ours(gs.tensor(x)).detach().numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-9, atol=1e-12)


def test_spectral_norm_initial_power_iterations_give_the_largest_singular_value() -> None:
    gs.manual_seed(0)
    layer = nn.utils.parametrizations.spectral_norm(nn.Linear(6, 4)).double()
    layer.eval()
    assert np.linalg.norm(layer.weight.detach().numpy(), 2) == pytest.approx(1.0, rel=1e-3)


@pytest.mark.parametrize("leave", [True, False])
def test_remove_parametrizations_restores_the_class_and_keeps_the_parameter_object(leave: bool) -> None:
    for T in (gs, torch):
        layer = T.nn.Linear(4, 4)
        weight = layer.weight
        T.nn.utils.parametrize.register_parametrization(layer, "weight", _symmetric(T)())
        assert layer.parametrizations.weight.original is weight
        value = layer.weight.detach().clone()
        T.nn.utils.parametrize.remove_parametrizations(layer, "weight", leave_parametrized=leave)
        assert type(layer) is T.nn.Linear and not T.nn.utils.parametrize.is_parametrized(layer)
        assert layer.weight is weight and [n for n, _ in layer.named_parameters()] == ["bias", "weight"]
        expected = value.numpy() if leave else np.triu(value.numpy())
        np.testing.assert_allclose(layer.weight.detach().numpy(), expected)


def test_remove_weight_norm_leaves_a_fresh_parameter_with_the_value() -> None:
    layer = nn.utils.parametrizations.weight_norm(nn.Linear(3, 2))
    value = layer.weight.detach().numpy().copy()
    P.remove_parametrizations(layer, "weight")
    assert type(layer.weight) is nn.Parameter and list(dict(layer.named_parameters())) == ["bias", "weight"]
    np.testing.assert_allclose(layer.weight.detach().numpy(), value, rtol=1e-6)
    with pytest.raises(ValueError, match="Cannot leave unparametrized"):
        P.remove_parametrizations(nn.utils.parametrizations.weight_norm(nn.Linear(3, 2)), "weight", False)


def test_assignment_goes_through_right_inverse() -> None:
    layer = P.register_parametrization(nn.Linear(3, 3), "weight", _symmetric(gs)())
    target = np.arange(9.0).reshape(3, 3).astype(np.float32)
    layer.weight = gs.tensor(target + target.T)
    np.testing.assert_allclose(layer.parametrizations.weight.original.detach().numpy(), np.triu(target + target.T))
    np.testing.assert_allclose(layer.weight.detach().numpy(), target + target.T)


def test_cached_computes_once_per_block() -> None:
    calls = []

    class Counting(nn.Module):
        def forward(self, X: gs.Tensor) -> gs.Tensor:
            calls.append(1)
            return X * 2

    layer = P.register_parametrization(nn.Linear(2, 2), "weight", Counting())
    calls.clear()
    with P.cached():
        first, second = layer.weight, layer.weight
    assert first is second and len(calls) == 1
    layer.weight
    assert len(calls) == 2


def test_buffers_can_be_parametrized_and_stay_buffers() -> None:
    ours, theirs = nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    for module, T in ((ours, gs), (theirs, torch)):
        class Double(T.nn.Module):
            def forward(self, X: Any) -> Any:
                return X * 2

        T.nn.utils.parametrize.register_parametrization(module, "running_var", Double())
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    np.testing.assert_array_equal(ours.running_var.numpy(), theirs.running_var.numpy())


@pytest.mark.parametrize("make, error, message", [
    (lambda: P.register_parametrization(nn.Linear(2, 2), "missing", _symmetric(gs)()), ValueError,
     "does not have a parameter, a buffer"),
    (lambda: P.register_parametrization(nn.Linear(2, 3), "weight", _Transpose()), ValueError,
     "may not change the shape"),
    (lambda: P.remove_parametrizations(nn.Linear(2, 2), "weight"), ValueError, "does not have a parametrization"),
    (lambda: nn.utils.parametrizations.spectral_norm(nn.Linear(2, 2), dim=2), IndexError, "Dimension out of range"),
])
def test_errors_like_torch(make: Callable[[], Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        make()


class _Transpose(nn.Module):
    def forward(self, X: gs.Tensor) -> gs.Tensor:
        return X.t()
