"""The operation that made the first NaN/Inf is named whatever the line layout.

``loss = log(x).mean()`` on one line must name ``LogBackward0`` (the operation whose output first
held the NaN), exactly as ``logs = log(x)`` then ``loss = logs.mean()`` on two lines does, not
``MeanBackward0`` (the operation whose result the line left behind). Checked for ``watch``, ``run``
and ``debug``, on gradscope and PyTorch models, for NaNs born in the forward pass (in a module's
forward and in the loss computation) and in the backward pass (``sqrt`` of an exact zero).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

HEADERS = {"gradscope": "import gradscope as T\nfrom gradscope import nn\n",
           "torch": "import torch as T\nfrom torch import nn\nT.set_num_threads(1)\n"}

# kind -> layout -> (the body of Head.forward or of loss_fn); the first line holds the culprit
BODIES = {
    "forward-module": {
        "one": "        return T.log(h).mean(1, keepdim=True)\n",
        "multi": "        logs = T.log(h)\n        return logs.mean(1, keepdim=True)\n"},
    "forward-loss": {
        "one": "    return T.log(out - target).mean()\n",
        "multi": "    logs = T.log(out - target)\n    return logs.mean()\n"},
    "backward-module": {  # sqrt(0) = 0, but its derivative is inf (then inf * 0 = nan)
        "one": "        return T.sqrt(h * h).sum(1, keepdim=True)\n",
        "multi": "        roots = T.sqrt(h * h)\n        return roots.sum(1, keepdim=True)\n"},
    "backward-loss": {
        "one": "    return T.sqrt((out - out.detach()) ** 2).sum() + out.sum()\n",
        "multi": "    roots = T.sqrt((out - out.detach()) ** 2)\n    return roots.sum() + out.sum()\n"},
}
CULPRIT = {"forward-module": "T.log(h)", "forward-loss": "T.log(out - target)",
           "backward-module": "T.sqrt(h * h)", "backward-loss": "T.sqrt((out - out.detach()) ** 2)"}
NODE = {"forward": "LogBackward0", "backward": "SqrtBackward0"}
TEMPLATE = '''

class Head(nn.Module):
    def forward(self, h):
{head}

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.head = Head()

    def forward(self, x):
        return self.head(self.lin(x) * 0.0 + x)


model = Model()


def loss_fn(out, target):
{loss}

def batch(step):
    return T.ones(8, 4) * {data}, T.ones(8, 1) * {target}
'''
TRAINING = '''

optimizer = T.optim.SGD(model.parameters(), lr=0.01)
for step in range(2):
    x, y = batch(step)
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
'''
KINDS = list(BODIES)
LAYOUTS = ("one", "multi")


def _source(engine: str, kind: str, layout: str) -> str:
    body = BODIES[kind][layout]
    return HEADERS[engine] + TEMPLATE.format(
        head=body if kind.endswith("module") else "        return h.sum(1, keepdim=True)\n",
        loss=body if kind.endswith("loss") else "    return ((out - target) ** 2).mean()\n",
        data={"forward-module": "-2.0", "backward-module": "0.0"}.get(kind, "1.0"),
        target="100.0" if kind == "forward-loss" else "0.5")


def _write(path: Path, engine: str, kind: str, layout: str, script: bool = False) -> tuple[Path, str]:
    """The file, and ``file:line`` of the line holding the culprit."""
    path.write_text(_source(engine, kind, layout) + (TRAINING if script else ""))
    line = next(number for number, text in enumerate(path.read_text().splitlines(), 1) if CULPRIT[kind] in text)
    return path, f"{path.name}:{line}"


@pytest.fixture(params=["gradscope", "torch"])
def engine_name(request: pytest.FixtureRequest) -> str:
    if request.param == "torch":
        pytest.importorskip("torch")
    return request.param


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_watch_names_the_operation_and_its_line(gradscope, engine_name, kind, layout, tmp_path):
    model, source = _write(tmp_path / f"{engine_name}_{kind}_{layout}.py", engine_name, kind, layout)
    result = gradscope("watch", str(model), "--steps", "2", "--nan", "--inf", "--format", "json", code=1)
    origin = json.loads(result.stdout)["first_nonfinite"]
    phase = kind.split("-")[0]
    assert (origin["step"], origin["phase"], origin["node"], origin["source"]) == (0, phase, NODE[phase], source)
    assert origin["module"] == ("head" if kind.endswith("module") else None)
    assert origin["kind"] == ("nan" if phase == "forward" else "inf")  # sqrt'(0) is inf before inf * 0 is nan


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_run_names_the_same_operation_in_both_layouts(gradscope, engine_name, kind, layout, tmp_path):
    script, source = _write(tmp_path / f"{engine_name}_{kind}_{layout}.py", engine_name, kind, layout, script=True)
    result = gradscope("run", "--format", "json", "--nan", "--inf", str(script), code=1)
    origin = json.loads(result.stdout)["first_nonfinite"]
    phase = kind.split("-")[0]
    assert (origin["step"], origin["phase"]) == (0, phase)
    if kind == "forward-loss" and engine_name == "torch":
        # the loss computation's operations are recorded on torch: the op that made it, in either layout
        assert (origin["module"], origin["node"], origin["source"]) == (None, "LogBackward0", source)
    elif kind == "forward-loss":
        # gradscope's engine does not record the script's loss computation: the finding says so
        assert (origin["module"], origin["node"], origin["source"]) == (None, None, None)
        assert "the loss computation produced nan" in result.stderr
    elif kind == "backward-loss":
        assert (origin["module"], origin["node"], origin["kind"]) == (None, "SqrtBackward0", "inf")
    else:
        assert (origin["module"], origin["node"], origin["source"]) == ("head", NODE[phase], source)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["forward-module", "forward-loss"])
def test_debug_stops_at_the_operation_that_made_a_forward_nan(gradscope, engine_name, kind, layout, tmp_path):
    model, source = _write(tmp_path / f"{engine_name}_{kind}_{layout}.py", engine_name, kind, layout)
    out = gradscope("debug", str(model), "--break", "forward nan", "--commands", "where; quit", code=0).stdout
    where = "head (Head)" if kind.endswith("module") else "(outside the model's modules)"
    assert out.startswith(f"> stopped at LogBackward0 in {where} · forward: a line of forward code made nan")
    assert "  node:    LogBackward0 (made the value)\n" in out
    assert f"  source:  {source}\n" in out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["backward-module", "backward-loss"])
def test_debug_names_the_node_that_made_a_backward_nonfinite(gradscope, engine_name, kind, layout, tmp_path):
    model, source = _write(tmp_path / f"{engine_name}_{kind}_{layout}.py", engine_name, kind, layout)
    out = gradscope("debug", str(model), "--break", "nan", "--commands", "where; quit", code=0).stdout
    where = "in head" if kind.endswith("module") else "outside the model's modules"
    function = "forward" if kind.endswith("module") else "loss_fn"
    assert f"first non-finite gradient of this pass: produced by SqrtBackward0 {where} " \
           f"(created at {source} in {function})" in out
    if kind.endswith("module"):  # the first NaN (not Inf) of a module's grad_input: sqrt's inf times 2h = 0
        assert re.search(r"> stopped at head \(Head\) · post: .*\n", out)
        assert "  node:    MulBackward0 (produced grad_input)\n" in out
