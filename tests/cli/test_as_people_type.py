"""Everyday use, round two (issue 24): configuration and commands behave as people type them."""
from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gradscope.cli.app import _TrimmedLines

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_models"


# ------------------------------------------------------------------------ no blanks at line ends
def test_trimmed_lines_drop_blanks_at_line_ends_across_writes():
    stream = io.StringIO()
    trimmed = _TrimmedLines(stream)
    for chunk in ["a  b   ", "  \nc ", "", "   ", "\n", "  d\n", "e   "]:
        trimmed.write(chunk)
    trimmed.write("f\n")
    assert stream.getvalue() == "a  b\nc\n  d\ne   f\n"


@pytest.mark.parametrize("argv", [
    ["inspect", "sample_models/mlp.py"],
    ["inspect", "sample_models/unused_detach.py"],
    ["watch", "sample_models/nan_forward.py", "--steps", "8", "--nan"],
    ["check", "sample_models/dead_relu.py"],
    ["clip", "sample_models/rnn_exploding.py", "--max", "1"],
    ["graph", "sample_models/mlp.py"],
    ["debug", "sample_models/nan_backward.py", "--break", "nan", "--commands", "where; grads; table; quit"],
    ["run", "--nan", "sample_scripts/train_softmax.py", "--steps", "6", "--bad-step", "3"],
])
def test_piped_output_has_no_blanks_at_line_ends(argv, tmp_path):
    """Tables written to a pipe are not padded with blanks to the table's width (stdout and stderr)."""
    argv = [str(ROOT / word) if word.startswith("sample_") else word for word in argv]
    result = subprocess.run([sys.executable, "-m", "gradscope", *argv], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode in (0, 1), result.stderr
    assert len((result.stdout + result.stderr).splitlines()) > 5
    for line in (result.stdout + result.stderr).splitlines():
        assert line == line.rstrip(), repr(line)


# --------------------------------------------------------------------- run's summary at 80 columns
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.mark.parametrize("columns", [60, 80])
def test_run_summary_wraps_at_words_on_a_terminal(columns, tmp_path):
    """On a terminal the summary's last sentence is wrapped by gradscope at a blank, not by the
    terminal in the middle of a word."""
    pexpect = pytest.importorskip("pexpect")
    child = pexpect.spawn(sys.executable, ["-m", "gradscope", "run", "--nan",
                                           str(ROOT / "sample_scripts" / "train_softmax.py"), "--steps", "6",
                                           "--bad-step", "3"],
                          cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1",
                                                  "TERM": "xterm"},
                          encoding="utf-8", timeout=120, dimensions=(24, columns))
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1
    lines = [ANSI.sub("", line).split("\r")[-1] for line in child.before.split("\r\n")]
    assert all(len(line) <= columns for line in lines), lines
    start = next(i for i, line in enumerate(lines) if line.startswith("module '0' turned"))
    assert " ".join(line.strip() for line in lines[start:] if line.strip()) == (
        "module '0' turned finite inputs into nan; the modules listed after it only passed it on")
    assert len([line for line in lines[start:] if line.strip()]) == 2


@pytest.mark.parametrize("columns", [None, "60", "80"])
def test_piped_run_summary_wraps_at_words_only_to_a_known_width(columns, tmp_path):
    """Piped, a sentence stays on one line (grep finds it), unless COLUMNS gives a width: then it is
    wrapped at words to it, as on a terminal."""
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    result = subprocess.run([sys.executable, "-m", "gradscope", "run", "--nan", str(ROOT / "sample_scripts" /
                             "train_softmax.py"), "--steps", "6", "--bad-step", "3"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**env, "PYTHONPATH": str(ROOT), **({"COLUMNS": columns} if columns else {})})
    lines = result.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("module '0' turned"))
    sentence = "module '0' turned finite inputs into nan; the modules listed after it only passed it on"
    if columns is None:
        assert lines[start:] == [sentence]
    else:
        assert " ".join(lines[start:]) == sentence and len(lines[start:]) == 2
        assert all(len(line) <= int(columns) for line in lines)


# ----------------------------------------------------------------------- one line after Ctrl-C
SIGNALLED_MODEL = (SAMPLES / "mlp.py").read_text() + """
import os
_batch = batch


def batch(step):
    if step == 2:
        os.kill(os.getpid(), {signum})
    return _batch(step)
"""
SIGNALLED_SCRIPT = """
import os
import gradscope as gs
from gradscope import nn

model = nn.Linear(3, 1)
optimizer = gs.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    if step == 2:
        os.kill(os.getpid(), {signum})
    loss = model(gs.randn(4, 3)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(("signum", "code", "said"), [(2, 130, "interrupted"), (15, 143, "terminated (SIGTERM)")])
@pytest.mark.parametrize("argv", [["watch", "model.py", "--steps", "5"],
                                  ["watch", "model.py", "--steps", "5", "--format", "json"],
                                  ["run", "train.py"], ["run", "--format", "json", "train.py"]])
def test_one_line_says_the_run_was_interrupted(argv, signum, code, said, tmp_path):
    (tmp_path / "model.py").write_text(SIGNALLED_MODEL.format(signum=signum))
    (tmp_path / "train.py").write_text(SIGNALLED_SCRIPT.format(signum=signum))
    result = subprocess.run([sys.executable, "-m", "gradscope", *argv], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == code, result.stderr
    mentions = [line for line in result.stderr.splitlines() if "interrupted" in line or "terminated" in line]
    if "json" not in argv:
        assert "interrupted" not in result.stdout and "terminated" not in result.stdout
    assert mentions == [f"{said} after 2 step(s): the summary covers the steps that finished"]


# ------------------------------------------------------------------------------- run -m MODULE
SHOW = """
import os, sys
from . import helper
print(sys.argv[0] == os.path.abspath(__file__), sys.argv[1:])
print(__name__, __package__, __spec__.name, helper.VALUE)
print(sys.path[0] == os.getcwd())
"""


def _package(root: Path) -> None:
    (root / "proj").mkdir()
    (root / "proj" / "__init__.py").write_text("")
    (root / "proj" / "helper.py").write_text("VALUE = 42\n")
    (root / "proj" / "show.py").write_text(SHOW)
    (root / "proj" / "__main__.py").write_text("from .show import *\n")
    (root / "proj" / "train.py").write_text((ROOT / "sample_scripts" / "train_softmax.py").read_text())
    (root / "proj" / "ddp.py").write_text((ROOT / "sample_scripts" / "train_ddp.py").read_text())
    (root / "lib").mkdir()
    (root / "lib" / "__init__.py").write_text("")


def _gradscope(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradscope", *argv], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("module", ["proj.show", "proj"])
def test_run_m_runs_a_module_as_python_m_does(module, tmp_path):
    """The module sees what `python -m MODULE ARGS` shows it: argv, __name__, __package__, __spec__,
    relative imports, the current directory first on sys.path."""
    _package(tmp_path)
    python = subprocess.run([sys.executable, "-m", module, "--lr", "0.1", "pos"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=60)
    assert python.returncode == 0, python.stderr
    result = _gradscope(tmp_path, "run", "-m", module, "--lr", "0.1", "pos")
    assert result.returncode == 0, result.stderr
    assert result.stdout == python.stdout
    if module == "proj.show":
        assert result.stdout.splitlines()[0] == "True ['--lr', '0.1', 'pos']"
    assert f"gradscope run -m {module}: no step completed" in result.stderr


def test_run_m_finds_where_the_nan_started(tmp_path):
    _package(tmp_path)
    result = _gradscope(tmp_path, "run", "--nan", "--format", "json", "-m", "proj.train", "--steps", "6",
                        "--bad-step", "3")
    assert result.returncode == 1, result.stderr
    origin = json.loads(result.stdout)["first_nonfinite"]
    assert (origin["step"], origin["module"], origin["node"], origin["source"]) == (
        3, "0", "ExpBackward0", os.path.join("proj", "train.py") + ":20")


@pytest.mark.parametrize(("module", "message"), [
    ("nothere.train", "error: -m nothere.train: no module named 'nothere'"),
    ("proj.nothere", "error: -m proj.nothere: no module named 'proj.nothere'"),
    ("lib", "error: -m lib: is a package without __main__.py; name the module to run (lib.train, ...)"),
    ("proj/train.py", "error: -m proj/train.py: not a module name (dotted names like package.train)"),
])
def test_run_m_refuses_what_it_cannot_find_in_one_line(module, message, tmp_path):
    _package(tmp_path)
    result = _gradscope(tmp_path, "run", "-m", module)
    assert result.returncode == 3
    assert result.stderr == message + "\n"
    assert result.stdout == ""


def test_run_m_under_nproc(tmp_path):
    pytest.importorskip("torch.distributed")
    _package(tmp_path)
    result = _gradscope(tmp_path, "run", "--nproc", "2", "--nan", "--format", "json", "-m", "proj.ddp", "--steps", "6",
                        "--bad-step", "3")
    assert result.returncode == 1, result.stderr
    origin = json.loads(result.stdout)["first_nonfinite"]
    assert (origin["rank"], origin["step"], origin["node"], origin["source"]) == (
        1, 3, "DivBackward0", os.path.join("proj", "ddp.py") + ":22")
    assert "[rank0] step 0: loss" in result.stderr and "[rank1] step 2: loss" in result.stderr


def test_run_m_under_nproc_checks_the_module_before_starting_ranks(tmp_path):
    _package(tmp_path)
    result = _gradscope(tmp_path, "run", "--nproc", "2", "-m", "proj.nothere")
    assert result.returncode == 3
    assert result.stderr == "error: -m proj.nothere: no module named 'proj.nothere'\n"


# ------------------------------------------------------------------------- TensorBoard scalars
def _scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    accumulator_module = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    accumulator = accumulator_module.EventAccumulator(str(directory))
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def _same(value: float, logged: object) -> bool:
    expected = float(logged)
    return (math.isnan(value) and math.isnan(expected)) or value == pytest.approx(expected, rel=1e-6)


def test_watch_writes_the_log_records_as_tensorboard_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    result = _gradscope(tmp_path, "watch", str(SAMPLES / "nan_forward.py"), "--steps", "8", "--nan",
                        "--log", "runs/log.jsonl", "--tensorboard", "runs/tb")
    assert result.returncode == 1, result.stderr
    records = [json.loads(line) for line in (tmp_path / "runs" / "log.jsonl").read_text().splitlines()]
    scalars = _scalars(tmp_path / "runs" / "tb")
    assert sorted(scalars) == ["grad_norm/layer/net.0", "grad_norm/layer/net.2", "grad_norm/total", "loss"]
    assert [step for step, _ in scalars["loss"]] == [record["step"] for record in records] == list(range(6))
    for (_, loss), (_, total), record in zip(scalars["loss"], scalars["grad_norm/total"], records):
        assert _same(loss, record["loss"]) and _same(total, record["total_grad_norm"])
    assert math.isnan(scalars["loss"][-1][1])
    assert len(list((tmp_path / "runs" / "tb").glob("events.out.tfevents.*"))) == 1


def test_run_writes_parameter_and_clipped_scalars_without_importing_torch(tmp_path):
    pytest.importorskip("tensorboard")
    _package(tmp_path)
    code = ("import sys; from gradscope.cli import main\n"
            "try:\n    main(['run', '--clip', '1', '--tensorboard', 'tb', '--log', 'log.jsonl', '-m', 'proj.train',"
            " '--steps', '3'])\nexcept SystemExit as exc:\n    print('exit', exc.code, 'torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.stdout.splitlines()[-1] == "exit 0 False", result.stderr
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    scalars = _scalars(tmp_path / "tb")
    assert {"loss", "grad_norm/total", "clipped/grad_norm/total", "grad_norm/layer/0.score",
            "grad_norm/parameter/0.score.weight"} <= set(scalars)
    for step, record in enumerate(records):
        assert scalars["grad_norm/parameter/3.bias"][step] == (step, pytest.approx(record["parameters"]["3.bias"]))
        assert scalars["clipped/grad_norm/total"][step] == (
            step, pytest.approx(record["clipped"]["total_grad_norm"]))


def test_tensorboard_directory_from_pyproject_is_relative_to_it(tmp_path):
    pytest.importorskip("tensorboard")
    (tmp_path / "pyproject.toml").write_text('[tool.gradscope.watch]\ntensorboard = "runs/tb"\n')
    (tmp_path / "sub").mkdir()
    result = subprocess.run([sys.executable, "-m", "gradscope", "watch", str(SAMPLES / "mlp.py"), "--steps", "2"],
                            cwd=tmp_path / "sub", capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert [step for step, _ in _scalars(tmp_path / "runs" / "tb")["loss"]] == [0, 1]


def test_tensorboard_into_a_file_is_refused_before_the_model_runs(tmp_path):
    pytest.importorskip("tensorboard")
    (tmp_path / "taken").write_text("")
    result = _gradscope(tmp_path, "watch", str(SAMPLES / "mlp.py"), "--steps", "2", "--tensorboard", "taken")
    assert result.returncode == 2
    assert result.stderr == "error: --tensorboard taken: cannot write there: is a file, not a directory\n"


@pytest.mark.parametrize("command", ["watch", "run"])
def test_tensorboard_without_the_package_is_one_clear_error(command, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from gradscope.cli import cli

    for name in ("tensorboard", "tensorboard.compat", "tensorboard.compat.proto", "tensorboard.summary",
                 "tensorboard.summary.writer", "tensorboard.summary.writer.event_file_writer"):
        monkeypatch.setitem(sys.modules, name, None)  # what an environment without the package gives
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n")
    argv = ([command, str(SAMPLES / "mlp.py"), "--steps", "2", "--tensorboard", "runs/tb"] if command == "watch"
            else [command, "--tensorboard", "runs/tb", "train.py"])
    result = CliRunner().invoke(cli, argv, catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stderr == ("error: --tensorboard runs/tb: writing TensorBoard scalars needs the tensorboard package "
                             "(pip install tensorboard)\n")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "runs").exists()


def test_tensorboard_under_nproc_is_written_by_rank_0(tmp_path):
    pytest.importorskip("tensorboard")
    pytest.importorskip("torch.distributed")
    _package(tmp_path)
    result = _gradscope(tmp_path, "run", "--nproc", "2", "--tensorboard", "tb", "--log", "log.jsonl", "-m", "proj.ddp",
                        "--steps", "3")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 1
    losses = _scalars(tmp_path / "tb")["loss"]
    assert [step for step, _ in losses] == [0, 1, 2]
    assert [value for _, value in losses] == pytest.approx([record["loss"] for record in records])
