"""Snapshots restore a step exactly; bundles are pickle-free .npz files."""
from __future__ import annotations

import json

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn, optim
from gradscope.monitor.snapshot import BundleError, Snapshot


def setup():
    gs.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5), nn.Linear(4, 1))
    optimizer = optim.Adam(model.parameters(), lr=0.1)
    return model, optimizer


def train_step(model, optimizer, batch):
    optimizer.zero_grad()
    inputs, targets = batch
    loss = ((model(inputs) - targets) ** 2).mean()
    loss.backward()
    optimizer.step()
    return float(loss.item())


def test_restore_repeats_a_step_exactly(tmp_path):
    model, optimizer = setup()
    batch = (gs.randn(8, 3), gs.randn(8, 1))
    train_step(model, optimizer, batch)
    snapshot = Snapshot.capture(1, model, optimizer, batch)
    first = train_step(model, optimizer, batch)
    after = [p.detach().numpy().copy() for p in model.parameters()]
    for source in ("memory", "bundle"):
        if source == "bundle":
            snapshot.save(tmp_path / "s.npz", extra={"lr": 0.1})
            snapshot, meta = Snapshot.load(tmp_path / "s.npz")
            assert meta["lr"] == 0.1 and meta["step"] == 1
        restored_batch = snapshot.restore(model, optimizer)
        assert all(p.grad is None for p in model.parameters())
        assert train_step(model, optimizer, restored_batch) == first  # dropout mask, BN stats, Adam state
        for expected, p in zip(after, model.parameters()):
            np.testing.assert_array_equal(p.detach().numpy(), expected)


def test_bundle_has_no_pickle_and_json_metadata(tmp_path):
    model, optimizer = setup()
    snapshot = Snapshot.capture(0, model, optimizer, ((gs.randn(2, 3),), {"label": gs.tensor([1, 0])}))
    snapshot.save(tmp_path / "b.npz")
    with np.load(tmp_path / "b.npz", allow_pickle=False) as data:
        assert all(data[key].dtype != object for key in data.files)
        meta = json.loads(bytes(data["meta"]).decode())
    assert meta["format"] == "gradscope.bundle/1"
    batch = Snapshot.load(tmp_path / "b.npz")[0].restore(model, optimizer)
    assert isinstance(batch[0], tuple) and batch[1]["label"].tolist() == [1, 0]


def test_bundle_errors(tmp_path):
    model, optimizer = setup()
    snapshot = Snapshot.capture(0, model, optimizer, None)
    with pytest.raises(BundleError, match="does not match the model"):
        snapshot.restore(nn.Linear(3, 1), None)
    with pytest.raises(BundleError, match="not found"):
        Snapshot.load(tmp_path / "missing.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(2))
    with pytest.raises(BundleError, match="no metadata"):
        Snapshot.load(tmp_path / "other.npz")
    with pytest.raises(BundleError, match="cannot store a object"):
        Snapshot.capture(0, model, optimizer, object()).save(tmp_path / "object.npz")
