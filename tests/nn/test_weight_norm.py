"""``nn.utils.weight_norm`` / ``remove_weight_norm`` against torch: parameter names and order,
``g`` and ``v`` values, outputs and gradients for dim 0, 1, -1 and None, and folding back."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")


def _layers(engine: object, kind: str) -> object:
    engine.manual_seed(0)
    if kind == "linear":
        return engine.nn.Linear(4, 3).double()
    return engine.nn.Conv1d(2, 3, 3).double()


@pytest.mark.parametrize("kind,dim", [("linear", 0), ("linear", 1), ("linear", None), ("conv", 0), ("conv", 2),
                                      ("conv", -1)])
def test_weight_norm_matches_torch(kind: str, dim: int | None) -> None:
    reference, layer = _layers(torch, kind), _layers(gs, kind)
    layer.load_state_dict({k: gs.tensor(v.numpy()) for k, v in reference.state_dict().items()})
    torch.nn.utils.weight_norm(reference, dim=dim)
    gs.nn.utils.weight_norm(layer, dim=dim)
    assert [n for n, _ in layer.named_parameters()] == [n for n, _ in reference.named_parameters()]
    for (name, want), got in zip(reference.named_parameters(), layer.parameters()):
        assert tuple(got.shape) == tuple(want.shape), name
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, err_msg=name)
    x = np.random.default_rng(0).standard_normal((2, 4) if kind == "linear" else (2, 2, 5))
    (reference(torch.tensor(x)) ** 2).sum().backward()
    (layer(gs.tensor(x)) ** 2).sum().backward()
    for (name, want), got in zip(reference.named_parameters(), layer.parameters()):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)
    torch.nn.utils.remove_weight_norm(reference)
    gs.nn.utils.remove_weight_norm(layer)
    assert list(layer.state_dict()) == list(reference.state_dict())
    np.testing.assert_allclose(layer.weight.detach().numpy(), reference.weight.detach().numpy(), rtol=1e-12)


def test_weight_norm_twice_or_missing_raises_like_torch() -> None:
    layer = gs.nn.utils.weight_norm(gs.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="Cannot register two weight_norm hooks"):
        gs.nn.utils.weight_norm(layer)
    with pytest.raises(ValueError, match="weight_norm of 'bias' not found"):
        gs.nn.utils.remove_weight_norm(layer, "bias")
