"""The README's `$ gradscope ...` output blocks are what the commands print, byte for byte
(apart from the spaces rich pads lines with)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradscope.cli import cli

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```\n\$ (gradscope [^\n]*)\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)


def _needs_torch(command: str) -> bool:
    """Whether the example runs a file of the command line that imports torch."""
    files = [ROOT / word for word in shlex.split(command.split(" < ")[0].split("; echo")[0]) if word.endswith(".py")]
    return any(re.search(r"^\s*(import|from) torch\b", file.read_text(), re.M) for file in files if file.is_file())


def _examples() -> list:
    params = []
    for command, expected in BLOCKS:
        params.append(pytest.param(command, expected, id=command[:60]))
    return params


@pytest.mark.parametrize(("command", "expected"), _examples())
def test_readme_example_output(command, expected, monkeypatch):
    if _needs_torch(command):
        pytest.importorskip("torch")
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("COLUMNS", raising=False)
    words = shlex.split(command.split(" < ")[0].split("; echo")[0])
    result = CliRunner().invoke(cli, words[1:], catch_exceptions=False)
    got = result.stdout + result.stderr
    if "; echo" in command:
        got += f"exit code {result.exit_code}\n"
    assert [line.rstrip() for line in got.splitlines()] == [line.rstrip() for line in expected.splitlines()]


def test_readme_has_examples():
    assert len(BLOCKS) >= 19
