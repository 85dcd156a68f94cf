"""docs/run-protection.md: its `$ gradscope ...` output blocks are what the commands print, byte for
byte (apart from the spaces rich pads lines with), as the README's are."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradscope.cli import cli

ROOT = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"^```\n\$ (gradscope [^\n]*)\n(.*?)^```", (ROOT / "docs" / "run-protection.md").read_text(),
                    re.M | re.S)


@pytest.mark.parametrize(("command", "expected"), [pytest.param(c, e, id=c[:70]) for c, e in BLOCKS])
def test_run_protection_example_output(command, expected, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("COLUMNS", raising=False)
    words = shlex.split(command.split("; echo")[0])
    result = CliRunner().invoke(cli, words[1:], catch_exceptions=False)
    got = result.stdout + result.stderr
    if "; echo" in command:
        got += f"exit code {result.exit_code}\n"
    assert [line.rstrip() for line in got.splitlines()] == [line.rstrip() for line in expected.splitlines()]


def test_the_page_has_its_examples():
    assert len(BLOCKS) == 6
