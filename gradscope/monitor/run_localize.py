"""Where did the first NaN/Inf of a ``gradscope run`` step start? (:func:`localize_from_kept_calls`;
:mod:`gradscope.monitor.localize` says how it relates to the other ways of localising.)

Called once, when the cheap per-step numbers of :class:`~gradscope.monitor.run.RunMonitor` held a
non-finite value. The script's step cannot be run again, but its model can: the model's calls of
this step were kept (inputs, random generator state, and the gradients that reached its outputs),
and the parameters have not changed since. Each call is re-run with full instrumentation:

* forward: global forward hooks check every module's inputs and outputs exactly, and the lines
  of the user's own files are traced, so the first module that turned finite inputs into NaN/Inf,
  the line and the autograd node are known;
* backward: the call's forward is re-run recording where nodes were created, node post-hooks are
  put on every node of its graph, and backward runs from the kept output gradients: the first
  node whose incoming gradients are finite but whose results are not is the origin, and the
  module whose forward created it is the module.
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np
from typing import TYPE_CHECKING, Any

from gradscope.engines import Engine
from gradscope.monitor.localize import backward_node_origin, forward_module_origin, update_origin
from gradscope.monitor.monitors import ForwardNonFiniteTracer
from gradscope.monitor.records import NonFiniteOrigin
from gradscope.monitor.stats import module_of
from gradscope._tool.frames import is_user_file
from gradscope.monitor.tracing import encloses, hook_every_node, module_words, relative_source

if TYPE_CHECKING:
    from gradscope.monitor.run import RunMonitor, RunOptions
    from gradscope.monitor.run_step import RootCall

def _follow(filename: str, line: int) -> bool:
    return is_user_file(filename)


def localize_from_kept_calls(monitor: "RunMonitor", engine: Engine, loss: Any, stats: Any,
                             step: int) -> NonFiniteOrigin:
    """The origin of the first non-finite value of this backward pass, found by re-running the
    model calls the monitor kept of it (see the module docstring)."""
    calls = [call for call in monitor.backward_pass.calls if call.engine is engine]
    monitor.localizing = True
    rng = engine.get_rng_state()
    try:
        origin = _forward_origin(monitor, engine, calls, stats, step)
        if origin is None:
            origin = _backward_origin(monitor, engine, calls, step)
    finally:
        engine.set_rng_state(rng)
        monitor.localizing = False
    if origin is not None:
        return origin
    if monitor.backward_pass.activation_nonfinite:
        kinds = {"nan" if math.isnan(value) else "inf" for value in stats.output_squares
                 if value is not None and not math.isfinite(value)}
        kind = "nan" if "nan" in kinds or not kinds else "inf"
        return NonFiniteOrigin(step=step, phase="forward", module=None, node=None, source=None, kind=kind,
                               detail=f"a module of the model returned {kind}; running the model again did not "
                                      "reproduce it")
    for (name, parameter), square in zip(monitor.parameters, stats.squares):
        if square is not None and not math.isfinite(square):
            kind = "nan" if math.isnan(square) else "inf"
            return NonFiniteOrigin(step=step, phase="backward", module=module_of(name), node=None, source=None,
                                   kind=kind, detail=f"the gradient of {name} is {kind}; re-running the model's "
                                                     "forward and backward pass did not reproduce it")
    kind = "nan" if loss is None or math.isnan(stats.loss or 0.0) else "inf"
    return NonFiniteOrigin(step=step, phase="forward", module=None, node=None, source=None, kind=kind,
                           detail="the loss is not finite; no module of the model produced a non-finite value")


def parameter_origin(engine: Engine, parameters: list[tuple[str, Any]], optimizer: Any, step: int,
                     options: "RunOptions", gradient_norms: dict[str, float | None] | None = None
                     ) -> NonFiniteOrigin | None:
    """An ``update`` origin if a parameter is non-finite (and watched), else None.

    ``gradient_norms``: the gradient norm of each parameter at that step, as the step's record
    shows it, so that the finding says what the record says."""
    if not parameters:
        return None
    squares = engine.squared_norms([p for _, p in parameters])
    for (name, _), square in zip(parameters, squares):
        if square is None or math.isfinite(square):
            continue
        kind = "nan" if math.isnan(square) else "inf"
        if (kind == "nan" and options.nan) or (kind == "inf" and options.inf):
            return update_origin(step, name, kind, optimizer, (gradient_norms or {}).get(name))
    return None


# ---------------------------------------------------------------------------- forward
def _forward_origin(monitor: "RunMonitor", engine: Engine, calls: list["RootCall"], stats: Any,
                    step: int) -> NonFiniteOrigin | None:
    for call in calls:
        kind = _first_kind(engine, [*engine.tensors_in(call.args), *engine.tensors_in(call.kwargs)])
        if kind is not None:
            source = relative_source(*call.call_site) if call.call_site is not None else None
            return NonFiniteOrigin(step=step, phase="forward", module=None, node=None, source=source,
                                   kind=kind, detail=f"the model{f' {call.name!r}' if call.name else ''} was "
                                                     f"called with inputs that already hold {kind} (the data): "
                                                     f"{_bad_inputs(engine, call)}")
    for call in calls:
        returned = _first_kind(engine, call.outputs)
        if returned is None and not monitor.backward_pass.activation_nonfinite:
            continue
        trace = ForwardNonFiniteTracer(engine.local_module(call.module), engine=engine, follow=_follow,
                                       module_name=monitor.module_name, module_outputs_at_lines=True,
                                       trace_ops=True, allow_inf=monitor.inf_allowance.allows
                                       if monitor.inf_allowance else None)
        try:
            with trace:
                _call_again(engine, call, track_inputs="floating")
        except Exception:  # noqa: BLE001 - a model that cannot be called again: report what is known
            trace.module_found = False
        if not trace.module_found:
            if returned is None:  # the non-finite module output was in another call
                continue
            return NonFiniteOrigin(step=step, phase="forward", module=call.name, node=engine.node_name(
                call.outputs[0]), source=None, kind=returned, detail=f"{module_words(call.name)} returned "
                                                                     f"{returned}; running it again did not "
                                                                     "reproduce it")
        if trace.parameter is not None:
            kind = trace.parameter_kind or trace.kind
            if monitor.optimizer_steps:
                return update_origin(step - 1, trace.parameter, kind, monitor.last_optimizer)
            return NonFiniteOrigin(step=step, phase="forward", module=trace.module, node=None, source=None,
                                   kind=kind, detail=f"parameter {trace.parameter} was already {kind} "
                                                     "before the first optimizer step")
        source = relative_source(*trace.source) if trace.source is not None else None
        note = " (the model's outputs, loss and gradients stayed finite: the value was masked out or unused)" \
            if returned is None and not trace.propagated else ""
        return forward_module_origin(step, trace.module, trace.kind, trace.source_node or trace.node, source,
                                     trace.propagated, note)
    if stats.loss is not None and not math.isfinite(stats.loss):
        kind = "nan" if math.isnan(stats.loss) else "inf"
        for output, node, frame, operation in monitor.loss_operations():
            made = engine.nonfinite_kind(output)
            if made is None:
                continue
            source = relative_source(*frame) if frame is not None else None
            if node is None:  # inputs that need no gradient (the targets): no autograd node made it
                return NonFiniteOrigin(step=step, phase="forward", module=None, node=None, source=source,
                                       kind=made, detail=f"the model's outputs are finite; {operation}() in the "
                                                         f"loss computation made {made} from values that need no "
                                                         "gradient (the targets)")
            return NonFiniteOrigin(step=step, phase="forward", module=None, node=node.name(), source=source,
                                   kind=made, detail=f"the model's outputs are finite; the loss computation outside "
                                                     f"the model produced {made} in {node.name()}")
        return NonFiniteOrigin(step=step, phase="forward", module=None, node=None, source=None, kind=kind,
                               detail=f"the model's outputs are finite; the loss computation produced {kind}")
    return None


def _bad_inputs(engine: Engine, call: "RootCall") -> str:
    """Which inputs of the call hold NaN/Inf, and at which batch elements (first dimension)."""
    import inspect

    names: dict[int, str] = {}
    try:
        bound = inspect.signature(call.forward or engine.local_module(call.module).forward).bind_partial(
            *call.args, **call.kwargs)
        names = {id(value): name for name, value in bound.arguments.items()}
    except (TypeError, ValueError):
        pass
    described = []
    values = [(repr(names[id(value)]) if id(value) in names else f"at position {index}", value)
              for index, value in enumerate(call.args)]
    values += [(repr(key), value) for key, value in call.kwargs.items()]
    for name, value in values:
        for tensor in engine.tensors_in(value):
            kind = engine.nonfinite_kind(tensor)
            if kind is None:
                continue
            array = engine.to_numpy(tensor)
            if array.ndim == 0:
                described.append(f"input {name} is {kind}")
                break
            bad = np.flatnonzero(~np.isfinite(array.reshape(array.shape[0], -1)).all(axis=1)).tolist()
            shown = ", ".join(str(index) for index in bad[:8]) + (", ..." if len(bad) > 8 else "")
            described.append(f"input {name}, batch element{'s' if len(bad) != 1 else ''} {shown} of "
                             f"{array.shape[0]}")
            break
    return "; ".join(described) or "an input"


# ---------------------------------------------------------------------------- backward
def _backward_origin(monitor: "RunMonitor", engine: Engine, calls: list["RootCall"],
                     step: int) -> NonFiniteOrigin | None:
    for call in reversed(calls):
        present = [(out, grad) for out, grad in zip(call.outputs, call.grad_outputs) if grad is not None]
        if not present:
            continue
        kind = _first_kind(engine, [grad for _, grad in present])
        if kind is not None:
            node, kind = _first_bad_node(engine, monitor.backward_pass.loss_events, kind)
            frames = [frame for _, made, frame, _ in monitor.loss_operations() if made is node and frame is not None]
            source = relative_source(*frames[0]) if frames else None
            return NonFiniteOrigin(step=step, phase="backward", module=None,
                                   node=node.name() if node is not None else None, source=source, kind=kind,
                                   detail=f"the gradient that reached the output of {module_words(call.name)} was "
                                          f"already {kind}: the loss computation outside the model produced it")
        trace = _BackwardTrace(monitor, engine)
        try:
            trace.run(call)
        except Exception:  # noqa: BLE001 - a model that cannot be called again: try the next call
            continue
        if trace.node is not None:
            source = relative_source(*trace.source) if trace.source is not None else None
            return backward_node_origin(step, trace.module, trace.node, trace.kind, source, trace.propagated)
    return None


class _BackwardTrace:
    """Re-run one model call and its backward pass with node post-hooks on every node."""

    def __init__(self, monitor: "RunMonitor", engine: Engine) -> None:
        self.monitor = monitor
        self.engine = engine
        self.node: str | None = None
        self.module: str | None = None
        self.kind = "nan"
        self.source: tuple[str, int] | None = None
        self.propagated: list[str] = []
        self._max_seq = -1
        self._open: dict[int, list[int]] = {}
        self._ranges: list[tuple[int, int, str]] = []
        self._events: list[tuple[str, Any, Any, Any]] = []

    def run(self, call: "RootCall") -> None:
        engine = self.engine
        handles = [engine.register_module_forward_pre_hook(self._on_pre),
                   engine.register_module_forward_hook(self._on_forward)]
        try:
            with engine.record_creation_traces():
                outputs = _call_again(engine, call, track_inputs="graph")
        finally:
            for handle in handles:
                handle.remove()
        tensors = [t for t in engine.tensors_in(outputs) if t.requires_grad]
        pairs = [(t, grad) for t, grad in zip(tensors, call.grad_outputs) if grad is not None]
        handles = hook_every_node([t.grad_fn for t, _ in pairs], self._on_node)
        try:
            self.monitor.original_backward(engine)([t for t, _ in pairs], [grad for _, grad in pairs])
        finally:
            for handle in handles:
                handle.remove()
        self._find()

    def _seq(self, tensor: Any) -> int:
        node = getattr(tensor, "grad_fn", None)
        return self.engine.node_sequence_nr(node) if node is not None else -1

    def _on_pre(self, module: Any, args: tuple) -> None:
        for tensor in self.engine.tensors_in(args):
            self._max_seq = max(self._max_seq, self._seq(tensor))
        self._open.setdefault(id(module), []).append(self._max_seq)

    def _on_forward(self, module: Any, args: tuple, output: Any) -> None:
        starts = self._open.get(id(module))
        start = starts.pop() if starts else self._max_seq
        tensors = self.engine.tensors_in(output)
        end = max([start, *(self._seq(t) for t in tensors)])
        self._max_seq = max(self._max_seq, end)
        name = self.monitor.module_name(module)
        if name is None:
            return
        self._ranges.append((start, end, name))
        for tensor in tensors:
            if tensor.requires_grad:
                tensor.register_hook(partial(self._on_output, name))

    def _on_output(self, name: str, grad: Any) -> None:
        if grad is not None:  # (None: the output's node ran, but the output got no gradient)
            self._events.append(("module", name, grad, None))

    def _on_node(self, node: Any, grad_inputs: tuple, grad_outputs: tuple) -> None:
        self._events.append(("node", node, grad_inputs, grad_outputs))

    def _find(self) -> None:
        engine = self.engine
        for what, subject, first, second in self._events:
            if what == "module":
                if self.node is not None and engine.nonfinite_kind(first) is not None \
                        and not encloses(subject, self.module) and subject not in self.propagated:
                    self.propagated.append(subject)
                continue
            if self.node is not None:
                continue
            produced = _first_kind(engine, [g for g in first if g is not None])
            if produced is None or _first_kind(engine, [g for g in second if g is not None]) is not None:
                continue
            self.node = subject.name()
            self.kind = produced
            self.module = self._module_of(engine.node_sequence_nr(subject))
            frames = [frame for frame in engine.node_trace(subject) if is_user_file(frame[0])]
            self.source = frames[-1] if frames else None

    def _module_of(self, seq: int) -> str | None:
        inside = [(start, name) for start, end, name in self._ranges if start < seq <= end]
        return max(inside, key=lambda item: item[0])[1] if inside else None


def _first_bad_node(engine: Engine, events: list, kind: str) -> tuple[Any, str]:
    """The first node (in execution order) whose incoming gradients are finite but whose results
    are not, and the kind of its result; ``(None, kind)`` when there is none."""
    for node, grad_inputs, grad_outputs in events:
        produced = _first_kind(engine, [g for g in grad_inputs if g is not None])
        if produced is not None and _first_kind(engine, [g for g in grad_outputs if g is not None]) is None:
            return node, produced
    return None, kind


# ---------------------------------------------------------------------------- helpers
def _call_again(engine: Engine, call: "RootCall", track_inputs: str | None = None) -> Any:
    """Call the model again with the kept inputs and the random state it had before.

    ``track_inputs``: None passes the inputs as they are; ``"graph"`` gives each input tensor that
    required grad in the script a fresh graph of its own; ``"floating"`` makes every floating-point
    input tensor require grad, so that every operation of the forward pass records a node whose
    name a finding can show (a parameter-free module such as ``x / x.norm()`` included).
    """
    if call.rng is not None:
        engine.set_rng_state(call.rng)
    args, kwargs = call.args, call.kwargs
    if track_inputs is not None:
        floating = track_inputs == "floating"
        args = tuple(_tracked(engine, value, floating) for value in args)
        kwargs = {key: _tracked(engine, value, floating) for key, value in kwargs.items()}
    module = engine.local_module(call.module)
    if call.forward is None:
        return module(*args, **kwargs)
    # the call ran an instance-level forward (a redirection, e.g. Lightning's to training_step): run it again
    state = module.__dict__
    saved = state.get("forward", _ABSENT)
    state["forward"] = call.forward
    try:
        return module(*args, **kwargs)
    finally:
        if saved is _ABSENT:
            state.pop("forward", None)
        else:
            state["forward"] = saved


_ABSENT = object()


def _tracked(engine: Engine, value: Any, floating: bool) -> Any:
    """``value`` on a fresh graph of its own when it requires grad (or, with ``floating``, is a
    floating-point tensor); a clone, so that the model's in-place operations on it stay legal."""
    if engine.is_tensor(value) and (value.requires_grad or (floating and value.is_floating_point())):
        return value.detach().requires_grad_().clone()
    return value


def _first_kind(engine: Engine, tensors: list) -> str | None:
    kinds = {engine.nonfinite_kind(tensor) for tensor in tensors if tensor is not None}
    return "nan" if "nan" in kinds else "inf" if "inf" in kinds else None


