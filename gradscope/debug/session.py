"""The debugging session: hooks that turn forward and backward into stopping points.

A :class:`DebugSession` registers global module forward hooks (through the engine adapter,
so it works on gradscope's engine and on PyTorch alike) and hooks on the autograd nodes the
model creates. It never wraps a module's inputs or outputs (module full backward hooks would,
and in-place layers such as ``ReLU(inplace=True)`` then fail): it observes

* a module's ``grad_output`` with a pre-hook on the nodes that made its outputs (what a tensor
  hook on each output sees, taken together);
* a module's ``grad_input`` by adding up what the module's nodes send to the gradient edges of
  its arguments (recorded when the call started), in node post-hooks.

Each hook builds an :class:`~gradscope.debug.conditions.Event`; when a breakpoint matches it
(or the user is stepping), the session *stops*: it calls ``interface.interact(session)`` from
inside the hook, so everything is live. An edit of ``grad_output`` is what the pre-hook
returns; an edit of ``grad_input`` is applied by a pre-hook on the nodes that receive it, which
have not run yet when the module's backward is done (nodes run from the newest to the oldest).
The rest of backward then sees exactly what a module full backward hook returning the edit
would have passed on.

Stopping points, in order:

* ``forward``: after a module call returns, or (with ``forward nan``/``inf`` breakpoints, see
  :mod:`gradscope.debug.forward`) right after a line of the user's forward code made a
  non-finite value;
* ``start``: forward done, backward not started (``run_debug_step`` only);
* ``pre``: a module's ``grad_output`` is known, before its backward;
* ``node``: an autograd node has run (only for ``node`` breakpoints);
* ``post``: every node of the module's call has run (its parameters' gradients are
  accumulated) and ``grad_input`` is known.
"""
from __future__ import annotations

import functools
import linecache
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

from gradscope.debug.conditions import NONFINITE_KINDS, BreakpointTable, Event
from gradscope.debug.forward import ValueWatch
from gradscope.debug.graph import HOOK_NODE, AutogradGraph, build_graph
from gradscope.debug.stats import MissingTensor, l2_norm, nonfinite_count, tensor_stats, total_norm
from gradscope.debug.tracking import Call, ForwardTracker, UserCode
from gradscope.debug.views import (BreakpointList, BreakpointRow, GradGroup, GradsView, LayerRow, LayerTable,
                                   ParamRow, ParamsView, Position)
from gradscope.engines import Engine, engine_of
from gradscope.errors import ControlFlow, GradscopeError
from gradscope.monitor.tracing import relative_source

_EDITABLE = {"pre": "grad_output", "post": "grad_input", "node": "grad_input"}


class DebuggerQuit(ControlFlow):
    """Raised by ``quit``: aborts the forward or backward pass after every hook has been
    removed and the model restored. It derives from ``BaseException`` (through
    :class:`ControlFlow`) so that ``except Exception`` blocks in user code let it through."""


class DebugCommandError(GradscopeError):
    """A command that cannot run here (e.g. ``scale`` when there is no gradient to edit)."""


class Interface(Protocol):
    """What a session talks to when it stops (the command shell)."""

    def interact(self, session: "DebugSession") -> None:
        """Run commands until one resumes (step, next, continue, finish); quit raises
        :class:`DebuggerQuit`."""

    def show(self, view: Any) -> None:
        """Show a view record or a message."""


@dataclass
class Snapshot:
    """Copies of the model's parameter gradients (and optionally values and buffers)."""

    engine: Engine
    grads: list
    values: list | None = None
    buffers: list | None = None

    @classmethod
    def take(cls, model: Any, values: bool, engine: Engine | None = None) -> "Snapshot":
        engine = engine or _engine(model)
        with engine.no_grad():
            params = list(model.parameters())
            grads = [(p, None if p.grad is None else engine.clone(p.grad)) for p in params]
            if not values:
                return cls(engine, grads)
            return cls(engine, grads, [(p, engine.clone(p)) for p in params],
                       [(b, engine.clone(b)) for b in model.buffers()])

    def restore(self) -> None:
        """Put every recorded gradient, value and buffer back."""
        engine = self.engine
        for tensor, saved in (self.values or []) + (self.buffers or []):
            engine.copy_into(tensor, saved)
        for param, grad in self.grads:
            param.grad = None if grad is None else engine.clone(grad)


@dataclass(eq=False)
class _CallState:
    """What backward did with one module call."""

    pre_seen: bool = False
    post_done: bool = False
    deferred: bool = False
    grad_output: list | None = None
    output_templates: list | None = None
    grad_input: list | None = None
    grad_output_norm: float | None = None
    grad_input_norm: float | None = None
    nonfinite: int = 0
    pending: set = field(default_factory=set)
    edits: list = field(default_factory=list)


@dataclass(eq=False)
class _Part:
    """What one node sent along a gradient edge in this pass (``sender``), or what a module's
    ``grad_input`` edit put in place of its nodes' parts (``edited_by``)."""

    array: np.ndarray
    sender: Any = None
    edited_by: Call | None = None

    def belongs_to(self, call: Call) -> bool:
        """Whether the part is ``call``'s: sent by one of its nodes, or an edit of a call inside it."""
        if self.edited_by is not None:
            return _within(self.edited_by, call)
        return self.sender in call.nodes


@dataclass(eq=False)
class _Edge:
    """The gradient sent along one edge ``(node, output_nr)`` that is some call's argument."""

    parts: list = field(default_factory=list)
    sent: np.ndarray | None = None
    edited: bool = False

    def add(self, sender: Any, array: np.ndarray) -> None:
        self.parts.append(_Part(array, sender=sender))
        self.sent = array.copy() if self.sent is None else self.sent + array

    def part_of(self, call: Call) -> np.ndarray | None:
        """The sum of ``call``'s parts (None when it sent nothing)."""
        mine = [part.array for part in self.parts if part.belongs_to(call)]
        return None if not mine else functools.reduce(np.add, mine[1:], mine[0].copy())

    def replace(self, call: Call, array: np.ndarray) -> None:
        """Put ``array`` in place of ``call``'s parts."""
        self.parts = [part for part in self.parts if not part.belongs_to(call)] + [_Part(array, edited_by=call)]
        self.edited = True

    def total(self, received: np.ndarray) -> np.ndarray:
        """What the receiving node gets after the edits, given what it ``received``: the sum of
        the parts when they add up to it (every sender was seen), else ``received`` corrected by
        the difference the edits made."""
        arrays = [part.array for part in self.parts]
        now = functools.reduce(np.add, arrays[1:], arrays[0].copy())
        if self.sent is not None and self.sent.shape == received.shape \
                and np.array_equal(self.sent, received, equal_nan=True):
            return np.asarray(now, dtype=received.dtype)
        return np.asarray(received - self.sent + now, dtype=received.dtype)


@dataclass(eq=False)
class Stop:
    """The point where the session is stopped."""

    phase: str
    call: Call | None
    node: Any
    reason: str
    groups: dict
    editable: str | None = None
    edited: bool = False
    edits: list = field(default_factory=list)
    source: str | None = None
    value_kind: str | None = None
    line: tuple[str, int] | None = None


def _engine(model: Any) -> Engine:
    engine = engine_of(model)
    if engine is None:
        raise GradscopeError(f"cannot debug a {type(model).__name__}: expected an nn.Module of gradscope or "
                             "PyTorch")
    return engine


def _within(call: Call | None, ancestor: Call) -> bool:
    while call is not None:
        if call is ancestor:
            return True
        call = call.parent
    return False


class DebugSession:
    """Breakpoints, stepping and gradient edits on one model (gradscope's or PyTorch's).

    Args:
        model: the root module to debug.
        interface: what to call when stopping (``DebuggerShell``).
        conditions: breakpoint conditions to set (see ``gradscope.debug.conditions``).
        stop_at_start: stop once before backward starts (``run_debug_step`` only).
        snapshot_each_pass: take a snapshot of the gradients at the start of every backward
            pass, to restore on ``quit`` (library use inside a training loop).
        step: the training step number, shown by ``where``.
        locate: ``fn(module_path) -> "file:line" | None`` where a module is defined (see
            ``ForwardTracker``).
        engine: the model's engine adapter (default: found from the model).
        user_code: which stack frames are the user's (for source lines).
    """

    def __init__(self, model: Any, interface: Interface, *, conditions: tuple | list = (),
                 stop_at_start: bool = False, snapshot_each_pass: bool = True, step: int | None = None,
                 locate: Callable[[str], str | None] | None = None, engine: Engine | None = None,
                 user_code: UserCode | None = None) -> None:
        self.model = model
        self.engine = engine or _engine(model)
        self.interface = interface
        self.breakpoints = BreakpointTable()
        for condition in conditions:
            self.breakpoints.add(condition)
        self.tracker = ForwardTracker(model, on_call_end=self._on_call_end, on_pass_start=self._on_pass_start,
                                      locate=locate, engine=self.engine, user_code=user_code,
                                      on_call_start=self._on_call_start)
        self.user_code = self.tracker.user_code
        self.parameter_names = {id(p): name for name, p in model.named_parameters()}
        self.stop_at_start = stop_at_start
        self.snapshot_each_pass = snapshot_each_pass
        self.step = step
        self.snapshot: Snapshot | None = None
        self.mode = "continue"
        self.next_depth = 0
        self.state = "idle"
        self.current: Stop | None = None
        self.loss: Any = None
        self.attached = False
        self.value_watch: ValueWatch | None = None
        self._pausing = False
        self._post_handles: dict = {}
        self._pre_handles: dict = {}
        self._pre_calls: dict = {}
        self._reset_pass()

    # ---------------------------------------------------------------- lifecycle
    def attach(self) -> "DebugSession":
        """Register the forward hooks. Calls made before attaching are not debugged."""
        if self.attached:
            return self
        self.tracker.attach()
        self.attached = True
        return self

    def detach(self) -> None:
        """Remove every hook the session registered (idempotent)."""
        self.tracker.detach()
        self._remove_node_hooks()
        self.attached = False

    remove = detach

    def __enter__(self) -> "DebugSession":
        return self.attach()

    def __exit__(self, *exc_info: Any) -> None:
        self.detach()

    def _remove_node_hooks(self) -> None:
        for handle in list(self._post_handles.values()) + list(self._pre_handles.values()):
            handle.remove()
        self._post_handles = {}
        self._pre_handles = {}
        self._pre_calls = {}

    def _reset_pass(self) -> None:
        self._remove_node_hooks()
        self._states: dict = {}
        self._ran: dict = {}
        self._reachable: set | None = None
        self._first_nonfinite: tuple | None = None
        self._edges: dict = {}
        self._pass_open = False

    def _on_pass_start(self) -> bool:
        """Called before a top-level forward call; True to forget the calls recorded so far."""
        finished = self.state == "finished" or not any(c.has_grad_outputs for c in self.tracker.calls)
        if finished:
            self._reset_pass()
            self.state = "forward"
            self.mode = "continue" if self.mode == "finish" else self.mode
        return finished

    def _active(self) -> bool:
        return self.attached and not self._pausing

    def _state(self, call: Call) -> _CallState:
        state = self._states.get(call)
        if state is None:
            state = self._states[call] = _CallState()
        return state

    def watches_forward_values(self) -> bool:
        """Whether a ``forward`` breakpoint looks for NaN/Inf (then ``run_debug_step`` traces the
        lines of the forward pass with a :class:`ValueWatch`)."""
        return any(b.enabled and b.watches_forward_values() for b in self.breakpoints.breakpoints)

    def forward_watch(self) -> ValueWatch | nullcontext:
        """A context that traces the forward pass for non-finite values when a breakpoint asks."""
        if not self.watches_forward_values():
            return nullcontext()
        self.value_watch = ValueWatch(self.engine, self.user_code, self._forward_value)
        return self.value_watch

    def forward_breakpoint_for(self, loss: Any) -> str | None:
        """The ``forward`` condition that stops at the line which made the loss NaN/Inf, when the
        loss is already non-finite before backward starts and the breakpoints that look for
        NaN/Inf only check backward points (they would stop far from the cause, at the loss's
        own nodes); None otherwise."""
        if self.watches_forward_values():
            return None
        kind = self._loss_kind(loss)
        if kind is None:
            return None
        backward_only = [b for b in self.breakpoints.breakpoints
                         if b.enabled and b.kinds() & NONFINITE_KINDS and "forward" not in b.phases]
        return f"forward {kind}" if backward_only else None

    def forget_forward(self) -> None:
        """Forget the forward pass recorded so far (before running it again from the same state)."""
        self.tracker.reset()
        self._reset_pass()
        self.state = "idle"

    def _loss_kind(self, loss: Any) -> str | None:
        """``"nan"``/``"inf"`` when the loss is a tensor that holds one, else None."""
        if not self.engine.is_tensor(loss):
            return None
        return self.engine.nonfinite_kind(loss)

    # ---------------------------------------------------------------- driving one step
    def begin_backward(self, loss: Any) -> None:
        """Tell the session the loss about to be differentiated: tracks every node under it,
        and stops at ``start`` if asked to (or stepping)."""
        self.value_watch = None
        self.loss = loss
        roots = [loss.grad_fn] if getattr(loss, "grad_fn", None) is not None else []
        reachable: set = set()
        stack = list(roots)
        while stack:
            node = stack.pop()
            if node in reachable:
                continue
            reachable.add(node)
            stack.extend(child for child, _ in node.next_functions if child is not None)
        self._reachable = reachable
        self._hook_nodes(reachable)
        self.state = "start"
        if self.stop_at_start or self.mode in ("step", "next"):
            self.stop_at_start = False
            reason = "forward done, backward not started" if self.mode == "continue" else self.mode
            self._pause(Stop("start", None, None, reason, {}))

    def end(self) -> None:
        """Mark the pass finished (``run_debug_step`` calls this after backward returned)."""
        self.state = "finished"
        self.current = None

    def quit(self) -> None:
        """Abort: restore the snapshot, remove every hook, raise :class:`DebuggerQuit`."""
        if self.snapshot is not None:
            self.snapshot.restore()
        self.detach()
        raise DebuggerQuit("debugger quit: the pass was aborted and the model restored")

    def resume(self, mode: str) -> None:
        """Set how to go on: ``"step"``, ``"next"``, ``"continue"`` or ``"finish"``."""
        if self.state == "finished":
            raise DebugCommandError("the backward pass has finished; nothing to run (use quit to leave)")
        self.mode = mode
        stop = self.current
        self.next_depth = stop.call.depth if stop is not None and stop.call is not None else 0
        if stop is not None and stop.phase == "start":
            self.next_depth = 1 << 30

    # ---------------------------------------------------------------- forward hooks
    def _on_call_start(self, call: Call, args: tuple) -> None:
        if self.value_watch is None or not self._active():
            return
        site = self.user_code.user_frame()
        if site is not None:
            self.value_watch.check(args, *site)

    def _on_call_end(self, call: Call, output: Any) -> None:
        if not self._active():
            return
        self._hook_nodes(call.own_nodes)
        for edge in call.input_edges:
            if edge is not None and edge not in self._edges:
                self._edges[edge] = _Edge()
        for node in call.output_nodes:
            self._pre_calls.setdefault(node, []).append(call)
            self._ensure_pre_hook(node)
        if self.value_watch is not None:
            self.value_watch.mark_seen(output)
        if self.mode == "finish":
            return
        arrays = [self.engine.to_numpy(t) for t in self.engine.tensors_in(output)]
        self._event("forward", call, None, {"output": arrays})

    def _forward_value(self, tensor: Any, kind: str, filename: str, line: int, node: Any) -> None:
        """A line of the user's forward code made a non-finite tensor (from :class:`ValueWatch`);
        ``node`` is the operation that made the first non-finite value in it."""
        if not self._active() or self.mode == "finish":
            return
        active = self.tracker.active_calls
        call = active[-1] if active else None
        self._event("forward", call, node, {"output": [self.engine.to_numpy(tensor)]},
                    value_kind=kind, line=(filename, line))

    # ---------------------------------------------------------------- backward hooks
    def _begin_pass(self) -> None:
        if self._pass_open:
            return
        self._pass_open = True
        self.state = "backward"
        self.engine.queue_backward_callback(self._on_backward_end)
        if self.snapshot_each_pass:
            self.snapshot = Snapshot.take(self.model, values=False, engine=self.engine)

    def _hook_nodes(self, nodes: Any) -> None:
        for node in nodes:
            if node not in self._post_handles:
                self._post_handles[node] = node.register_hook(self._make_post_hook(node))

    def _ensure_pre_hook(self, node: Any) -> None:
        if node not in self._pre_handles:
            self._pre_handles[node] = node.register_prehook(self._make_pre_hook(node))

    def _make_post_hook(self, node: Any) -> Callable:
        def node_ran(grad_inputs: tuple, grad_outputs: tuple) -> tuple | None:
            if not self._active():
                return None
            return self._node_ran(node, grad_inputs, grad_outputs)

        return node_ran

    def _make_pre_hook(self, node: Any) -> Callable:
        def node_starts(grad_outputs: tuple) -> tuple | None:
            if not self._active():
                return None
            return self._node_starts(node, grad_outputs)

        return node_starts

    def _any_nonfinite(self, tensors: Any) -> bool:
        return any(t is not None and self.engine.nonfinite_kind(t) is not None for t in tensors)

    def _arrays(self, tensors: Any) -> list:
        return [None if t is None else self.engine.to_numpy(t) for t in tensors]

    def _tensor_like(self, array: np.ndarray, template: Any) -> Any:
        """``array`` as a tensor on ``template``'s device with its dtype."""
        return self.engine.from_numpy(array, device=self.engine.describe_device(template),
                                      dtype=self.engine.dtype_name(template))

    def _node_starts(self, node: Any, grad_outputs: tuple) -> tuple | None:
        """Pre-hook of a node that receives a module's output or argument gradient: applies
        ``grad_input`` edits made upstream, then the ``pre`` points of the calls it made."""
        self._begin_pass()
        current = list(grad_outputs)
        changed = False
        for slot, gradient in enumerate(current):
            edge = self._edges.get((node, slot))
            if edge is not None and edge.edited and gradient is not None:
                current[slot] = self._tensor_like(edge.total(self.engine.to_numpy(gradient)), gradient)
                changed = True
        for call in sorted(self._pre_calls.get(node, ()), key=lambda c: c.index):
            if self._pre_point(call, node, current):
                changed = True
        return tuple(current) if changed else None

    def _pre_point(self, call: Call, node: Any, current: list) -> bool:
        """Record (and maybe stop at) the ``pre`` point of ``call``; edits go into ``current``."""
        state = self._state(call)
        slots = [(index, nr) for index, (edge_node, nr) in enumerate(call.output_edges) if edge_node is node]
        if state.grad_output is None:
            state.grad_output = [None] * len(call.output_edges)
            state.output_templates = [None] * len(call.output_edges)
        for index, nr in slots:
            gradient = current[nr] if nr < len(current) else None
            state.grad_output[index] = None if gradient is None else self.engine.to_numpy(gradient)
            state.output_templates[index] = gradient
        state.grad_output_norm = total_norm(state.grad_output)
        state.nonfinite += sum(nonfinite_count(state.grad_output[i]) for i, _ in slots
                               if state.grad_output[i] is not None)
        if state.pre_seen:
            return False  # a later output node of a call whose pre point has passed
        state.pre_seen = True
        state.deferred = not call.has_grad_inputs
        state.pending = {n for n in call.nodes if n not in self._ran
                         and (self._reachable is None or n in self._reachable)}
        stop = self._event("pre", call, None, {"grad_output": state.grad_output})
        if stop is None or not stop.edited:
            return False
        for index, nr in slots:
            new, template = stop.groups["grad_output"][index], state.output_templates[index]
            if template is not None and new is not None:
                current[nr] = self._tensor_like(new, template)
        return True

    def _node_ran(self, node: Any, grad_inputs: tuple, grad_outputs: tuple) -> tuple | None:
        self._begin_pass()
        self._ran[node] = len(self._ran)
        owner = self.tracker.owner_of(node)
        if self._first_nonfinite is None and self._any_nonfinite(grad_inputs) \
                and not self._any_nonfinite(grad_outputs):
            self._first_nonfinite = (node, owner)
        # Gradients are copied to the host only where they are looked at: for node breakpoints,
        # and along the edges that are some module's argument (for its grad_input).
        produced: list | None = None
        replacement = None
        if self.mode != "finish" and self.breakpoints.wants("node"):
            produced = self._arrays(grad_inputs)
            stop = self._event("node", owner, node, {"grad_output": self._arrays(grad_outputs),
                                                     "grad_input": produced})
            if stop is not None and stop.edited:
                produced = stop.groups["grad_input"]
                replacement = tuple(None if template is None or new is None else self._tensor_like(new, template)
                                    for new, template in zip(produced, grad_inputs))
        for index, ((child, nr), gradient) in enumerate(zip(node.next_functions, grad_inputs)):
            edge = self._edges.get((child, nr)) if child is not None and gradient is not None else None
            if edge is not None:
                edge.add(node, produced[index] if produced is not None else self.engine.to_numpy(gradient))
        call = owner
        while call is not None:
            state = self._states.get(call)
            if state is not None and state.pre_seen:
                if node in state.pending:
                    state.pending.discard(node)
                    if not state.pending and not state.post_done:
                        self._post_point(call, editable=True)
            call = call.parent
        return replacement

    def _post_point(self, call: Call, editable: bool) -> None:
        state = self._state(call)
        state.post_done = True
        arrays = [None if edge is None or edge not in self._edges else self._edges[edge].part_of(call)
                  for edge in call.input_edges]
        state.grad_input = arrays
        state.grad_input_norm = total_norm(arrays) if any(a is not None for a in arrays) else None
        state.nonfinite += sum(nonfinite_count(a) for a in arrays if a is not None)
        groups = {"grad_output": state.grad_output or [], "grad_input": arrays}
        # An edit needs the nodes that receive grad_input not to have run yet (always so when
        # one thread runs backward: they are older than every node of the call).
        editable = editable and not any(edge is not None and edge[0] in self._ran for edge in call.input_edges)
        stop = self._event("post", call, None, groups, editable=editable)
        if stop is None or not stop.edited:
            return
        for index, edge in enumerate(call.input_edges):
            before, after = arrays[index], stop.groups["grad_input"][index]
            if edge is None or before is None or after is None:
                continue
            self._edges[edge].replace(call, after)
            self._ensure_pre_hook(edge[0])

    def _on_backward_end(self) -> None:
        if not self.attached:
            return
        leftovers = [c for c, s in self._states.items() if s.pre_seen and not s.post_done]
        for call in sorted(leftovers, key=lambda c: -c.index):
            self._post_point(call, editable=False)
        self._pass_open = False
        self.state = "finished"
        if self.mode == "finish":
            self.interface.show(self.layer_table())

    # ---------------------------------------------------------------- stopping
    def _event(self, phase: str, call: Call | None, node: Any, groups: dict, *, editable: bool = True,
               value_kind: str | None = None, line: tuple[str, int] | None = None) -> Stop | None:
        if self.mode == "finish":
            return None
        checked = groups.get("output" if phase == "forward" else _EDITABLE.get(phase, ""), [])
        event = Event(phase=phase, module_path=None if call is None else call.path,
                      module_type=None if call is None else call.type_name,
                      node_name=None if node is None else node.name(), arrays=tuple(checked),
                      module_call=None if call is None else call.display, value=value_kind is not None)
        hits = self.breakpoints.hit(event)
        depth = call.depth if call is not None else 0
        if hits:
            reason = "breakpoint " + ", ".join(f"{b.number} ({b.text})" for b in hits)
        elif value_kind is not None:
            return None
        elif phase != "node" and self.mode == "step":
            reason = "step"
        elif phase != "node" and self.mode == "next" and depth <= self.next_depth:
            reason = "next"
        else:
            return None
        stop = Stop(phase, call, node, reason, {k: list(v) for k, v in groups.items()},
                    editable=_EDITABLE.get(phase) if editable else None, value_kind=value_kind, line=line,
                    source=None if line is None else relative_source(*line))
        self._pause(stop)
        return stop

    def _pause(self, stop: Stop) -> None:
        self.current = stop
        self._pausing = True
        self.tracker.suspended = True
        try:
            self.interface.interact(self)
        finally:
            self._pausing = False
            self.tracker.suspended = False
            self.current = None

    # ---------------------------------------------------------------- editing the gradient
    def _editable(self) -> tuple[Stop, list]:
        stop = self.current
        if stop is None or stop.editable is None:
            where = "here" if stop is None else f"at a {stop.phase} point"
            if stop is not None and stop.phase == "post":
                where += " whose grad_input has already been passed on"
            raise DebugCommandError(f"no gradient to edit {where}: edits apply at pre (grad_output), post "
                                    "(grad_input) and node points")
        arrays = stop.groups[stop.editable]
        if not any(a is not None for a in arrays):
            raise DebugCommandError(f"{stop.editable} is all None here: nothing to edit")
        return stop, arrays

    def _apply(self, stop: Stop, new: list, description: str) -> None:
        old = stop.groups[stop.editable]
        cast = []
        for before, after in zip(old, new):
            if before is None or after is None:
                cast.append(None if before is None else after)
                continue
            after = np.asarray(after)
            if after.shape != before.shape:
                try:
                    after = np.broadcast_to(after, before.shape)
                except ValueError:
                    raise DebugCommandError(f"the new gradient has shape {list(after.shape)}, expected "
                                            f"{list(before.shape)}") from None
            cast.append(np.array(after, dtype=before.dtype))
        stop.groups[stop.editable] = cast
        stop.edited = True
        stop.edits.append(description)
        if stop.call is not None:
            state = self._state(stop.call)
            state.edits.append(f"{stop.phase}: {description}")
            if stop.phase == "pre":
                state.grad_output, state.grad_output_norm = cast, total_norm(cast)
            elif stop.phase == "post":
                state.grad_input, state.grad_input_norm = cast, total_norm(cast)

    def scale(self, factor: float) -> None:
        """Multiply the gradient at this point by ``factor``."""
        stop, arrays = self._editable()
        self._apply(stop, [None if a is None else a * factor for a in arrays], f"scale {factor:g}")

    def clip(self, limit: float, mode: str = "norm") -> None:
        """Clip the gradient at this point: its total norm to ``limit`` (``mode="norm"``, the
        rule of ``clip_grad_norm_``: multiply by ``limit / (norm + 1e-6)`` when that is below
        1) or each element to ``[-limit, limit]`` (``mode="value"``)."""
        if limit < 0:
            raise DebugCommandError("clip needs a limit >= 0")
        stop, arrays = self._editable()
        if mode == "value":
            new = [None if a is None else np.clip(a, -limit, limit) for a in arrays]
        elif mode == "norm":
            norm = total_norm(arrays)
            factor = limit / (norm + 1e-6)
            new = [None if a is None else (a * factor if factor < 1 else a) for a in arrays]
        else:
            raise DebugCommandError(f"clip mode must be 'norm' or 'value', not {mode!r}")
        self._apply(stop, new, f"clip {limit:g} {mode}")

    def zero(self) -> None:
        """Replace the gradient at this point by zeros."""
        stop, arrays = self._editable()
        self._apply(stop, [None if a is None else np.zeros_like(a) for a in arrays], "zero")

    def set_value(self, expression: str) -> None:
        """Replace the gradient by the value of a Python expression (see ``namespace``): a
        tensor, array or number for a single slot, or a tuple with one entry per slot."""
        stop, arrays = self._editable()
        value = self.evaluate(expression)
        if isinstance(value, (tuple, list)):
            if len(value) != len(arrays):
                raise DebugCommandError(f"{stop.editable} has {len(arrays)} entries; the value has {len(value)}")
            entries = list(value)
        elif len(arrays) == 1:
            entries = [value]
        else:
            raise DebugCommandError(f"{stop.editable} has {len(arrays)} entries: give a tuple with one per entry")
        new = []
        for index, (entry, old) in enumerate(zip(entries, arrays)):
            if entry is None:
                new.append(None)
                continue
            if old is None:
                raise DebugCommandError(f"{stop.editable}[{index}] has no gradient here; it can only stay None")
            data = self.engine.to_numpy(entry) if self.engine.is_tensor(entry) else entry
            try:
                new.append(np.asarray(data, dtype=old.dtype))
            except (TypeError, ValueError) as error:
                raise DebugCommandError(f"cannot use {type(entry).__name__} as a gradient: {error}") from None
        self._apply(stop, new, f"set {expression}")

    # ---------------------------------------------------------------- looking
    def namespace(self) -> dict:
        """The names ``print`` and ``set`` expressions can use."""
        stop = self.current
        names: dict = {**self.engine.debug_namespace(), "model": self.model, "np": np, "loss": self.loss}
        module = stop.call.module if stop is not None and stop.call is not None else None
        names["module"] = module
        names["node"] = stop.node if stop is not None else None
        for key in ("grad_output", "grad_input", "output"):
            arrays = stop.groups.get(key) if stop is not None else None
            names[key] = None if arrays is None else tuple(
                None if a is None else self.engine.from_numpy(a) for a in arrays)
        return names

    def evaluate(self, expression: str) -> Any:
        """Evaluate ``expression`` with ``namespace()``; errors become DebugCommandError."""
        try:
            return eval(expression, {"__builtins__": __builtins__}, self.namespace())  # noqa: S307
        except Exception as error:  # noqa: BLE001 - the user's expression; report it as a message
            raise DebugCommandError(f"{type(error).__name__}: {error}") from None

    def _calls(self) -> list[Call]:
        """The calls backward visits: an output requires grad and the call made it (a module that
        returns its argument unchanged, such as ``nn.Identity``, has no backward of its own)."""
        return [call for call in self.tracker.calls if call.has_grad_outputs and call.output_edges]

    def _counts(self) -> tuple[int, int]:
        calls = self._calls()
        done = sum(1 for call in calls if self._state(call).post_done)
        return done, len(calls) - done

    def _last_ran(self, call: Call) -> Any:
        """The node of ``call`` that ran last (leaf accumulators aside)."""
        ran = [n for n in call.nodes if n in self._ran and getattr(n, "variable", None) is None]
        return max(ran, key=self._ran.__getitem__) if ran else None

    def position(self) -> Position:
        """Where the session is: the answer to ``where``."""
        stop = self.current
        done, pending = self._counts()
        if stop is not None and stop.phase == "forward":
            active = self.tracker.active_calls
            done, pending = len(self.tracker.calls) - len(active), len(active)
        loss_array = self.engine.to_numpy(self.loss) if self.loss is not None else None
        loss = float(loss_array.reshape(-1)[0]) if loss_array is not None and loss_array.size == 1 else None
        notes = []
        if self._first_nonfinite is not None:
            node, owner = self._first_nonfinite
            where = f" in {owner.display}" if owner is not None else " outside the model's modules"
            created = self.user_code.creation_site(self.engine, node) or (owner.source if owner is not None
                                                                          else "unknown")
            notes.append(f"first non-finite gradient of this pass: produced by {node.name()}{where} "
                         f"(created at {created})")
        if stop is None:
            state = self.state
            reason = "backward finished" if state == "finished" else state
            return Position(state=state, phase=None, module=None, module_type=None, node=None,
                            modules_done=done, modules_pending=pending, source=None, reason=reason,
                            step=self.step, loss=loss, notes=tuple(notes))
        call = stop.call
        node_text = None
        source = call.source if call is not None else None
        if stop.phase == "pre" and call is not None:
            node_text = ", ".join(n.name() for n in self._real_nodes(call.output_nodes)) + " (next to run)"
        elif stop.phase == "post" and call is not None:
            producers = [n for n in call.nodes if any(child in call.input_nodes for child, _ in n.next_functions)]
            if producers:
                node_text = ", ".join(sorted({n.name() for n in producers})) + " (produced grad_input)"
            else:
                last = self._last_ran(call)
                node_text = None if last is None else f"{last.name()} (ran last)"
        elif stop.value_kind is not None:
            node_text = None if stop.node is None else f"{stop.node.name()} (made the value)"
            source = stop.source
            code = linecache.getline(*stop.line).strip() if stop.line is not None else ""
            notes.append(f"this line made {stop.value_kind}" + (f": {code}" if code else ""))
        elif stop.phase == "forward" and call is not None:
            node_text = ", ".join(n.name() for n in self._real_nodes(call.output_nodes)) or None
            if node_text:
                node_text += " (created)"
        elif stop.phase == "node":
            node_text = f"{stop.node.name()} (just ran)"
            source = self.user_code.creation_site(self.engine, stop.node) or source
        if stop.phase == "pre" and call is not None and call.parent is None and self._first_nonfinite is None \
                and any(nonfinite_count(a) for a in stop.groups["grad_output"] if a is not None):
            notes.append("the gradient reaching the model is already non-finite: it comes from the loss "
                         "computation, outside the model's modules")
        if stop.phase == "post" and call is not None and self._state(call).deferred:
            notes.append("no input of this module requires grad: grad_input is None")
        if stop.phase == "start":
            state = "start"
        else:
            state = "forward" if stop.phase == "forward" else "backward"
        phase = None if stop.phase == "start" else ("line" if stop.value_kind is not None else stop.phase)
        return Position(state=state, phase=phase,
                        module=None if call is None else call.display,
                        module_type=None if call is None else call.type_name, node=node_text,
                        modules_done=done, modules_pending=pending, source=source, reason=stop.reason,
                        step=self.step, loss=loss, notes=tuple(notes), edits=tuple(stop.edits))

    @staticmethod
    def _real_nodes(nodes: list) -> list:
        """``nodes`` with backward-hook identity nodes replaced by the nodes they forward to."""
        found, stack = [], list(reversed(nodes))
        while stack:
            node = stack.pop()
            if node is None or node in found:
                continue
            if node.name() == HOOK_NODE:
                stack.extend(child for child, _ in reversed(node.next_functions))
            else:
                found.append(node)
        return found

    def banner(self) -> str:
        """One line announcing the current stop."""
        stop = self.current
        if stop is None:
            return "backward finished" if self.state == "finished" else self.state
        if stop.phase == "start":
            loss = self.position().loss
            value = "" if loss is None else f" (loss = {loss:.6g})"
            banner = f"stopped before backward{value}: forward done, backward not started"
            kind = self._loss_kind(self.loss)
            if kind is not None:
                banner += (f" · the loss is already {kind}: the forward pass made it "
                           f"(--break 'forward {kind}' stops at the line that did)")
            return banner
        what = {"forward": "output computed", "pre": "grad_output known, before its backward",
                "post": "grad_input known, after its backward", "node": "node ran"}[stop.phase]
        place = stop.call.display if stop.call is not None else "(outside the model's modules)"
        if stop.phase == "node":
            place = f"{stop.node.name()} in {place}"
        if stop.value_kind is not None:
            made = f"line {stop.line[1]}" if stop.node is None else stop.node.name()
            kind = f" ({stop.call.type_name})" if stop.call is not None else ""
            return f"stopped at {made} in {place}{kind} · forward: a line of forward code made {stop.value_kind} · " \
                   f"{stop.reason}"
        kind = f" ({stop.call.type_name})" if stop.call is not None and stop.phase != "node" else ""
        return f"stopped at {place}{kind} · {stop.phase}: {what} · {stop.reason}"

    def grads_view(self) -> GradsView:
        """The gradients at this point: the answer to ``grads``."""
        stop = self.current
        if stop is None or stop.phase == "start":
            raise DebugCommandError("no gradients at this point (use table or params)")
        groups = []
        for name, arrays in stop.groups.items():
            edited = stop.edited and name == stop.editable
            entries = tuple(MissingTensor(f"{name}[{i}]", "None (no gradient)") if a is None
                            else tensor_stats(f"{name}[{i}]", a, edited) for i, a in enumerate(arrays))
            groups.append(GradGroup(name, entries))
        notes = []
        if stop.phase == "pre":
            groups.append(GradGroup("grad_input", (MissingTensor("grad_input", "not computed yet (step to "
                                                                              "the post point)"),)))
        if stop.edits:
            notes.append("edited here: " + "; ".join(stop.edits))
        title = self.banner().removeprefix("stopped at ")
        return GradsView(title=title, groups=tuple(groups), notes=tuple(notes))

    def _param_status(self, param: Any) -> str:
        """``"accumulated"`` in this pass, ``"pending"``, ``"not used"`` or ``"frozen"``."""
        if not param.requires_grad:
            return "frozen"
        accumulators = {id(getattr(node, "variable", None)): node for call in self.tracker.calls
                        for node in call.own_nodes if getattr(node, "variable", None) is not None}
        node = accumulators.get(id(param))
        if node is None:
            return "not used"
        return "accumulated" if node in self._ran else "pending"

    def layer_table(self) -> LayerTable:
        """Every module call of the pass in forward order: the answer to ``table``."""
        stop = self.current
        rows = []
        for call in self.tracker.calls:
            state = self._state(call)
            if not call.has_grad_outputs:
                status = "no grad"
            elif not call.output_edges and self.state != "forward":
                status = "passed through"
            elif stop is not None and stop.call is call:
                status = f"current ({stop.phase})"
            elif state.post_done:
                status = "done"
            elif state.pre_seen:
                status = "running"
            else:
                status = "pending"
            accumulated = [self.engine.to_numpy(p.grad) for p in call.module.parameters(recurse=False)
                           if p.grad is not None and self._param_status(p) == "accumulated"]
            rows.append(LayerRow(module=call.display, module_type=call.type_name, status=status,
                                 grad_output_norm=state.grad_output_norm, grad_input_norm=state.grad_input_norm,
                                 param_grad_norm=total_norm(accumulated) if accumulated else None,
                                 nonfinite=state.nonfinite, edits="; ".join(state.edits)))
        grads = [self.engine.to_numpy(p.grad) for p in self.model.parameters() if p.grad is not None]
        notes = []
        if self.state != "finished" and self.state != "idle":
            notes.append("gradients of modules not done yet are not known; parameter norms count only "
                         "gradients accumulated in this pass")
        return LayerTable(rows=tuple(rows), total_param_grad_norm=total_norm(grads) if grads else None,
                          notes=tuple(notes))

    def params_view(self) -> ParamsView:
        """The current module's parameters (all of the model's when not in a module)."""
        stop = self.current
        call = stop.call if stop is not None else None
        module = call.module if call is not None else self.model
        prefix = (call.path + ".") if call is not None and call.path else ""
        rows = []
        for name, param in module.named_parameters():
            grad = param.grad
            status = self._param_status(param) if self.state != "finished" else \
                ("accumulated" if grad is not None else "no grad")
            if grad is None:
                rows.append(ParamRow(prefix + name, tuple(param.shape), status if status != "accumulated"
                                     else "no grad", None, None, None, 0, l2_norm(self.engine.to_numpy(param))))
                continue
            stats = tensor_stats(name, self.engine.to_numpy(grad))
            rows.append(ParamRow(prefix + name, tuple(param.shape), status, stats.norm, stats.mean,
                                 stats.abs_max, stats.nonfinite, l2_norm(self.engine.to_numpy(param))))
        notes = []
        if any(row.status == "pending" for row in rows):
            notes.append("'pending': this pass has not accumulated its gradient yet; .grad shows what "
                         "was there before")
        return ParamsView(module=call.display if call is not None else "model", rows=tuple(rows),
                          notes=tuple(notes))

    def graph(self, model_output_only: bool = False) -> AutogradGraph:
        """The autograd graph from the loss (or the model's output when the loss is unknown)."""
        if self.loss is not None and self.loss.grad_fn is not None and not model_output_only:
            roots = [self.loss.grad_fn]
        else:
            roots = [n for call in self.tracker.calls if call.parent is None for n in call.output_nodes]
        stop = self.current
        current = stop.call.nodes if stop is not None and stop.call is not None else set()
        if stop is not None and stop.phase == "node":
            current = {stop.node}
        tracked = self.state in ("backward", "finished") or self._ran
        return build_graph(roots, owner_of=self._owner_display, parameter_names=self.parameter_names,
                           ran=self._ran if tracked else None, current=current, engine=self.engine)

    def _owner_display(self, node: Any) -> str | None:
        call = self.tracker.owner_of(node)
        return None if call is None else call.display

    def breakpoint_list(self) -> BreakpointList:
        """The answer to ``breakpoints``."""
        return BreakpointList(tuple(BreakpointRow(b.number, b.text, b.phase_text, b.enabled, b.hits)
                                    for b in self.breakpoints.breakpoints))

    def module_paths(self) -> list[str]:
        """Every module path of the model ("model" for the root), for completion and checks."""
        return ["model"] + [path for path in self.tracker.paths.values() if path]


def run_debug_step(model: Any, compute_loss: Callable[[], Any], interface: Interface, *,
                   conditions: tuple | list = (), stop_at_start: bool | None = None, step: int | None = None,
                   backward: Callable[[Any], None] | None = None,
                   locate: Callable[[str], str | None] | None = None, engine: Engine | None = None,
                   forward_again: Callable[[], Any] | None = None) -> str:
    """Debug one forward + backward of ``model`` (a gradscope or PyTorch module).

    Attaches a session, runs ``compute_loss()`` (the forward pass; node creation sites are
    recorded, and with ``forward nan``/``inf`` breakpoints the lines of the forward code are
    traced), stops before backward when there are no breakpoint conditions (or
    ``stop_at_start``), runs backward through the breakpoints, then hands the finished state to
    ``interface.interact`` for a last look. ``backward(loss)`` runs the backward pass (default
    ``loss.backward()``); ``locate`` is passed to the session. When the loss is already NaN/Inf
    after forward and only backward breakpoints look for NaN/Inf, the session says so, adds a
    ``forward nan`` (or ``inf``) breakpoint and runs the forward pass again from the same state
    (``forward_again()``, default ``compute_loss()``), so that it stops at the line that made it. Source lines point at code that
    runs below this call, never at its callers. Every hook is removed at the end, whatever
    happens. On ``quit``, on an error and on Ctrl-C the parameters' values and gradients and the
    buffers are restored to what they were before the call.

    Returns:
        ``"finished"`` when backward ran to the end, ``"quit"`` when the user quit.
    """
    engine = engine or _engine(model)
    session = DebugSession(model, interface, conditions=conditions,
                           stop_at_start=not conditions if stop_at_start is None else stop_at_start,
                           snapshot_each_pass=False, step=step, locate=locate, engine=engine,
                           user_code=UserCode.below(sys._getframe(1)))
    session.snapshot = Snapshot.take(model, values=True, engine=engine)
    rng_state = engine.get_rng_state()
    completed = False
    try:
        session.attach()
        with engine.record_creation_traces(), session.forward_watch():
            loss = compute_loss()
        condition = session.forward_breakpoint_for(loss)
        if condition is not None:
            kind = condition.split()[-1]
            added = session.breakpoints.add(condition)
            interface.show(f"note: the loss is already {kind} before backward starts, so the forward pass made "
                           f"it (backward breakpoints would stop at the loss's own nodes): running forward again "
                           f"with breakpoint {added.number} ({added.text}) to stop at the line that made it")
            session.snapshot.restore()
            engine.set_rng_state(rng_state)
            session.forget_forward()
            with engine.record_creation_traces(), session.forward_watch():
                loss = (forward_again or compute_loss)()
        session.begin_backward(loss)
        if backward is None:
            loss.backward()
        else:
            backward(loss)
        session.end()
        completed = True
        interface.interact(session)
        return "finished"
    except DebuggerQuit:
        return "quit"
    finally:
        session.detach()
        if not completed:
            session.snapshot.restore()
