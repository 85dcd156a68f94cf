"""``gradscope run``: ``check``'s gradient rules over the run, with its waivers (both engines).

A 12-layer sigmoid network: the first layers' gradients are around 1e-11 (vanishing), and an
SGD update of lr x 1e-11 is below the float32 resolution of weights around 0.1, so those weights
never change although the optimizer holds them: ``unchanged`` must say so, not "missing from the
optimizer". ``frozen`` leaves the last layer out of the optimizer (that one *is* missing);
``unused`` adds a layer forward never calls (no gradient); ``nan`` makes every gradient NaN from
the first step (a gradient that is NaN is still a gradient: not ``no_grad``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

SCRIPT = '''
import sys
ENGINE, mode = sys.argv[1], sys.argv[2]
if ENGINE == "torch":
    import torch as T
    from torch import nn
    T.set_num_threads(1)
else:
    import gradscope as T
    from gradscope import nn


class Net(nn.Module):
    def __init__(self, depth):
        super().__init__()
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(16, 16), nn.Sigmoid()]
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(16, 1)
        self.spare = nn.Linear(16, 16)

    def forward(self, x):
        return self.head(self.body(x))


T.manual_seed(0)
model = Net(12 if mode == "sigmoid" else 2)
if mode != "unused":
    del model.spare
params = [p for name, p in model.named_parameters() if not (mode == "frozen" and name.startswith("head."))]
opt = T.optim.SGD(params, lr=0.1)
x, y = T.randn(32, 16), T.randn(32, 1)
if mode == "nan":
    y = y * float("nan")
for step in range(5):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "net.py"
    path.write_text(SCRIPT)
    return path


def _findings(doc: dict) -> dict[tuple[str, str | None], str]:
    return {(f["check"], f["parameter"] or f["module"]): f["message"] for f in doc["findings"]}


def test_vanishing_and_unchanged_below_float32_resolution(gradscope, engine, script):
    result = gradscope("run", "--format", "json", str(script), engine, "sigmoid", code=0)
    findings = _findings(json.loads(result.stdout))
    assert ("vanishing", "body.0.weight") in findings and ("vanishing", "body.2.weight") in findings
    assert ("vanishing", "head.weight") not in findings
    message = findings[("unchanged", "body.0.weight")]
    assert "never changed over 5 steps: the update is below the parameter's float32 resolution" in message
    assert "missing from the optimizer" not in message
    assert "vanishing" in result.stderr and "No non-finite value: every loss" in result.stderr


def test_health_fail_makes_the_run_fail_and_waivers_accept(gradscope, engine, script, tmp_path):
    gradscope("run", "--health", "fail", str(script), engine, "sigmoid", code=1)
    doc = json.loads(gradscope("run", "--health", "fail", "--format", "json", "--ignore", "body.*", str(script),
                               engine, "sigmoid", code=0).stdout)
    assert doc["findings"] == [] and doc["waived"] > 0
    (tmp_path / "pyproject.toml").write_text('[tool.gradscope]\nhealth = "fail"\nmin_norm = 1e-20\n'
                                             'ignore = ["body.*:unchanged"]\n')
    doc = json.loads(gradscope("run", "--format", "json", str(script), engine, "sigmoid", code=0).stdout)
    assert not [f for f in doc["findings"] if f["check"] == "vanishing"]  # min_norm from the config
    gradscope("run", "--health", "warn", str(script), engine, "sigmoid", code=0)


def test_a_parameter_missing_from_the_optimizer(gradscope, engine, script):
    findings = _findings(json.loads(gradscope("run", "--format", "json", str(script), engine, "frozen",
                                              code=0).stdout))
    assert "is it missing from the optimizer's parameters?" in findings[("unchanged", "head.weight")]
    assert not [key for key in findings if key[0] == "unchanged" and key[1] != "head.weight"
                and key[1] != "head.bias"]


def test_a_layer_forward_never_calls_gets_no_gradient(gradscope, engine, script):
    findings = _findings(json.loads(gradscope("run", "--format", "json", str(script), engine, "unused",
                                              code=0).stdout))
    assert ("no_grad", "spare") in findings
    assert "spare.weight, spare.bias receive no gradient" in findings[("no_grad", "spare")]


def test_a_healthy_run_has_no_findings(gradscope, engine, script):
    result = gradscope("run", "--format", "json", str(script), engine, "shallow", code=0)
    assert json.loads(result.stdout)["findings"] == []
    assert "No findings: every loss, gradient and parameter stayed finite." in result.stderr


def test_nan_gradients_from_the_first_step_are_not_missing_gradients(gradscope, engine, script):
    doc = json.loads(gradscope("run", "--nan", "--format", "json", str(script), engine, "nan", code=1).stdout)
    assert doc["first_nonfinite"] is not None
    assert not [f for f in doc["findings"] if f["check"] == "no_grad"], doc["findings"]
    doc = json.loads(gradscope("run", "--format", "json", str(script), engine, "nan", code=1).stdout)
    assert not [f for f in doc["findings"] if f["check"] == "no_grad"], doc["findings"]


SMALL_UPDATES = """
import sys
ENGINE = sys.argv[1]
if ENGINE == "torch":
    import torch as T
    from torch import nn
    T.set_num_threads(1)
else:
    import gradscope as T
    from gradscope import nn
T.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 1024), nn.Tanh(), nn.Linear(1024, 1024), nn.Tanh(), nn.Linear(1024, 1))
opt = T.optim.SGD(model.parameters(), lr=1e-4)
x, y = T.randn(32, 64), T.randn(32, 1)
for step in range(4):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
"""


def test_small_updates_of_a_large_layer_are_changes(gradscope, engine, tmp_path):
    """A float32 norm of a 64 x 1024 weight stays put under these updates (gradscope's engine:
    reported 'unchanged' before), though its entries move: no ``unchanged`` finding."""
    path = tmp_path / "small_updates.py"
    path.write_text(SMALL_UPDATES)
    doc = json.loads(gradscope("run", "--format", "json", str(path), engine, code=0).stdout)
    assert not [f for f in doc["findings"] if f["check"] == "unchanged"], doc["findings"]
