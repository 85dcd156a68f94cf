"""Observing must not change what is observed, on both engines.

A model with an in-place ReLU on a module output, an in-place ``y += h`` after a module, and a
module input that ``forward`` ignores gets exactly the same ``.grad`` (None-ness and values) with
and without every monitor attached, and every command runs on it.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from gradscope.cli import cli
from gradscope.engines import get_engine
from gradscope.monitor.clip import ModuleGradientClipper
from gradscope.monitor.monitors import BackwardNonFiniteTracer, ForwardNonFiniteTracer, GradientMonitor

ENGINES = ["gradscope", "torch"]

MODEL = '''
{imports}


class Ignores(nn.Module):
    def forward(self, x, extra):
        return x * 2.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(8, 8)
        self.side = nn.Linear(4, 8)
        self.ignore = Ignores()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        h = self.act(self.fc1(x))
        y = self.fc2(h)
        y += h
        return self.head(self.ignore(y, self.side(x)))


{lib}.manual_seed(0)
model = Net()
loss_fn = nn.MSELoss()


def batch(step):
    generator = {lib}.Generator().manual_seed(step)
    inputs = {lib}.randn(6, 4, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True)
'''
IMPORTS = {"gradscope": "import gradscope as gs\nfrom gradscope import nn",
           "torch": "import torch\nfrom torch import nn"}
LIB = {"gradscope": "gs", "torch": "torch"}


def model_source(engine: str) -> str:
    return MODEL.format(imports=IMPORTS[engine], lib=LIB[engine])


@pytest.fixture(params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> str:
    if request.param == "torch":
        pytest.importorskip("torch")
    return request.param


def load(engine: str, tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / f"model_{engine}.py"
    path.write_text(model_source(engine))
    namespace: dict[str, Any] = {"__name__": "perturbation_model"}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # noqa: S102
    namespace["path"] = path
    return namespace


def gradients(namespace: dict[str, Any], monitor: Any = None) -> dict[str, np.ndarray | None]:
    """Run one forward and backward pass (inside ``monitor`` if given); return every ``.grad``."""
    engine = get_engine(namespace["__engine__"])
    model = namespace["model"]
    model.zero_grad(set_to_none=True)
    inputs, targets = namespace["batch"](0)

    def step() -> None:
        loss = namespace["loss_fn"](model(inputs), targets)
        if isinstance(monitor, BackwardNonFiniteTracer):
            monitor.watch(loss)
        loss.backward()

    if monitor is None:
        step()
    else:
        with monitor:
            step()
    return {name: None if p.grad is None else np.array(engine.to_numpy(p.grad))
            for name, p in model.named_parameters()}


MONITORS = {
    "inspect": lambda ns: GradientMonitor(ns["model"]),
    "forward tracer": lambda ns: ForwardNonFiniteTracer(ns["model"], ns["path"]),
    "backward tracer": lambda ns: BackwardNonFiniteTracer(ns["model"]),
    "module clipper (not clipping)": lambda ns: ModuleGradientClipper(ns["model"], 1e30),
}


@pytest.mark.parametrize("monitor", sorted(MONITORS))
def test_every_grad_is_unchanged_by_monitoring(engine_name, tmp_path, monitor):
    namespace = load(engine_name, tmp_path)
    namespace["__engine__"] = engine_name
    plain = gradients(namespace)
    assert plain["side.weight"] is None and plain["side.bias"] is None  # the ignored input
    observed = gradients(namespace, MONITORS[monitor](namespace))
    assert plain.keys() == observed.keys()
    for name, expected in plain.items():
        if expected is None:
            assert observed[name] is None, f"{name}: monitoring made a gradient appear"
        else:
            np.testing.assert_array_equal(observed[name], expected, err_msg=name)


def run(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_every_command_runs_on_in_place_models(engine_name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "model.py"
    path.write_text(model_source(engine_name))
    result = run("inspect", str(path), "--format", "json")
    assert result.exit_code == 1, result.stderr
    findings = json.loads(result.stdout)["findings"]
    # the ignored input's layer gets no gradient at all ("no_grad"), not a zero one ("dead")
    assert [(f["check"], f["module"], sorted(f["parameters"])) for f in findings] == \
        [("no_grad", "side", ["side.bias", "side.weight"])]
    modules = {m["name"]: m for m in json.loads(result.stdout)["modules"]}
    assert modules["act"]["grad_output_norm"] > 0 and modules["fc2"]["grad_input_norm"] > 0
    assert modules["side"]["grad_output_norm"] is None
    result = run("watch", str(path), "--steps", "3", "--nan", "--inf", "--format", "json")
    assert result.exit_code == 0, result.stderr
    for scope in ("global", "module"):
        result = run("clip", str(path), "--max", "0.1", "--scope", scope, "--format", "json")
        assert result.exit_code == 0, result.stderr
    result = run("check", str(path), "--steps", "2", "--format", "json")
    assert result.exit_code == 1, result.stderr
    failed = {c["name"] for c in json.loads(result.stdout)["checks"] if c["status"] == "fail"}
    assert failed == {"gradients_reach_parameters"}
    result = run("graph", str(path))
    assert result.exit_code == 0, result.stderr
    assert "fc1.weight" in result.stdout


def test_keyword_arguments_are_module_inputs(engine_name):
    """A module called with a keyword tensor: its grad_input includes that input's gradient."""
    lib = pytest.importorskip(engine_name)
    nn = lib.nn

    class Mix(nn.Module):
        def forward(self, x, *, other):
            return x * 2.0 + other * 3.0

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(2, 2)
            self.b = nn.Linear(2, 2)
            self.mix = Mix()

        def forward(self, x):
            return self.mix(self.a(x), other=self.b(x))

    lib.manual_seed(0)
    model = Net()
    monitor = GradientMonitor(model)
    with monitor:
        model(lib.ones(3, 2)).sum().backward()
    mix = {record.name: record for record in monitor.module_records()}["mix"]
    assert mix.grad_output_norm == pytest.approx(math.sqrt(6.0))
    assert mix.grad_input_norm == pytest.approx(math.sqrt(6 * 4.0 + 6 * 9.0))
