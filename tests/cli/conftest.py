"""Fixtures for CLI tests: a runner that keeps stdout and stderr apart, and the sample models."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gradscope.cli import cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


def sample(name: str) -> str:
    """Path of a sample model file."""
    return str(SAMPLES / f"{name}.py")


class Invoker:
    """Runs ``gradscope ARGS`` in-process, in a temporary working directory."""

    def __init__(self, runner: CliRunner) -> None:
        self.runner = runner

    def __call__(self, *args: str, code: int | None = None) -> Result:
        result = self.runner.invoke(cli, list(args), catch_exceptions=False)
        if code is not None:
            assert result.exit_code == code, (
                f"exit {result.exit_code} != {code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")
        return result

    def json(self, *args: str, code: int | None = None) -> dict[str, Any]:
        """Run with ``--format json``; stdout must be exactly one JSON document."""
        result = self(*args, "--format", "json", code=code)
        return json.loads(result.stdout)


@pytest.fixture
def gradscope(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Invoker:
    monkeypatch.chdir(tmp_path)
    return Invoker(CliRunner())
