"""The torch adapter and what users see on PyTorch models: engine choice, errors, statistics,
snapshots, localisation and the library API."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from gradscope.cli import cli
from gradscope.engines import EngineError, engine_of, get_engine, select_engine

torch = pytest.importorskip("torch")

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


def run(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_engine_of_objects():
    from gradscope import nn as gs_nn

    assert engine_of(torch.nn.Linear(2, 2)) is get_engine("torch")
    assert engine_of(torch.ones(2)) is get_engine("torch")
    assert engine_of(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1)) is get_engine("torch")
    assert engine_of(gs_nn.Linear(2, 2)) is get_engine("gradscope")
    assert engine_of([1, 2]) is None
    with pytest.raises(EngineError, match="--engine gradscope was given, but the model is a PyTorch module"):
        select_engine(torch.nn.Linear(2, 2), "gradscope")
    with pytest.raises(EngineError, match="unknown engine"):
        get_engine("jax")


@pytest.mark.parametrize("model,engine,words", [("torch_models/mlp.py", "gradscope", "PyTorch module"),
                                                ("mlp.py", "torch", "gradscope module")])
def test_engine_mismatch_is_a_model_error(tmp_path, monkeypatch, model, engine, words):
    monkeypatch.chdir(tmp_path)
    for command in (["inspect"], ["watch", "--steps", "1"], ["clip", "--max", "1"], ["check"], ["graph"]):
        result = run(command[0], str(SAMPLES / model), *command[1:], "--engine", engine)
        assert result.exit_code == 3, result.stderr
        assert f"--engine {engine} was given, but the model is a {words}" in result.stderr
        assert result.stderr.count("\n") == 1
    assert run("inspect", str(SAMPLES / model), "--engine", "gradscope" if engine == "torch" else "torch").exit_code \
        == 0


def test_graph_draws_torchs_grad_fn_graph():
    result = run("graph", str(SAMPLES / "torch_models" / "mlp.py"))
    assert result.exit_code == 0, result.stderr
    assert "AddmmBackward0" in result.stdout and "AccumulateGrad 0.weight [32, 8]" in result.stdout
    assert "NllLossBackward0" in result.stdout
    dot = run("graph", str(SAMPLES / "torch_models" / "mlp.py"), "--format", "dot").stdout
    assert dot.startswith("digraph") and "AddmmBackward0" in dot


def test_assert_gradients_healthy_accepts_torch_models():
    from gradscope.testing import assert_gradients_healthy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    batch = (torch.randn(16, 4), torch.randn(16, 1))
    report = assert_gradients_healthy(model, batch, torch.nn.MSELoss())
    assert [m.name for m in report.modules] == ["", "0", "1", "2"]
    unused = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 1), "unused": torch.nn.Linear(4, 1)})
    with pytest.raises(AssertionError, match="no_grad"):
        assert_gradients_healthy(_Used(unused), batch, torch.nn.MSELoss())


class _Used(torch.nn.Module):
    def __init__(self, layers: torch.nn.ModuleDict) -> None:
        super().__init__()
        self.layers = layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers["used"](x)


def test_squared_norms_are_batched_exact_and_confirm_float32_overflow():
    engine = get_engine("torch")
    big = torch.full((4,), 1e20)  # the float32 norm overflows; the values are finite
    values = [torch.tensor([3.0, 4.0]), None, big, torch.tensor([float("nan"), 1.0]),
              torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor([1.0, 2.0], dtype=torch.float64)]
    squares = engine.squared_norms(values)
    assert squares[0] == pytest.approx(25.0) and squares[1] is None
    assert squares[2] == pytest.approx(4e40, rel=1e-6)
    assert math.isnan(squares[3]) and squares[4] == 1.0 and squares[5] == pytest.approx(5.0)
    loss, squares = engine.loss_and_squared_norms(torch.tensor(2.5), [torch.ones(3)])
    assert loss == 2.5 and squares == [pytest.approx(3.0)]


def test_rng_state_and_snapshot_round_trip_through_a_bundle(tmp_path):
    from gradscope.loading import load_model_file
    from gradscope.monitor.snapshot import Snapshot

    source = (SAMPLES / "torch_models" / "mlp.py").read_text().replace("nn.ReLU(),\n    nn.Linear(32, 32)",
                                                                 "nn.Dropout(0.5),\n    nn.Linear(32, 32)")
    (tmp_path / "dropout.py").write_text(source.replace("def batch", "def make_optimizer(parameters):\n"
                                                        "    return torch.optim.Adam(parameters, lr=1e-2)\n\n\n"
                                                        "def batch"))
    workload = load_model_file(tmp_path / "dropout.py")
    optimizer = workload.make_optimizer(0.01)

    def train_step(batch):
        optimizer.zero_grad(set_to_none=True)
        loss = workload.loss(batch)
        loss.backward()
        optimizer.step()
        return float(loss.detach()), [p.detach().clone() for p in workload.model.parameters()]

    train_step(workload.batch(0))  # gives Adam some state
    batch = workload.batch(1)
    snapshot = Snapshot.capture(1, workload.model, optimizer, batch.raw, engine=workload.engine)
    expected_loss, expected_params = train_step(batch)
    snapshot.save(tmp_path / "bundle.npz")
    with np.load(tmp_path / "bundle.npz", allow_pickle=False) as data:
        assert "rng" in data.files and any(key.startswith("optim/") for key in data.files)
        assert json.loads(bytes(data["meta"]).decode())["engine"] == "torch"
    for stored in (snapshot, Snapshot.load(tmp_path / "bundle.npz")[0]):
        from gradscope.loading import Batch

        raw = stored.restore(workload.model, optimizer)
        replayed = Batch(inputs=(raw[0],), targets=raw[1], raw=raw)
        loss, params = train_step(replayed)
        assert loss == expected_loss  # the same dropout mask, the same Adam state
        for got, want in zip(params, expected_params):
            assert torch.equal(got, want)


def _workload(model, inputs, targets):
    from gradscope.loading import Workload

    return Workload(model=model, batch_fn=lambda step: (inputs, targets), loss_fn=torch.nn.MSELoss())


def test_watch_finds_inf_before_it_becomes_nan_in_backward():
    from gradscope.monitor import Watcher, WatchOptions

    class Distance(torch.nn.Module):
        def forward(self, x):
            return (x * x).sum(dim=1, keepdim=True).sqrt()  # sqrt'(0) = inf, then inf * 0 = nan

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False), Distance(), torch.nn.Linear(1, 1))
    inputs = torch.randn(5, 3)
    inputs[2] = 0.0
    watcher = Watcher(_workload(model, inputs, torch.randn(5, 1)), WatchOptions(steps=2, nan=True))
    list(watcher.steps())
    origin = watcher.report().first_nonfinite
    assert origin.phase == "backward" and origin.module == "1"
    assert origin.node == "SqrtBackward0" and origin.kind == "inf"
    assert origin.source.endswith(f"test_torch_engine.py:{_line('.sqrt()  # sqrt')}")


def test_watch_reports_an_update_that_overflows_on_torch():
    from gradscope.monitor import Watcher, WatchOptions

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 1))
    workload = _workload(model, torch.randn(8, 3) * 1000, torch.randn(8, 1))
    watcher = Watcher(workload, WatchOptions(steps=3, lr=1e37, nan=True, inf=True))
    records = list(watcher.steps())
    origin = watcher.report().first_nonfinite
    assert records[-1].nonfinite == "parameter"
    assert origin.phase == "update" and origin.step == 0 and origin.node == "SGD.step"


def _line(text: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if text in line and "_line(" not in line)


def test_forward_nan_is_pinned_to_the_operation_and_line_also_outside_the_model_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helpers.py").write_text("import torch\n\n\ndef features(x):\n"
                                         "    shifted = x - 1.0\n    return torch.log(shifted) * 2.0\n")
    (tmp_path / "model.py").write_text(
        "import torch\nfrom torch import nn\nfrom helpers import features\n\n\n"
        "class Features(nn.Module):\n    def forward(self, x):\n        return features(x)\n\n\n"
        "model = nn.Sequential(Features(), nn.Linear(3, 1))\nloss_fn = nn.MSELoss()\n\n\n"
        "def batch(step):\n    return torch.ones(4, 3) * (0.5 if step == 1 else 2.0), torch.zeros(4, 1)\n")
    result = run("watch", "model.py", "--steps", "3", "--nan", "--format", "json")
    assert result.exit_code == 1, result.stderr
    origin = json.loads(result.stdout)["first_nonfinite"]
    assert origin["step"] == 1 and origin["phase"] == "forward" and origin["module"] == "0"
    assert origin["node"] == "LogBackward0"  # not MulBackward0, the node of the module's output
    assert origin["source"] == "helpers.py:6"
