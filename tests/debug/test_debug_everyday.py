"""The debugger's part of everyday use: opening a saved failing step (--bundle), source lines of
the model file whatever started gradscope, tab completion that ends words, in-place layers."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import gradscope as gs
from gradscope import nn
from gradscope.cli import cli
from gradscope.debug import DebuggerShell, TextPresenter, run_debug_step
from gradscope.debug.shell import word_completions
from gradscope.loading import Batch, load_model_file
from gradscope.monitor.snapshot import Snapshot

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_models"


def run(*args: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _bundle(tmp_path: Path, sample: Path, steps: int) -> Path:
    bundle = tmp_path / "replay.npz"
    result = run("watch", str(sample), "--steps", str(steps), "--nan", "--bundle", str(bundle))
    assert result.exit_code == 1 and bundle.exists(), result.stderr
    return bundle


@pytest.mark.parametrize("engine", ["gradscope", "torch"])
def test_bundle_opens_the_failing_step_with_its_weights(tmp_path: Path, engine: str) -> None:
    """nan_norm only fails at step 3 after training steps 0-2: with the initial weights (what
    --step 3 uses) backward is finite; with the bundle's weights it is not."""
    if engine == "torch":
        pytest.importorskip("torch")
    sample = SAMPLES / ("torch_models" if engine == "torch" else "") / "nan_norm.py"
    bundle = _bundle(tmp_path, sample, steps=5)
    replayed = run("debug", str(sample), "--bundle", str(bundle), "--break", "nan", "--commands",
                   "where; print loss.item(); quit")
    assert replayed.exit_code == 0, replayed.stderr
    assert replayed.stdout.startswith("> stopped at norm (Standardize) · post: grad_input known, after its "
                                      "backward · breakpoint 1 (nan)")
    assert "  step:    3\n" in replayed.stdout
    assert "produced by SqrtBackward0 in norm" in replayed.stdout
    # The loss is the one of the saved state, not of the initial weights.
    workload = load_model_file(sample)
    snapshot, meta = Snapshot.load(bundle)
    inputs, targets = snapshot.restore(workload.model, workload.make_optimizer(float(meta["lr"])))
    saved_loss = workload.loss(Batch(inputs=(inputs,), targets=targets, raw=(inputs, targets))).item()
    initial = run("debug", str(sample), "--step", "3", "--commands", "print loss.item(); quit")
    assert f"(gradscope) print loss.item()\n{saved_loss!r}\n" in replayed.stdout
    assert f"\n{saved_loss!r}\n" not in initial.stdout


def test_bundle_with_forward_nan_stops_at_the_log_line(tmp_path: Path) -> None:
    sample = SAMPLES / "nan_forward.py"
    bundle = _bundle(tmp_path, sample, steps=10)
    result = run("debug", str(sample), "--bundle", str(bundle), "--break", "forward nan", "--commands", "where; quit")
    assert result.exit_code == 0, result.stderr
    assert "  source:  " + os.path.relpath(sample) + ":14\n" in result.stdout
    assert "  step:    5\n" in result.stdout


def test_bundle_errors(tmp_path: Path) -> None:
    missing = run("debug", str(SAMPLES / "mlp.py"), "--bundle", str(tmp_path / "none.npz"), "--commands", "quit")
    assert missing.exit_code == 2 and "none.npz" in missing.stderr
    bundle = _bundle(tmp_path, SAMPLES / "nan_forward.py", steps=10)
    both = run("debug", str(SAMPLES / "nan_forward.py"), "--bundle", str(bundle), "--step", "2", "--commands", "quit")
    assert both.exit_code == 2 and "either --step or --bundle" in both.stderr
    other = run("debug", str(SAMPLES / "mlp.py"), "--bundle", str(bundle), "--commands", "quit")
    assert other.exit_code == 2, other.stdout


@pytest.mark.skipif(shutil.which("gradscope") is None, reason="the gradscope console script is not installed")
def test_where_through_the_installed_script_shows_the_model_file() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", COLUMNS="200")
    result = subprocess.run([shutil.which("gradscope"), "debug", "sample_models/nan_backward.py", "--break", "nan",
                             "--commands", "where; quit"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    lines = (SAMPLES / "nan_backward.py").read_text().splitlines()
    defined = next(i for i, line in enumerate(lines, 1) if 'add_module("safe_log"' in line)
    created = next(i for i, line in enumerate(lines, 1) if "return gs.where(h > 0, gs.log(h)" in line)
    assert f"  source:  sample_models/nan_backward.py:{defined} (defined here)\n" in result.stdout
    assert f"(created at sample_models/nan_backward.py:{created} in forward)" in result.stdout


def test_sources_never_point_at_the_caller_of_the_debugger() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    x, y = gs.randn(5, 3), gs.randn(5, 1)
    out = io.StringIO()
    shell = DebuggerShell(TextPresenter(out), commands=["where", "quit"])
    run_debug_step(model, lambda: ((model(x) - y) ** 2).mean(), shell, conditions=["module 2"])  # this line
    assert "test_everyday.py" not in out.getvalue()
    assert "no line of your code on the stack" in out.getvalue()


def test_completion_ends_words_with_a_space() -> None:
    assert word_completions(["break", "breakpoints"]) == ["break "]
    assert word_completions(["breakpoints"]) == ["breakpoints "]
    assert word_completions(["node", "nan", "norm"]) == ["nan ", "node ", "norm "]
    assert word_completions([]) == []
    shell = DebuggerShell(TextPresenter(io.StringIO()), commands=[])
    assert shell.completenames("bre") == ["break "]
    assert shell.completenames("con") == ["continue "]


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.skip = nn.Linear(3, 5)
        self.relu = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        h = self.fc1(x)
        h += self.skip(x)
        return self.fc2(self.relu(h))


def _grads(model: nn.Module) -> dict:
    return {name: None if p.grad is None else p.grad.numpy().copy() for name, p in model.named_parameters()}


def test_in_place_layers_on_gradscope_engine() -> None:
    gs.manual_seed(0)
    model = InPlace()
    x, y = gs.randn(4, 3), gs.randn(4, 2)
    out = io.StringIO()
    shell = DebuggerShell(TextPresenter(out), commands=["step"] * 11)
    assert run_debug_step(model, lambda: ((model(x) - y) ** 2).mean(), shell) == "finished"
    text = out.getvalue()
    assert "error" not in text and "> stopped at relu (ReLU) · post" in text and "> stopped at fc1 (Linear) · pre" in text
    gs.manual_seed(0)
    reference = InPlace()
    ((reference(x) - y) ** 2).mean().backward()
    expected = _grads(reference)
    for name, grad in _grads(model).items():
        np.testing.assert_array_equal(grad, expected[name], err_msg=name)


def test_no_torch_import_for_a_native_session() -> None:
    code = ("import sys, io\n"
            "import gradscope as gs\n"
            "from gradscope.debug import DebuggerShell, TextPresenter, run_debug_step\n"
            "model = gs.nn.Linear(2, 1)\n"
            "shell = DebuggerShell(TextPresenter(io.StringIO()), commands=['finish'])\n"
            "run_debug_step(model, lambda: model(gs.randn(3, 2)).sum(), shell)\n"
            "print('torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert result.stdout.strip() == "False"


class Gate(nn.Module):
    def forward(self, x):
        return gs.tanh(x) * x


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.gate = Gate()
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(self.gate(h) + h)


@pytest.mark.parametrize("command, factor", [("scale 0.5", 0.5), ("zero", 0.0)])
def test_grad_input_edit_with_several_senders_on_gradscope_engine(command: str, factor: float) -> None:
    x, y = gs.randn(4, 3), gs.randn(4, 2)
    gs.manual_seed(0)
    model = Residual()
    shell = DebuggerShell(TextPresenter(io.StringIO()), commands=[command, "finish"])
    assert run_debug_step(model, lambda: ((model(x) - y) ** 2).mean(), shell, conditions=["module gate post"]) \
        == "finished"
    gs.manual_seed(0)
    reference = Residual()
    handle = reference.gate.register_full_backward_hook(
        lambda module, grad_input, grad_output: tuple(None if g is None else g * factor for g in grad_input))
    ((reference(x) - y) ** 2).mean().backward()
    handle.remove()
    expected = _grads(reference)
    for name, grad in _grads(model).items():
        np.testing.assert_allclose(grad, expected[name], rtol=1e-5, atol=1e-7, err_msg=name)


class RootGate(nn.Module):
    """Finite forward, NaN in backward where its input is <= 0."""

    def forward(self, x):
        return gs.sqrt(gs.relu(x))


class NanResidual(Residual):
    def __init__(self) -> None:
        super().__init__()
        self.gate = RootGate()


def test_zero_removes_a_modules_nan_when_a_residual_shares_its_input() -> None:
    x, y = gs.randn(4, 3), gs.randn(4, 2)
    gs.manual_seed(0)
    model = NanResidual()
    shell = DebuggerShell(TextPresenter(io.StringIO()), commands=["zero", "finish"])
    assert run_debug_step(model, lambda: ((model(x) - y) ** 2).mean(), shell, conditions=["module gate post"]) \
        == "finished"
    gs.manual_seed(0)
    reference = NanResidual()
    handle = reference.gate.register_full_backward_hook(
        lambda module, grad_input, grad_output: tuple(None if g is None else gs.zeros_like(g) for g in grad_input))
    ((reference(x) - y) ** 2).mean().backward()
    handle.remove()
    expected = _grads(reference)
    assert all(np.isfinite(value).all() for value in expected.values())
    for name, grad in _grads(model).items():
        np.testing.assert_allclose(grad, expected[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_a_module_that_returns_its_argument_is_passed_through() -> None:
    gs.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Identity(), nn.Linear(4, 1))
    x = gs.randn(2, 3)
    out = io.StringIO()
    shell = DebuggerShell(TextPresenter(out), commands=["finish", "where"])
    assert run_debug_step(model, lambda: model(x).sum(), shell) == "finished"
    text = out.getvalue()
    assert "modules: 3 done, 0 pending" in text
    assert [line.split()[:3] for line in text.splitlines() if line.startswith("1 ")] == [["1", "Identity", "passed"]]
    assert "stopped at 1 " not in text
