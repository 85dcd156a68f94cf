"""Everyday use, round two (issue 24): configuration and commands behave as people type them."""
from __future__ import annotations

import io
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


def test_piped_run_summary_keeps_each_sentence_on_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "gradscope", "run", "--nan", str(ROOT / "sample_scripts" /
                             "train_softmax.py"), "--steps", "6", "--bad-step", "3"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "60"})
    assert result.stderr.splitlines()[-1] == ("module '0' turned finite inputs into nan; the modules listed after it "
                                              "only passed it on")


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
