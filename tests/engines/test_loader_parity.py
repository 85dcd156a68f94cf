"""Bad model files give the same exit-3 error on both engines (only the file name differs)."""
from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from gradscope.cli import cli

pytest.importorskip("torch")

HEADERS = {"gradscope": "import gradscope as lib\nfrom gradscope import nn\n",
           "torch": "import torch as lib\nfrom torch import nn\n"}
GOOD = """
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
loss_fn = nn.MSELoss()

def batch(step):
    return lib.randn(5, 3), lib.randn(5, 2)
"""
CASES = {
    "no model": GOOD.replace("model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))", "helper = 3"),
    "model of wrong type": GOOD + "model = [1, 2]\n",
    "no data": GOOD.split("def batch")[0],
    "batch returns one tensor": GOOD.replace("return lib.randn(5, 3), lib.randn(5, 2)", "return lib.randn(5, 3)"),
    "non-scalar loss": GOOD.replace("loss_fn = nn.MSELoss()",
                                    "def loss_fn(output, targets):\n    return (output - targets) ** 2"),
    "non-tensor loss": GOOD.replace("loss_fn = nn.MSELoss()", "def loss_fn(output, targets):\n    return 1.5"),
    "detached loss": GOOD.replace("loss_fn = nn.MSELoss()", "def loss_fn(output, targets):\n"
                                  "    return ((output - targets) ** 2).mean().detach()"),
    "raises at import": GOOD + "raise ValueError('bad config value')\n",
    "shape mismatch": GOOD.replace("nn.Linear(4, 2)", "nn.Linear(5, 2)"),
}


def error(tmp_path, engine: str, body: str) -> str:
    path = tmp_path / f"{engine}.py"
    path.write_text(HEADERS[engine] + body)
    result = CliRunner().invoke(cli, ["inspect", str(path)], catch_exceptions=False)
    assert result.exit_code == 3, result.stderr
    assert result.stdout == ""
    message = result.stderr.strip().replace(str(path), "MODEL")
    assert message.count("\n") == 0, message
    return message


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_model_error_on_both_engines(tmp_path, case):
    native = error(tmp_path, "gradscope", CASES[case])
    torch_message = error(tmp_path, "torch", CASES[case])
    if case == "shape mismatch":  # the engines word the failing matmul differently; the context is the same
        context = re.compile(r"\[in module .*\]")
        assert context.search(native).group() == context.search(torch_message).group() \
            == "[in module '2' (Linear), input shape (5, 4)]"
    else:
        assert native == torch_message
