"""Drawing the debugger's views with rich, and the autograd graph as Graphviz DOT.

Pure functions from the records of ``gradscope.debug.views`` / ``gradscope.debug.graph`` to
rich renderables (or DOT text), plus ``RichPresenter``, the small adapter through which the
debugger's shell prints them on a console the caller created.
"""
from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.text import Text
from rich.tree import Tree

from gradscope.debug.graph import AutogradGraph, GraphNode, TreeLine, node_label, tree_lines
from gradscope.debug.stats import MissingTensor
from gradscope.debug.text import number, sparkline, state_mark
from gradscope.debug.views import (BREAKPOINT_COLUMNS, GRADS_COLUMNS, LAYER_COLUMNS, PARAMS_COLUMNS, BreakpointList,
                                   GradsView, GraphView, LayerTable, ParamsView, Position, ViewColumn)
from gradscope.render.layout import Column, FittedTable

_STATUS_STYLE = {"done": "green", "pending": "dim", "running": "cyan", "no grad": "dim"}


def render_view(view: Any) -> RenderableType:
    """The rich renderable of any debugger view record."""
    if isinstance(view, Position):
        return render_position(view)
    if isinstance(view, GradsView):
        return render_grads(view)
    if isinstance(view, LayerTable):
        return render_layer_table(view)
    if isinstance(view, ParamsView):
        return render_params(view)
    if isinstance(view, BreakpointList):
        return render_breakpoints(view)
    if isinstance(view, GraphView):
        return render_graph(view.graph, view.max_depth, view.stop_at_pending)
    return Text(str(view))


def _notes(notes: tuple) -> list:
    return [Text(f"note: {note}", style="yellow") for note in notes]


def render_position(p: Position) -> RenderableType:
    """``where``: a heading line and one line per known field."""
    if p.phase is None:
        head = Text({"start": "before backward", "finished": "after backward"}.get(p.state, p.state), style="bold")
    else:
        point = {"forward": ("output", " of "), "line": ("a line", " inside ")}.get(p.phase, (p.phase, " point of "))
        head = Text.assemble((p.state, "bold"), ", ", (point[0], "bold magenta"), point[1],
                             (p.module or "(no module)", "bold cyan"),
                             f" ({p.module_type})" if p.module_type else "")
    fields = [("node", p.node, ""), ("modules", f"{p.modules_done} done, {p.modules_pending} pending", ""),
              ("source", p.source, ""), ("reason", p.reason, ""),
              ("step", None if p.step is None else str(p.step), ""),
              ("loss", None if p.loss is None else number(p.loss), "")]
    fields += [("note", note, "yellow") for note in p.notes]
    fields += [("edited", edit, "magenta") for edit in p.edits]
    lines = [_Field("  " + f"{name}:".ljust(9), Text(value, style=style))
             for name, value, style in fields if value is not None]
    return Group(head, *lines)


class _Field:
    """``label value`` on one line; a value too long for it wraps under itself, not under the label."""

    def __init__(self, label: str, value: Text) -> None:
        self.label = label
        self.value = value

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        indent = len(self.label)
        for index, line in enumerate(self.value.wrap(console, max(options.max_width - indent, 8))):
            line.rstrip()
            yield Text.assemble((self.label, "dim") if index == 0 else " " * indent, line)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(len(self.label) + 8, len(self.label) + self.value.cell_len)


def _nonfinite(count: int) -> Text:
    return Text(str(count), style="bold red" if count else "")


def render_grads(view: GradsView) -> RenderableType:
    """``grads``: one row per tensor with its statistics and a histogram of its values.

    The table fits the console it is drawn on as ``inspect``'s tables do (see
    :mod:`gradscope.render.layout`): no name or number is cut; the least useful columns are left
    out first and named; when even the tensor, its norm and its non-finite count do not fit, each
    tensor becomes a ``name value`` block.
    """
    columns = _columns(GRADS_COLUMNS, histogram="blue")
    rows = []
    missing = []
    for group in view.groups:
        for entry in group.entries:
            if isinstance(entry, MissingTensor):
                missing.append(Text(f"{entry.label}: {entry.reason}", style="dim"))
                continue
            label = Text(entry.label)
            if entry.edited:
                label.append(" (edited)", style="magenta")
            rows.append([label, _shape(entry.shape), number(entry.norm), number(entry.mean), number(entry.abs_max),
                         _nonfinite(entry.nonfinite), sparkline(entry.histogram),
                         f"[{number(entry.low)}, {number(entry.high)}]"])
    parts: list = [FittedTable(columns, rows, title=view.title)] if rows else [Text(view.title)]
    return Group(*parts, *missing, *_notes(view.notes))


def render_layer_table(view: LayerTable) -> RenderableType:
    """``table``: one row per module call, in forward order (fitted like ``grads``)."""
    columns = _columns(LAYER_COLUMNS, edits="magenta")
    rows = []
    for row in view.rows:
        style = "bold yellow" if row.status.startswith("current") else _STATUS_STYLE.get(row.status, "")
        rows.append([Text(row.module), row.module_type, Text(row.status, style=style), number(row.grad_output_norm),
                     number(row.grad_input_norm), number(row.param_grad_norm), _nonfinite(row.nonfinite),
                     row.edits])
    total = Text(f"total parameter gradient norm: {number(view.total_param_grad_norm)}")
    return Group(FittedTable(columns, rows), total, *_notes(view.notes))


def render_params(view: ParamsView) -> RenderableType:
    """``params``: the current module's parameters and their gradients (fitted like ``grads``)."""
    if not view.rows:
        return Group(Text(f"parameters of {view.module}: none"), *_notes(view.notes))
    columns = _columns(PARAMS_COLUMNS)
    rows = []
    for row in view.rows:
        style = "green" if row.status == "accumulated" else "dim"
        rows.append([Text(row.name), _shape(row.shape), Text(row.status, style=style), number(row.grad_norm),
                     number(row.grad_mean), number(row.grad_abs_max), _nonfinite(row.nonfinite),
                     number(row.param_norm)])
    return Group(FittedTable(columns, rows, title=f"parameters of {view.module}"), *_notes(view.notes))


def render_breakpoints(view: BreakpointList) -> RenderableType:
    """``breakpoints``: number, condition, where it is checked, enabled, hits (fitted like ``grads``)."""
    if not view.rows:
        return Text("no breakpoints")
    columns = _columns(BREAKPOINT_COLUMNS)
    rows = [[str(row.number), Text(row.condition), row.phases,
             Text("yes", style="green") if row.enabled else Text("no", style="dim"), str(row.hits)]
            for row in view.rows]
    return FittedTable(columns, rows)


def _columns(columns: tuple[ViewColumn, ...], **styles: str) -> list[Column]:
    """The layout columns of a debugger table (``styles``: header -> rich style of the column)."""
    return [Column(column.header, "right" if column.numeric else "left", drop=column.drop,
                   style=styles.get(column.header), stacked=column.stacked) for column in columns]


def _shape(shape: tuple) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


def _node_text(line: TreeLine) -> Text:
    node = line.node
    text = Text()
    if node.parameter is not None:
        text.append("AccumulateGrad ", style="dim")
        text.append(node.parameter, style="bold green")
    else:
        text.append(node.name, style="bold")
    text.append(" " + ", ".join(str(list(s)) for s in node.shapes), style="dim")
    if node.module:
        text.append(f" · {node.module}", style="cyan")
    if line.repeat:
        text.append(" (shown above)", style="dim italic")
        return text
    mark = state_mark(node.state)
    if mark:
        text.append(f" {mark}", style="green" if node.state == "ran" else "dim")
    if node.current:
        text.append(" ◀ here", style="bold yellow")
    return text


def render_graph(graph: AutogradGraph, max_depth: int | None = None, stop_at_pending: bool = False,
                 title: str = "autograd graph") -> RenderableType:
    """The graph as a rich tree: node names, output shapes, owning modules, parameter names,
    which nodes have run (✓) and which have not (·); shared nodes are drawn once.

    Where the tree's guides would leave a node too little room (a deep graph on a narrow
    terminal), it is drawn as an outline instead (see :class:`GraphDrawing`)."""
    lines = tree_lines(graph, max_depth, stop_at_pending)
    if not lines:
        return Text("(empty graph: nothing requires grad)")
    footer = []
    if graph.hidden_hook_nodes:
        footer.append(Text(f"({graph.hidden_hook_nodes} backward-hook identity nodes not shown)", style="dim"))
    if graph.truncated:
        footer.append(Text("(graph truncated)", style="yellow"))
    return Group(GraphDrawing(lines, title), *footer)


class GraphDrawing:
    """The lines of a graph as a rich tree, or, where a line of the tree would not fit the width
    (each level of a tree takes 4 columns), as an outline: each node on its own line after its
    depth, indented by one column per level up to the deepest indentation at which every label
    still fits, so that no node name is cut (a label longer than the width wraps between its words)."""

    GUIDE = 4

    def __init__(self, lines: list[TreeLine], title: str) -> None:
        self.lines = lines
        self.title = title

    def _entries(self) -> list[tuple[int, Text]]:
        entries = []
        for line in self.lines:
            entries.append((line.depth, _node_text(line)))
            if line.hidden_inputs:
                entries.append((line.depth + 1, Text(f"… {line.hidden_inputs} input(s) not shown", style="dim")))
        return entries

    def _tree(self) -> Tree:
        tree = Tree(Text(self.title, style="bold"), guide_style="dim")
        parents: list[Tree] = [tree]
        for depth, text in self._entries():
            del parents[depth + 1:]
            parents.append(parents[depth].add(text))
        return tree

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        entries = self._entries()
        if all(self.GUIDE * (depth + 1) + text.cell_len <= width for depth, text in entries):
            yield self._tree()
            return
        digits = len(str(max(depth for depth, _ in entries)))
        room = width - digits - 1
        deepest = max(depth for depth, _ in entries)
        indent = next((cap for cap in range(deepest, -1, -1)
                       if all(min(depth, cap) + text.cell_len <= room for depth, text in entries)), 0)
        yield Text(f"{self.title} (too deep for this width: the number before a node is its depth)", style="bold")
        for depth, text in entries:
            line = Text(f"{depth:>{digits}} " + " " * min(depth, indent), style="dim")
            line.append_text(text)
            yield line

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self._tree())


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def graph_to_dot(graph: AutogradGraph, max_depth: int | None = None, name: str = "gradscope") -> str:
    """Graphviz DOT text of the graph: one box per node (name, shapes, module), leaf
    parameters as ellipses, edges in the forward direction (from inputs to outputs), and the
    nodes of each module grouped in a cluster."""
    depths: dict[int, int] = {}
    for line in tree_lines(graph, max_depth):
        if not line.repeat:
            depths.setdefault(line.node.id, line.depth)
    shown = [node for node in graph.nodes if node.id in depths]
    clusters: dict[str, list[GraphNode]] = {}
    for node in shown:
        clusters.setdefault(node.module or "", []).append(node)
    out = [f"digraph {_dot_quote(name)} {{", "  rankdir=BT;", '  node [fontname="Helvetica", fontsize=10];']
    for index, (module, nodes) in enumerate(sorted(clusters.items())):
        indent = "  "
        if module:
            out.append(f"  subgraph cluster_{index} {{")
            out.append(f"    label={_dot_quote(module)}; style=rounded; color=gray60;")
            indent = "    "
        for node in nodes:
            shape = "ellipse" if node.parameter is not None else "box"
            label = node_label(node)
            out.append(f"{indent}n{node.id} [label={_dot_quote(label)}, shape={shape}];")
        if module:
            out.append("  }")
    for node in shown:
        for child in node.inputs:
            if child in depths:
                out.append(f"  n{child} -> n{node.id};")
    out.append("}")
    return "\n".join(out) + "\n"


class RichPresenter:
    """Prints the debugger's output on a rich ``Console`` (the one adapter with side effects
    in this module; the console comes from the caller). On a terminal, output fits the
    terminal's width; otherwise (a transcript) nothing is wrapped or cut."""

    def __init__(self, console: Console, errors: Console | None = None) -> None:
        self.console = console
        self.errors = errors or console

    def _print(self, console: Console, renderable: RenderableType) -> None:
        if console.is_terminal:
            console.print(renderable)
            return
        natural = Measurement.get(console, console.options.update_width(10_000), renderable).maximum
        width = console.width
        console.width = max(width, natural)
        try:
            console.print(renderable)
        finally:
            console.width = width

    def show(self, view: Any) -> None:
        self._print(self.console, render_view(view))

    def info(self, text: str) -> None:
        self._print(self.console, Text(text))

    def error(self, text: str) -> None:
        if text.startswith("warning:"):
            self._print(self.errors, Text(text, style="yellow"))
        else:
            self._print(self.errors, Text(f"error: {text}", style="bold red"))

    def banner(self, text: str) -> None:
        self._print(self.console, Text(f"> {text}", style="bold yellow"))

    def echo(self, text: str) -> None:
        self._print(self.console, Text(text, style="bold"))
