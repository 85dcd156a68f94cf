"""What the debugger's commands show, as plain frozen records. ``gradscope.render.debug``
turns them into rich renderables and ``gradscope.debug.text`` into plain text.

Both draw the tables with the same columns (:data:`GRADS_COLUMNS`, ...) and the same fitting
rules as ``inspect``: at a given width no name or number is cut; columns are left out in order
(those whose cells all say the same first, then the larger ``drop`` first; ``drop == 0`` stays)
and named; when even the columns that stay do not fit, each row becomes a block of
``header value`` pairs under the row's name.
"""
from __future__ import annotations

from dataclasses import dataclass


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
