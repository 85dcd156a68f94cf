"""``--ignore GLOB[:KIND]`` and ``ignore = [...]`` in ``[tool.gradscope]``: findings a project accepts.

A waiver names a parameter (or module) glob and a finding kind (``conv1.bias:vanishing``,
``encoder.*:no_grad``; without ``:KIND`` every kind). Waived findings are left out of the report
and fail nothing. Flags add to the waivers of ``[tool.gradscope]``.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import click

from gradscope.cli.app import App, ExitCode

F = Callable[..., Any]


def ignore_option(fn: F) -> F:
    """``--ignore GLOB[:KIND]`` (repeatable)."""
    return click.option("--ignore", "ignore", multiple=True, metavar="GLOB[:KIND]",
                        help="Accept findings of KIND (e.g. vanishing, no_grad; all kinds when left out) on "
                             "parameters or modules matching GLOB, e.g. conv1.bias:vanishing; repeatable. "
                             "Adds to ignore = [...] in [tool.gradscope].")(fn)


def configured_ignore(start: Path) -> tuple[list[str], str | None]:
    """The ``ignore`` list of ``[tool.gradscope]`` in the nearest ``pyproject.toml`` and that file.

    Raises:
        ValueError: the file cannot be read or ``ignore`` is not a list of strings.
    """
    from gradscope.cli.config import find_pyproject

    path = find_pyproject(start)
    if path is None or sys.version_info < (3, 11):
        return [], None
    import tomllib

    try:
        section = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("gradscope", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it: {exc}") from exc
    value = section.get("ignore", []) if isinstance(section, dict) else []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f"{path}: [tool.gradscope] ignore must be a list of strings like \"conv1.bias:vanishing\"")
    return value, str(path)


def read_waivers(app: App, flags: tuple[str, ...]) -> tuple[Any, ...]:
    """The waivers of ``[tool.gradscope]`` and of ``--ignore``; a bad one aborts with exit code 2,
    naming where it came from."""
    from gradscope.monitor.analysis import parse_waiver

    try:
        configured, path = configured_ignore(Path.cwd())
    except ValueError as error:
        app.abort(str(error), ExitCode.USAGE)
    waivers = []
    for text, source in [*((item, f"{path}: [tool.gradscope] ignore") for item in configured),
                         *((item, "--ignore") for item in flags)]:
        try:
            waivers.append(parse_waiver(text))
        except ValueError as error:
            app.abort(f"{source}: {error}", ExitCode.USAGE)
    return tuple(waivers)
