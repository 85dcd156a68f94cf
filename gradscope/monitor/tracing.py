"""Following the user's source lines while a diagnostic re-run executes.

Shared by every localisation that needs more than module hooks: ``watch``'s and ``run``'s forward
NaN/Inf tracer, the graph-cut search of the diagnoses and the debugger's forward watch.

* :func:`relative_source`: how a place in the user's code is shown (which files are the user's
  is :func:`gradscope._tool.frames.is_user_file`'s to say);
* :class:`LineTracer`: ``sys.settrace`` over the frames of chosen files, reporting the local
  variables after every line and the value each frame returns;
* :class:`NonFiniteKinds`: the NaN/Inf check of a tensor, made once per tensor;
* :func:`hook_every_node`: a post-hook on every node of an autograd graph;
* :func:`join_path`, :func:`encloses` and :func:`module_words`: module paths in findings.
"""
from __future__ import annotations

import functools
import os
import sys
from types import FrameType, TracebackType
from typing import Any, Callable, Iterable

from gradscope.engines import ACCUMULATE_NODE, Engine


def relative_source(filename: str, line: int) -> str:
    """``file:line``, the file relative to the working directory when it is below it."""
    try:
        relative = os.path.relpath(filename)
    except ValueError:
        relative = filename
    return f"{filename if relative.startswith('..') else relative}:{line}"


def hook_every_node(roots: Iterable[Any], hook: Callable[[Any, tuple, tuple], None]) -> list:
    """Register ``hook(node, grad_inputs, grad_outputs) -> None`` as a post-hook on every autograd
    node reachable from the nodes ``roots`` (None entries are skipped), each once, except the
    ``AccumulateGrad`` nodes of the leaves; returns the handles."""
    handles = []
    stack = [node for node in roots if node is not None]
    seen = {id(node) for node in stack}
    while stack:
        node = stack.pop()
        if node.name() == ACCUMULATE_NODE:
            continue
        handles.append(node.register_hook(functools.partial(hook, node)))
        for child, _ in node.next_functions:
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return handles


def lines_of(source_file: str | os.PathLike) -> Callable[[str, int], bool]:
    """The ``follow`` predicate of a :class:`LineTracer` that traces one file."""
    path = str(source_file)
    return lambda filename, line: filename == path


def join_path(prefix: str, name: str) -> str:
    """The dotted path of ``name`` inside ``prefix`` (either may be empty)."""
    return f"{prefix}.{name}" if prefix and name else prefix or name


def encloses(outer: str, inner: str | None) -> bool:
    """True if module ``outer`` is ``inner`` or one of its ancestors (``""``, the root, encloses all)."""
    if inner is None:
        return False
    return outer == inner or outer == "" or inner.startswith(outer + ".")


def module_words(module: str | None) -> str:
    """How a finding names a module: None is code outside the modules, ``""`` the root's forward."""
    if module is None:
        return "code outside the model's modules"
    return f"module {module!r}" if module else "the model's own forward"


class LineTracer:
    """Trace the lines of chosen source files while a ``with`` block runs (``sys.settrace``).

    When a followed frame starts, ``entered(value)`` is called with each of its local variables
    (its arguments), so that values passed in can be told from values made inside. After each line
    of a followed frame, ``look(value, filename, line)`` is called with each local variable and the
    line that just ran; when the frame returns, with the returned value and the returning line.
    The trace function that was set before the block is set again when it exits.

    Args:
        follow: ``follow(filename, first_line) -> bool``: whether a frame of this code is traced.
        look: called with the values a line or a return left behind.
        entered: called with the arguments of a followed frame; None: nothing to do.
    """

    def __init__(self, follow: Callable[[str, int], bool], look: Callable[[Any, str, int], Any],
                 entered: Callable[[Any], Any] | None = None) -> None:
        self.follow = follow
        self.look = look
        self.entered = entered
        self._last_line: dict[int, int] = {}
        self._previous: Any = None
        self._active = False

    def __enter__(self) -> "LineTracer":
        self._previous = sys.gettrace()
        self._active = True
        sys.settrace(self._trace_call)
        return self

    def __exit__(self, kind: type | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop tracing and put the previous trace function back (idempotent)."""
        if self._active:
            self._active = False
            sys.settrace(self._previous)
            self._last_line.clear()

    def _trace_call(self, frame: FrameType, event: str, arg: Any) -> Callable | None:
        if not self.follow(frame.f_code.co_filename, frame.f_lineno):
            return None
        if self.entered is not None:
            for value in list(frame.f_locals.values()):
                self.entered(value)
        self._last_line[id(frame)] = frame.f_lineno
        return self._trace_line

    def _trace_line(self, frame: FrameType, event: str, arg: Any) -> Callable | None:
        if event == "line":
            filename = frame.f_code.co_filename
            line = self._last_line.get(id(frame), frame.f_lineno)
            for value in list(frame.f_locals.values()):
                self.look(value, filename, line)
        elif event == "return":
            self.look(arg, frame.f_code.co_filename, frame.f_lineno)
        if event == "return":
            self._last_line.pop(id(frame), None)
        else:
            self._last_line[id(frame)] = frame.f_lineno
        return self._trace_line


class NonFiniteKinds:
    """``"nan"``, ``"inf"`` or None per tensor, checked once and remembered by identity (the
    tensors are kept alive, so an identity is not reused while the memo lives).

    Args:
        engine: the tensors' engine.
        floats_only: count every tensor that is not floating point as finite without reading it.
    """

    def __init__(self, engine: Engine, floats_only: bool = False) -> None:
        self.engine = engine
        self.floats_only = floats_only
        self._kinds: dict[int, tuple[Any, str | None]] = {}

    def known(self, tensor: Any) -> bool:
        """Whether ``tensor`` was checked already."""
        entry = self._kinds.get(id(tensor))
        return entry is not None and entry[0] is tensor

    def kind(self, tensor: Any) -> str | None:
        """The tensor's kind of non-finite value (checked on the first call only)."""
        entry = self._kinds.get(id(tensor))
        if entry is not None and entry[0] is tensor:
            return entry[1]
        kind = None if self.floats_only and not _is_floating(tensor) else self.engine.nonfinite_kind(tensor)
        self._kinds[id(tensor)] = (tensor, kind)
        return kind

    def first(self, value: Any) -> tuple[str | None, Any]:
        """``(kind, tensor)`` of the first non-finite tensor in ``value``, else ``(None, None)``."""
        for tensor in self.engine.tensors_in(value):
            kind = self.kind(tensor)
            if kind is not None:
                return kind, tensor
        return None, None

    def clear(self) -> None:
        """Forget every tensor."""
        self._kinds.clear()


def _is_floating(tensor: Any) -> bool:
    is_floating = getattr(tensor, "is_floating_point", None)
    return bool(is_floating()) if is_floating is not None else True
