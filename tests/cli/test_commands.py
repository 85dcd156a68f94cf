"""Every command on every sample model: exit codes, findings, JSON schemas, stdout vs stderr.

Every test runs twice: on gradscope's sample models and on their PyTorch twins
(``sample_models/torch_models/``), which must give the same verdicts.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.cli.conftest import SAMPLES, sample

pytestmark = pytest.mark.usefixtures("engine")

HEALTHY = ["mlp", "cnn", "transformer"]
EXPECTED_INSPECT = {
    "mlp": set(),
    "cnn": set(),
    "transformer": set(),
    "deep_sigmoid": {"vanishing"},
    "rnn_exploding": {"exploding"},
    "nan_forward": set(),  # finite at step 0; the NaN comes at step 5
    "nan_backward": {"nonfinite"},
    "nan_norm": set(),  # finite at step 0; the NaN comes at step 3
    "dead_relu": {"dead"},
    "unused_detach": {"no_grad"},
}
ALL = sorted(EXPECTED_INSPECT)


def prefix(engine: str) -> str:
    """How the sample models call the engine's functions: ``gs.`` or ``torch.``."""
    return "torch." if engine == "torch" else "gs."
FINDING_KEYS = {"check", "severity", "module", "parameter", "message", "value", "threshold", "source", "parameters"}



# ------------------------------------------------------------------------------------------- inspect
@pytest.mark.parametrize("name", ALL)
def test_inspect_json_schema_and_findings(gradscope, name, engine):
    expected = EXPECTED_INSPECT[name]
    result = gradscope("inspect", sample(name), "--format", "json", code=1 if expected else 0)
    data = json.loads(result.stdout)
    assert set(data) == {"schema", "model", "step", "loss", "total_grad_norm", "modules", "parameters", "findings"}
    assert data["schema"] == "gradscope.inspect/1"
    assert data["model"] == sample(name)
    assert data["step"] == 0
    for module in data["modules"]:
        assert set(module) == {"name", "type", "calls", "grad_output_norm", "grad_input_norm", "nonfinite"}
    for parameter in data["parameters"]:
        assert set(parameter) == {"name", "module", "shape", "has_grad", "grad_norm", "grad_mean", "grad_std",
                                  "grad_abs_max", "nonfinite", "zero_fraction", "param_norm", "grad_to_param"}
        if not parameter["has_grad"]:
            assert parameter["grad_norm"] is None and parameter["grad_to_param"] is None
    for finding in data["findings"]:
        assert set(finding) == FINDING_KEYS
    assert {f["check"] for f in data["findings"]} == expected


def test_inspect_table_goes_to_stdout_only(gradscope):
    result = gradscope("inspect", sample("mlp"), code=0)
    assert "Parameter gradients" in result.stdout
    assert "No findings" in result.stdout
    assert result.stderr == ""


def test_inspect_module_order_and_names(gradscope):
    data = gradscope.json("inspect", sample("cnn"), code=0)
    names = [m["name"] for m in data["modules"]]
    assert names == ["", "features", "features.0", "features.1", "features.2", "features.3", "features.4",
                     "classifier"]
    assert data["modules"][-1]["type"] == "Linear"
    first_conv = data["modules"][2]
    assert first_conv["grad_input_norm"] is None  # the images do not require grad
    assert first_conv["grad_output_norm"] > 0


def test_inspect_specific_findings(gradscope):
    data = gradscope.json("inspect", sample("unused_detach"), code=1)
    assert {name for f in data["findings"] for name in f["parameters"]} == {
        "encoder.0.weight", "encoder.0.bias", "aux_head.weight", "aux_head.bias"}
    assert [f["module"] for f in data["findings"]] == ["encoder.0", "aux_head"]  # one finding per module
    data = gradscope.json("inspect", sample("dead_relu"), code=1)
    assert {f["parameter"] for f in data["findings"]} == {"hidden.weight", "hidden.bias", "out.weight"}
    data = gradscope.json("inspect", sample("deep_sigmoid"), code=1)
    vanishing = {f["parameter"] for f in data["findings"]}
    assert "0.weight" in vanishing and "24.weight" not in vanishing
    assert data["total_grad_norm"] > 0


def test_inspect_nonfinite_numbers_are_strings(gradscope):
    data = gradscope.json("inspect", sample("nan_norm"), "--step", "3", code=1)
    assert data["total_grad_norm"] == "nan"
    embed = next(p for p in data["parameters"] if p["name"] == "embed.weight")
    assert embed["nonfinite"] == 96 and embed["grad_norm"] == "nan"
    assert {f["check"] for f in data["findings"]} == {"nonfinite"}


def test_inspect_step_and_save(gradscope, tmp_path):
    data = gradscope.json("inspect", sample("mlp"), "--step", "3", code=0)
    assert data["step"] == 3
    result = gradscope("inspect", sample("mlp"), "--save", "report.svg", code=0)
    assert (tmp_path / "report.svg").read_text().lstrip().startswith("<svg")
    assert "saved report.svg" in result.stderr
    gradscope("inspect", sample("mlp"), "--save", "report.html", code=0)
    assert "<html" in (tmp_path / "report.html").read_text().lower()
    result = gradscope("inspect", sample("mlp"), "--save", "report.png", code=2)
    assert "svg" in result.stderr


def test_inspect_thresholds(gradscope):
    data = gradscope.json("inspect", sample("mlp"), "--max-norm", "0.1", code=1)
    assert {f["check"] for f in data["findings"]} == {"exploding"}
    data = gradscope.json("inspect", sample("mlp"), "--min-norm", "1e6", code=1)
    assert {f["check"] for f in data["findings"]} == {"vanishing"}


# --------------------------------------------------------------------------------------------- watch
WATCH_KEYS = {"schema", "steps_run", "status", "first_nonfinite", "history", "bundle", "divergence", "findings"}
ORIGIN_KEYS = {"step", "phase", "module", "node", "source", "kind", "propagated", "detail"}


@pytest.mark.parametrize("name", HEALTHY + ["dead_relu", "unused_detach"])
def test_watch_healthy_runs_all_steps(gradscope, name, tmp_path):
    data = gradscope.json("watch", sample(name), "--steps", "3", "--nan", "--inf", code=0)
    assert set(data) == WATCH_KEYS
    assert data["schema"] == "gradscope.watch/1"
    assert data["status"] == "ok" and data["steps_run"] == 3 and data["first_nonfinite"] is None
    assert data["bundle"] is None
    assert [h["step"] for h in data["history"]] == [0, 1, 2]
    assert all(set(h) == {"step", "loss", "total_grad_norm"} for h in data["history"])
    assert not (tmp_path / ".gradscope").exists()


def test_watch_nan_forward_later_step(gradscope, tmp_path, engine):
    data = gradscope.json("watch", sample("nan_forward"), "--steps", "10", "--nan", code=1)
    assert data["status"] == "nonfinite"
    assert data["steps_run"] == 6
    origin = data["first_nonfinite"]
    assert set(origin) == ORIGIN_KEYS
    assert origin["step"] == 5 and origin["phase"] == "forward" and origin["module"] == "features"
    assert origin["node"] == "LogBackward0" and origin["kind"] == "nan"
    line = _line_of(sample("nan_forward"), f"return {prefix(engine)}log(")
    assert origin["source"].endswith(f"nan_forward.py:{line}")
    assert data["bundle"] == ".gradscope/replay.npz" and (tmp_path / ".gradscope" / "replay.npz").exists()
    assert (tmp_path / ".gradscope" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_watch_nan_backward(gradscope, engine):
    data = gradscope.json("watch", sample("nan_backward"), "--steps", "5", "--nan", "--bundle", "b.npz", code=1)
    origin = data["first_nonfinite"]
    assert origin["step"] == 0 and origin["phase"] == "backward"
    assert origin["module"] == "safe_log" and origin["node"] == "LogBackward0"
    line = _line_of(sample("nan_backward"), f"return {prefix(engine)}where(h > 0, {prefix(engine)}log(h)")
    assert origin["source"].endswith(f"nan_backward.py:{line}")


def test_watch_nan_backward_at_a_later_step(gradscope):
    data = gradscope.json("watch", sample("nan_norm"), "--steps", "5", "--nan", code=1)
    assert data["steps_run"] == 4
    origin = data["first_nonfinite"]
    assert origin["step"] == 3 and origin["phase"] == "backward" and origin["kind"] == "nan"
    assert origin["module"] == "norm" and origin["node"] == "SqrtBackward0"
    line = _line_of(sample("nan_norm"), "keepdim=True).sqrt()")
    assert origin["source"].endswith(f"nan_norm.py:{line}")


def test_watch_exploding_rnn_overflows_in_forward(gradscope, engine):
    data = gradscope.json("watch", sample("rnn_exploding"), "--steps", "10", "--nan", "--inf", code=1)
    origin = data["first_nonfinite"]
    assert origin["phase"] == "forward" and origin["step"] == 1
    assert origin["module"] == "recurrent"
    # numpy's matmul overflows to inf here; PyTorch's sums +inf and -inf products to nan
    assert origin["kind"] == ("nan" if engine == "torch" else "inf")


def test_watch_without_flags_reports_but_does_not_stop(gradscope):
    data = gradscope.json("watch", sample("nan_norm"), "--steps", "5", code=1)
    assert data["status"] == "nonfinite" and data["steps_run"] == 5 and data["first_nonfinite"] is None


def test_watch_clip_keeps_rnn_finite(gradscope):
    data = gradscope.json("watch", sample("rnn_exploding"), "--steps", "4", "--nan", "--inf", "--clip", "1",
                          "--lr", "0.001", code=0)
    assert data["steps_run"] == 4


def test_watch_plain_lines_when_piped_and_log(gradscope, tmp_path):
    result = gradscope("watch", sample("nan_forward"), "--steps", "8", "--nan", "--log", "run.jsonl", code=1)
    lines = result.stdout.splitlines()
    assert lines[0].startswith("step    0  loss")
    assert "NON-FINITE loss" in lines[5]
    assert "First non-finite value (nan) started here" in result.stdout
    assert result.stderr == ""
    records = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert records[0]["schema"] == "gradscope.watch.step/1"
    assert set(records[0]["layers"]) == {"net.0", "net.2"}
    assert records[5]["loss"] == "nan" and records[5]["nonfinite"] == "loss"
    gradscope("watch", sample("mlp"), "--steps", "2", "--log", "run.jsonl", code=0)
    assert len((tmp_path / "run.jsonl").read_text().splitlines()) == 8  # appended


def test_watch_json_summary_on_stderr(gradscope):
    result = gradscope("watch", sample("nan_norm"), "--steps", "5", "--nan", "--format", "json", code=1)
    json.loads(result.stdout)
    assert "started here" in result.stderr


def test_watch_ctrl_c_prints_summary_and_exits_130(gradscope, monkeypatch):
    from gradscope.monitor import watch as watch_module

    original = watch_module.Watcher._train_step

    def interrupt_at_step_2(self, step, batch, parameters, **options):
        if step == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, step, batch, parameters, **options)

    monkeypatch.setattr(watch_module.Watcher, "_train_step", interrupt_at_step_2)
    result = gradscope("watch", sample("mlp"), "--steps", "10", "--format", "json", code=130)
    data = json.loads(result.stdout)
    assert data["steps_run"] == 2 and data["status"] == "interrupted"
    assert "interrupted after 2 step(s): the summary covers the steps that finished" in result.stderr


# -------------------------------------------------------------------------------------------- replay
@pytest.mark.parametrize("name,phase", [("nan_forward", "forward"), ("nan_norm", "backward"),
                                        ("rnn_exploding", "forward")])
def test_replay_reproduces_the_failing_step(gradscope, name, phase):
    watched = gradscope.json("watch", sample(name), "--steps", "10", "--nan", "--inf", "--bundle", "r.npz", code=1)
    replayed = gradscope.json("replay", "r.npz", sample(name), code=1)
    assert replayed["first_nonfinite"] == watched["first_nonfinite"]
    assert replayed["first_nonfinite"]["phase"] == phase
    assert replayed["history"][0]["step"] == watched["history"][-1]["step"]
    assert replayed["history"][0]["loss"] == watched["history"][-1]["loss"]


def test_replay_errors(gradscope, tmp_path):
    gradscope("watch", sample("nan_norm"), "--steps", "5", "--nan", "--bundle", "r.npz", code=1)
    result = gradscope("replay", "r.npz", sample("mlp"), code=2)
    assert result.stderr.startswith("error: r.npz: the bundle does not match the model: ")
    assert result.stderr.endswith(f"(model file {sample('mlp')})\n")
    result = gradscope("replay", "missing.npz", sample("mlp"), code=2)
    assert "missing.npz" in result.stderr and result.stdout == ""
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    result = gradscope("replay", "bad.npz", sample("mlp"), code=2)
    assert "not a gradscope replay bundle" in result.stderr


def test_replay_names_no_bundle_of_its_own(gradscope):
    """replay reads a bundle and writes none: no `replay bundle:` line for its own input, bundle null."""
    watched = gradscope("watch", str(SAMPLES / "nan_norm.py"), "--steps", "5", "--nan", "--bundle", "r.npz", code=1)
    assert "replay bundle: r.npz" in watched.stdout
    replayed = gradscope("replay", "r.npz", str(SAMPLES / "nan_norm.py"), code=1)
    assert "First non-finite value (nan) started here:" in replayed.stdout
    assert "replay bundle" not in replayed.stdout + replayed.stderr
    assert gradscope.json("replay", "r.npz", str(SAMPLES / "nan_norm.py"), code=1)["bundle"] is None


@pytest.mark.parametrize("command", ["replay", "debug"])
def test_bundle_of_the_other_engine_is_refused_naming_both_files(gradscope, command):
    pytest.importorskip("torch")
    gradscope("watch", str(SAMPLES / "nan_norm.py"), "--steps", "5", "--nan", "--bundle", "r.npz", code=1)
    twin = str(SAMPLES / "torch_models" / "nan_norm.py")
    argv = (["replay", "r.npz", twin] if command == "replay"
            else ["debug", twin, "--bundle", "r.npz", "--commands", "quit"])
    result = gradscope(*argv, code=2)
    assert result.stderr == ("error: r.npz: the bundle was written by a gradscope model; this model runs on torch "
                             f"(model file {twin})\n")
    assert result.stdout == ""


# ---------------------------------------------------------------------------------------------- clip
CLIP_KEYS = {"schema", "mode", "scope", "max", "total_norm_before", "total_norm_after", "parameters"}


@pytest.mark.parametrize("name", ALL)
def test_clip_every_model(gradscope, name):
    data = gradscope.json("clip", sample(name), "--max", "1.0", code=0)
    assert set(data) == CLIP_KEYS and data["schema"] == "gradscope.clip/1"
    assert data["mode"] == "norm" and data["scope"] == "global" and data["max"] == 1.0
    for parameter in data["parameters"]:
        assert set(parameter) == {"name", "norm_before", "norm_after"}
    if isinstance(data["total_norm_before"], float) and data["total_norm_before"] > 1.0:
        assert data["total_norm_after"] == pytest.approx(1.0, rel=1e-3)


def test_clip_value_and_module_scope(gradscope):
    data = gradscope.json("clip", sample("rnn_exploding"), "--max", "0.5", "--mode", "value", code=0)
    assert data["total_norm_after"] < data["total_norm_before"]
    data = gradscope.json("clip", sample("rnn_exploding"), "--max", "1.0", "--scope", "module", code=0)
    by_name = {p["name"]: p for p in data["parameters"]}
    # module scope changes what flows upstream, not the readout's own gradient
    assert by_name["readout.weight"]["norm_after"] == pytest.approx(by_name["readout.weight"]["norm_before"])
    assert by_name["recurrent.weight"]["norm_after"] < by_name["recurrent.weight"]["norm_before"]
    result = gradscope("clip", sample("mlp"), "--max", "1", "--steps", "2", code=0)
    assert "norm before" in result.stdout and "(step 1)" in result.stdout


def test_clip_requires_max(gradscope):
    result = gradscope("clip", sample("mlp"), code=2)
    assert "--max" in result.stderr


# --------------------------------------------------------------------------------------------- check
EXPECTED_CHECK_FAILURES = {
    "mlp": set(), "cnn": set(), "transformer": set(),
    "nan_forward": set(),
    "deep_sigmoid": {"no_vanishing_gradients", "parameters_update"},
    "rnn_exploding": {"finite", "no_exploding_gradients"},
    "nan_backward": {"finite"},
    "nan_norm": set(),
    "dead_relu": {"no_dead_parameters"},
    "unused_detach": {"gradients_reach_parameters"},
}


@pytest.mark.parametrize("name", ALL)
def test_check_every_model(gradscope, name, engine):
    failures = EXPECTED_CHECK_FAILURES[name]
    data = gradscope.json("check", sample(name), "--steps", "3", code=1 if failures else 0)
    assert set(data) == {"schema", "passed", "waived", "checks", "findings"} and data["schema"] == "gradscope.check/1"
    assert data["passed"] is (not failures)
    assert {c["name"] for c in data["checks"] if c["status"] == "fail"} == failures
    assert all(set(c) == {"name", "status", "message"} for c in data["checks"])
    assert all(set(f) == FINDING_KEYS for f in data["findings"])


@pytest.mark.parametrize("name", HEALTHY)
def test_check_overfit_and_gradcheck_pass_on_healthy_models(gradscope, name):
    data = gradscope.json("check", sample(name), "--steps", "3", "--overfit", "--gradcheck", code=0)
    assert {c["name"]: c["status"] for c in data["checks"]}["loss_decreases"] == "pass"
    assert {c["name"]: c["status"] for c in data["checks"]}["gradcheck"] == "pass"


def test_check_later_nan_with_more_steps(gradscope):
    data = gradscope.json("check", sample("nan_forward"), "--steps", "6", code=1)
    assert [c["name"] for c in data["checks"] if c["status"] == "fail"] == ["finite"]


def test_check_overfit_fails_with_zero_learning_rate(gradscope):
    data = gradscope.json("check", sample("mlp"), "--overfit", "--lr", "0", code=1)
    failed = {c["name"] for c in data["checks"] if c["status"] == "fail"}
    assert failed == {"parameters_update", "loss_decreases"}


def test_check_junit(gradscope):
    import xml.etree.ElementTree as ElementTree

    result = gradscope("check", sample("dead_relu"), "--format", "junit", code=1)
    root = ElementTree.fromstring(result.stdout)
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 9
    failed = [case.get("name") for case in cases if case.find("failure") is not None]
    assert failed == ["no_dead_parameters"]
    assert root.find("./testsuite").get("failures") == "1"


def test_check_github_annotations_point_at_the_layer(gradscope):
    result = gradscope("check", sample("dead_relu"), "--format", "github", code=1)
    lines = result.stdout.splitlines()
    line = _line_of(sample("dead_relu"), 'add_module("hidden"')
    assert lines[0].startswith(f"::error file={sample('dead_relu')},line={line},title=gradscope dead::")
    assert lines[-1].startswith("gradscope check failed:")


def test_check_reads_pyproject_and_flags_win(gradscope, tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope]\nmax_norm = 0.01\nsteps = 1\n")
    data = gradscope.json("check", sample("mlp"), code=1)
    assert {c["name"] for c in data["checks"] if c["status"] == "fail"} == {"no_exploding_gradients"}
    gradscope.json("check", sample("mlp"), "--max-norm", "1000", code=0)
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope]\nmax_nrom = 1\n")
    result = gradscope("check", sample("mlp"), code=2)
    assert "pyproject.toml: tool.gradscope: unknown key 'max_nrom'" in result.stderr
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope]\nsteps = 'many'\n")
    result = gradscope("check", sample("mlp"), code=2)
    assert "pyproject.toml: tool.gradscope.steps: expected a whole number >= 1, got 'many'" in result.stderr


def test_check_table(gradscope):
    result = gradscope("check", sample("unused_detach"), code=1)
    assert "gradients_reach_parameters" in result.stdout and "FAIL" in result.stdout
    assert "some checks failed" in result.stdout


# ------------------------------------------------------------------------------------ general CLI
def test_python_dash_m_and_version():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "gradscope", "--help"], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0 and "inspect" in result.stdout


def test_unknown_option_is_usage_error(gradscope):
    result = gradscope("inspect", sample("mlp"), "--bogus", code=2)
    assert "No such option" in result.stderr and result.stdout == ""


def test_debug_before_or_after_the_command(gradscope):
    result = gradscope("--debug", "inspect", "missing.py", code=3)
    assert "Traceback" in result.stderr
    result = gradscope("inspect", "missing.py", "--debug", code=3)
    assert "Traceback" in result.stderr
    result = gradscope("inspect", "missing.py", code=3)
    assert "Traceback" not in result.stderr


def test_internal_error_exit_4(gradscope, monkeypatch):
    from gradscope.monitor import inspect as inspect_module

    def broken(*args, **kwargs):
        raise ZeroDivisionError("oops")

    monkeypatch.setattr(inspect_module, "inspect_model", broken)
    result = gradscope("inspect", sample("mlp"), code=4)
    assert "internal error: ZeroDivisionError: oops" in result.stderr and "--debug" in result.stderr


def _line_of(path: str, text: str) -> int:
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if text in line:
            return number
    raise AssertionError(f"{text!r} not in {path}")


def test_watch_live_table_on_a_terminal(tmp_path, monkeypatch):
    import io

    from click.testing import CliRunner
    from rich.console import Console

    from gradscope.cli import App, cli

    monkeypatch.chdir(tmp_path)
    app = App()
    screen = io.StringIO()
    app._out = Console(file=screen, force_terminal=True, width=120)
    result = CliRunner().invoke(cli, ["watch", sample("mlp"), "--steps", "3"], obj=app, catch_exceptions=False)
    assert result.exit_code == 0
    text = screen.getvalue()
    assert "gradscope watch" in text and "total grad norm" in text and "3 steps run" in text
    assert "step    0  loss" not in text  # no plain lines on a terminal
