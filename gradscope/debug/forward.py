"""Finding the line of the user's forward code whose result first holds a NaN or an Inf.

Module hooks only see what goes into and comes out of modules, so a ``log`` of a negative
number inside a custom ``forward`` shows up first as the output of that module, or as the input
of the next one. A :class:`ValueWatch` also traces the lines of the user's own files while the
forward pass runs (``sys.settrace``, only while a ``forward nan``/``inf`` breakpoint asks for it):
after every line it looks at the frame's local variables, and at every ``return`` at the returned
value, and reports the first tensor that holds a non-finite value it has not seen before, with
the line that made it. Every operation's output is checked as well (``trace_nonfinite_ops``), so
that the node reported is the operation that made the first NaN/Inf when the tensor found was
computed from it: ``log`` in ``y = log(x).mean()``, not ``mean``.
"""
from __future__ import annotations

from types import TracebackType
from typing import Any, Callable

from gradscope.debug.tracking import UserCode
from gradscope.engines import Engine, OpTrace
from gradscope.monitor.tracing import LineTracer, NonFiniteKinds

#: ``fn(tensor, kind, filename, line, node)``; ``kind`` is ``"nan"`` or ``"inf"``; ``node`` is the
#: autograd node of the operation that made the first non-finite value ``tensor`` was computed
#: from (``tensor.grad_fn`` itself when it made it, or when no operation was seen).
Found = Callable[[Any, str, str, int, Any], None]


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
        self._kinds = NonFiniteKinds(engine, floats_only=True)
        self._lines = LineTracer(user_code.is_user_frame, self.check, self.mark_seen)
        self._ops_context: Any = None
        self._ops: OpTrace | None = None

    def __enter__(self) -> "ValueWatch":
        self._ops_context = self.engine.trace_nonfinite_ops()
        self._ops = self._ops_context.__enter__()
        self._lines.__enter__()
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        self._lines.close()
        if self._ops_context is not None:
            context, self._ops_context = self._ops_context, None
            context.__exit__(None, None, None)

    def kind(self, tensor: Any) -> str | None:
        """``"nan"``, ``"inf"`` or None for ``tensor`` (remembered: the watch has seen it)."""
        return self._kinds.kind(tensor)

    def mark_seen(self, value: Any) -> None:
        """Remember the tensors in ``value`` without reporting them (a module's output, the
        arguments of a traced function)."""
        for tensor in self.engine.tensors_in(value):
            self._kinds.kind(tensor)

    def check(self, value: Any, filename: str, line: int) -> None:
        """Report the first tensor in ``value`` that is new and holds a NaN/Inf."""
        for tensor in self.engine.tensors_in(value):
            if self._kinds.known(tensor):
                continue
            kind = self._kinds.kind(tensor)
            if kind is not None:
                self.found(tensor, kind, filename, line, self._origin(tensor))
                return

    def _origin(self, tensor: Any) -> Any:
        """The node of the operation that made the first NaN/Inf ``tensor`` holds; else
        ``tensor``'s own node."""
        origin = self._ops.origin(tensor) if self._ops is not None else None
        if origin is not None and origin.grad_fn is not None:
            return origin.grad_fn
        return getattr(tensor, "grad_fn", None)
