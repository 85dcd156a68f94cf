"""The CLI's application object and exit codes.

``App`` lives in ``click``'s ``ctx.obj``. It owns the stdout and stderr consoles (created on first
use, never at import time, so ``CliRunner`` captures them) and turns errors into exit codes.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from enum import IntEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator, NoReturn

import click

if TYPE_CHECKING:
    from rich.console import Console


# Width of tables written to a pipe or file, where no terminal says how wide to be.
PIPE_WIDTH = 160


class ExitCode(IntEnum):
    """Process exit codes of every gradscope command."""

    OK = 0
    FINDINGS = 1
    USAGE = 2
    MODEL_ERROR = 3
    INTERNAL_ERROR = 4
    INTERRUPTED = 130
    STDOUT_CLOSED = 141
    TERMINATED = 143


class App:
    """Per-invocation state: output consoles, ``--debug`` and ``abort``.

    Args:
        debug: show full tracebacks for model and internal errors.

    Attributes:
        model_path: the model file the command loaded (None until one is loaded; ``gradscope run``
            loads none): an error its code raises that reaches the CLI is reported as the
            model's, with the line.
    """

    def __init__(self, debug: bool = False) -> None:
        self.debug = debug
        self.model_path: Path | None = None
        self._out: Console | None = None
        self._err: Console | None = None
        self._stdout: IO[str] | None = None

    @property
    def stdout(self) -> IO[str]:
        """The real stdout, where a command's document goes (even while user output is redirected)."""
        return self._stdout if self._stdout is not None else sys.stdout

    @contextlib.contextmanager
    def user_output_to_stderr(self) -> Iterator[None]:
        """Send everything printed to stdout inside the block to stderr, except what gradscope
        writes through this app: stdout then holds one document and nothing else.

        Where stdout is the process's file descriptor 1, the descriptor itself is pointed at
        stderr too, so ``os.write(1, ...)``, C extensions and child processes cannot reach it either.
        """
        saved = sys.stdout
        previous = self._stdout
        document = self.stdout
        descriptor = _move_descriptor_1(document)
        if descriptor is not None:
            document = io.TextIOWrapper(io.FileIO(descriptor, "w", closefd=False),
                                        encoding=getattr(saved, "encoding", None) or "utf-8", errors="replace")
        self._stdout = document
        sys.stdout = sys.stderr
        try:
            yield
        finally:
            sys.stdout = saved
            if descriptor is not None:
                with contextlib.suppress(OSError, ValueError):
                    document.flush()
                with contextlib.suppress(OSError, ValueError):
                    sys.stderr.flush()
                os.dup2(descriptor, 1)
                os.close(descriptor)
                if self._out is not None and _unwrapped(self._out.file) is document:
                    self._out = None
            self._stdout = previous

    def write(self, text: str) -> None:
        """Write ``text`` as it is to stdout."""
        self.stdout.write(text)
        self.stdout.flush()

    @property
    def out(self) -> "Console":
        """Console on stdout: the data a command reports."""
        if self._out is None:
            from rich.console import Console

            self._out = Console(file=_trimmed(self.stdout), highlight=False, soft_wrap=False)
            if not self._out.is_terminal and "COLUMNS" not in os.environ:
                self._out.width = PIPE_WIDTH
        return self._out

    @property
    def err(self) -> "Console":
        """Console on stderr: progress, notes and error messages."""
        if self._err is None:
            from rich.console import Console

            self._err = Console(file=_trimmed(sys.stderr), highlight=False, soft_wrap=True)
        return self._err

    @property
    def err_wraps(self) -> bool:
        """True when stderr has a width to wrap sentences at (a terminal, or ``COLUMNS`` set): there
        summaries are wrapped at words rather than cut mid-word by the terminal. Piped without
        ``COLUMNS``, each sentence stays on one line (``grep`` finds it whole)."""
        return self.err.is_terminal or "COLUMNS" in os.environ

    @property
    def stdout_is_terminal(self) -> bool:
        """True when stdout is an interactive terminal (live views), False when piped."""
        return self.out.is_terminal

    def echo_json(self, data: Any) -> None:
        """Write ``data`` as JSON (and nothing else) to stdout."""
        import json  # here, not at import time: ``gradscope --help`` does not need it

        self.write(json.dumps(data, indent=2, allow_nan=False) + "\n")

    def note(self, message: str) -> None:
        """One informational line on stderr."""
        self.err.print(message, markup=False)

    def warn(self, message: str) -> None:
        """One warning line on stderr."""
        self.err.print(f"warning: {message}", style="yellow", markup=False)

    def abort(self, message: str, code: ExitCode = ExitCode.INTERNAL_ERROR,
              exc: BaseException | None = None) -> NoReturn:
        """Print ``message`` as one error line on stderr and exit with ``code``.

        With ``--debug`` and an exception, the full traceback is printed first.
        """
        if self.debug and exc is not None:
            import traceback  # here, not at import time: ``gradscope --help`` does not need it

            sys.stderr.flush()
            click.echo("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
                       err=True, nl=False)
        self.err.print(f"error: {message}", style="bold red", markup=False)
        raise click.exceptions.Exit(int(code))

    def exit(self, code: ExitCode) -> NoReturn:
        """Exit with ``code`` without printing anything."""
        raise click.exceptions.Exit(int(code))


class _TrimmedLines:
    """A text stream that drops the blanks at the end of every line written through it: rich pads
    each line of a table to the table's width, which on a terminal is invisible and in a pipe or
    a file is noise (``diff``, ``grep 'x$'``, editors showing trailing whitespace). Blanks at the
    end of a write are held back until the next write shows whether a line ends there."""

    def __init__(self, stream: IO[str]) -> None:
        self.wrapped = stream
        self._blanks = ""

    def write(self, text: str) -> int:
        lines = (self._blanks + text).split("\n")
        last = lines[-1].rstrip(" ")
        self._blanks = lines[-1][len(last):]
        self.wrapped.write("\n".join([*(line.rstrip(" ") for line in lines[:-1]), last]))
        return len(text)

    def flush(self) -> None:
        self.wrapped.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def _trimmed(stream: IO[str]) -> Any:
    """``stream``, or where it is not a terminal, ``stream`` without blanks at the ends of lines."""
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError, OSError):
        terminal = False
    return stream if terminal else _TrimmedLines(stream)


def _unwrapped(stream: Any) -> Any:
    return stream.wrapped if isinstance(stream, _TrimmedLines) else stream


def _move_descriptor_1(stream: IO[str]) -> int | None:
    """When ``stream`` writes to file descriptor 1: flush it, keep a duplicate of descriptor 1
    (returned) and point descriptor 1 at stderr. None when ``stream`` is something else."""
    try:
        if stream.fileno() != 1:
            return None
        stderr = sys.stderr.fileno()
        stream.flush()
        descriptor = os.dup(1)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    try:
        os.dup2(stderr, 1)
    except OSError:
        os.close(descriptor)
        return None
    return descriptor
