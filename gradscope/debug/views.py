"""What the debugger's commands show, as plain frozen records. ``gradscope.render.debug``
turns them into rich renderables and ``gradscope.debug.text`` into plain text."""
from __future__ import annotations

from dataclasses import dataclass


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
        modules_done: module calls whose backward has finished.
        modules_pending: module calls whose backward has not finished (the current one included).
        source: ``file:line`` of the module's forward call, or of the node's creation.
        reason: why the debugger stopped (``"breakpoint 1: nan"``, ``"step"``, ...).
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
