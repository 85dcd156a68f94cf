"""What a debugging session records of a pass: the point where it is stopped (:class:`Stop`),
what backward did with each module call (:class:`CallState`), and the gradient sent along each
edge that is some call's argument (:class:`Edge`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gradscope.debug.tracking import Call


@dataclass(eq=False)
class CallState:
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
