"""``nn.utils.spectral_norm`` / ``remove_spectral_norm`` against torch: state_dict names, power
iteration in training mode (buffers advance), frozen vectors in eval mode, outputs and gradients
for Linear, Conv2d and ConvTranspose2d (dim=1)."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

LAYERS = {"linear": lambda e: e.nn.Linear(4, 3), "conv": lambda e: e.nn.Conv2d(2, 3, 3),
          "conv_transpose": lambda e: e.nn.ConvTranspose2d(2, 3, 3)}


@pytest.mark.parametrize("kind", sorted(LAYERS))
def test_spectral_norm_matches_torch(kind: str) -> None:
    reference = torch.nn.utils.spectral_norm(LAYERS[kind](torch).double(), n_power_iterations=2)
    layer = gs.nn.utils.spectral_norm(LAYERS[kind](gs).double(), n_power_iterations=2)
    assert list(layer.state_dict()) == list(reference.state_dict())
    layer.load_state_dict({k: gs.tensor(v.numpy()) for k, v in reference.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((2, 4) if kind == "linear" else (1, 2, 5, 5))
    results = []
    for engine, module in ((torch, reference), (gs, layer)):
        for _ in range(3):
            out = module(engine.tensor(x))
            (out ** 2).sum().backward()
        module.eval()
        frozen = module(engine.tensor(x)).detach().numpy()
        u_after_eval = module.weight_u.numpy().copy()
        engine.nn.utils.remove_spectral_norm(module)
        results.append([out.detach().numpy(), module.weight.detach().numpy(), frozen, u_after_eval,
                        sorted(module.state_dict())])
    for want, got in zip(results[0][:4], results[1][:4]):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert results[1][4] == results[0][4]


def test_spectral_norm_gradients_reach_the_original_weight() -> None:
    reference = torch.nn.utils.spectral_norm(torch.nn.Linear(3, 2).double())
    layer = gs.nn.utils.spectral_norm(gs.nn.Linear(3, 2).double())
    layer.load_state_dict({k: gs.tensor(v.numpy()) for k, v in reference.state_dict().items()})
    x = np.arange(6.0).reshape(2, 3)
    reference(torch.tensor(x)).sum().backward()
    layer(gs.tensor(x)).sum().backward()
    np.testing.assert_allclose(layer.weight_orig.grad.numpy(), reference.weight_orig.grad.numpy(), rtol=1e-10)
    with pytest.raises(RuntimeError, match="Cannot register two spectral_norm hooks"):
        gs.nn.utils.spectral_norm(layer)


@pytest.mark.parametrize("layer", ["ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d", "Conv3d"])
def test_transposed_convolutions_normalise_over_the_output_channels_as_in_torch(layer):
    torch = pytest.importorskip("torch")
    shapes = []
    for lib in (torch, gs):
        module = getattr(lib.nn, layer)(2, 3, 2)
        legacy = lib.nn.utils.spectral_norm(getattr(lib.nn, layer)(2, 3, 2))
        new = lib.nn.utils.parametrizations.spectral_norm(module)
        shapes.append((tuple(legacy.weight_u.shape), tuple(new.parametrizations.weight[0]._u.shape)))
    assert shapes[0] == shapes[1]


@pytest.mark.parametrize("what", ["spectral_norm", "weight_norm"])
def test_removing_a_norm_that_is_not_there_is_a_value_error_as_in_torch(what: str) -> None:
    messages = []
    for engine in (torch, gs):
        with pytest.raises(ValueError) as caught:
            getattr(engine.nn.utils, f"remove_{what}")(engine.nn.Linear(3, 3))
        messages.append(str(caught.value))
    assert messages[0] == messages[1] == f"{what} of 'weight' not found in " \
        "Linear(in_features=3, out_features=3, bias=True)"
