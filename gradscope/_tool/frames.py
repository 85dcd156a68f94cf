"""Whose code a frame runs: the user's, a library's, or gradscope's own. One rule for every
place that reads a stack or a traceback.

* **gradscope's** code is every file of the ``gradscope`` package. Part of it is the
  **instrumentation**: ``gradscope/monitor/`` and ``gradscope/engines/``, the code that a
  monitored run puts around and inside the user's calls (hooks, wrappers around ``backward()`` and
  ``step()``, line tracers, the torch adapter's function and dispatch modes);
* **library** code is the standard library, installed packages, and code without a source file
  (``<string>``, ``<frozen importlib._bootstrap>``, the methods a dataclass generates);
* the **user's** code is everything else: the model file, the script and the modules beside them.

A file name is compared as it is given, made absolute; the package and library folders with
their links both kept and resolved, so that either spelling of an installed path matches.
gradscope's own folder is tested first: an installed gradscope is gradscope's, not a library's.

Who uses which question: the line tracers and the findings' source lines follow only
:func:`is_user_file`; anomaly mode records a node's creation stack without gradscope's frames
(:func:`is_gradscope_file`: a library's model, such as a ``transformers`` layer, stays in it);
a script's traceback is shown without the instrumentation (:func:`is_instrumentation_file`);
and :func:`raised_by_instrumentation` tells a failure of gradscope's run from the script's own.
"""
from __future__ import annotations

import enum
import functools
import os
import sysconfig
from types import CodeType, TracebackType
from typing import Callable, TypeVar

__all__ = ["Owner", "owner", "is_user_file", "is_gradscope_file", "is_instrumentation_file", "passes_call_through",
           "raised_by_instrumentation"]

_Function = TypeVar("_Function", bound=Callable)


class Owner(enum.Enum):
    """Whose code a file holds (see the module docstring)."""

    USER = "user"
    LIBRARY = "library"
    GRADSCOPE = "gradscope"  # gradscope's own code outside the instrumentation
    INSTRUMENTATION = "instrumentation"  # gradscope/monitor/ and gradscope/engines/


def _roots(paths: list[str]) -> tuple[str, ...]:
    """Each folder as given (made absolute) and with its links resolved, each ending in a separator."""
    return tuple(sorted({os.path.join(form(path), "")
                         for path in paths for form in (os.path.abspath, os.path.realpath)}))


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = _roots([_PACKAGE_DIR])
_INSTRUMENTATION = _roots([os.path.join(_PACKAGE_DIR, name) for name in ("monitor", "engines")])
_LIBRARIES = _roots([sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")])

# The code objects of gradscope's wrappers that only pass a call of the user's on (see
# passes_call_through), by identity: code objects compare equal by content, so a set would also
# match another function compiled from the same text in the same file.
_PASS_THROUGH: dict[int, CodeType] = {}


@functools.lru_cache(maxsize=None)
def owner(filename: str) -> Owner:
    """Whose code the source file ``filename`` (a code object's ``co_filename``) holds."""
    if filename.startswith("<"):
        return Owner.LIBRARY
    path = os.path.abspath(filename)
    if path.startswith(_INSTRUMENTATION):
        return Owner.INSTRUMENTATION
    if path.startswith(_PACKAGE):
        return Owner.GRADSCOPE
    if path.startswith(_LIBRARIES):
        return Owner.LIBRARY
    return Owner.USER


@functools.lru_cache(maxsize=None)
def is_user_file(filename: str) -> bool:
    """True for the user's own source files (not the standard library, installed packages,
    gradscope itself or code without a file such as ``<string>``)."""
    return owner(filename) is Owner.USER


@functools.lru_cache(maxsize=None)
def is_gradscope_file(filename: str) -> bool:
    """True for every file of the gradscope package, its instrumentation included."""
    return owner(filename) in (Owner.GRADSCOPE, Owner.INSTRUMENTATION)


@functools.lru_cache(maxsize=None)
def is_instrumentation_file(filename: str) -> bool:
    """True for the files of ``gradscope/monitor/`` and ``gradscope/engines/``."""
    return owner(filename) is Owner.INSTRUMENTATION


def passes_call_through(function: _Function) -> _Function:
    """Mark ``function`` as a wrapper of gradscope's that passes a call of the user's on (their
    ``backward()``, a torch function the script called under the adapter's mode): an exception
    raised by the call it makes is not gradscope's (see :func:`raised_by_instrumentation`)."""
    _PASS_THROUGH[id(function.__code__)] = function.__code__
    return function


def raised_by_instrumentation(traceback: TracebackType | None) -> bool:
    """True when gradscope's instrumentation, not the user's code, raised the exception whose
    traceback this is: of the frames that are either the instrumentation's or the user's, the
    innermost is the instrumentation's. Library frames, gradscope's other frames and the wrappers
    marked by :func:`passes_call_through` count as neither."""
    verdict = False
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if _PASS_THROUGH.get(id(code)) is not code:
            kind = owner(code.co_filename)
            if kind is Owner.INSTRUMENTATION:
                verdict = True
            elif kind is Owner.USER:
                verdict = False
        traceback = traceback.tb_next
    return verdict
