"""``--ignore GLOB[:KIND]`` and ``ignore = [...]`` in ``[tool.gradscope]``: findings a project accepts.

A waiver names a parameter (or module) glob and a finding kind (``conv1.bias:vanishing``,
``encoder.*:no_grad``; without ``:KIND`` every kind). Waived findings are left out of the report
and fail nothing. Like every option, the flags (repeatable) win over the config file's list.
"""
from __future__ import annotations

from typing import Any, Callable

from gradscope.cli.app import ExitCode
from gradscope.cli.settings import option

F = Callable[..., Any]


def ignore_option(fn: F) -> F:
    """``--ignore GLOB[:KIND]`` (repeatable; config key ``ignore``)."""
    return option("ignore", "Accept findings of KIND (e.g. vanishing, no_grad; all kinds when left out) on "
                            "parameters or modules matching GLOB, e.g. conv1.bias:vanishing; repeatable.",
                  multiple=True)(fn)


def read_waivers(run: Any) -> tuple[Any, ...]:
    """The waivers of this run (``--ignore`` flags, else ``ignore`` in ``[tool.gradscope]``); a bad
    one aborts with exit code 2, naming where it came from."""
    from gradscope.monitor.analysis import parse_waiver

    resolved = run.settings["ignore"]
    waivers = []
    for text in resolved.value or ():
        try:
            waivers.append(parse_waiver(text))
        except ValueError as error:
            run.app.abort(f"{resolved.source}: {error}", ExitCode.USAGE)
    return tuple(waivers)
