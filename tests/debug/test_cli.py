"""``gradscope debug`` and ``gradscope graph`` on the sample models, through click's runner."""
from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradscope.cli import cli
from gradscope.debug.text import number
from gradscope.engines import total_norm
from gradscope.loading import load_model_file
from gradscope.nn.modules import module as module_file

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


def run(*args: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _rows(table: str) -> dict[str, list[str]]:
    rows = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.split("│")]
        if len(cells) > 3:
            rows[cells[0]] = cells[1:]
    return rows


def test_without_a_terminal_it_says_how_to_use_commands() -> None:
    result = run("debug", str(SAMPLES / "mlp.py"))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "needs a terminal" in result.stderr and "--commands" in result.stderr


def test_nan_backward_transcript() -> None:
    sample = SAMPLES / "nan_backward.py"
    result = run("debug", str(sample), "--break", "nan", "--commands", "where; grads; table; quit")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert out.startswith("> stopped at safe_log (SafeLog) · post: grad_input known, after its backward · "
                          "breakpoint 1 (nan)\n(gradscope) where\n")
    assert "  node:    LogBackward0 (produced grad_input)" in out
    line = _line_of(sample, "return gs.where(h > 0, gs.log(h)")
    assert f"produced by LogBackward0 in safe_log (created at {os.path.relpath(sample)}:{line} in forward)" in out
    assert re.search(r"grad_input\[0\]\s+│ \[16, 16\]\s+│\s+nan\s+│\s+nan\s+│\s+nan\s+│\s+[1-9]\d*", out)
    rows = _rows(out.split("(gradscope) table")[1])
    assert rows["safe_log"][:2] == ["SafeLog", "current (post)"]
    assert rows["out"][1] == "done" and rows["hidden"][1] == "pending"
    assert out.endswith("(gradscope) quit\nquit: the pass was aborted, every hook removed and the model restored\n")


def test_commands_file_and_step(tmp_path: Path) -> None:
    commands = tmp_path / "session.txt"
    commands.write_text("# stop in the forward pass of the corrupted batch\nwhere\n\ndelete 1\ncontinue\n")
    result = run("debug", str(SAMPLES / "nan_forward.py"), "--step", "5", "--break", "forward nan",
                 "--commands-file", str(commands))
    assert result.exit_code == 0, result.stderr
    line = _line_of(SAMPLES / "nan_forward.py", "return gs.log(counts + 1.0)")
    assert result.stdout.startswith("> stopped at LogBackward0 in features (LogFeatures) · forward: a line of "
                                    "forward code made nan · breakpoint 1 (forward and nan)")
    assert "  node:    LogBackward0 (made the value)\n" in result.stdout
    assert f"  source:  {os.path.relpath(SAMPLES / 'nan_forward.py')}:{line}\n" in result.stdout
    assert "  note:    this line made nan: return gs.log(counts + 1.0)" in result.stdout
    assert "  step:    5" in result.stdout
    assert "> backward finished" in result.stdout


@pytest.mark.parametrize("args, message", [
    (("--break", "nann", "--commands", "quit"), "--break 'nann': unknown word 'nann'"),
    (("--commands", "quit", "--commands-file", __file__), "either --commands or --commands-file"),
])
def test_usage_errors(args: tuple, message: str) -> None:
    result = run("debug", str(SAMPLES / "mlp.py"), *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_model_errors_exit_3(tmp_path: Path) -> None:
    result = run("debug", str(tmp_path / "missing.py"), "--commands", "quit")
    assert result.exit_code == 3
    assert "model file not found" in result.stderr


def test_edit_changes_upstream_gradients_like_a_plain_hook() -> None:
    sample = SAMPLES / "mlp.py"
    result = run("debug", str(sample), "--break", "module 2 post", "--commands", "scale 0.5; finish")
    assert result.exit_code == 0, result.stderr
    shown = _rows(result.stdout.split("(gradscope) finish")[1])

    workload = load_model_file(sample)
    model = workload.model
    grad_outputs: dict[str, float] = {}
    names = {id(m): name for name, m in model.named_modules()}

    def record(module, grad_output):
        if id(module) in names:  # not the loss module
            grad_outputs[names[id(module)]] = total_norm([g._data for g in grad_output if g is not None])

    def halve(module, grad_input, grad_output):
        if module is model[2]:
            return tuple(None if g is None else g * 0.5 for g in grad_input)
        return None

    with module_file.register_module_full_backward_pre_hook(record), \
            module_file.register_module_full_backward_hook(halve), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        workload.loss(workload.batch(0)).backward()
    for path in ("0", "1", "2", "3", "4"):
        assert shown[path][2] == number(grad_outputs[path]), path
        params = [p.grad._data for p in model.get_submodule(path).parameters()]
        assert shown[path][4] == (number(total_norm(params)) if params else "-"), path
    assert shown["2"][6] == "post: scale 0.5"


def test_graph_tree_and_dot() -> None:
    result = run("graph", str(SAMPLES / "mlp.py"))
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"autograd graph of {SAMPLES / 'mlp.py'} (step 0)"
    assert lines[1] == "└── NllLossBackward0 []"
    assert "AccumulateGrad 0.weight [32, 8] · 0" in result.stdout
    assert "ReluBackward0 [32, 32] · 3" in result.stdout
    shallow = run("graph", str(SAMPLES / "mlp.py"), "--depth", "2")
    assert len(shallow.stdout.splitlines()) < len(lines)
    assert "input(s) not shown" in shallow.stdout
    dot = run("graph", str(SAMPLES / "mlp.py"), "--format", "dot")
    assert dot.exit_code == 0
    assert dot.stdout.startswith('digraph "gradscope" {')
    assert '[label="AccumulateGrad 4.bias [3]", shape=ellipse];' in dot.stdout


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.py")))
def test_every_sample_model_can_be_stepped_through(sample: str) -> None:
    result = run("debug", str(SAMPLES / sample), "--commands", "step; step; step; where; grads; table; finish")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.count("> stopped at") == 3
    assert result.stdout.rstrip().endswith("> backward finished")


def test_help_has_an_example() -> None:
    for command in ("debug", "graph"):
        result = run(command, "--help")
        assert result.exit_code == 0
        assert "Examples:" in result.stdout and f"gradscope {command} " in result.stdout
