"""LSTM with ``proj_size`` against torch: parameters, outputs, final states and gradients, on plain,
stacked, bidirectional, batch-first and packed inputs, in float32 and float64."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

CONFIGS = [dict(num_layers=1), dict(num_layers=2, bidirectional=True, batch_first=True),
           dict(num_layers=2, bias=False)]


def _pair(dtype: str, **kwargs: object) -> tuple:
    torch.manual_seed(0)
    reference = torch.nn.LSTM(5, 6, proj_size=3, **kwargs).to(getattr(torch, dtype))
    model = gs.nn.LSTM(5, 6, proj_size=3, **kwargs).to(getattr(gs, dtype))
    assert list(model.state_dict()) == list(reference.state_dict())
    assert [tuple(p.shape) for p in model.parameters()] == [tuple(p.shape) for p in reference.parameters()]
    model.load_state_dict({k: gs.tensor(v.numpy()) for k, v in reference.state_dict().items()})
    return reference, model


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kwargs", CONFIGS, ids=["single", "bidirectional", "nobias"])
def test_projected_lstm_matches_torch(kwargs: dict, dtype: str) -> None:
    reference, model = _pair(dtype, **kwargs)
    rng = np.random.default_rng(1)
    directions = 2 if kwargs.get("bidirectional") else 1
    batch = 4
    x = rng.standard_normal((batch, 3, 5) if kwargs.get("batch_first") else (3, batch, 5)).astype(dtype)
    h0 = rng.standard_normal((kwargs["num_layers"] * directions, batch, 3)).astype(dtype)
    c0 = rng.standard_normal((kwargs["num_layers"] * directions, batch, 6)).astype(dtype)
    t_out, (t_h, t_c) = reference(torch.tensor(x), (torch.tensor(h0), torch.tensor(c0)))
    g_out, (g_h, g_c) = model(gs.tensor(x), (gs.tensor(h0), gs.tensor(c0)))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    for want, got in ((t_out, g_out), (t_h, g_h), (t_c, g_c)):
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), **tol)
    (t_out.square().sum() + t_h.sum() + t_c.sum()).backward()
    (g_out.square().sum() + g_h.sum() + g_c.sum()).backward()
    for (name, want), got in zip(reference.named_parameters(), model.parameters()):
        np.testing.assert_allclose(got.grad.numpy(), want.grad.numpy(), err_msg=name, **tol)
    assert repr(model) == repr(reference)


def test_projected_lstm_on_packed_sequences_and_without_state() -> None:
    reference, model = _pair("float64", num_layers=2, bidirectional=True, batch_first=True)
    x = np.random.default_rng(2).standard_normal((3, 4, 5))
    lengths = [4, 2, 3]
    t_packed = torch.nn.utils.rnn.pack_padded_sequence(torch.tensor(x), lengths, batch_first=True,
                                                       enforce_sorted=False)
    g_packed = gs.nn.utils.rnn.pack_padded_sequence(gs.tensor(x), lengths, batch_first=True, enforce_sorted=False)
    t_out, (t_h, _) = reference(t_packed)
    g_out, (g_h, _) = model(g_packed)
    t_pad, _ = torch.nn.utils.rnn.pad_packed_sequence(t_out, batch_first=True)
    g_pad, _ = gs.nn.utils.rnn.pad_packed_sequence(g_out, batch_first=True)
    np.testing.assert_allclose(g_pad.detach().numpy(), t_pad.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_h.detach().numpy(), t_h.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_projection_arguments_are_checked_like_torch() -> None:
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        gs.nn.LSTM(4, 3, proj_size=3)
    with pytest.raises(ValueError, match="only supported for LSTM"):
        gs.nn.GRU(4, 3, proj_size=2)
    model = gs.nn.LSTM(4, 5, proj_size=2)
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 3, 2\)"):
        model(gs.zeros(2, 3, 4), (gs.zeros(1, 3, 5), gs.zeros(1, 3, 5)))
