"""Options about what the views show (shared by ``inspect`` and ``watch``)."""
from __future__ import annotations

from typing import Any, Callable

import click

F = Callable[..., Any]


def layers_option(fn: F) -> F:
    """``--layers GLOB`` (repeatable): list only the modules whose path matches one of the globs."""
    return click.option("--layers", "layers", multiple=True, metavar="GLOB",
                        help="Show only modules whose path matches GLOB (e.g. 'encoder.layers.1*'; "
                             "'model' is the model itself); repeatable. Findings still cover every module.")(fn)
