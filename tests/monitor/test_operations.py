"""The library operations behind the CLI: watch/replay, check, clip, inspect, gradscope.testing."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn, optim
from gradscope.loading import Workload, load_model_file
from gradscope.monitor import CheckOptions, Watcher, WatchOptions, check_model, clip_model, inspect_model, replay
from gradscope.testing import assert_gradients_healthy

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


def sample(name: str) -> Workload:
    return load_model_file(SAMPLES / f"{name}.py")


def regression_workload(scale: float = 1.0) -> Workload:
    gs.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    inputs, targets = gs.randn(8, 3) * scale, gs.randn(8, 1)
    return Workload(model=model, batch_fn=lambda step: (inputs, targets), loss_fn=nn.MSELoss())


def test_watch_yields_records_and_trains():
    watcher = Watcher(regression_workload(), WatchOptions(steps=5, lr=0.1, nan=True))
    records = list(watcher.steps())
    assert [r.step for r in records] == list(range(5))
    assert records[-1].loss < records[0].loss
    assert [name for name, _ in records[0].layer_norms] == ["0", "2"]
    report = watcher.report()
    assert report.status == "ok" and report.first_nonfinite is None and report.steps_run == 5


def test_watch_update_phase_when_the_step_overflows(tmp_path):
    watcher = Watcher(regression_workload(), WatchOptions(steps=3, lr=1e39, inf=True, nan=True,
                                                          bundle=str(tmp_path / "u.npz")))
    with np.errstate(over="ignore", invalid="ignore"):
        records = list(watcher.steps())
    origin = watcher.report().first_nonfinite
    # the parameter is seen before step 1's forward pass; the origin is step 0's update
    assert len(records) == 2 and records[-1].nonfinite == "parameter"
    assert origin.phase == "update" and origin.node == "SGD.step" and origin.step == 0
    assert origin.module in ("0", "2")
    with np.errstate(over="ignore", invalid="ignore"):
        replayed = replay(regression_workload(), tmp_path / "u.npz")
    assert replayed.first_nonfinite == origin and replayed.history[0].nonfinite == "parameter"


def test_watch_nan_in_input_data():
    workload = regression_workload()
    inputs = gs.randn(8, 3)
    inputs[0, 0] = float("nan")
    workload.batch_fn = lambda step: (inputs, gs.randn(8, 1))
    watcher = Watcher(workload, WatchOptions(steps=2, nan=True))
    list(watcher.steps())
    origin = watcher.report().first_nonfinite
    assert origin.node == "input data" and origin.module is None and origin.phase == "forward"


def test_watch_nan_created_by_the_loss_function():
    workload = regression_workload()
    workload.loss_fn = lambda output, targets: gs.log(output - 100.0).mean()
    watcher = Watcher(workload, WatchOptions(steps=2, nan=True))
    list(watcher.steps())
    origin = watcher.report().first_nonfinite
    assert origin.phase == "forward" and origin.module is None


def test_localisation_leaves_the_state_restored(tmp_path):
    workload = sample("nan_backward")
    before = {name: p.detach().numpy().copy() for name, p in workload.model.named_parameters()}
    watcher = Watcher(workload, WatchOptions(steps=3, nan=True, bundle=str(tmp_path / "b.npz")))
    list(watcher.steps())
    for name, p in workload.model.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), before[name])
    report = replay(sample("nan_backward"), tmp_path / "b.npz")
    assert report.first_nonfinite == watcher.report().first_nonfinite


def test_inspect_model_library_call():
    report = inspect_model(sample("mlp"), step=2)
    assert report.step == 2 and report.findings == ()
    assert report.total_grad_norm == pytest.approx(np.sqrt(sum(p.grad_norm ** 2 for p in report.parameters)))


def test_clip_model_global_norm_matches_clip_grad_norm():
    report = clip_model(regression_workload(scale=50.0), 0.1)
    assert report.total_norm_before > 0.1
    assert report.total_norm_after == pytest.approx(0.1, rel=1e-4)
    with pytest.raises(ValueError, match="mode"):
        clip_model(regression_workload(), 1.0, mode="bogus")


class WrongSquare(gs.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x * 3.0  # should be 2x


def test_gradcheck_catches_a_wrong_backward():
    workload = regression_workload()
    model = workload.model
    workload.compute_loss = lambda m, batch: WrongSquare.apply(m(batch[0]) - batch[1]).mean()
    report = check_model(workload, CheckOptions(steps=1, gradcheck=True))
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["gradcheck"] == "fail"
    assert any(f.check == "gradcheck" and f.parameter.startswith(("0.", "2.")) for f in report.findings)
    assert model is workload.model


def test_gradcheck_passes_on_a_correct_model_and_state_is_restored():
    workload = regression_workload()
    before = [p.detach().numpy().copy() for p in workload.model.parameters()]
    report = check_model(workload, CheckOptions(steps=2, overfit=True, gradcheck=True))
    assert report.passed, report
    for expected, p in zip(before, workload.model.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), expected)


def test_parameters_missing_from_the_optimizer_are_unchanged():
    workload = regression_workload()
    workload.optimizer_fn = lambda parameters: optim.SGD(list(workload.model[2].parameters()), lr=0.1)
    report = check_model(workload, CheckOptions(steps=1))
    assert {f.parameter for f in report.findings if f.check == "unchanged"} == {"0.weight", "0.bias"}


def test_assert_gradients_healthy():
    gs.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    batch = (gs.randn(16, 3), gs.randint(0, 2, (16,)))
    report = assert_gradients_healthy(model, batch, nn.CrossEntropyLoss())
    assert report.total_grad_norm > 0
    with pytest.raises(AssertionError, match="exploding"):
        assert_gradients_healthy(model, batch, nn.CrossEntropyLoss(), max_norm=1e-6)
    assert_gradients_healthy(model, batch, nn.CrossEntropyLoss(), max_norm=1e-6, allow=("exploding",))
