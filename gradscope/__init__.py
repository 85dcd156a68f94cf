"""gradscope: a gradient-flow debugger with a PyTorch-compatible autograd engine on numpy.

``import gradscope as gs`` gives the tensor API (``gs.tensor``, ``gs.exp``, ``gs.no_grad``, ...);
``from gradscope import nn`` gives modules, layers, losses and hooks.
"""
from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def _load() -> None:
    """Import the tensor API into this module (once)."""
    import importlib

    _api = importlib.import_module("gradscope._api")
    namespace = globals()
    for name, value in vars(_api).items():
        if not name.startswith("__"):
            namespace.setdefault(name, value)


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name == "_api":
        raise AttributeError(name)
    _load()
    try:
        return globals()[name]
    except KeyError:
        raise AttributeError(f"module 'gradscope' has no attribute '{name}'") from None


def __dir__() -> list:
    _load()
    return sorted(globals())
