"""The autograd graph below a tensor, as plain records (rendered by ``gradscope.render.debug``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

from gradscope.engines import ACCUMULATE_NODE, HOOK_NODE, Engine

if TYPE_CHECKING:
    from gradscope.debug.record import PassRecord, Stop
    from gradscope.debug.tracking import ForwardTracker

__all__ = ["ACCUMULATE_NODE", "HOOK_NODE", "AutogradGraph", "GraphNode", "TreeLine", "build_graph", "node_label",
           "trace_graph", "tree_lines"]


@dataclass(frozen=True)
class GraphNode:
    """One autograd node.

    Attributes:
        id: index of the node in ``AutogradGraph.nodes`` (depth-first order from the roots).
        name: ``node.name()``, e.g. ``"MulBackward0"``.
        shapes: the shape of each output of the node (of the leaf for an accumulator).
        module: display path of the module call that created it, or None.
        parameter: for a leaf accumulator, the parameter's name (``"fc1.weight"``), or
            ``"(input)"`` for a leaf that is not a parameter of the model; else None.
        state: ``"ran"``, ``"pending"``, or ``"unknown"`` when runs are not tracked.
        current: whether it belongs to the module where the debugger is stopped.
        inputs: ids of the nodes its gradients flow to (its ``next_functions``).
    """

    id: int
    name: str
    shapes: tuple
    module: str | None
    parameter: str | None
    state: str
    current: bool
    inputs: tuple


@dataclass(frozen=True)
class AutogradGraph:
    """A graph of nodes reachable from ``roots``; hook identity nodes are left out."""

    nodes: tuple
    roots: tuple
    hidden_hook_nodes: int = 0
    truncated: bool = False


def _shapes(node: Any, engine: Engine | None) -> tuple:
    variable = getattr(node, "variable", None)
    if variable is not None:
        return (tuple(variable.shape),)
    if engine is not None:
        return engine.node_output_shapes(node)
    meta = getattr(node, "_meta", None) or ()
    return tuple(tuple(int(s) for s in shape) for shape, _ in meta)


def build_graph(roots: Iterable[Any], *, owner_of: Callable[[Any], str | None] = lambda node: None,
                parameter_names: dict | None = None, ran: set | None = None,
                current: set | frozenset = frozenset(), max_nodes: int = 5000,
                engine: Engine | None = None) -> AutogradGraph:
    """Collect the graph below ``roots`` (autograd nodes, e.g. ``loss.grad_fn``).

    Args:
        roots: nodes to start from; None entries are ignored.
        owner_of: maps a node to the display path of its owning module (or None).
        parameter_names: ``id(tensor) -> name`` for the model's parameters.
        ran: the nodes that have run in the current backward pass; None if not tracked.
        current: nodes to mark as part of the current stopping point.
        max_nodes: stop collecting after this many nodes (``truncated`` is then True).
        engine: the engine adapter of the graph, which knows its nodes' output shapes.
    """
    parameter_names = parameter_names or {}
    ids: dict = {}
    order: list = []
    hidden: set = set()

    def visible(node: Any) -> list:
        """``node`` itself, or what a hook identity node forwards to."""
        found, stack = [], [node]
        while stack:
            item = stack.pop()
            if item is None:
                continue
            if item.name() == HOOK_NODE:
                if item not in hidden:
                    hidden.add(item)
                stack.extend(child for child, _ in reversed(item.next_functions))
            elif item not in found:
                found.append(item)
        return found

    root_nodes = [n for root in roots for n in visible(root)]
    truncated = False
    stack = list(reversed(root_nodes))
    children: dict = {}
    while stack:
        node = stack.pop()
        if node in ids:
            continue
        if len(order) >= max_nodes:
            truncated = True
            break
        ids[node] = len(order)
        order.append(node)
        kids = [v for child, _ in node.next_functions for v in visible(child)]
        children[node] = kids
        stack.extend(reversed([k for k in kids if k not in ids]))
    records = []
    for node in order:
        variable = getattr(node, "variable", None)
        parameter = None
        if node.name() == ACCUMULATE_NODE and variable is not None:
            parameter = parameter_names.get(id(variable), "(input)")
        state = "unknown" if ran is None else ("ran" if node in ran else "pending")
        records.append(GraphNode(id=ids[node], name=node.name(), shapes=_shapes(node, engine), module=owner_of(node),
                                 parameter=parameter, state=state, current=node in current,
                                 inputs=tuple(ids[k] for k in children[node] if k in ids)))
    return AutogradGraph(nodes=tuple(records), roots=tuple(ids[n] for n in root_nodes if n in ids),
                         hidden_hook_nodes=len(hidden), truncated=truncated)


@dataclass(frozen=True)
class TreeLine:
    """One line of the graph drawn as a tree (see ``tree_lines``).

    Attributes:
        depth: nesting level (0 for a root).
        node: the GraphNode shown on this line.
        repeat: the node was already drawn above (a shared input); its inputs are not repeated.
        hidden_inputs: inputs left out below this node (depth limit or not run yet).
    """

    depth: int
    node: GraphNode
    repeat: bool
    hidden_inputs: int


def tree_lines(graph: AutogradGraph, max_depth: int | None = None, stop_at_pending: bool = False) -> list[TreeLine]:
    """The graph as tree lines, depth first from the roots; a node reached again is drawn once
    more with ``repeat=True`` and no inputs.

    Args:
        max_depth: levels below the roots to draw (None: all).
        stop_at_pending: do not expand a node that has not run (its inputs cannot have run).
    """
    lines: list[TreeLine] = []
    drawn: set = set()
    stack = [(root, 0) for root in reversed(graph.roots)]
    while stack:
        node_id, depth = stack.pop()
        node = graph.nodes[node_id]
        if node_id in drawn:
            lines.append(TreeLine(depth, node, True, 0))
            continue
        drawn.add(node_id)
        cut = (max_depth is not None and depth >= max_depth) or (stop_at_pending and node.state == "pending")
        lines.append(TreeLine(depth, node, False, len(node.inputs) if cut else 0))
        if not cut:
            stack.extend((child, depth + 1) for child in reversed(node.inputs))
    return lines


def node_label(node: GraphNode) -> str:
    """``"MulBackward0 [5, 2]"``, or ``"AccumulateGrad fc1.weight [4, 3]"`` for a leaf."""
    shapes = ", ".join(str(list(shape)) for shape in node.shapes)
    if node.parameter is not None:
        return f"AccumulateGrad {node.parameter} {shapes}"
    return f"{node.name} {shapes}"


def pass_graph(loss: Any, stop: Stop | None, state: str, tracker: ForwardTracker, record: PassRecord, *,
               engine: Engine, parameter_names: dict, model_output_only: bool = False) -> AutogradGraph:
    """The graph a debugging session shows: from the loss (or from the model's outputs when the
    loss is unknown or ``model_output_only``), each node named by the module call that owns it,
    marked with whether it ran in this pass (once backward started) and whether it belongs to
    the point ``stop``."""
    if loss is not None and loss.grad_fn is not None and not model_output_only:
        roots = [loss.grad_fn]
    else:
        roots = [n for call in tracker.calls if call.parent is None for n in call.output_nodes]
    current = stop.call.nodes if stop is not None and stop.call is not None else set()
    if stop is not None and stop.phase == "node":
        current = {stop.node}
    tracked = state in ("backward", "finished") or record.ran

    def owner(node: Any) -> str | None:
        call = tracker.owner_of(node)
        return None if call is None else call.display

    return build_graph(roots, owner_of=owner, parameter_names=parameter_names,
                       ran=record.ran if tracked else None, current=current, engine=engine)


def trace_graph(model: Any, compute_loss: Callable[[], Any]) -> AutogradGraph:
    """Run ``compute_loss()`` (one forward pass of ``model``) with forward hooks that record
    which module created each node, and return the graph under the loss (nothing runs
    backward, so node states are ``"unknown"``)."""
    from gradscope.debug.tracking import ForwardTracker

    tracker = ForwardTracker(model)
    tracker.attach()
    try:
        loss = compute_loss()
    finally:
        tracker.detach()

    def owner(node: Any) -> str | None:
        call = tracker.owner_of(node)
        return None if call is None else call.display

    names = {id(p): name for name, p in model.named_parameters()}
    roots = [loss.grad_fn] if getattr(loss, "grad_fn", None) is not None else []
    return build_graph(roots, owner_of=owner, parameter_names=names, engine=tracker.engine)
