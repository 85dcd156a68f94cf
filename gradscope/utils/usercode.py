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
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Any, Iterator

from gradscope.errors import ControlFlow

__all__ = ["Terminated", "ArgumentParserExit", "interrupt", "signal_handlers", "passes_through", "describe_raise",
           "model_argv"]

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
