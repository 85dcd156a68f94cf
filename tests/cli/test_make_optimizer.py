"""``make_optimizer`` returning ``(optimizer, scheduler)``: the scheduler steps after every
optimizer step, observed through the optimizer's step hooks, so that torch never blames the user
with "optimizer.step() has been overridden after learning rate scheduler initialization"."""
from __future__ import annotations

import json
import warnings

import pytest
from click.testing import CliRunner

from gradscope.cli import cli
from gradscope.loading import load_model_file

MODELS = {
    "gradscope": """import gradscope as T
from gradscope import nn
optim = T.optim
""",
    "torch": """import torch as T
from torch import nn
optim = T.optim
""",
}
REST = """
model = nn.Linear(3, 2)
loss_fn = nn.MSELoss()


def batch(step):
    g = T.Generator().manual_seed(step)
    return T.randn(5, 3, generator=g), T.randn(5, 2, generator=g)


def make_optimizer(parameters):
    optimizer = optim.SGD(parameters, lr=1.0)
    return optimizer, optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
"""


@pytest.fixture(params=sorted(MODELS))
def model_file(request, tmp_path):
    if request.param == "torch":
        pytest.importorskip("torch")
    path = tmp_path / "model.py"
    path.write_text(MODELS[request.param] + REST)
    return path


def test_the_scheduler_steps_after_each_step_and_nothing_warns(model_file):
    workload = load_model_file(model_file)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optimizer = workload.make_optimizer(0.01)
        assert "step" not in vars(optimizer) or hasattr(optimizer.step, "_wrapped_by_lr_sched")
        rates = []
        for step in range(3):
            optimizer.zero_grad()
            workload.backward(workload.loss(workload.batch(step)))
            optimizer.step()
            rates.append(optimizer.param_groups[0]["lr"])
    assert rates == [0.5, 0.25, 0.125]


def test_watch_shows_no_scheduler_warning(model_file, monkeypatch):
    monkeypatch.chdir(model_file.parent)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = CliRunner().invoke(cli, ["watch", "model.py", "--steps", "3", "--format", "json"],
                                    catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert "overridden" not in result.stderr and "warning" not in result.stderr.lower()
    losses = [row["loss"] for row in json.loads(result.stdout)["history"]]
    assert len(losses) == 3 and len(set(losses)) == 3


def test_an_optimizer_without_step_hooks_still_steps_its_scheduler(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODELS["gradscope"] + REST.replace("def make_optimizer", "def unused") + """
class Plain:
    def __init__(self, parameters):
        self.inner = optim.SGD(parameters, lr=1.0)

    def step(self):
        self.inner.step()

    def zero_grad(self):
        self.inner.zero_grad()


class Halving:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.steps = 0

    def step(self):
        self.steps += 1
        self.optimizer.inner.param_groups[0]["lr"] /= 2


def make_optimizer(parameters):
    optimizer = Plain(parameters)
    return optimizer, Halving(optimizer)
""")
    workload = load_model_file(path)
    optimizer = workload.make_optimizer(0.01)
    for step in range(2):
        workload.backward(workload.loss(workload.batch(step)))
        optimizer.step()
    assert optimizer.inner.param_groups[0]["lr"] == 0.25
