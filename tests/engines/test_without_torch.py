"""Without PyTorch installed: native models run, torch model files get one clear exit-3 line."""
from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from gradscope import engines
from gradscope.cli import cli


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import torch`` fail as it does where torch is not installed."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "gradscope.engines.torch", raising=False)
    monkeypatch.setattr(engines, "_engines", {})


def test_torch_model_file_without_torch_is_a_model_error(no_torch, tmp_path):
    path = tmp_path / "model.py"
    path.write_text("import torch\nfrom torch import nn\nmodel = nn.Linear(2, 1)\n")
    result = CliRunner().invoke(cli, ["inspect", str(path)], catch_exceptions=False)
    assert result.exit_code == 3
    assert result.stderr.strip() == (f"error: {path}: the torch engine needs PyTorch, which is not installed "
                                     "(pip install 'gradscope[torch]')")


def test_native_models_run_without_torch(no_torch, tmp_path):
    path = tmp_path / "model.py"
    path.write_text("import gradscope as gs\nfrom gradscope import nn\nmodel = nn.Linear(2, 1)\n"
                    "loss_fn = nn.MSELoss()\ninputs, targets = gs.randn(4, 2), gs.randn(4, 1)\n")
    result = CliRunner().invoke(cli, ["inspect", str(path), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    result = CliRunner().invoke(cli, ["inspect", str(path), "--engine", "torch"], catch_exceptions=False)
    assert result.exit_code == 3 and "needs PyTorch" in result.stderr
