"""``gradscope.jit``: TorchScript as model code uses it. gradscope runs Python eagerly, so
``script`` and ``trace`` give back the function or module itself (the same results, uncompiled),
and the annotations and decorators (``ignore``, ``unused``, ``export``, ``Final``) change nothing."""
from __future__ import annotations

from typing import Any, Callable, Final  # noqa: F401  (``jit.Final`` is typing's Final, as in PyTorch)

__all__ = ["Final", "annotate", "export", "ignore", "is_scripting", "is_tracing", "script", "trace", "unused"]


def script(obj: Any, optimize: Any = None, _frames_up: int = 0, _rcb: Any = None, example_inputs: Any = None) -> Any:
    """The function or module, run eagerly."""
    return obj


def trace(func: Any, example_inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The function or module, run eagerly (``example_inputs`` are not needed)."""
    return func


def ignore(drop: Any = False, **kwargs: Any) -> Any:
    """``@jit.ignore`` or ``@jit.ignore(drop=True)``: leaves the function as it is."""
    if callable(drop):
        return drop
    return lambda function: function


def unused(function: Callable) -> Callable:
    return function


def export(function: Callable) -> Callable:
    return function


def annotate(the_type: Any, the_value: Any) -> Any:
    return the_value


def is_scripting() -> bool:
    """False: gradscope never compiles TorchScript."""
    return False


def is_tracing() -> bool:
    """False: gradscope never traces."""
    return False
