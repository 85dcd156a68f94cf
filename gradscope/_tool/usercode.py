"""The boundary around the user's code: what passes through it and what is the model's fault.

Everything the user's code raises is the model's error, ``SystemExit`` and ``KeyboardInterrupt``
included, with two exceptions that pass through untouched:

* :class:`~gradscope.errors.ControlFlow`, which gradscope raises through user code on purpose;
* a real interrupt: Ctrl-C (``KeyboardInterrupt``) or SIGTERM (:class:`Terminated`) delivered to
  the process while :func:`signal_handlers` is active. Without those handlers (library use) every
  ``KeyboardInterrupt`` counts as real, as Python's own handler cannot be told apart.

:func:`model_argv` runs a model file as if started with no arguments: ``sys.argv`` is only the
file's path, and an ``argparse`` error becomes :class:`ArgumentParserExit` with argparse's message
instead of a usage text printed to stderr.

:class:`ImportScope` gives a user's file its folder on ``sys.path`` (as ``python FILE`` does) only
while its code runs, and keeps the modules it imports from that folder out of ``sys.modules`` in
between, so that loading a model file leaves the importing program as it found it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import types
from typing import Any, Iterator

from gradscope.errors import ControlFlow

__all__ = ["Terminated", "ArgumentParserExit", "ImportScope", "interrupt", "signal_handlers", "passes_through",
           "describe_raise", "model_argv"]

SIGTERM_EXIT = 143


class Terminated(KeyboardInterrupt):
    """SIGTERM was delivered: handled like Ctrl-C (a ``KeyboardInterrupt`` subclass), exit code 143."""


class ArgumentParserExit(SystemExit):
    """The model file's ``argparse`` parser refused the arguments (``message`` says why)."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message


class _State:
    installed = 0
    received: int | None = None


_state = _State()


def _on_signal(signum: int, frame: Any) -> None:
    interrupt(signum)


def interrupt(signum: int) -> None:
    """Act on a delivered SIGINT (``KeyboardInterrupt``) or SIGTERM (:class:`Terminated`) now,
    as a real interrupt (for handlers that deferred the signal, such as a distributed run's)."""
    _state.received = signum
    if signum == signal.SIGTERM:
        raise Terminated()
    raise KeyboardInterrupt()


@contextlib.contextmanager
def signal_handlers() -> Iterator[None]:
    """Handle SIGINT and SIGTERM as interrupts for the duration of the block (main thread only).

    Inside the block, a ``KeyboardInterrupt`` that no signal caused is the user's code raising it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    received = _state.received
    _state.received = None
    _state.installed += 1
    try:
        for signum in previous:
            signal.signal(signum, _on_signal)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        _state.installed -= 1
        _state.received = received


def passes_through(exc: BaseException) -> bool:
    """True when ``exc`` must cross the user-code boundary unchanged (see the module docstring)."""
    if isinstance(exc, ControlFlow):
        return True
    if isinstance(exc, KeyboardInterrupt):
        return not _state.installed or _state.received is not None
    return False


def describe_raise(exc: BaseException) -> str:
    """How a message says what the user's code did: ``raised ValueError: ...``, ``called sys.exit(5)``."""
    if isinstance(exc, ArgumentParserExit):
        return (f"parses command-line arguments and argparse refused them ({exc.message}); "
                "gradscope runs a model file without arguments")
    if isinstance(exc, SystemExit):
        code = exc.code
        return f"called sys.exit({code!r})" if code is not None else "called sys.exit()"
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"raised {type(exc).__name__}" + (f": {first}" if first else "")


def describe_syntax_error(label: str, exc: Exception) -> str:
    """One line for a file that does not compile: ``model.py:3: syntax error: invalid syntax: def f(:``
    (without the line number when Python gives none, as for a file holding null bytes)."""
    line = getattr(exc, "lineno", None)
    message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    source = getattr(exc, "text", None)
    text = f": {source.strip()}" if isinstance(source, str) and source.strip() else ""
    return f"{label}{f':{line}' if line else ''}: syntax error: {message}{text}"


@contextlib.contextmanager
def model_argv(path: str) -> Iterator[None]:
    """Run the block with ``sys.argv == [path]`` and argparse errors raised as :class:`ArgumentParserExit`."""
    import argparse

    saved_argv = sys.argv
    saved_error = argparse.ArgumentParser.error

    def error(parser: argparse.ArgumentParser, message: str) -> None:
        raise ArgumentParserExit(message)

    sys.argv = [path]
    argparse.ArgumentParser.error = error  # type: ignore[method-assign]
    try:
        yield
    finally:
        sys.argv = saved_argv
        argparse.ArgumentParser.error = saved_error  # type: ignore[method-assign]


class ImportScope:
    """The import state of one user file: what ``sys.path`` and ``sys.modules`` hold only while its
    code runs.

    Inside :meth:`active` the file's folder is on ``sys.path`` (put first, as for ``python FILE``,
    unless it is there already), so the file imports the helper modules beside it, and the modules
    it imported from that folder before are back in ``sys.modules``. When the outermost
    :meth:`active` block ends, ``sys.path`` is restored to the list it was, and every module
    imported from the folder since (a top-level module or package found there, a namespace package
    included, with its submodules) leaves ``sys.modules``, kept here for the next block. A folder
    named like a package the program imports (``torch/``, ``numpy/``) therefore cannot shadow it
    once the block is over, and ``pytest.importorskip("torch")`` stays honest in a session that
    loaded model files. Modules found elsewhere (torch imported for the first time by the file, say)
    stay imported, and so does anything from the folder that was imported before the first block.

    Args:
        directory: the user file's folder.
    """

    def __init__(self, directory: str) -> None:
        self.directory = os.path.realpath(directory)
        self._prefix = os.path.join(self.directory, "")
        self._own: dict[str, types.ModuleType] = {}
        self._before: set[str] | None = None
        self._depth = 0
        self._saved_path: list[str] = []
        self._module_count = 0

    def active(self) -> "ImportScope":
        """``with scope.active():`` runs the block with the folder importable; re-entrant (only the
        outermost block acts)."""
        return self

    def __enter__(self) -> None:
        if self._depth == 0:
            self._enter()
        self._depth += 1

    def __exit__(self, *exc_info: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._leave()

    def _enter(self) -> None:
        if self._before is None:
            self._before = {name for name, module in list(sys.modules.items())
                            if "." not in name and self._from_here(module)}
        self._saved_path = sys.path[:]
        if self.directory not in sys.path:
            sys.path.insert(0, self.directory)
        for name, module in self._own.items():
            sys.modules.setdefault(name, module)
        self._module_count = len(sys.modules)

    def _leave(self) -> None:
        sys.path[:] = self._saved_path
        if len(sys.modules) != self._module_count:
            self._collect()
        for name, module in self._own.items():
            if sys.modules.get(name) is module:
                del sys.modules[name]

    def _collect(self) -> None:
        """Take the modules newly imported from the folder into ``_own``."""
        assert self._before is not None
        tops = {name for name, module in list(sys.modules.items())
                if "." not in name and name not in self._before and name not in self._own and self._from_here(module)}
        tops.update(name for name in self._own if "." not in name)
        for name, module in list(sys.modules.items()):
            if name.partition(".")[0] in tops and module is not None:
                self._own[name] = module

    def _from_here(self, module: Any) -> bool:
        file = getattr(module, "__file__", None)
        if isinstance(file, str):
            return os.path.realpath(file).startswith(self._prefix)
        try:
            locations = list(getattr(module, "__path__", None) or ())
        except TypeError:
            return False
        return any(isinstance(location, str) and os.path.join(os.path.realpath(location), "").startswith(self._prefix)
                   for location in locations)
