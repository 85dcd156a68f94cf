"""Everyday use (issue 15): diagnoses a person can act on, waivers, progress, consistent names."""
from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from gradscope.cli import App, cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


def sample(name: str) -> str:
    """Path of one of gradscope's own sample models."""
    return str(SAMPLES / f"{name}.py")

CONV_BN = """
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.bn1 = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.head = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x):
        return self.head(self.relu(self.bn1(self.conv1(x))).flatten(1))


model = Net()
loss_fn = nn.CrossEntropyLoss()


def batch(step):
    generator = gs.Generator().manual_seed(step)
    return gs.randn(8, 1, 8, 8, generator=generator), gs.randint(0, 3, (8,), generator=generator)
"""

NAN_TARGETS = """
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
loss_fn = nn.MSELoss()


def batch(step):
    generator = gs.Generator().manual_seed(step)
    inputs = gs.randn(16, 4, generator=generator)
    targets = inputs.sum(1, keepdim=True)
    if step == 3:
        targets[0, 0] = float("nan")
    return inputs, targets
"""

DIVERGE = """
import gradscope as gs
from gradscope import nn, optim

gs.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
loss_fn = nn.MSELoss()


def make_optimizer(parameters):
    return optim.SGD(parameters, lr=5.0)


def batch(step):
    generator = gs.Generator().manual_seed(step)
    inputs = gs.randn(32, 4, generator=generator)
    return inputs, inputs.sum(1, keepdim=True)
"""

BROADCAST = """
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)
model = nn.Sequential(nn.Linear(3, 1))
loss_fn = nn.MSELoss()


def batch(step):
    return gs.randn(4, 3), gs.randn(4)
"""

NO_GRAD_CALL = """
import gradscope as gs
from gradscope import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(4, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        with gs.no_grad():
            hidden = self.frozen(x)
        return self.head(hidden)


model = Net()
loss_fn = nn.MSELoss()


def batch(step):
    return gs.randn(4, 4), gs.randn(4, 1)
"""

LONG_NAMES = """
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.out_proj = nn.Linear(8, 8)

    def forward(self, x):
        return self.out_proj(x).tanh()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = Attention()

    def forward(self, x):
        return self.self_attn(x)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Layer() for _ in range(12)])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.encoder(x))


model = Net()
loss_fn = nn.MSELoss()


def batch(step):
    generator = gs.Generator().manual_seed(step)
    inputs = gs.randn(8, 8, generator=generator)
    return inputs, inputs.sum(1, keepdim=True)
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


def on_terminal(*args: str, width: int = 120, height: int = 30) -> tuple[int, str, str]:
    """Run with stdout and stderr consoles that are terminals; returns (code, screen, errors)."""
    app = App()
    screen, errors = io.StringIO(), io.StringIO()
    app._out = Console(file=screen, force_terminal=True, width=width, height=height)
    app._err = Console(file=errors, force_terminal=True, width=width)
    result = CliRunner().invoke(cli, list(args), obj=app, catch_exceptions=False)
    return result.exit_code, screen.getvalue(), errors.getvalue()


# ------------------------------------------------------------------------ zero by construction
def test_conv_batchnorm_block_with_bias_passes_check_with_a_note(gradscope, tmp_path):
    model = write(tmp_path, "convbn", CONV_BN)
    data = gradscope.json("check", model, "--steps", "3", code=0)
    assert data["passed"]
    notes = [f for f in data["findings"] if f["parameter"] == "conv1.bias"]
    assert notes and {f["severity"] for f in notes} == {"info"}
    assert "zero by construction" in notes[0]["message"] and "bn1" in notes[0]["message"]
    inspected = gradscope.json("inspect", model, code=0)
    assert [f["severity"] for f in inspected["findings"]] == ["info"]


# ---------------------------------------------------------------------------------- waivers
def test_ignore_waives_findings_by_parameter_glob_and_kind(gradscope):
    data = gradscope.json("inspect", sample("deep_sigmoid"), code=1)
    assert any(f["check"] == "vanishing" for f in data["findings"])
    waived = gradscope.json("inspect", sample("deep_sigmoid"), "--ignore", "*:vanishing", code=0)
    assert not any(f["check"] == "vanishing" for f in waived["findings"])
    check = gradscope.json("check", sample("dead_relu"), "--steps", "2", "--ignore", "hidden.*:dead",
                           "--ignore", "out.weight", code=0)
    assert check["passed"] and check["waived"] == 3
    result = gradscope("inspect", sample("mlp"), "--ignore", "0.weight:vanishng", code=2)
    assert "--ignore" in result.stderr and "unknown finding kind 'vanishng'" in result.stderr


def test_ignore_from_pyproject(gradscope, tmp_path):
    pytest.importorskip("tomllib")
    (tmp_path / "pyproject.toml").write_text('[tool.gradscope]\nignore = ["encoder.*:no_grad", "aux_head.*"]\n')
    data = gradscope.json("inspect", sample("unused_detach"), code=0)
    assert data["findings"] == []
    (tmp_path / "pyproject.toml").write_text('[tool.gradscope]\nignore = ["x:nonsense"]\n')
    result = gradscope("inspect", sample("mlp"), code=2)
    assert "pyproject.toml: tool.gradscope.ignore" in result.stderr


# ----------------------------------------------------------------------------- NaN in targets
def test_nan_in_targets_is_named(gradscope, tmp_path):
    model = write(tmp_path, "nan_targets", NAN_TARGETS)
    data = gradscope.json("watch", model, "--steps", "6", "--nan", code=1)
    origin = data["first_nonfinite"]
    assert origin["step"] == 3 and origin["node"] == "target data"
    assert origin["detail"] == "batch(3) returned targets containing nan"
    inspected = gradscope.json("inspect", model, "--step", "3", code=1)
    assert inspected["findings"][0]["message"] == "the loss is NaN: batch(3) returned targets containing nan"


# -------------------------------------------------------------------------------- divergence
def test_divergence_shows_update_ratios(gradscope, tmp_path):
    model = write(tmp_path, "diverge", DIVERGE)
    data = gradscope.json("watch", model, "--steps", "4", code=1)
    assert data["status"] == "ok"
    divergence = data["divergence"]
    assert divergence["step"] == 2 and divergence["loss_after"] > 100 * divergence["loss_before"]
    assert set(divergence["update_ratios"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert all(ratio > 1 for ratio in divergence["update_ratios"].values())
    finding = data["findings"][0]
    assert finding["check"] == "divergence" and "after the update of step 1" in finding["message"]
    text = gradscope("watch", model, "--steps", "4", code=1).stdout
    assert "|update| / |parameter|" in text and "0.bias" in text


def test_divergence_flags_layers_whose_gradients_became_zero():
    from gradscope.engines import get_engine
    from gradscope.monitor.diagnose import DivergenceTracker
    from gradscope.monitor.records import StepRecord

    import numpy as np

    tracker = DivergenceTracker(get_engine("gradscope"))
    tracker.start([], {"fc.weight": np.ones(4)})
    tracker.finish(StepRecord(0, 1.0, 1.0, (("fc", 1.0), ("out", 0.5))))
    tracker.start([], {"fc.weight": np.full(4, 41.0)})
    tracker.finish(StepRecord(1, 1e4, 1.0, (("fc", 0.0), ("out", 0.5))))
    assert tracker.divergence.zeroed_layers == ("fc",)
    assert tracker.divergence.update_ratios == (("fc.weight", 40.0),)


# ------------------------------------------------------------------------ broadcasting loss
def test_broadcasting_loss_is_a_finding_not_a_warning(gradscope, tmp_path):
    model = write(tmp_path, "broadcast", BROADCAST)
    inspected = gradscope.json("inspect", model, code=1)
    finding = inspected["findings"][0]
    assert finding["check"] == "loss_broadcast" and "[4, 1]" in finding["message"] and "[4, 4]" in finding["message"]
    result = gradscope("check", model, "--format", "json", code=1)
    assert "UserWarning" not in result.stderr
    checks = {c["name"]: c["status"] for c in json.loads(result.stdout)["checks"]}
    assert checks["loss_shapes_match"] == "fail"


# ------------------------------------------------------------------------- detached branches
def test_detached_branch_points_at_the_line_once_per_module(gradscope):
    data = gradscope.json("inspect", sample("unused_detach"), code=1)
    encoder, aux = data["findings"]
    assert encoder["module"] == "encoder.0" and encoder["parameters"] == ["encoder.0.weight", "encoder.0.bias"]
    path = Path(sample("unused_detach"))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if ").detach()" in text)
    assert encoder["source"].endswith(f"unused_detach.py:{line}")
    assert "never called" in aux["message"]
    github = gradscope("check", sample("unused_detach"), "--format", "github", code=1).stdout
    assert f"line={line},title=gradscope no_grad::encoder.0.weight, encoder.0.bias" in github


def test_no_grad_block_points_at_the_call(gradscope, tmp_path):
    model = write(tmp_path, "no_grad_call", NO_GRAD_CALL)
    finding = gradscope.json("inspect", model, code=1)["findings"][0]
    assert finding["module"] == "frozen" and finding["source"].endswith("no_grad_call.py:14")


# --------------------------------------------------------------------------- overfit message
def test_overfit_failure_message_is_a_whole_sentence(gradscope):
    data = gradscope.json("check", sample("mlp"), "--overfit", "--lr", "0", "--steps", "3", code=1)
    check = {c["name"]: c for c in data["checks"]}["loss_decreases"]
    assert check["status"] == "fail"
    assert check["message"].startswith("training 3 steps on batch 0 took the loss from ")
    assert check["message"].endswith("(learning rate, loss or wiring problem)")


# -------------------------------------------------------------------------------- progress
def test_progress_on_a_terminal_and_nothing_when_piped(gradscope):
    code, _, errors = on_terminal("check", sample("mlp"), "--overfit", "--gradcheck", "--steps", "2")
    assert code == 0 and "gradcheck (finite differences)" in errors
    piped = gradscope("check", sample("mlp"), "--overfit", "--gradcheck", "--steps", "2", code=0)
    assert piped.stderr == ""
    code, _, errors = on_terminal("watch", sample("nan_forward"), "--steps", "8", "--nan", "--format", "json")
    assert code == 1 and "locating the non-finite value of step 5" in errors
    piped = gradscope("watch", sample("nan_forward"), "--steps", "8", "--nan", "--format", "json", code=1)
    assert "locating" not in piped.stderr


def test_live_watch_shows_progress_and_every_layer(tmp_path):
    model = write(tmp_path, "long_names", LONG_NAMES)
    code, screen, _ = on_terminal("watch", model, "--steps", "3", width=160, height=12)
    assert code == 0
    assert "step 3/3 · " in screen and "elapsed" in screen
    assert "encoder.layers.0.self_attn.out_proj" in screen and "more layers (choose which with --layers" in screen
    code, screen, _ = on_terminal("watch", model, "--steps", "2", "--layers", "encoder.layers.1*", width=80)
    assert "encoder.layers.11.self_attn.out_proj" in screen and "encoder.layers.2." not in screen


# ----------------------------------------------------------------------- readable when piped
@pytest.mark.parametrize("width", ["60", "80", "120", "160"])
def test_inspect_at_every_width_cuts_nothing(tmp_path, monkeypatch, width):
    model = write(tmp_path, "long_names", LONG_NAMES)
    monkeypatch.setenv("COLUMNS", width)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["inspect", model], catch_exceptions=False)
    data = json.loads(CliRunner().invoke(cli, ["inspect", model, "--format", "json"]).stdout)
    assert "…" not in result.stdout and "\x1b[" not in result.stdout
    assert all(len(line.rstrip()) <= int(width) for line in result.stdout.splitlines())
    for parameter in data["parameters"]:
        assert parameter["name"] in result.stdout
    for module in data["modules"]:
        assert module["name"] in result.stdout


def test_saved_svg_is_sized_to_its_content(gradscope, tmp_path):
    model = write(tmp_path, "long_names", LONG_NAMES)
    gradscope("inspect", model, "--save", "report.svg", code=0)
    svg = (tmp_path / "report.svg").read_text()
    assert "…" not in svg and "encoder.layers.11.self_attn.out_proj.weight" in svg.replace("&#160;", " ")
    gradscope("inspect", sample("mlp"), "--save", "small.svg", code=0)
    small = (tmp_path / "small.svg").read_text()
    assert len(small) < len(svg)


def test_root_module_is_called_model_everywhere_people_read(gradscope):
    table = gradscope("inspect", sample("transformer"), code=0).stdout
    assert "(model)" not in table and "\nmodel " in table
    data = gradscope.json("inspect", sample("transformer"), code=0)
    assert data["modules"][0]["name"] == "" and data["modules"][0]["calls"] == 1
    watch = gradscope.json("watch", sample("nan_forward"), "--steps", "10", "--nan", code=1)
    assert watch["first_nonfinite"]["propagated"] == ["net.0", "net.1", "net.2", "net"]


def test_a_loss_that_bounces_back_below_where_it_started_has_not_diverged():
    """Training brought the loss from 3 down to 0.001; a jump back to 0.1 (x100) is noise, not a
    divergence. A jump above every earlier loss is."""
    from gradscope.engines import get_engine
    from gradscope.monitor.analysis import diverged
    from gradscope.monitor.diagnose import DivergenceTracker
    from gradscope.monitor.records import StepRecord

    import numpy as np

    assert diverged(0.001, 0.12) and not diverged(0.001, 0.12, highest=3.0) and diverged(0.5, 60.0, highest=3.0)
    tracker = DivergenceTracker(get_engine("gradscope"))
    for step, loss in enumerate([3.0, 0.5, 0.001, 0.12, 0.002, 500.0]):
        tracker.start([], {"fc.weight": np.full(4, float(step + 1))})
        tracker.finish(StepRecord(step, loss, 1.0, (("fc", 1.0),)))
    assert tracker.divergence is not None and tracker.divergence.step == 5


@pytest.mark.parametrize("command", [["watch", "--steps", "3", "--nan"], ["clip", "--steps", "3", "--max", "1"],
                                     ["check"]])
def test_training_commands_freeze_the_objects_alive_before_their_loop_and_unfreeze_after(gradscope, tmp_path, command):
    """watch, clip and check keep the garbage collector from walking the whole process at every
    collection their steps trigger (gc.freeze for the loop), and leave nothing frozen behind."""
    import gc

    model = tmp_path / "frozen.py"
    model.write_text(
        "import gc\n"
        "import numpy as np\n"
        "import gradscope as gs\n"
        "from gradscope import nn\n"
        "model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))\n"
        "loss_fn = nn.CrossEntropyLoss()\n"
        "def batch(step):\n"
        "    with open('frozen.txt', 'a') as log:\n"
        "        log.write(f'{gc.get_freeze_count()}\\n')\n"
        "    rng = np.random.default_rng(step)\n"
        "    return gs.tensor(rng.standard_normal((6, 4), dtype=np.float32)), gs.tensor(rng.integers(0, 2, 6))\n")
    assert gc.get_freeze_count() == 0
    gradscope(command[0], str(model), *command[1:])
    counts = [int(line) for line in (tmp_path / "frozen.txt").read_text().split()]
    assert counts and min(counts) > 1000, counts  # (the process's objects were frozen while the steps ran)
    assert gc.get_freeze_count() == 0
