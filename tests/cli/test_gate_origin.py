"""A CI gate that says where and when (issue 24).

* ``check``, ``inspect`` and ``assert_gradients_healthy`` on a model that goes NaN give one
  ``nonfinite`` finding that says at which step and where it started (the localisation of
  ``watch --nan``) and lists the parameters it reached, instead of one error per parameter;
* ``check --format github`` points each annotation at the file and line that define its module
  (in an imported file too), and the NaN's at the line that made it;
* ``debug --break nan`` on a NaN made in forward says so and stops at the line;
* ``unchanged`` tells an update below float32 resolution from a parameter missing from the optimizer.
"""
from __future__ import annotations

import json
import runpy
import textwrap
from pathlib import Path

import pytest

from tests.cli.conftest import ENGINES

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


def sample(name: str, engine: str = "gradscope") -> str:
    if engine == "torch":
        pytest.importorskip("torch")
        return str(SAMPLES / "torch_models" / f"{name}.py")
    return str(SAMPLES / f"{name}.py")


def line_of(path: str | Path, text: str) -> int:
    return next(n for n, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line)


LOG = {"gradscope": "gs.log(counts + 1.0)", "torch": "torch.log(counts + 1.0)"}
SQRT = "std = (centered"


# ------------------------------------------------------------------------ one finding, step and origin
@pytest.mark.parametrize("engine", ENGINES)
def test_check_says_once_at_which_step_and_where_a_nan_started(gradscope, engine):
    model = sample("nan_forward", engine)
    data = gradscope.json("check", model, "--steps", "8", code=1)
    nonfinite = [f for f in data["findings"] if f["check"] == "nonfinite"]
    assert len(nonfinite) == 1, data["findings"]
    finding = nonfinite[0]
    assert finding["module"] == "features"
    assert finding["source"].endswith(f"nan_forward.py:{line_of(model, LOG[engine])}")
    assert finding["message"].startswith("step 5: the first nan appeared in the forward pass: module 'features'")
    assert "LogBackward0" in finding["message"] and "after it: the loss, net.0.weight" in finding["message"]
    assert finding["parameters"] == ["net.0.weight", "net.0.bias", "net.2.weight", "net.2.bias"]
    finite = next(c for c in data["checks"] if c["name"] == "finite")
    assert finite["status"] == "fail" and finite["message"].startswith("step 5:")


@pytest.mark.parametrize("engine", ENGINES)
def test_backward_nan_names_the_node_and_line_in_check_and_inspect(gradscope, engine):
    model = sample("nan_norm", engine)
    line = line_of(model, SQRT)
    for data in (gradscope.json("check", model, "--steps", "5", code=1),
                 gradscope.json("inspect", model, "--step", "3", code=1)):
        nonfinite = [f for f in data["findings"] if f["check"] == "nonfinite"]
        assert len(nonfinite) == 1, data["findings"]
        message = nonfinite[0]["message"]
        assert message.startswith("step 3: the first nan appeared in the backward pass: module 'norm'")
        assert "SqrtBackward0" in message and nonfinite[0]["source"].endswith(f":{line}")
        assert nonfinite[0]["parameters"] == ["embed.weight"]


def test_inspect_keeps_the_gradients_of_its_pass(gradscope):
    data = gradscope.json("inspect", sample("nan_norm"), "--step", "3", code=1)
    embed = next(p for p in data["parameters"] if p["name"] == "embed.weight")
    assert embed["nonfinite"] == 96 and embed["grad_norm"] == "nan"


def test_check_table_prints_the_origin_once_per_place(gradscope):
    text = gradscope("check", sample("nan_forward"), "--steps", "8", code=1).stdout
    flat = " ".join(text.split())
    assert "1 finding (1 error)" in flat
    assert flat.count("non-finite gradient value") == 0
    assert "step 5: the first nan appeared in the forward pass: module 'features'" in flat


def test_assert_gradients_healthy_reports_the_origin_once():
    from gradscope.testing import assert_gradients_healthy

    namespace = runpy.run_path(sample("nan_norm"))
    with pytest.raises(AssertionError) as raised:
        assert_gradients_healthy(namespace["model"], namespace["batch"](3), namespace["loss_fn"])
    message = str(raised.value)
    assert "(1 finding)" in message and message.count("nonfinite:") == 1
    assert "the first nan appeared in the backward pass: module 'norm' (SqrtBackward0" in message
    assert f"nan_norm.py:{line_of(sample('nan_norm'), SQRT)}" in message


NAN_TARGETS = """
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
loss_fn = nn.MSELoss()


def batch(step):
    inputs = gs.randn(8, 4)
    targets = inputs.sum(1, keepdim=True)
    if step == 1:
        targets[2, 0] = float("nan")
    return inputs, targets
"""


def test_nan_in_the_batch_is_one_finding_naming_the_batch(gradscope, tmp_path):
    (tmp_path / "targets.py").write_text(textwrap.dedent(NAN_TARGETS))
    data = gradscope.json("check", "targets.py", "--steps", "3", code=1)
    nonfinite = [f for f in data["findings"] if f["check"] == "nonfinite"]
    assert len(nonfinite) == 1
    assert nonfinite[0]["message"] == "the loss is NaN: batch(1) returned targets containing nan"
    assert nonfinite[0]["parameters"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


# ----------------------------------------------------------------------------- GitHub annotations
LAYERS = """
import {engine} as T
from {engine} import nn


class LogFeatures(nn.Module):
    def forward(self, counts):
        return T.log(counts + 1.0)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(6, 16)
        self.act = nn.Tanh()
        self.out = nn.Linear(16, 1)
        self.unused = nn.Linear(3, 3)

    def forward(self, x):
        return self.out(self.act(self.hidden(x)))


class CountModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = LogFeatures()
        self.head = Head()
        self.extra = nn.Sequential(nn.Linear(2, 2))

    def forward(self, counts):
        return self.head(self.features(counts))
"""
NET = """
import {engine} as T
from {engine} import nn
from {layers} import CountModel

T.manual_seed(0)
model = CountModel()
loss_fn = nn.MSELoss()


def batch(step):
    generator = T.Generator().manual_seed(5000 + step)
    counts = T.randint(0, 20, (16, 6), generator=generator).float()
    if step == 2:
        counts[3, 2] = -3.0
    return counts, counts.sum(dim=1, keepdim=True) / 60.0
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_github_annotations_point_at_the_imported_file(gradscope, tmp_path, engine):
    if engine == "torch":
        pytest.importorskip("torch")
    layers = tmp_path / f"layers_{engine}.py"  # (a name of its own: the import stays in sys.modules)
    layers.write_text(LAYERS.format(engine=engine))
    (tmp_path / "net.py").write_text(NET.format(engine=engine, layers=layers.stem))
    lines = gradscope("check", "net.py", "--steps", "4", "--format", "github", code=1).stdout.splitlines()
    by_title = {line.split("title=")[1].split("::")[0]: line for line in lines if line.startswith("::")}
    unused = next(line for line in lines if "head.unused" in line)
    assert unused.startswith(f"::error file={layers.name},line={line_of(layers, 'self.unused =')},")
    extra = next(line for line in lines if "extra.0" in line)
    assert extra.startswith(f"::error file={layers.name},line={line_of(layers, 'self.extra =')},")
    nan = by_title["gradscope nonfinite"]
    assert nan.startswith(f"::error file={layers.name},line={line_of(layers, 'T.log(')},")
    assert "step 2: the first nan appeared in the forward pass: module 'features'" in nan
    assert not any(",line=1," in line for line in lines)


def test_github_annotation_of_a_user_class_points_at_the_class(gradscope, tmp_path):
    file = tmp_path / "layers_defined.py"
    file.write_text(LAYERS.format(engine="gradscope").replace(
        "        self.unused = nn.Linear(3, 3)\n",
        "        self.unused = nn.Linear(3, 3)\n        for i in range(2):\n"
        "            setattr(self, f\"block{i}\", nn.Linear(2, 2))\n"))
    (tmp_path / "net.py").write_text(NET.format(engine="gradscope", layers=file.stem))
    from gradscope.loading import load_model_file
    from gradscope.monitor.definitions import ModuleDefinitions

    workload = load_model_file(str(tmp_path / "net.py"))
    defined = ModuleDefinitions(workload.model, workload.path)
    layers = str(file.resolve())
    assert defined("features") == (layers, line_of(file, "class LogFeatures"))
    assert defined("head") == (layers, line_of(file, "class Head"))
    assert defined("head.hidden") == (layers, line_of(file, "self.hidden ="))
    assert defined("extra.0") == (layers, line_of(file, "self.extra ="))
    assert defined("") == (layers, line_of(file, "class CountModel"))
    assert defined("head.block1") == (layers, line_of(file, "class Head"))  # a computed name: its holder's class


def test_github_annotation_in_the_model_file_for_a_sequential(gradscope):
    lines = gradscope("check", sample("nan_norm"), "--steps", "5", "--format", "github", code=1).stdout
    assert lines.startswith(f"::error file={sample('nan_norm')},line={line_of(sample('nan_norm'), SQRT)},"
                            "title=gradscope nonfinite::step 3:")
    deep = gradscope("check", sample("deep_sigmoid"), "--format", "github", code=1).stdout.splitlines()
    model_line = line_of(sample("deep_sigmoid"), "model = nn.Sequential")
    assert all(f",line={model_line}," in line for line in deep if line.startswith("::"))


# ------------------------------------------------------------------------ debug --break nan, forward
@pytest.mark.parametrize("engine", ENGINES)
def test_debug_break_nan_on_a_forward_nan_stops_at_the_line(gradscope, engine):
    model = sample("nan_forward", engine)
    result = gradscope("debug", model, "--step", "5", "--break", "nan", "--commands", "where; quit", code=0)
    text = result.stdout
    assert "the loss is already nan before backward starts" in text
    assert "breakpoint 2 (forward and nan)" in text
    assert "> stopped at LogBackward0 in features (LogFeatures) · forward: a line of forward code made nan" in text
    assert f"source:  {model}:{line_of(model, LOG[engine])}" in text or \
        f"nan_forward.py:{line_of(model, LOG[engine])}" in text
    assert "MseLossBackward0" not in text


def test_debug_break_nan_on_a_backward_nan_is_unchanged(gradscope):
    text = gradscope("debug", sample("nan_backward"), "--break", "nan", "--commands", "quit", code=0).stdout
    assert "already nan" not in text and "> stopped at safe_log (SafeLog) · post" in text


def test_debug_start_banner_says_the_loss_is_already_nan(gradscope):
    text = gradscope("debug", sample("nan_forward"), "--step", "5", "--commands", "quit", code=0).stdout
    assert "stopped before backward (loss = nan)" in text
    assert "the loss is already nan: the forward pass made it (--break 'forward nan' stops at the line" in text


# ------------------------------------------------------------------------------------ unchanged
@pytest.mark.parametrize("engine", ENGINES)
def test_unchanged_below_float32_resolution(gradscope, engine):
    data = gradscope.json("check", sample("deep_sigmoid", engine), code=1)
    unchanged = [f for f in data["findings"] if f["check"] == "unchanged"]
    assert unchanged, data["findings"]
    for finding in unchanged:
        assert "is among the optimizer's parameters" in finding["message"]
        assert "below its float32 resolution" in finding["message"]
        assert "missing" not in finding["message"]


MISSING = """
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
loss_fn = nn.MSELoss()


def make_optimizer(parameters):
    return gs.optim.SGD(model[2].parameters(), lr=0.1)


def batch(step):
    inputs = gs.randn(8, 4)
    return inputs, inputs.sum(1, keepdim=True)
"""


def test_unchanged_missing_from_the_optimizer(gradscope, tmp_path):
    (tmp_path / "missing.py").write_text(textwrap.dedent(MISSING))
    data = gradscope.json("check", "missing.py", "--steps", "1", code=1)
    unchanged = {f["parameter"]: f["message"] for f in data["findings"] if f["check"] == "unchanged"}
    assert set(unchanged) == {"0.weight", "0.bias"}
    assert all(message.endswith("it is missing from the optimizer's parameters") for message in unchanged.values())
    assert json.dumps(data).count("float32 resolution") == 0
