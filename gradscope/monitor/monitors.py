"""Monitors: context managers that attach to a model through the public global module hooks.

Each monitor holds the ``RemovableHandle`` of every hook it registers and removes them all when its
``with`` block exits, also on error. Monitors record plain data and never print.
"""
from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from gradscope.monitor.records import ModuleRecord
from gradscope.monitor.stats import nonfinite_kind, norm_of, tensors_in, to_numpy
from gradscope.nn.modules import module as module_hooks


# Full backward hooks on a module whose inputs need no gradient (the model's first layer, fed
# with data) fire early with grad_input None and warn; that is expected while monitoring.
_EXPECTED_WARNING = ".*no inputs require gradients.*"


class _HookOwner:
    """Base: keeps handles and removes them all on ``__exit__``, also on error."""

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._warnings: Any = None

    def _attach(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "_HookOwner":
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message=_EXPECTED_WARNING, category=UserWarning)
        try:
            self._attach()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def close(self) -> None:
        """Remove every hook this monitor registered (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._warnings is not None:
            self._warnings.__exit__(None, None, None)
            self._warnings = None


def module_name(names: dict[int, str], module: Any) -> str | None:
    """The module's dotted path in the model, or None for modules outside it (e.g. a loss module)."""
    return names.get(id(module))


class GradientMonitor(_HookOwner):
    """Record the gradient flowing through each module of ``model``.

    Registers a global forward pre-hook (call order and count) and a global full backward hook
    ``hook(module, grad_input, grad_output) -> None`` that adds up the squared norms of
    ``grad_output`` and ``grad_input`` per module. Modules outside ``model`` are ignored.

    Example::

        with GradientMonitor(model) as monitor:
            loss_fn(model(x), y).backward()
        records = monitor.module_records()
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self._names = {id(module): name for name, module in model.named_modules()}
        self._types = {name: type(module).__name__ for name, module in model.named_modules()}
        self._calls: dict[str, int] = {}
        self._squares: dict[str, list[float | None]] = {}
        self._nonfinite: dict[str, int] = {}

    def _attach(self) -> None:
        self._handles.append(module_hooks.register_module_forward_pre_hook(self._on_forward_pre))
        self._handles.append(module_hooks.register_module_full_backward_hook(self._on_backward))

    def _on_forward_pre(self, module: Any, args: tuple) -> None:
        name = self._names.get(id(module))
        if name is not None:
            self._calls[name] = self._calls.get(name, 0) + 1

    def _on_backward(self, module: Any, grad_input: tuple, grad_output: tuple) -> None:
        name = self._names.get(id(module))
        if name is None:
            return
        out_norm, out_bad = norm_of(grad_output)
        in_norm, in_bad = norm_of(grad_input)
        squares = self._squares.setdefault(name, [None, None])
        for index, norm in ((0, out_norm), (1, in_norm)):
            if norm is not None:
                squares[index] = (squares[index] or 0.0) + norm * norm
        self._nonfinite[name] = self._nonfinite.get(name, 0) + out_bad + in_bad

    def module_records(self) -> tuple[ModuleRecord, ...]:
        """One record per module called in forward, in the order of their first call."""
        records = []
        for name, calls in self._calls.items():
            out_sq, in_sq = self._squares.get(name, [None, None])
            records.append(ModuleRecord(name=name, type=self._types[name], calls=calls,
                                        grad_output_norm=_sqrt(out_sq), grad_input_norm=_sqrt(in_sq),
                                        nonfinite=self._nonfinite.get(name, 0)))
        return tuple(records)


class ForwardNonFiniteTracer(_HookOwner):
    """Find where the first NaN/Inf appears in a forward pass.

    A global forward hook checks every module's inputs and output: the first module (in completion
    order) whose inputs are finite but whose output is not is the origin; later modules that receive
    a non-finite input only pass it on. When ``source_file`` is given, the lines of code in that file
    are traced as well (``sys.settrace``, only during this expensive re-run), so the exact line
    whose result first holds a non-finite tensor is known.

    Attributes:
        module: dotted path of the originating module, or None.
        node: the autograd node of the first non-finite tensor (``"LogBackward0"``), if any.
        kind: ``"nan"`` or ``"inf"``.
        source: ``(file, line)`` of the first line that produced a non-finite tensor, or None.
        propagated: modules that received a non-finite input.
    """

    def __init__(self, model: Any, source_file: Path | None = None) -> None:
        super().__init__()
        self._names = {id(module): name for name, module in model.named_modules()}
        self._source_file = str(source_file) if source_file is not None else None
        self.module: str | None = None
        self.module_found = False
        self.node: str | None = None
        self.kind: str | None = None
        self.source: tuple[str, int] | None = None
        self.source_node: str | None = None
        self.source_kind: str | None = None
        self.parameter_nonfinite = False
        self.propagated: list[str] = []
        self._checked: dict[int, tuple[Any, str | None]] = {}
        self._last_line: dict[int, int] = {}
        self._previous_trace: Callable | None = None

    def _attach(self) -> None:
        self._handles.append(module_hooks.register_module_forward_hook(self._on_forward))
        if self._source_file is not None:
            self._previous_trace = sys.gettrace()
            sys.settrace(self._trace_call)

    def close(self) -> None:
        if self._source_file is not None and sys.gettrace() == self._trace_call:
            sys.settrace(self._previous_trace)
        super().close()

    def _kind(self, tensor: Any) -> str | None:
        key = id(tensor)
        cached = self._checked.get(key)
        if cached is not None and cached[0] is tensor:
            return cached[1]
        kind = nonfinite_kind(to_numpy(tensor)) if getattr(tensor, "dtype", None) is not None else None
        self._checked[key] = (tensor, kind)
        return kind

    def _first_kind(self, value: Any) -> tuple[str | None, Any]:
        for tensor in tensors_in(value):
            kind = self._kind(tensor)
            if kind is not None:
                return kind, tensor
        return None, None

    def _on_forward(self, module: Any, args: tuple, output: Any) -> None:
        out_kind, tensor = self._first_kind(output)
        if out_kind is None:
            return
        in_kind, _ = self._first_kind(args)
        params_bad = any(self._kind(p) is not None for p in module.parameters(recurse=False))
        name = self._names.get(id(module))
        if not self.module_found and in_kind is None:
            self.module_found = True
            self.module = name
            self.kind = out_kind
            self.node = node_name(tensor)
            self.parameter_nonfinite = params_bad
        elif self.module_found and name is not None and not _contains(name, self.module):
            self.propagated.append(name)

    # ---- line tracing (sys.settrace), only for frames of the model file
    def _trace_call(self, frame: FrameType, event: str, arg: Any) -> Callable | None:
        if frame.f_code.co_filename != self._source_file:
            return None
        for value in list(frame.f_locals.values()):
            self._first_kind(value)  # arguments are not attributed to this frame
        self._last_line[id(frame)] = frame.f_lineno
        return self._trace_line

    def _trace_line(self, frame: FrameType, event: str, arg: Any) -> Callable | None:
        if self.source is None:
            if event == "line":
                for value in list(frame.f_locals.values()):
                    self._attribute(value, frame, self._last_line.get(id(frame), frame.f_lineno))
            elif event == "return":
                self._attribute(arg, frame, frame.f_lineno)
        if event == "return":
            self._last_line.pop(id(frame), None)
        else:
            self._last_line[id(frame)] = frame.f_lineno
        return self._trace_line

    def _attribute(self, value: Any, frame: FrameType, line: int) -> None:
        for tensor in tensors_in(value):
            known = self._checked.get(id(tensor))
            if known is not None and known[0] is tensor:
                continue
            kind = self._kind(tensor)
            if kind is not None and self.source is None:
                self.source = (frame.f_code.co_filename, line)
                self.source_node = node_name(tensor)
                self.source_kind = kind
                return


class BackwardNonFiniteTracer(_HookOwner):
    """Find the module whose backward first produces a NaN/Inf gradient.

    Global full backward pre-hooks and hooks track which modules' backward is in progress and
    compare ``grad_output`` with ``grad_input``: the first module whose ``grad_output`` is finite
    but whose ``grad_input`` is not is the origin, later ones only pass it on. Parameter tensor
    hooks catch a non-finite parameter gradient whose module sends finite gradients upstream.
    When anomaly mode stops backward with an error, :meth:`innermost_open` tells which module's
    backward was running.
    """

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model
        self._names = {id(module): name for name, module in model.named_modules()}
        self.module: str | None = None
        self.module_found = False
        self.kind: str | None = None
        self.parameter: str | None = None
        self.propagated: list[str] = []
        self._open: list[str] = []

    def _attach(self) -> None:
        self._handles.append(module_hooks.register_module_full_backward_pre_hook(self._on_pre))
        self._handles.append(module_hooks.register_module_full_backward_hook(self._on_full))
        for name, parameter in self.model.named_parameters():
            if parameter.requires_grad:
                self._handles.append(parameter.register_hook(self._parameter_hook(name)))

    def _on_pre(self, module: Any, grad_output: tuple) -> None:
        name = self._names.get(id(module))
        if name is not None:
            self._open.append(name)

    def _on_full(self, module: Any, grad_input: tuple, grad_output: tuple) -> None:
        name = self._names.get(id(module))
        if name is None:
            return
        if name in self._open:
            del self._open[len(self._open) - 1 - self._open[::-1].index(name)]
        in_kind = _first_kind(grad_input)
        if in_kind is None:
            return
        if not self.module_found and _first_kind(grad_output) is None:
            self.module_found = True
            self.module = name
            self.kind = in_kind
        elif self.module_found and not _contains(name, self.module):
            self.propagated.append(name)

    def _parameter_hook(self, name: str) -> Callable[[Any], None]:
        def hook(grad: Any) -> None:
            if self.parameter is None:
                kind = nonfinite_kind(to_numpy(grad))
                if kind is not None:
                    self.parameter = name
                    if not self.module_found and self.kind is None:
                        self.kind = kind
        return hook

    def innermost_open(self) -> str | None:
        """The innermost module whose backward had started but not finished."""
        return self._open[-1] if self._open else None


def node_name(tensor: Any) -> str | None:
    """``tensor.grad_fn.name()``, looking through the identity nodes of module backward hooks."""
    node = getattr(tensor, "grad_fn", None)
    while node is not None and node.name() == "BackwardHookFunctionBackward":
        following = [fn for fn, _ in node.next_functions if fn is not None]
        node = following[0] if following else None
    return node.name() if node is not None else None


def _first_kind(values: tuple) -> str | None:
    for value in values:
        if value is not None:
            kind = nonfinite_kind(to_numpy(value))
            if kind is not None:
                return kind
    return None


def _contains(outer: str, inner: str | None) -> bool:
    """True if module ``outer`` is ``inner`` or one of its ancestors."""
    if inner is None:
        return False
    return outer == inner or outer == "" or inner.startswith(outer + ".")


def _sqrt(value: float | None) -> float | None:
    if value is None:
        return None
    return math.sqrt(value) if not math.isnan(value) else math.nan
