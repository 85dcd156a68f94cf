"""The debugging session: global hooks that turn forward and backward into stopping points.

A :class:`DebugSession` registers global module hooks (forward pre/post, full backward
pre/post), a post-hook on every autograd node created by the model, and tensor hooks on the
model's parameters. Each hook builds an :class:`~gradscope.debug.conditions.Event`; when a
breakpoint matches it (or the user is stepping), the session *stops*: it calls
``interface.interact(session)`` from inside the hook, so everything is live, and whatever
gradient edit the user made is returned from the hook and used by the rest of backward.

Stopping points, in order:

* ``forward``: after a module call returns (only for ``forward`` breakpoints and stepping);
* ``start``: forward done, backward not started (``run_debug_step`` only);
* ``pre``: a module's ``grad_output`` is known, before its backward;
* ``node``: an autograd node has run (only for ``node`` breakpoints);
* ``post``: a module's backward is done and ``grad_input`` is known. For a call none of whose
  inputs requires grad, the engine calls full hooks right after the pre-hook; the session
  instead stops when every node of the call (and its parameters' accumulation) has run.
"""
from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import numpy as np

import gradscope
from gradscope.autograd.anomaly import detect_anomaly
from gradscope.autograd.graph import queue_callback
from gradscope.autograd.tensor import Tensor
from gradscope.debug.conditions import BreakpointTable, Event
from gradscope.debug.graph import HOOK_NODE, AutogradGraph, build_graph
from gradscope.debug.stats import MissingTensor, l2_norm, nonfinite_count, tensor_stats, total_norm
from gradscope.debug.tracking import Call, ForwardTracker, creation_site, flatten_tensors
from gradscope.debug.views import (BreakpointList, BreakpointRow, GradGroup, GradsView, LayerRow, LayerTable,
                                   ParamRow, ParamsView, Position)
from gradscope.errors import ControlFlow, GradscopeError
from gradscope.nn.modules.module import (Module, register_module_full_backward_hook,
                                         register_module_full_backward_pre_hook)

# The module hook machinery warns when a call none of whose inputs requires grad gets full
# backward hooks; the session registers them itself and handles that case (deferred post).
_NO_INPUT_GRAD_WARNING = r"Full backward hook.*no inputs require gradients"
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

    grads: list
    values: list | None = None
    buffers: list | None = None

    @classmethod
    def take(cls, model: Module, values: bool) -> "Snapshot":
        params = list(model.parameters())
        grads = [(p, None if p.grad is None else p.grad._data.copy()) for p in params]
        if not values:
            return cls(grads)
        return cls(grads, [(p, p._data.copy()) for p in params],
                   [(b, b._data.copy()) for b in model.buffers()])

    def restore(self) -> None:
        """Put every recorded gradient, value and buffer back."""
        for param, grad in self.grads:
            param.grad = None if grad is None else gradscope.from_numpy(grad.copy())
        for tensor, data in (self.values or []) + (self.buffers or []):
            if tensor._data.shape == data.shape and not np.array_equal(tensor._data, data, equal_nan=True):
                np.copyto(tensor._data, data)
            elif tensor._data.shape != data.shape:
                tensor._data = data.copy()


@dataclass(eq=False)
class _CallState:
    """What backward did with one module call."""

    pre_seen: bool = False
    engine_post_seen: bool = False
    post_done: bool = False
    deferred: bool = False
    grad_output: list | None = None
    grad_input: list | None = None
    grad_output_norm: float | None = None
    grad_input_norm: float | None = None
    nonfinite: int = 0
    pending: set = field(default_factory=set)
    edits: list = field(default_factory=list)


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

    def replacement(self) -> tuple | None:
        if not self.edited:
            return None
        return tuple(None if a is None else gradscope.from_numpy(a) for a in self.groups[self.editable])


class DebugSession:
    """Breakpoints, stepping and gradient edits on one model.

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
    """

    def __init__(self, model: Module, interface: Interface, *, conditions: tuple | list = (),
                 stop_at_start: bool = False, snapshot_each_pass: bool = True, step: int | None = None,
                 locate: Callable[[str], str | None] | None = None) -> None:
        self.model = model
        self.interface = interface
        self.breakpoints = BreakpointTable()
        for condition in conditions:
            self.breakpoints.add(condition)
        self.tracker = ForwardTracker(model, on_call_end=self._on_call_end, on_pass_start=self._on_pass_start,
                                      locate=locate)
        self.parameter_names = {id(p): name for name, p in model.named_parameters()}
        self.stop_at_start = stop_at_start
        self.snapshot_each_pass = snapshot_each_pass
        self.step = step
        self.snapshot: Snapshot | None = None
        self.mode = "continue"
        self.next_depth = 0
        self.state = "idle"
        self.current: Stop | None = None
        self.loss: Tensor | None = None
        self.attached = False
        self._pausing = False
        self._handles: list = []
        self._node_handles: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._warning_filter: tuple | None = None
        self._reset_pass()

    # ---------------------------------------------------------------- lifecycle
    def attach(self) -> "DebugSession":
        """Register every hook. Calls made before attaching are not debugged."""
        if self.attached:
            return self
        self.tracker.attach()
        self._handles = [register_module_full_backward_pre_hook(self._backward_pre),
                         register_module_full_backward_hook(self._backward_post)]
        for param in self.model.parameters():
            if param.requires_grad:
                self._handles.append(param.register_hook(self._param_grad))
        warnings.filterwarnings("ignore", message=_NO_INPUT_GRAD_WARNING, category=UserWarning)
        self._warning_filter = warnings.filters[0]
        self.attached = True
        return self

    def detach(self) -> None:
        """Remove every hook the session registered (idempotent)."""
        self.tracker.detach()
        for handle in self._handles:
            handle.remove()
        self._handles = []
        for handle in list(self._node_handles.values()):
            handle.remove()
        self._node_handles = weakref.WeakKeyDictionary()
        if self._warning_filter is not None and self._warning_filter in warnings.filters:
            warnings.filters.remove(self._warning_filter)
        self._warning_filter = None
        self.attached = False

    remove = detach

    def __enter__(self) -> "DebugSession":
        return self.attach()

    def __exit__(self, *exc_info: Any) -> None:
        self.detach()

    def _reset_pass(self) -> None:
        self._states: dict = {}
        self._ran: dict = {}
        self._reachable: set | None = None
        self._first_nonfinite: tuple | None = None
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

    # ---------------------------------------------------------------- driving one step
    def begin_backward(self, loss: Tensor) -> None:
        """Tell the session the loss about to be differentiated: tracks every node under it,
        and stops at ``start`` if asked to (or stepping)."""
        self.loss = loss
        roots = [loss.grad_fn] if loss.grad_fn is not None else []
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

    # ---------------------------------------------------------------- hooks
    def _on_call_end(self, call: Call, output: Any) -> None:
        if not self._active():
            return
        self._hook_nodes(call.own_nodes)
        if self.mode == "finish":
            return
        arrays = [t._data for t in flatten_tensors(output)]
        self._event("forward", call, None, {"output": arrays})

    def _param_grad(self, grad: Tensor) -> None:
        if self._active():
            self._begin_pass()
        return None

    def _begin_pass(self) -> None:
        if self._pass_open:
            return
        self._pass_open = True
        self.state = "backward"
        queue_callback(self._on_backward_end)
        if self.snapshot_each_pass:
            self.snapshot = Snapshot.take(self.model, values=False)

    def _hook_nodes(self, nodes: Any) -> None:
        for node in nodes:
            if node not in self._node_handles:
                self._node_handles[node] = node.register_hook(self._make_node_hook(node))

    def _make_node_hook(self, node: Any) -> Callable:
        ref = weakref.ref(node)

        def node_ran(grad_inputs: tuple, grad_outputs: tuple) -> tuple | None:
            target = ref()
            if target is None or not self._active():
                return None
            return self._node_ran(target, grad_inputs, grad_outputs)

        return node_ran

    def _match(self, module: Module, kind: str) -> Call | None:
        """The call of ``module`` this backward hook is about: the latest call not yet seen."""
        best = None
        for call in self.tracker.calls:
            if call.module is not module or not call.has_grad_outputs:
                continue
            state = self._state(call)
            if kind == "pre" and state.pre_seen:
                continue
            if kind == "post" and (not state.pre_seen or state.engine_post_seen):
                continue
            if best is None or call.index > best.index:
                best = call
        return best

    def _backward_pre(self, module: Module, grad_output: tuple) -> tuple | None:
        if not self._active():
            return None
        call = self._match(module, "pre")
        if call is None:
            return None
        self._begin_pass()
        state = self._state(call)
        state.pre_seen = True
        state.deferred = not call.has_grad_inputs
        arrays = [None if g is None else g._data for g in grad_output]
        state.grad_output = arrays
        state.grad_output_norm = total_norm(arrays)
        state.nonfinite += sum(nonfinite_count(a) for a in arrays if a is not None)
        state.pending = {n for n in call.nodes if n not in self._ran
                         and (self._reachable is None or n in self._reachable)}
        stop = self._event("pre", call, None, {"grad_output": arrays})
        return None if stop is None else stop.replacement()

    def _backward_post(self, module: Module, grad_input: tuple, grad_output: tuple) -> tuple | None:
        if not self._active():
            return None
        call = self._match(module, "post")
        if call is None:
            return None
        state = self._state(call)
        state.engine_post_seen = True
        if state.deferred:
            if not state.pending:
                self._finish_call(call)
            return None
        arrays = [None if g is None else g._data for g in grad_input]
        return self._post_point(call, arrays)

    def _post_point(self, call: Call, arrays: list) -> tuple | None:
        state = self._state(call)
        state.post_done = True
        state.grad_input = arrays
        state.grad_input_norm = total_norm(arrays) if any(a is not None for a in arrays) else None
        state.nonfinite += sum(nonfinite_count(a) for a in arrays if a is not None)
        groups = {"grad_output": state.grad_output or [], "grad_input": arrays}
        stop = self._event("post", call, None, groups)
        return None if stop is None else stop.replacement()

    def _finish_call(self, call: Call) -> None:
        """The deferred post point of a call whose inputs need no grad."""
        self._post_point(call, [None] * call.n_inputs)

    def _node_ran(self, node: Any, grad_inputs: tuple, grad_outputs: tuple) -> tuple | None:
        self._begin_pass()
        self._ran[node] = len(self._ran)
        produced = [None if g is None else g._data for g in grad_inputs]
        incoming = [None if g is None else g._data for g in grad_outputs]
        if self._first_nonfinite is None and any(nonfinite_count(a) for a in produced if a is not None) \
                and not any(nonfinite_count(a) for a in incoming if a is not None):
            self._first_nonfinite = (node, self.tracker.owner_of(node))
        replacement = None
        if self.mode != "finish" and self.breakpoints.wants("node"):
            stop = self._event("node", self.tracker.owner_of(node), node,
                               {"grad_output": incoming, "grad_input": produced})
            if stop is not None:
                replacement = stop.replacement()
        call = self.tracker.owner_of(node)
        while call is not None:
            state = self._states.get(call)
            if state is not None and node in state.pending:
                state.pending.discard(node)
                if not state.pending and state.deferred and state.engine_post_seen and not state.post_done:
                    self._finish_call(call)
            call = call.parent
        return replacement

    def _on_backward_end(self) -> None:
        if not self.attached:
            return
        leftovers = [c for c, s in self._states.items() if s.deferred and s.engine_post_seen and not s.post_done]
        for call in sorted(leftovers, key=lambda c: -c.index):
            self._finish_call(call)
        self._pass_open = False
        self.state = "finished"
        if self.mode == "finish":
            self.interface.show(self.layer_table())

    # ---------------------------------------------------------------- stopping
    def _event(self, phase: str, call: Call | None, node: Any, groups: dict) -> Stop | None:
        if self.mode == "finish":
            return None
        checked = groups.get("output" if phase == "forward" else _EDITABLE.get(phase, ""), [])
        event = Event(phase=phase, module_path=None if call is None else call.path,
                      module_type=None if call is None else call.type_name,
                      node_name=None if node is None else node.name(), arrays=tuple(checked),
                      module_call=None if call is None else call.display)
        hits = self.breakpoints.hit(event)
        depth = call.depth if call is not None else 0
        if hits:
            reason = "breakpoint " + ", ".join(f"{b.number} ({b.text})" for b in hits)
        elif phase != "node" and self.mode == "step":
            reason = "step"
        elif phase != "node" and self.mode == "next" and depth <= self.next_depth:
            reason = "next"
        else:
            return None
        stop = Stop(phase, call, node, reason, {k: list(v) for k, v in groups.items()},
                    editable=_EDITABLE.get(phase))
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
        if isinstance(value, (tuple, list)) and not isinstance(value, Tensor):
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
            data = entry._data if isinstance(entry, Tensor) else entry
            try:
                new.append(np.asarray(data, dtype=old.dtype))
            except (TypeError, ValueError) as error:
                raise DebugCommandError(f"cannot use {type(entry).__name__} as a gradient: {error}") from None
        self._apply(stop, new, f"set {expression}")

    # ---------------------------------------------------------------- looking
    def namespace(self) -> dict:
        """The names ``print`` and ``set`` expressions can use."""
        stop = self.current
        names: dict = {"model": self.model, "gs": gradscope, "np": np, "loss": self.loss}
        module = stop.call.module if stop is not None and stop.call is not None else None
        names["module"] = module
        names["node"] = stop.node if stop is not None else None
        for key in ("grad_output", "grad_input", "output"):
            arrays = stop.groups.get(key) if stop is not None else None
            names[key] = None if arrays is None else tuple(
                None if a is None else gradscope.from_numpy(a) for a in arrays)
        return names

    def evaluate(self, expression: str) -> Any:
        """Evaluate ``expression`` with ``namespace()``; errors become DebugCommandError."""
        try:
            return eval(expression, {"__builtins__": __builtins__}, self.namespace())  # noqa: S307
        except Exception as error:  # noqa: BLE001 - the user's expression; report it as a message
            raise DebugCommandError(f"{type(error).__name__}: {error}") from None

    def _calls(self) -> list[Call]:
        return [call for call in self.tracker.calls if call.has_grad_outputs]

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
        loss = float(self.loss._data) if self.loss is not None and self.loss._data.size == 1 else None
        notes = []
        if self._first_nonfinite is not None:
            node, owner = self._first_nonfinite
            where = f" in {owner.display}" if owner is not None else " outside the model's modules"
            created = creation_site(node) or (owner.source if owner is not None else "unknown")
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
        elif stop.phase == "forward" and call is not None:
            node_text = ", ".join(n.name() for n in self._real_nodes(call.output_nodes)) or None
            if node_text:
                node_text += " (created)"
        elif stop.phase == "node":
            node_text = f"{stop.node.name()} (just ran)"
            source = creation_site(stop.node) or source
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
        return Position(state=state, phase=None if stop.phase == "start" else stop.phase,
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
            return f"stopped before backward{value}: forward done, backward not started"
        what = {"forward": "output computed", "pre": "grad_output known, before its backward",
                "post": "grad_input known, after its backward", "node": "node ran"}[stop.phase]
        place = stop.call.display if stop.call is not None else "(outside the model's modules)"
        if stop.phase == "node":
            place = f"{stop.node.name()} in {place}"
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

    def _param_status(self, param: Tensor) -> str:
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
            elif stop is not None and stop.call is call:
                status = f"current ({stop.phase})"
            elif state.post_done:
                status = "done"
            elif state.pre_seen:
                status = "running"
            else:
                status = "pending"
            accumulated = [p.grad._data for p in call.module.parameters(recurse=False)
                           if p.grad is not None and self._param_status(p) == "accumulated"]
            rows.append(LayerRow(module=call.display, module_type=call.type_name, status=status,
                                 grad_output_norm=state.grad_output_norm, grad_input_norm=state.grad_input_norm,
                                 param_grad_norm=total_norm(accumulated) if accumulated else None,
                                 nonfinite=state.nonfinite, edits="; ".join(state.edits)))
        grads = [p.grad._data for p in self.model.parameters() if p.grad is not None]
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
                                     else "no grad", None, None, None, 0, l2_norm(param._data)))
                continue
            stats = tensor_stats(name, grad._data)
            rows.append(ParamRow(prefix + name, tuple(param.shape), status, stats.norm, stats.mean,
                                 stats.abs_max, stats.nonfinite, l2_norm(param._data)))
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
                           ran=self._ran if tracked else None, current=current)

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


def run_debug_step(model: Module, compute_loss: Callable[[], Tensor], interface: Interface, *,
                   conditions: tuple | list = (), stop_at_start: bool | None = None, step: int | None = None,
                   backward: Callable[[Tensor], None] | None = None,
                   locate: Callable[[str], str | None] | None = None) -> str:
    """Debug one forward + backward of ``model``.

    Attaches a session, runs ``compute_loss()`` (the forward pass; node creation sites are
    recorded), stops before backward when there are no breakpoint conditions (or
    ``stop_at_start``), runs backward through the breakpoints, then hands the finished state to
    ``interface.interact`` for a last look. ``backward(loss)`` runs the backward pass (default
    ``loss.backward()``); ``locate`` is passed to the session. Every hook is removed at the end,
    whatever happens.
    On ``quit``, on an error and on Ctrl-C the parameters' values and gradients and the buffers
    are restored to what they were before the call.

    Returns:
        ``"finished"`` when backward ran to the end, ``"quit"`` when the user quit.
    """
    session = DebugSession(model, interface, conditions=conditions,
                           stop_at_start=not conditions if stop_at_start is None else stop_at_start,
                           snapshot_each_pass=False, step=step, locate=locate)
    session.snapshot = Snapshot.take(model, values=True)
    completed = False
    try:
        session.attach()
        with detect_anomaly(check_nan=False):
            loss = compute_loss()
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
