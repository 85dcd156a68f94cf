"""How modules are named to people, and which ones ``--layers`` chooses (no rich: JSON uses it too)."""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Sequence

# How the model itself (module path "") is shown to people, everywhere; JSON keeps "".
ROOT_LABEL = "model"


def module_label(name: str | None) -> str:
    """How a module path is shown: the root module as ``model`` (as the debugger names it), code
    outside every module as ``(outside modules)``."""
    if name is None:
        return "(outside modules)"
    return name or ROOT_LABEL


def layer_selected(name: str | None, patterns: Sequence[str]) -> bool:
    """True when no pattern is given or module path ``name`` matches one of the globs
    (``"model"`` matches the model itself, whose path is ``""``)."""
    if not patterns:
        return True
    if name is None:
        return False
    return any(fnmatchcase(module_label(name), pattern) for pattern in patterns)
