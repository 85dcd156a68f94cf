"""Fixtures for CLI tests: a runner that keeps stdout and stderr apart, and the sample models."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from gradscope.cli import cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"
ENGINES = ("gradscope", "torch")
_current = {"engine": "gradscope"}


def sample(name: str) -> str:
    """Path of a sample model file: gradscope's, or its PyTorch twin in tests run by ``engine``."""
    if _current["engine"] == "torch":
        return str(SAMPLES / "torch_models" / f"{name}.py")
    return str(SAMPLES / f"{name}.py")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Any:
    """Run the test once per engine; :func:`sample` then gives that engine's sample models."""
    from tests.cli import conftest as imported  # test modules import this file under its package name

    if request.param == "torch":
        pytest.importorskip("torch")
    for state in {id(_current): _current, id(imported._current): imported._current}.values():
        state["engine"] = request.param
    yield request.param
    for state in {id(_current): _current, id(imported._current): imported._current}.values():
        state["engine"] = "gradscope"


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
