"""The torch adapter's operation tracing: a dispatch mode that finds the operations whose output
held NaN/Inf, and a function mode that records the operations run outside the model."""
from __future__ import annotations

import collections
import functools
import sys
from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from gradscope._tool.frames import passes_call_through
from gradscope.engines.observers import GraphOpRecorder, NonFiniteOp, OpTrace, stack_of
from gradscope.engines.spec import Engine
from gradscope.engines.torch.private import TorchDispatchMode, tree_leaves


# Operations whose output is uninitialised memory: a NaN there means nothing.
_UNINITIALISED = ("aten.empty", "aten.new_empty", "aten.empty_strided", "aten.empty_like", "aten.resize_")


class _NonFiniteOps(TorchDispatchMode):
    """Checks the output of every operation below autograd; records each non-finite one."""

    def __init__(self, trace: OpTrace) -> None:
        super().__init__()
        self.trace = trace
        self._pending: list = []  # records whose node autograd attaches after the operation returns

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if self._pending:  # the previous operation is now recorded by autograd
            self._read_nodes()
        out = func(*args, **(kwargs or {}))
        if not str(func).startswith(_UNINITIALISED):
            for tensor in tree_leaves(out):
                if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel() \
                        and not bool(torch.isfinite(tensor).all()):
                    kind = "nan" if bool(torch.isnan(tensor).any()) else "inf"
                    record = NonFiniteOp(str(func), kind, stack_of(sys._getframe(1)), tensor)
                    self.trace.outputs.append(record)
                    self._pending.append(record)
                    break
        return out

    def _read_nodes(self) -> None:
        for record in self._pending:
            record.grad_fn = record.tensor.grad_fn
        self._pending.clear()

    def __exit__(self, *exc_info: Any) -> Any:
        self._read_nodes()
        return super().__exit__(*exc_info)


class _GraphOpMode(TorchFunctionMode):
    """Passes every torch function through and shows it to the recorder (None: inert)."""

    def __init__(self, recorder: "_TorchGraphOpRecorder") -> None:
        super().__init__()
        self.recorder: _TorchGraphOpRecorder | None = recorder

    @passes_call_through  # func is the script's call: what it raises is the script's error
    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.recorder is not None:
            self.recorder.saw(func, args, kwargs, out)
        return out


def _on_top(mode: Any) -> bool:
    depth = torch._C._len_torch_function_stack()
    return bool(depth) and torch._C._get_function_stack_at(depth - 1) is mode


class _TorchGraphOpRecorder(GraphOpRecorder):
    """:class:`GraphOpRecorder` through a torch function mode pushed while it is started.

    ``loss.backward()`` would run inside the mode's handler (a tensor method under an active mode),
    where the mode is off the stack and cannot be removed; so while started, ``Tensor.backward``
    is wrapped to stop recording before it starts.
    """

    def __init__(self, engine: Engine, follow: Callable[[str], bool], limit: int) -> None:
        self.engine = engine
        self.records: collections.deque = collections.deque(maxlen=limit)
        self._follow = follow
        self._mode: _GraphOpMode | None = None
        self._stale: list[_GraphOpMode] = []
        self._backward: Any = None

    def start(self) -> None:
        self._drop_stale()
        if self._mode is None and not torch.compiler.is_compiling():
            self._mode = _GraphOpMode(self)
            self._mode.__enter__()
            if self._backward is None:
                self._backward = torch.Tensor.__dict__["backward"]
                torch.Tensor.backward = self._stop_then(self._backward)

    def _stop_then(self, backward: Callable) -> Callable:
        @functools.wraps(backward)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.stop()
            return backward(*args, **kwargs)

        return wrapper

    def stop(self) -> None:
        if self._backward is not None:
            torch.Tensor.backward = self._backward
            self._backward = None
        mode, self._mode = self._mode, None
        if mode is None:
            self._drop_stale()
            return
        if _on_top(mode):
            mode.__exit__(None, None, None)
        else:  # the script pushed a mode of its own above it: leave it there, inert, until it is on top
            mode.recorder = None
            self._stale.append(mode)
        self._drop_stale()

    def _drop_stale(self) -> None:
        while self._stale and _on_top(self._stale[-1]):
            self._stale.pop().__exit__(None, None, None)

    def clear(self) -> None:
        self.records.clear()

    def saw(self, func: Any, args: tuple, kwargs: dict | None, out: Any) -> None:
        if type(out) is not torch.Tensor:
            if not isinstance(out, (tuple, list)):
                if not isinstance(out, torch.Tensor):
                    return
            else:
                out = next((item for item in out if isinstance(item, torch.Tensor)), None)
                if out is None:
                    return
        if not out.is_floating_point():
            return
        frame = sys._getframe(2)
        follow = self._follow
        while frame is not None and not follow(frame.f_code.co_filename):
            frame = frame.f_back
        self.records.append((out, out.grad_fn, (frame.f_code.co_filename, frame.f_lineno) if frame is not None
                             else None, func, (args, kwargs)))
