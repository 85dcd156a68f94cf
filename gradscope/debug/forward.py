"""Finding the line of the user's forward code whose result first holds a NaN or an Inf.

Module hooks only see what goes into and comes out of modules, so a ``log`` of a negative
number inside a custom ``forward`` shows up first as the output of that module, or as the input
of the next one. A :class:`ValueWatch` also traces the lines of the user's own files while the
forward pass runs (``sys.settrace``, only while a ``forward nan``/``inf`` breakpoint asks for it):
after every line it looks at the frame's local variables, and at every ``return`` at the returned
value, and reports the first tensor that holds a non-finite value it has not seen before, with
the line that made it.
"""
from __future__ import annotations

import sys
from types import FrameType, TracebackType
from typing import Any, Callable

from gradscope.debug.tracking import UserCode
from gradscope.engines import Engine

#: ``fn(tensor, kind, filename, line)``; ``kind`` is ``"nan"`` or ``"inf"``.
Found = Callable[[Any, str, str, int], None]


class ValueWatch:
    """Report new non-finite tensors made by the user's code while the block runs.

    Args:
        engine: the model's engine (tensors and their non-finite check).
        user_code: which files are traced.
        found: called for each tensor holding a NaN/Inf the watch had not seen, from inside the
            trace function (tracing is off while it runs).
    """

    def __init__(self, engine: Engine, user_code: UserCode, found: Found) -> None:
        self.engine = engine
        self.user_code = user_code
        self.found = found
        self._known: dict[int, tuple[Any, str | None]] = {}
        self._last_line: dict[int, int] = {}
        self._previous: Any = None

    def __enter__(self) -> "ValueWatch":
        self._previous = sys.gettrace()
        sys.settrace(self._trace_call)
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        sys.settrace(self._previous)

    def kind(self, tensor: Any) -> str | None:
        """``"nan"``, ``"inf"`` or None for ``tensor`` (remembered: the watch has seen it)."""
        known = self._known.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1]
        kind = self.engine.nonfinite_kind(tensor) if self._is_float(tensor) else None
        self._known[id(tensor)] = (tensor, kind)
        return kind

    def mark_seen(self, value: Any) -> None:
        """Remember the tensors in ``value`` without reporting them (a module's output, the
        arguments of a traced function)."""
        for tensor in self.engine.tensors_in(value):
            self.kind(tensor)

    def check(self, value: Any, filename: str, line: int) -> None:
        """Report the first tensor in ``value`` that is new and holds a NaN/Inf."""
        for tensor in self.engine.tensors_in(value):
            known = self._known.get(id(tensor))
            if known is not None and known[0] is tensor:
                continue
            kind = self.kind(tensor)
            if kind is not None:
                self.found(tensor, kind, filename, line)
                return

    @staticmethod
    def _is_float(tensor: Any) -> bool:
        is_floating = getattr(tensor, "is_floating_point", None)
        return bool(is_floating()) if is_floating is not None else True

    def _trace_call(self, frame: FrameType, event: str, arg: Any) -> Callable | None:
        if not self.user_code.is_user_frame(frame.f_code.co_filename, frame.f_lineno):
            return None
        for value in list(frame.f_locals.values()):
            self.mark_seen(value)
        self._last_line[id(frame)] = frame.f_lineno
        return self._trace_line

    def _trace_line(self, frame: FrameType, event: str, arg: Any) -> Callable | None:
        filename = frame.f_code.co_filename
        if event == "line":
            previous = self._last_line.get(id(frame), frame.f_lineno)
            for value in list(frame.f_locals.values()):
                self.check(value, filename, previous)
            self._last_line[id(frame)] = frame.f_lineno
        elif event == "return":
            self.check(arg, filename, frame.f_lineno)
            self._last_line.pop(id(frame), None)
        return self._trace_line
