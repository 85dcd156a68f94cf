"""Options about what the views show (shared by ``inspect`` and ``watch``)."""
from __future__ import annotations

from typing import Any, Callable

from gradscope.cli.settings import option

F = Callable[..., Any]


def layers_option(fn: F) -> F:
    """``--layers GLOB`` (repeatable; config key ``layers``): list only the modules whose path matches."""
    return option("layers", "Show only modules whose path matches GLOB (e.g. 'encoder.layers.1*'; "
                            "'model' is the model itself); repeatable. Findings still cover every module.",
                  multiple=True)(fn)
