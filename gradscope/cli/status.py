"""A one-line live status on a terminal that the program's own output does not garble.

``run`` shows ``gradscope: step 3  loss ...`` on stderr while the script prints its own lines. The
status line is drawn without a newline; :class:`BelowStatus` wraps the script's ``sys.stdout``
and ``sys.stderr`` so that each write first clears the status line, and once the script has
finished a line the status is drawn again under it: the script's output reads exactly as it
would without gradscope.
"""
from __future__ import annotations

import contextlib
import sys
from typing import IO, Any, Iterator

_CLEAR = "\r\x1b[2K"


class StatusLine:
    """The live status line on ``stream`` (a terminal)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.text = ""
        self.shown = False

    def show(self, text: str) -> None:
        """Replace the status line with ``text``."""
        self.text = text
        self._draw()

    def hide(self) -> None:
        """Clear the status line (it is drawn again after the next complete line of output)."""
        if self.shown:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self.shown = False

    def _draw(self) -> None:
        self.stream.write(_CLEAR + self.text)
        self.stream.flush()
        self.shown = True

    def after_output(self, text: str) -> None:
        """The program wrote ``text``: draw the status again when that ended a line."""
        if self.text and text.endswith("\n"):
            self._draw()


class BelowStatus:
    """A text stream that keeps the program's output above the status line (see the module)."""

    def __init__(self, stream: IO[str], status: StatusLine) -> None:
        self._stream = stream
        self._status = status

    def write(self, text: str) -> int:
        if not text:
            return 0
        self._status.hide()
        written = self._stream.write(text)
        if "\n" in text:
            self._stream.flush()
            self._status.after_output(text)
        return written

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def output_below(status: StatusLine | None) -> Iterator[None]:
    """Inside the block, ``sys.stdout`` and ``sys.stderr`` keep their output above ``status``
    (nothing changes when ``status`` is None); the status line is cleared at the end."""
    if status is None:
        yield
        return
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = BelowStatus(saved[0], status), BelowStatus(saved[1], status)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        status.hide()
