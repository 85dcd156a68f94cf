"""What the debugger's commands show, as plain frozen records, and the functions that build
them from a session's state (:func:`position` for ``where``, :func:`banner`, :func:`grads_view`,
:func:`layer_table` for ``table``, :func:`params_view`, :func:`breakpoint_list`; the graph's
builder is :func:`gradscope.debug.graph.pass_graph`). ``gradscope.render.debug`` turns the
records into rich renderables and ``gradscope.debug.text`` into plain text.

Both draw the tables with the same columns (:data:`GRADS_COLUMNS`, ...) and the same fitting
rules as ``inspect``: at a given width no name or number is cut; columns are left out in order
(those whose cells all say the same first, then the larger ``drop`` first; ``drop == 0`` stays)
and named; when even the columns that stay do not fit, each row becomes a block of
``header value`` pairs under the row's name.
"""
from __future__ import annotations

import linecache
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradscope.debug.errors import DebugCommandError
from gradscope.debug.graph import HOOK_NODE
from gradscope.debug.stats import MissingTensor, l2_norm, tensor_stats
from gradscope.engines import nonfinite_count, total_norm

if TYPE_CHECKING:
    from gradscope.debug.conditions import BreakpointTable
    from gradscope.debug.record import PassRecord, Stop
    from gradscope.debug.tracking import Call, ForwardTracker
    from gradscope.engines import Engine


@dataclass(frozen=True)
class ViewColumn:
    """One column of a debugger table.

    Attributes:
        header: its header.
        numeric: right-aligned (numbers) rather than left-aligned.
        drop: 0 for a column that always stays; otherwise the larger, the sooner it is left out.
        stacked: whether it is shown when rows are drawn as blocks (a histogram is not).
    """

    header: str
    numeric: bool = False
    drop: int = 0
    stacked: bool = True


GRADS_COLUMNS = (ViewColumn("tensor"), ViewColumn("shape", drop=4), ViewColumn("norm", True),
                 ViewColumn("mean", True, drop=6), ViewColumn("abs max", True, drop=5),
                 ViewColumn("non-finite", True, drop=1), ViewColumn("histogram", drop=7, stacked=False),
                 ViewColumn("range", drop=3))
LAYER_COLUMNS = (ViewColumn("module"), ViewColumn("type", drop=3), ViewColumn("status"),
                 ViewColumn("grad_output", True), ViewColumn("grad_input", True, drop=4),
                 ViewColumn("param grad", True, drop=5), ViewColumn("non-finite", True, drop=1),
                 ViewColumn("edits", drop=2))
PARAMS_COLUMNS = (ViewColumn("parameter"), ViewColumn("shape", drop=4), ViewColumn("status", drop=3),
                  ViewColumn("grad norm", True), ViewColumn("grad mean", True, drop=6),
                  ViewColumn("grad abs max", True, drop=5), ViewColumn("non-finite", True, drop=1),
                  ViewColumn("param norm", True, drop=2))
BREAKPOINT_COLUMNS = (ViewColumn("#", True), ViewColumn("condition"), ViewColumn("checked at", drop=2),
                      ViewColumn("enabled", drop=3), ViewColumn("hits", True, drop=1))


@dataclass(frozen=True)
class Position:
    """The answer to ``where``.

    Attributes:
        state: ``"forward"``, ``"start"`` (forward done, backward not started), ``"backward"``
            or ``"finished"``.
        phase: ``"forward"``, ``"line"`` (a line of forward code made a NaN/Inf), ``"pre"``,
            ``"post"``, ``"node"`` or None (start / finished).
        module: display path of the module ("model" for the root), or None.
        module_type: its class name.
        node: the autograd node at this point, with what it is (``"AddBackward0 (next to run)"``).
        modules_done: module calls whose backward has finished (at a forward point: the calls
            that have returned).
        modules_pending: module calls whose backward has not finished, the current one included
            (at a forward point: the calls that have started and not returned).
        source: ``file:line`` of the module's forward call, or of the node's creation.
        reason: why the debugger stopped (``"breakpoint 1 (nan)"``, ``"step"``, ...).
        step: the training step being debugged, when known.
        loss: the loss value, when known.
        notes: further remarks (first non-finite gradient, missing grad_input, ...).
        edits: the gradient edits made at this point.
    """

    state: str
    phase: str | None
    module: str | None
    module_type: str | None
    node: str | None
    modules_done: int
    modules_pending: int
    source: str | None
    reason: str
    step: int | None = None
    loss: float | None = None
    notes: tuple = ()
    edits: tuple = ()


@dataclass(frozen=True)
class GradGroup:
    """A named tuple of tensors (``grad_output``): TensorStats or MissingTensor entries."""

    name: str
    entries: tuple


@dataclass(frozen=True)
class GradsView:
    """The answer to ``grads``: the gradients (or outputs) at the current point."""

    title: str
    groups: tuple
    notes: tuple = ()


@dataclass(frozen=True)
class LayerRow:
    """One module call in ``table``. Norms are None when not known (yet)."""

    module: str
    module_type: str
    status: str
    grad_output_norm: float | None
    grad_input_norm: float | None
    param_grad_norm: float | None
    nonfinite: int
    edits: str = ""


@dataclass(frozen=True)
class LayerTable:
    """The answer to ``table``: every module call of the pass in forward order."""

    rows: tuple
    total_param_grad_norm: float | None
    notes: tuple = ()


@dataclass(frozen=True)
class ParamRow:
    """One parameter in ``params``; statistics are None when it has no gradient."""

    name: str
    shape: tuple
    status: str
    grad_norm: float | None
    grad_mean: float | None
    grad_abs_max: float | None
    nonfinite: int
    param_norm: float


@dataclass(frozen=True)
class ParamsView:
    """The answer to ``params``: the parameters of the current module."""

    module: str
    rows: tuple
    notes: tuple = ()


@dataclass(frozen=True)
class BreakpointRow:
    number: int
    condition: str
    phases: str
    enabled: bool
    hits: int


@dataclass(frozen=True)
class BreakpointList:
    """The answer to ``breakpoints``."""

    rows: tuple


@dataclass(frozen=True)
class GraphView:
    """The answer to ``graph``: an autograd graph and how much of it to draw.

    Attributes:
        graph: the ``AutogradGraph`` records.
        max_depth: draw at most this many levels below the roots (None: all).
        stop_at_pending: do not expand nodes that have not run yet (draws the graph "from the
            loss to the current point").
    """

    graph: object
    max_depth: int | None = None
    stop_at_pending: bool = False


# ---------------------------------------------------------------- building the records
# What a session knows, as the builders take it: the point where it is stopped (``stop``, None
# when running or finished), ``state`` (``"idle"``, ``"forward"``, ``"start"``, ``"backward"``
# or ``"finished"``), the forward calls of the pass (``tracker``), what backward did with them
# (``record``) and the engine adapter that reads tensors.

def _backward_calls(tracker: ForwardTracker) -> list[Call]:
    """The calls backward visits: an output requires grad and the call made it (a module that
    returns its argument unchanged, such as ``nn.Identity``, has no backward of its own)."""
    return [call for call in tracker.calls if call.has_grad_outputs and call.output_edges]


def _counts(tracker: ForwardTracker, record: PassRecord) -> tuple[int, int]:
    calls = _backward_calls(tracker)
    done = sum(1 for call in calls if record.state(call).post_done)
    return done, len(calls) - done


def loss_value(engine: Engine, loss: Any) -> float | None:
    """The loss as a number, when it is known and has one element."""
    loss_array = engine.to_numpy(loss) if loss is not None else None
    return float(loss_array.reshape(-1)[0]) if loss_array is not None and loss_array.size == 1 else None


def loss_kind(engine: Engine, loss: Any) -> str | None:
    """``"nan"``/``"inf"`` when the loss is a tensor that holds one, else None."""
    if not engine.is_tensor(loss):
        return None
    return engine.nonfinite_kind(loss)


def position(stop: Stop | None, state: str, tracker: ForwardTracker, record: PassRecord, engine: Engine, *,
             step: int | None, loss: float | None) -> Position:
    """Where the session is: the answer to ``where``."""
    done, pending = _counts(tracker, record)
    if stop is not None and stop.phase == "forward":
        active = tracker.active_calls
        done, pending = len(tracker.calls) - len(active), len(active)
    user_code = tracker.user_code
    notes = []
    if record.first_nonfinite is not None:
        node, owner = record.first_nonfinite
        where = f" in {owner.display}" if owner is not None else " outside the model's modules"
        created = user_code.creation_site(engine, node) or (owner.source if owner is not None else "unknown")
        notes.append(f"first non-finite gradient of this pass: produced by {node.name()}{where} "
                     f"(created at {created})")
    if stop is None:
        reason = "backward finished" if state == "finished" else state
        return Position(state=state, phase=None, module=None, module_type=None, node=None,
                        modules_done=done, modules_pending=pending, source=None, reason=reason,
                        step=step, loss=loss, notes=tuple(notes))
    call = stop.call
    node_text = None
    source = call.source if call is not None else None
    if stop.phase == "pre" and call is not None:
        node_text = ", ".join(n.name() for n in _real_nodes(call.output_nodes)) + " (next to run)"
    elif stop.phase == "post" and call is not None:
        producers = [n for n in call.nodes if any(child in call.input_nodes for child, _ in n.next_functions)]
        if producers:
            node_text = ", ".join(sorted({n.name() for n in producers})) + " (produced grad_input)"
        else:
            last = record.last_ran(call)
            node_text = None if last is None else f"{last.name()} (ran last)"
    elif stop.value_kind is not None:
        node_text = None if stop.node is None else f"{stop.node.name()} (made the value)"
        source = stop.source
        code = linecache.getline(*stop.line).strip() if stop.line is not None else ""
        notes.append(f"this line made {stop.value_kind}" + (f": {code}" if code else ""))
    elif stop.phase == "forward" and call is not None:
        node_text = ", ".join(n.name() for n in _real_nodes(call.output_nodes)) or None
        if node_text:
            node_text += " (created)"
    elif stop.phase == "node":
        node_text = f"{stop.node.name()} (just ran)"
        source = user_code.creation_site(engine, stop.node) or source
    if stop.phase == "pre" and call is not None and call.parent is None and record.first_nonfinite is None \
            and any(nonfinite_count(a) for a in stop.groups["grad_output"] if a is not None):
        notes.append("the gradient reaching the model is already non-finite: it comes from the loss "
                     "computation, outside the model's modules")
    if stop.phase == "post" and call is not None and record.state(call).deferred:
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
                    step=step, loss=loss, notes=tuple(notes), edits=tuple(stop.edits))


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


def banner(stop: Stop | None, state: str, *, loss: float | None = None, loss_kind: str | None = None) -> str:
    """One line announcing the point ``stop`` (``loss`` and ``loss_kind``, ``"nan"``/``"inf"``
    or None, are shown at the ``start`` point)."""
    if stop is None:
        return "backward finished" if state == "finished" else state
    if stop.phase == "start":
        value = "" if loss is None else f" (loss = {loss:.6g})"
        text = f"stopped before backward{value}: forward done, backward not started"
        if loss_kind is not None:
            text += (f" · the loss is already {loss_kind}: the forward pass made it "
                     f"(--break 'forward {loss_kind}' stops at the line that did)")
        return text
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


def grads_view(stop: Stop | None, state: str) -> GradsView:
    """The gradients at ``stop``: the answer to ``grads``."""
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
    title = banner(stop, state).removeprefix("stopped at ")
    return GradsView(title=title, groups=tuple(groups), notes=tuple(notes))


def _param_status(param: Any, tracker: ForwardTracker, record: PassRecord) -> str:
    """``"accumulated"`` in this pass, ``"pending"``, ``"not used"`` or ``"frozen"``."""
    if not param.requires_grad:
        return "frozen"
    accumulators = {id(getattr(node, "variable", None)): node for call in tracker.calls
                    for node in call.own_nodes if getattr(node, "variable", None) is not None}
    node = accumulators.get(id(param))
    if node is None:
        return "not used"
    return "accumulated" if node in record.ran else "pending"


def layer_table(stop: Stop | None, state: str, tracker: ForwardTracker, record: PassRecord, engine: Engine,
                model: Any) -> LayerTable:
    """Every module call of the pass in forward order: the answer to ``table``."""
    rows = []
    for call in tracker.calls:
        call_state = record.state(call)
        if not call.has_grad_outputs:
            status = "no grad"
        elif not call.output_edges and state != "forward":
            status = "passed through"
        elif stop is not None and stop.call is call:
            status = f"current ({stop.phase})"
        elif call_state.post_done:
            status = "done"
        elif call_state.pre_seen:
            status = "running"
        else:
            status = "pending"
        accumulated = [engine.to_numpy(p.grad) for p in call.module.parameters(recurse=False)
                       if p.grad is not None and _param_status(p, tracker, record) == "accumulated"]
        rows.append(LayerRow(module=call.display, module_type=call.type_name, status=status,
                             grad_output_norm=call_state.grad_output_norm,
                             grad_input_norm=call_state.grad_input_norm,
                             param_grad_norm=total_norm(accumulated) if accumulated else None,
                             nonfinite=call_state.nonfinite, edits="; ".join(call_state.edits)))
    grads = [engine.to_numpy(p.grad) for p in model.parameters() if p.grad is not None]
    notes = []
    if state != "finished" and state != "idle":
        notes.append("gradients of modules not done yet are not known; parameter norms count only "
                     "gradients accumulated in this pass")
    return LayerTable(rows=tuple(rows), total_param_grad_norm=total_norm(grads) if grads else None,
                      notes=tuple(notes))


def params_view(stop: Stop | None, state: str, tracker: ForwardTracker, record: PassRecord, engine: Engine,
                model: Any) -> ParamsView:
    """The parameters of the module at ``stop`` (all of the model's when not in a module)."""
    call = stop.call if stop is not None else None
    module = call.module if call is not None else model
    prefix = (call.path + ".") if call is not None and call.path else ""
    rows = []
    for name, param in module.named_parameters():
        grad = param.grad
        status = _param_status(param, tracker, record) if state != "finished" else \
            ("accumulated" if grad is not None else "no grad")
        if grad is None:
            rows.append(ParamRow(prefix + name, tuple(param.shape), status if status != "accumulated"
                                 else "no grad", None, None, None, 0, l2_norm(engine.to_numpy(param))))
            continue
        stats = tensor_stats(name, engine.to_numpy(grad))
        rows.append(ParamRow(prefix + name, tuple(param.shape), status, stats.norm, stats.mean,
                             stats.abs_max, stats.nonfinite, l2_norm(engine.to_numpy(param))))
    notes = []
    if any(row.status == "pending" for row in rows):
        notes.append("'pending': this pass has not accumulated its gradient yet; .grad shows what "
                     "was there before")
    return ParamsView(module=call.display if call is not None else "model", rows=tuple(rows),
                      notes=tuple(notes))


def breakpoint_list(breakpoints: BreakpointTable) -> BreakpointList:
    """The answer to ``breakpoints``."""
    return BreakpointList(tuple(BreakpointRow(b.number, b.text, b.phase_text, b.enabled, b.hits)
                                for b in breakpoints.breakpoints))
