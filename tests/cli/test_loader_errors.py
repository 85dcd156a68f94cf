"""Model-file loading errors: one clear line on stderr naming the file, exit code 3."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

HEADER = "import gradscope as gs\nfrom gradscope import nn\n"
GOOD_REST = """
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
loss_fn = nn.MSELoss()

def batch(step):
    return gs.randn(5, 3), gs.randn(5, 2)
"""


def write(tmp_path: Path, body: str, name: str = "model.py") -> str:
    path = tmp_path / name
    path.write_text(body)
    return name


def run_error(gradscope, path: str, *extra: str) -> str:
    result = gradscope("inspect", path, *extra, code=3)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 or "Traceback" in result.stderr, result.stderr
    assert path in result.stderr
    return result.stderr


def test_good_model_file_loads(gradscope, tmp_path):
    gradscope("inspect", write(tmp_path, HEADER + GOOD_REST), code=0)


def test_not_found(gradscope):
    assert "model file not found" in run_error(gradscope, "nope.py")


def test_directory(gradscope, tmp_path):
    (tmp_path / "adir").mkdir()
    assert "is a directory" in run_error(gradscope, "adir")


def test_syntax_error_names_the_line(gradscope, tmp_path):
    path = write(tmp_path, HEADER + "model = nn.Linear(3, 2\nloss_fn = 1\n")
    err = run_error(gradscope, path)
    assert "model.py:3: syntax error" in err


def test_user_code_raises_at_import(gradscope, tmp_path):
    path = write(tmp_path, HEADER + "x = 1\nraise ValueError('bad config value')\n")
    err = run_error(gradscope, path)
    assert "running the model file raised ValueError: bad config value" in err
    assert "(line 4)" in err
    assert "Traceback" not in err
    err = run_error(gradscope, path, "--debug")
    assert "Traceback" in err and "bad config value" in err


def test_missing_model(gradscope, tmp_path):
    path = write(tmp_path, HEADER + "loss_fn = nn.MSELoss()\ndef batch(step):\n    return 1, 2\nhelper = 3\n")
    err = run_error(gradscope, path)
    assert "no model: define `model` (an nn.Module instance) or `build_model()`" in err
    assert "found: loss_fn, batch, helper" in err


def test_model_of_wrong_type(gradscope, tmp_path):
    path = write(tmp_path, HEADER + GOOD_REST + "model = [1, 2]\n")
    assert "`model` is a list; expected an nn.Module instance" in run_error(gradscope, path)


def test_build_model_used_and_its_errors(gradscope, tmp_path):
    body = HEADER + GOOD_REST.replace("model = nn.Sequential", "def build_model():\n    return nn.Sequential")
    gradscope("inspect", write(tmp_path, body), code=0)
    body = HEADER + GOOD_REST.replace("model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))",
                                      "def build_model():\n    return 1 / 0")
    assert "build_model() raised ZeroDivisionError: division by zero" in run_error(gradscope, write(tmp_path, body))


def test_missing_batch_and_loss(gradscope, tmp_path):
    path = write(tmp_path, HEADER + "model = nn.Linear(3, 2)\nloss_fn = nn.MSELoss()\n")
    assert "no data: define `batch(step)`" in run_error(gradscope, path)
    path = write(tmp_path, HEADER + "model = nn.Linear(3, 2)\ninputs = gs.randn(4, 3)\ntargets = gs.randn(4, 2)\n")
    err = run_error(gradscope, path)
    assert "no loss: define `loss_fn(output, targets)` or `compute_loss(model, batch)`" in err
    assert "found: model, inputs, targets" in err


MODULE_LEVEL_DATA = HEADER + """import sys

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        with gs.no_grad():
            self.fc.weight.copy_(gs.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 0.5]]))
            self.fc.bias.copy_(gs.tensor([0.0, 1.0]))

    def forward(self, x, scale):
        sys.stderr.write(f"inputs are the module's: {x is inputs[0] and scale is inputs[1]}\\n")
        return self.fc(x) * scale


model = Net()
inputs = (gs.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), gs.tensor(2.0))
targets = gs.tensor([[0.0, 1.0], [1.0, 0.0]])


def loss_fn(output, t):
    sys.stderr.write(f"targets are the module's: {t is targets}\\n")
    return ((output - t) ** 2).mean()
"""


def test_module_level_inputs_and_targets_are_the_batch(gradscope, tmp_path):
    """Module-level ``inputs`` (a tuple: positional arguments) and ``targets`` are the batch of
    every step: the model and the loss get those very objects, and the loss is theirs."""
    result = gradscope("inspect", write(tmp_path, MODULE_LEVEL_DATA), "--format", "json", code=0)
    weight, bias = np.array([[1.0, 0.0, -1.0], [0.5, 0.5, 0.5]]), np.array([0.0, 1.0])
    x, target = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), np.array([[0.0, 1.0], [1.0, 0.0]])
    expected = float((((x @ weight.T + bias) * 2.0 - target) ** 2).mean())
    assert json.loads(result.stdout)["loss"] == pytest.approx(expected, rel=1e-6)
    assert "inputs are the module's: True" in result.stderr and "targets are the module's: True" in result.stderr
    assert "False" not in result.stderr
    result = gradscope("watch", "model.py", "--steps", "3", "--lr", "0", "--format", "json", code=0)
    losses = [row["loss"] for row in json.loads(result.stdout)["history"]]
    assert losses == [pytest.approx(expected, rel=1e-6)] * 3
    assert result.stderr.count("inputs are the module's: True") == 3 and "False" not in result.stderr


def test_batch_returning_wrong_shape(gradscope, tmp_path):
    body = HEADER + GOOD_REST.replace("return gs.randn(5, 3), gs.randn(5, 2)", "return gs.randn(5, 3)")
    assert "batch(0) returned a Tensor of shape (5, 3); expected a tuple (inputs, targets)" in run_error(
        gradscope, write(tmp_path, body))


def test_non_scalar_loss(gradscope, tmp_path):
    body = HEADER + GOOD_REST.replace("loss_fn = nn.MSELoss()", "def loss_fn(output, targets):\n"
                                                                 "    return (output - targets) ** 2")
    assert "loss_fn returned a tensor of shape (5, 2); expected a scalar" in run_error(
        gradscope, write(tmp_path, body))


def test_non_tensor_loss(gradscope, tmp_path):
    body = HEADER + GOOD_REST.replace("loss_fn = nn.MSELoss()", "def loss_fn(output, targets):\n    return 1.5")
    assert "loss_fn returned a float; expected a scalar tensor" in run_error(gradscope, write(tmp_path, body))


def test_detached_loss(gradscope, tmp_path):
    body = HEADER + GOOD_REST.replace("loss_fn = nn.MSELoss()", "def loss_fn(output, targets):\n"
                                                                 "    return ((output - targets) ** 2).mean().detach()")
    assert "does not require grad" in run_error(gradscope, write(tmp_path, body))


def test_shape_mismatch_names_the_module_and_shapes(gradscope, tmp_path):
    body = HEADER + GOOD_REST.replace("nn.Linear(4, 2)", "nn.Linear(5, 2)")
    err = run_error(gradscope, write(tmp_path, body))
    assert "the model's forward raised" in err
    assert "[in module '2' (Linear), input shape (5, 4)]" in err


def test_error_in_custom_forward_gives_line(gradscope, tmp_path):
    body = HEADER + """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(3, 2)

    def forward(self, x):
        y = self.layer(x)
        return y.reshape(7, 7)

model = Net()
loss_fn = nn.MSELoss()

def batch(step):
    return gs.randn(5, 3), gs.randn(5, 2)
"""
    err = run_error(gradscope, write(tmp_path, body))
    assert "[in the model (Net), input shape (5, 3)]" in err
    assert "(line 11)" in err


def test_error_in_batch(gradscope, tmp_path):
    body = HEADER + GOOD_REST.replace("return gs.randn(5, 3), gs.randn(5, 2)", "raise KeyError('shard 3')")
    err = run_error(gradscope, write(tmp_path, body))
    assert "batch(0) raised KeyError: 'shard 3'" in err


@pytest.mark.parametrize("command", [["watch", "--steps", "1"], ["clip", "--max", "1"], ["check"]])
def test_every_command_exits_3_on_model_errors(gradscope, command):
    result = gradscope(command[0], "nope.py", *command[1:], code=3)
    assert "nope.py: model file not found" in result.stderr


def test_replay_model_error(gradscope):
    from tests.cli.conftest import sample

    gradscope("watch", sample("nan_backward"), "--nan", "--bundle", "bundle.npz", code=1)
    result = gradscope("replay", "bundle.npz", "nope.py", code=3)
    assert "nope.py: model file not found" in result.stderr
    result = gradscope("replay", "missing.npz", "nope.py", code=2)  # the bundle is checked first
    assert "missing.npz: replay bundle not found" in result.stderr
