"""Everyday use, round two (issue 24): configuration and commands behave as people type them."""
from __future__ import annotations

import io
import os
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
