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

import sys
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from gradscope.debug import views
from gradscope.debug.conditions import BreakpointTable, Event
from gradscope.debug.edits import GradientEdit
from gradscope.debug.errors import DebugCommandError, DebuggerQuit
from gradscope.debug.forward import ValueWatch
from gradscope.debug.graph import AutogradGraph, pass_graph
from gradscope.debug.record import PassRecord, Stop
from gradscope.debug.tracking import Call, ForwardTracker, UserCode
from gradscope.debug.views import BreakpointList, GradsView, LayerTable, ParamsView, Position
from gradscope.engines import Engine, engine_of
from gradscope.errors import GradscopeError
from gradscope.monitor.tracing import relative_source

_EDITABLE = {"pre": "grad_output", "post": "grad_input", "node": "grad_input"}


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


def _engine(model: Any) -> Engine:
    engine = engine_of(model)
    if engine is None:
        raise GradscopeError(f"cannot debug a {type(model).__name__}: expected an nn.Module of gradscope or "
                             "PyTorch")
    return engine


class DebugSession:
    """A debugging session on one model (gradscope's or PyTorch's): its state, the hooks that
    turn forward and backward into stopping points, and stepping between them.

    What the commands show is built from this state by :mod:`gradscope.debug.views` (and
    :func:`~gradscope.debug.graph.pass_graph`); the gradient edits at a stop are a
    :class:`~gradscope.debug.edits.GradientEdit` (:meth:`edit`).

    The state:

    * ``state``: ``"idle"``, ``"forward"``, ``"start"`` (forward done, backward not started),
      ``"backward"`` or ``"finished"``;
    * ``mode``: how to go on from a stop (``"step"``, ``"next"``, ``"continue"``, ``"finish"``),
      with ``next_depth``, the nesting level ``next`` stops at or above;
    * ``current``: the :class:`~gradscope.debug.record.Stop` the session is stopped at (None
      while running);
    * ``tracker``: the module calls of the forward pass; ``record``: what backward did with them
      (a :class:`~gradscope.debug.record.PassRecord`, replaced when a new pass starts);
    * ``loss``: the tensor backward started from; ``snapshot``: what ``quit`` restores.

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
        self.record = PassRecord()

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

    def forward_watch(self) -> ValueWatch | nullcontext:
        """A context that traces the forward pass for non-finite values when a breakpoint asks."""
        if not self.breakpoints.watches_forward_values():
            return nullcontext()
        self.value_watch = ValueWatch(self.engine, self.user_code, self._forward_value)
        return self.value_watch

    def forget_forward(self) -> None:
        """Forget the forward pass recorded so far (before running it again from the same state)."""
        self.tracker.reset()
        self._reset_pass()
        self.state = "idle"

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
        self.record.reachable = reachable
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
        self.record.watch_edges(call)
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
        if self.record.open:
            return
        self.record.open = True
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
            edge = self.record.edges.get((node, slot))
            if edge is not None and edge.edited and gradient is not None:
                current[slot] = self._tensor_like(edge.total(self.engine.to_numpy(gradient)), gradient)
                changed = True
        for call in sorted(self._pre_calls.get(node, ()), key=lambda c: c.index):
            if self._pre_point(call, node, current):
                changed = True
        return tuple(current) if changed else None

    def _pre_point(self, call: Call, node: Any, current: list) -> bool:
        """Record (and maybe stop at) the ``pre`` point of ``call``; edits go into ``current``."""
        state, slots = self.record.note_grad_output(call, node, current, self.engine.to_numpy)
        if not self.record.start_call(call):
            return False  # a later output node of a call whose pre point has passed
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
        self.record.ran[node] = len(self.record.ran)
        owner = self.tracker.owner_of(node)
        if self.record.first_nonfinite is None and self._any_nonfinite(grad_inputs) \
                and not self._any_nonfinite(grad_outputs):
            self.record.first_nonfinite = (node, owner)
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
        self.record.note_sent(node, grad_inputs, produced, self.engine.to_numpy)
        for call in self.record.calls_done_by(node, owner):
            self._post_point(call, editable=True)
        return replacement

    def _post_point(self, call: Call, editable: bool) -> None:
        arrays = self.record.finish_call(call)
        groups = {"grad_output": self.record.state(call).grad_output or [], "grad_input": arrays}
        # An edit needs the nodes that receive grad_input not to have run yet (always so when
        # one thread runs backward: they are older than every node of the call).
        editable = editable and not any(edge is not None and edge[0] in self.record.ran
                                        for edge in call.input_edges)
        stop = self._event("post", call, None, groups, editable=editable)
        if stop is None or not stop.edited:
            return
        for edge in self.record.edit_grad_input(call, arrays, stop.groups["grad_input"]):
            self._ensure_pre_hook(edge[0])

    def _on_backward_end(self) -> None:
        if not self.attached:
            return
        for call in self.record.unfinished_calls():
            self._post_point(call, editable=False)
        self.record.open = False
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
    def edit(self) -> GradientEdit:
        """The gradient edits (scale, clip, zero, set) at the current stop."""
        return GradientEdit(self.current, self.record, self.engine)

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

    # The answers to where, grads, table, params, graph and breakpoints, built from the session's
    # state by the functions beside the records they make.
    def position(self) -> Position:
        """Where the session is: the answer to ``where``."""
        return views.position(self.current, self.state, self.tracker, self.record, self.engine, step=self.step,
                              loss=views.loss_value(self.engine, self.loss))

    def banner(self) -> str:
        """One line announcing the current stop."""
        return views.banner(self.current, self.state, loss=views.loss_value(self.engine, self.loss),
                            loss_kind=views.loss_kind(self.engine, self.loss))

    def grads_view(self) -> GradsView:
        """The gradients at this point: the answer to ``grads``."""
        return views.grads_view(self.current, self.state)

    def layer_table(self) -> LayerTable:
        """Every module call of the pass in forward order: the answer to ``table``."""
        return views.layer_table(self.current, self.state, self.tracker, self.record, self.engine, self.model)

    def params_view(self) -> ParamsView:
        """The current module's parameters (all of the model's when not in a module)."""
        return views.params_view(self.current, self.state, self.tracker, self.record, self.engine, self.model)

    def graph(self, model_output_only: bool = False) -> AutogradGraph:
        """The autograd graph from the loss (or the model's output when the loss is unknown)."""
        return pass_graph(self.loss, self.current, self.state, self.tracker, self.record, engine=self.engine,
                          parameter_names=self.parameter_names, model_output_only=model_output_only)

    def breakpoint_list(self) -> BreakpointList:
        """The answer to ``breakpoints``."""
        return views.breakpoint_list(self.breakpoints)

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
    (``forward_again()``, default ``compute_loss()``), so that it stops at the line that made
    it. Source lines point at code that runs below this call, never at its callers. Every hook
    is removed at the end, whatever happens. On ``quit``, on an error and on Ctrl-C the parameters' values and gradients and the
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
        condition = session.breakpoints.forward_condition_for(views.loss_kind(engine, loss))
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
