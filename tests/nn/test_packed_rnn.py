"""Packed sequences against torch: ``pack_padded_sequence`` / ``pad_packed_sequence`` /
``pad_sequence`` / ``pack_sequence`` values and gradients, and RNN, LSTM and GRU over packed
input (layers, directions, batch_first, unsorted lengths, initial states) in float32 and float64."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")
LENGTHS = [3, 5, 1, 5, 2]


def _rnn_utils(lib: Any) -> Any:
    return lib.nn.utils.rnn


def _close(ours: Any, theirs: Any, dtype: Any, what: str) -> None:
    atol = 1e-5 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-5, atol=atol, err_msg=what)


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_pack_and_pad_round_trip_match_torch(batch_first: bool, enforce_sorted: bool) -> None:
    lengths = sorted(LENGTHS, reverse=True) if enforce_sorted else LENGTHS
    x = np.random.default_rng(0).standard_normal((5, 5, 3) if not batch_first else (5, 5, 3))
    results = []
    for lib in (gs, torch):
        R = _rnn_utils(lib)
        t = lib.tensor(x, requires_grad=True)
        packed = R.pack_padded_sequence(t, lib.tensor(lengths), batch_first=batch_first, enforce_sorted=enforce_sorted)
        padded, out_lengths = R.pad_packed_sequence(packed, batch_first=batch_first, padding_value=-1.5,
                                                    total_length=6)
        weights = lib.tensor(np.random.default_rng(1).standard_normal(tuple(padded.shape)))
        (padded * weights).sum().backward()
        results.append((packed, padded, out_lengths, t.grad))
    (packed, padded, lengths_out, grad), (ref_packed, ref_padded, ref_lengths, ref_grad) = results
    _close(packed.data, ref_packed.data, np.float64, "packed data")
    assert packed.batch_sizes.tolist() == ref_packed.batch_sizes.tolist()
    for ours, theirs in ((packed.sorted_indices, ref_packed.sorted_indices),
                         (packed.unsorted_indices, ref_packed.unsorted_indices)):
        assert (ours is None and theirs is None) or ours.tolist() == theirs.tolist()
    _close(padded, ref_padded, np.float64, "padded")
    assert lengths_out.tolist() == ref_lengths.tolist() and lengths_out.dtype == gs.int64
    _close(grad, ref_grad, np.float64, "input grad")


def test_pad_sequence_pack_sequence_and_errors_match_torch() -> None:
    rng = np.random.default_rng(2)
    seqs = [rng.standard_normal((n, 2)).astype(np.float32) for n in (2, 4, 3)]
    results = []
    for lib in (gs, torch):
        R = _rnn_utils(lib)
        tensors = [lib.tensor(s, requires_grad=True) for s in seqs]
        right = R.pad_sequence(tensors, batch_first=True, padding_value=7.0)
        left = R.pad_sequence(tensors, padding_side="left")
        packed = R.pack_sequence(tensors, enforce_sorted=False)
        (right.sum() + (left * 2).sum() + (packed.data * 3).sum()).backward()
        unpacked = R.unpack_sequence(packed)
        results.append((right, left, packed.data, [t.grad for t in tensors], unpacked))
        with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
            R.pack_sequence(tensors)
        with pytest.raises(ValueError, match="Expected total_length to be at least"):
            R.pad_packed_sequence(packed, total_length=2)
    for ours, theirs in zip(results[0][:3], results[1][:3]):
        _close(ours, theirs, np.float32, "padding")
    for ours, theirs in zip(results[0][3] + results[0][4], results[1][3] + results[1][4]):
        _close(ours, theirs, np.float32, "grads and unpacked sequences")


RNN_CASES = {
    "lstm": ("LSTM", {}),
    "lstm_2_layers_bidirectional": ("LSTM", {"num_layers": 2, "bidirectional": True}),
    "lstm_batch_first_with_state": ("LSTM", {"batch_first": True}),
    "gru_bidirectional": ("GRU", {"bidirectional": True}),
    "gru_2_layers_with_state": ("GRU", {"num_layers": 2}),
    "rnn_tanh_bidirectional": ("RNN", {"bidirectional": True, "num_layers": 2}),
    "rnn_relu": ("RNN", {"nonlinearity": "relu", "batch_first": True}),
}


def _rnn_scenario(lib: Any, name: str, dtype: Any, theirs: Any = None) -> tuple:
    kind, options = RNN_CASES[name]
    module = getattr(lib.nn, kind)(3, 4, **options)
    if dtype == np.float64:
        module = module.double()
    if theirs is not None:
        module.load_state_dict({k: gs.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})
    rng = np.random.default_rng(3)
    batch_first = options.get("batch_first", False)
    steps, batch = max(LENGTHS), len(LENGTHS)
    x = lib.tensor(rng.standard_normal((batch, steps, 3) if batch_first else (steps, batch, 3)).astype(dtype),
                   requires_grad=True)
    layers = options.get("num_layers", 1) * (2 if options.get("bidirectional") else 1)
    hx = None
    if "state" in name:
        h0 = lib.tensor(rng.standard_normal((layers, batch, 4)).astype(dtype), requires_grad=True)
        c0 = lib.tensor(rng.standard_normal((layers, batch, 4)).astype(dtype), requires_grad=True)
        hx = (h0, c0) if kind == "LSTM" else h0
    R = _rnn_utils(lib)
    packed = R.pack_padded_sequence(x, LENGTHS, batch_first=batch_first, enforce_sorted=False)
    output, state = module(packed, hx)
    padded, _ = R.pad_packed_sequence(output, batch_first=batch_first)
    h_n = state[0] if kind == "LSTM" else state
    loss = (padded * lib.tensor(rng.standard_normal(tuple(padded.shape)).astype(dtype))).sum() + (h_n * h_n).sum()
    if kind == "LSTM":
        loss = loss + state[1].sum()
    loss.backward()
    initial = [] if hx is None else ([hx[0].grad, hx[1].grad] if kind == "LSTM" else [hx.grad])
    grads = {n: p.grad for n, p in module.named_parameters()}
    return module, [output.data, padded, h_n, x.grad, *initial], grads


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(RNN_CASES))
def test_recurrent_layers_on_packed_input_match_torch(name: str, dtype: Any) -> None:
    theirs, ref_values, ref_grads = _rnn_scenario(torch, name, dtype)
    _, values, grads = _rnn_scenario(gs, name, dtype, theirs)
    for index, (ours, ref) in enumerate(zip(values, ref_values)):
        _close(ours, ref, dtype, f"value {index}")
    for key, grad in grads.items():
        _close(grad, ref_grads[key], dtype, key)
