"""What a debugging session records: the point where it is stopped (:class:`Stop`) and, for
the current pass, a :class:`PassRecord`: what backward did with each module call
(:class:`CallState`), which nodes ran, and the gradient sent along each edge that is some call's
argument (:class:`Edge`, from which a call's ``grad_input`` is summed and edited).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from gradscope.debug.tracking import Call
from gradscope.engines import nonfinite_count, total_norm


@dataclass(eq=False)
class CallState:
    """What backward did with one module call.

    Attributes:
        pre_seen: its ``pre`` point has passed (its backward started).
        post_done: its ``post`` point has passed (its backward is done).
        deferred: no argument requires grad, so ``grad_input`` is None.
        grad_output: per output, the gradient it received (host arrays; None where unknown).
        output_templates: per output, the tensor that gradient came in (for its device and dtype).
        grad_input: per argument, the gradient sent to it.
        grad_output_norm, grad_input_norm: their total norms.
        nonfinite: how many non-finite entries they held.
        pending: the call's nodes under the loss that have not run yet.
        edits: the gradient edits made at its points (``"pre: scale 0.5"``).
    """

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
class Part:
    """What one node sent along a gradient edge in this pass (``sender``), or what a module's
    ``grad_input`` edit put in place of its nodes' parts (``edited_by``)."""

    array: np.ndarray
    sender: Any = None
    edited_by: Call | None = None

    def belongs_to(self, call: Call) -> bool:
        """Whether the part is ``call``'s: sent by one of its nodes, or an edit of a call inside it."""
        if self.edited_by is not None:
            return within(self.edited_by, call)
        return self.sender in call.nodes


@dataclass(eq=False)
class Edge:
    """The gradient sent along one edge ``(node, output_nr)`` that is some call's argument."""

    parts: list = field(default_factory=list)
    sent: np.ndarray | None = None
    edited: bool = False

    def add(self, sender: Any, array: np.ndarray) -> None:
        self.parts.append(Part(array, sender=sender))
        self.sent = array.copy() if self.sent is None else self.sent + array

    def part_of(self, call: Call) -> np.ndarray | None:
        """The sum of ``call``'s parts (None when it sent nothing)."""
        mine = [part.array for part in self.parts if part.belongs_to(call)]
        return None if not mine else functools.reduce(np.add, mine[1:], mine[0].copy())

    def replace(self, call: Call, array: np.ndarray) -> None:
        """Put ``array`` in place of ``call``'s parts."""
        self.parts = [part for part in self.parts if not part.belongs_to(call)] + [Part(array, edited_by=call)]
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
    """The point where the session is stopped.

    Attributes:
        phase: ``"forward"``, ``"start"``, ``"pre"``, ``"node"`` or ``"post"``.
        call: the module call it belongs to (None outside the model's modules, or at ``start``).
        node: the autograd node (at ``node`` points, and at a forward line that made a NaN/Inf).
        reason: why the session stopped (``"breakpoint 1 (nan)"``, ``"step"``, ...).
        groups: the host arrays shown, by name (``"grad_output"``, ``"grad_input"``, ``"output"``).
        editable: the name of the group an edit replaces, or None when nothing can be edited.
        edited, edits: whether the group was edited here, and how.
        source: ``file:line`` of the forward line (with ``value_kind``).
        value_kind: ``"nan"``/``"inf"`` when a line of forward code made one, else None.
        line: ``(filename, line)`` of that line.
    """

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


@dataclass(eq=False)
class PassRecord:
    """What the session has seen of one pass, forgotten when the next pass starts.

    Attributes:
        states: what backward did with each module call (:class:`CallState`).
        ran: the nodes that have run, each with its position in the order they ran.
        reachable: the nodes under the loss (None until backward is about to start).
        first_nonfinite: ``(node, owner call)`` of the first node that produced a non-finite
            gradient from finite ones.
        edges: the gradient sent along each ``(node, output_nr)`` that is some call's argument.
        open: whether backward has started (its end callback is queued).
    """

    states: dict = field(default_factory=dict)
    ran: dict = field(default_factory=dict)
    reachable: set | None = None
    first_nonfinite: tuple | None = None
    edges: dict = field(default_factory=dict)
    open: bool = False

    def state(self, call: Call) -> CallState:
        """``call``'s state, made empty when backward has not reached it."""
        state = self.states.get(call)
        if state is None:
            state = self.states[call] = CallState()
        return state

    def watch_edges(self, call: Call) -> None:
        """Start recording what is sent along the edges of ``call``'s arguments."""
        for edge in call.input_edges:
            if edge is not None and edge not in self.edges:
                self.edges[edge] = Edge()

    def note_grad_output(self, call: Call, node: Any, gradients: list,
                         to_numpy: Callable[[Any], np.ndarray]) -> tuple[CallState, list]:
        """Record the gradients ``node`` is about to receive (``gradients``, by input slot) for
        ``call``'s outputs; returns the call's state and the ``(output index, slot)`` pairs noted."""
        state = self.state(call)
        slots = [(index, nr) for index, (edge_node, nr) in enumerate(call.output_edges) if edge_node is node]
        if state.grad_output is None:
            state.grad_output = [None] * len(call.output_edges)
            state.output_templates = [None] * len(call.output_edges)
        for index, nr in slots:
            gradient = gradients[nr] if nr < len(gradients) else None
            state.grad_output[index] = None if gradient is None else to_numpy(gradient)
            state.output_templates[index] = gradient
        state.grad_output_norm = total_norm(state.grad_output)
        state.nonfinite += sum(nonfinite_count(state.grad_output[i]) for i, _ in slots
                               if state.grad_output[i] is not None)
        return state, slots

    def start_call(self, call: Call) -> bool:
        """Mark ``call``'s backward started (its ``pre`` point): from now on it waits for its
        nodes under the loss that have not run. False when it had started already (a later
        output node of the call)."""
        state = self.state(call)
        if state.pre_seen:
            return False
        state.pre_seen = True
        state.deferred = not call.has_grad_inputs
        state.pending = {n for n in call.nodes if n not in self.ran
                         and (self.reachable is None or n in self.reachable)}
        return True

    def note_sent(self, node: Any, gradients: tuple, arrays: list | None,
                  to_numpy: Callable[[Any], np.ndarray]) -> None:
        """Record what ``node`` sent along the argument edges it feeds (``arrays``: the host copies
        of ``gradients`` when already made; only the edges recorded are copied otherwise)."""
        for index, ((child, nr), gradient) in enumerate(zip(node.next_functions, gradients)):
            edge = self.edges.get((child, nr)) if child is not None and gradient is not None else None
            if edge is not None:
                edge.add(node, arrays[index] if arrays is not None else to_numpy(gradient))

    def calls_done_by(self, node: Any, owner: Call | None) -> Iterator[Call]:
        """The calls (``owner``, then its ancestors) whose backward is done now that ``node`` ran,
        each yielded when it is reached (so that the caller's stop at one comes before the next)."""
        call = owner
        while call is not None:
            state = self.states.get(call)
            if state is not None and state.pre_seen and node in state.pending:
                state.pending.discard(node)
                if not state.pending and not state.post_done:
                    yield call
            call = call.parent

    def finish_call(self, call: Call) -> list:
        """Mark ``call``'s backward done (its ``post`` point) and return its ``grad_input``: per
        argument, the sum of what its nodes sent along the argument's edge (None if nothing)."""
        state = self.state(call)
        state.post_done = True
        arrays = [None if edge is None or edge not in self.edges else self.edges[edge].part_of(call)
                  for edge in call.input_edges]
        state.grad_input = arrays
        state.grad_input_norm = total_norm(arrays) if any(a is not None for a in arrays) else None
        state.nonfinite += sum(nonfinite_count(a) for a in arrays if a is not None)
        return arrays

    def edit_grad_input(self, call: Call, before: list, after: list) -> list:
        """Put the edited ``grad_input`` of ``call`` in place of what its nodes sent; returns the
        edges changed (their receiving nodes must apply the edit before they run)."""
        changed = []
        for index, edge in enumerate(call.input_edges):
            if edge is None or before[index] is None or after[index] is None:
                continue
            self.edges[edge].replace(call, after[index])
            changed.append(edge)
        return changed

    def unfinished_calls(self) -> list[Call]:
        """The calls whose backward started but has not finished, the newest first."""
        return sorted((c for c, s in self.states.items() if s.pre_seen and not s.post_done), key=lambda c: -c.index)

    def last_ran(self, call: Call) -> Any:
        """The node of ``call`` that ran last (leaf accumulators aside)."""
        ran = [n for n in call.nodes if n in self.ran and getattr(n, "variable", None) is None]
        return max(ran, key=self.ran.__getitem__) if ran else None


def within(call: Call | None, ancestor: Call) -> bool:
    while call is not None:
        if call is ancestor:
            return True
        call = call.parent
    return False
