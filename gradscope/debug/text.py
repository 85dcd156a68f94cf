"""Plain-text drawing of the debugger's views (for ``breakpoint_on`` outside the CLI, where
``rich`` is not used; the CLI draws the same records with ``gradscope.render.debug``)."""
from __future__ import annotations

import math
import sys
from typing import IO, Any

from gradscope.debug.graph import node_label, tree_lines
from gradscope.debug.stats import MissingTensor
from gradscope.debug.views import (BreakpointList, GradsView, GraphView, LayerTable, ParamsView, Position)

SPARK = " ▁▂▃▄▅▆▇█"


def sparkline(counts: tuple | list) -> str:
    """One block character per histogram bin, scaled to the largest bin."""
    peak = max(counts) if counts else 0
    if peak == 0:
        return " " * len(counts)
    return "".join(SPARK[0 if c == 0 else max(1, round(c / peak * (len(SPARK) - 1)))] for c in counts)


def number(value: float | None) -> str:
    """A number in 4 significant digits; "-" for None."""
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def state_mark(state: str) -> str:
    return {"ran": "✓", "pending": "○", "unknown": ""}[state]


def format_view(view: Any) -> str:
    """Plain text of any view record."""
    if isinstance(view, Position):
        return format_position(view)
    if isinstance(view, GradsView):
        return format_grads(view)
    if isinstance(view, LayerTable):
        return format_layer_table(view)
    if isinstance(view, ParamsView):
        return format_params(view)
    if isinstance(view, BreakpointList):
        return format_breakpoints(view)
    if isinstance(view, GraphView):
        return format_graph(view)
    return str(view)


def format_position(p: Position) -> str:
    if p.phase is None:
        head = {"start": "before backward", "finished": "after backward"}.get(p.state, p.state)
    else:
        point = {"forward": "output of", "line": "a line inside"}.get(p.phase, f"{p.phase} point of")
        head = f"{p.state}, {point} {p.module or '(no module)'}" + (f" ({p.module_type})" if p.module_type else "")
    lines = [head]
    fields = [("node", p.node), ("modules", f"{p.modules_done} done, {p.modules_pending} pending"),
              ("source", p.source), ("reason", p.reason),
              ("step", None if p.step is None else str(p.step)), ("loss", None if p.loss is None else number(p.loss))]
    lines += [f"  {name + ':':<9}{value}" for name, value in fields if value is not None]
    lines += [f"  note:    {note}" for note in p.notes]
    lines += [f"  edited:  {edit}" for edit in p.edits]
    return "\n".join(lines)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    return ["  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header] + rows]


def format_grads(view: GradsView) -> str:
    lines = [view.title]
    rows = []
    missing = []
    for group in view.groups:
        for entry in group.entries:
            if isinstance(entry, MissingTensor):
                missing.append(f"{entry.label}: {entry.reason}")
                continue
            label = entry.label + (" (edited)" if entry.edited else "")
            value_range = f"[{number(entry.low)}, {number(entry.high)}]"
            rows.append([label, str(list(entry.shape)), number(entry.norm), number(entry.mean), number(entry.abs_max),
                         str(entry.nonfinite), sparkline(entry.histogram), value_range])
    if rows:
        lines += _table(["tensor", "shape", "norm", "mean", "abs max", "non-finite", "histogram", "range"], rows)
    lines += missing
    lines += [f"note: {note}" for note in view.notes]
    return "\n".join(lines)


def format_layer_table(view: LayerTable) -> str:
    rows = [[r.module, r.module_type, r.status, number(r.grad_output_norm), number(r.grad_input_norm),
             number(r.param_grad_norm), str(r.nonfinite), r.edits] for r in view.rows]
    lines = _table(["module", "type", "status", "grad_output", "grad_input", "param grad", "non-finite", "edits"],
                   rows)
    lines.append(f"total parameter gradient norm: {number(view.total_param_grad_norm)}")
    lines += [f"note: {note}" for note in view.notes]
    return "\n".join(lines)


def format_params(view: ParamsView) -> str:
    rows = [[r.name, str(list(r.shape)), r.status, number(r.grad_norm), number(r.grad_mean), number(r.grad_abs_max),
             str(r.nonfinite), number(r.param_norm)] for r in view.rows]
    lines = [f"parameters of {view.module}"]
    lines += _table(["parameter", "shape", "status", "grad norm", "grad mean", "grad abs max", "non-finite",
                     "param norm"], rows) if rows else ["(no parameters)"]
    lines += [f"note: {note}" for note in view.notes]
    return "\n".join(lines)


def format_breakpoints(view: BreakpointList) -> str:
    if not view.rows:
        return "no breakpoints"
    rows = [[str(r.number), r.condition, r.phases, "yes" if r.enabled else "no", str(r.hits)] for r in view.rows]
    return "\n".join(_table(["#", "condition", "checked at", "enabled", "hits"], rows))


def format_graph(view: GraphView) -> str:
    lines = []
    for line in tree_lines(view.graph, view.max_depth, view.stop_at_pending):
        node = line.node
        parts = ["  " * line.depth + node_label(node)]
        if node.module:
            parts.append(f"· {node.module}")
        if line.repeat:
            parts.append("(shown above)")
        else:
            mark = state_mark(node.state)
            if mark:
                parts.append(mark)
            if node.current:
                parts.append("◀ here")
        lines.append(" ".join(parts))
        if line.hidden_inputs:
            lines.append("  " * (line.depth + 1) + f"… {line.hidden_inputs} input(s) not shown")
    if view.graph.hidden_hook_nodes:
        lines.append(f"({view.graph.hidden_hook_nodes} backward-hook identity nodes not shown)")
    return "\n".join(lines) if lines else "(empty graph: nothing requires grad)"


class TextPresenter:
    """Writes the views as plain text to a stream (default: standard output)."""

    def __init__(self, stream: IO | None = None) -> None:
        self.stream = stream

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stdout
        stream.write(text + "\n")
        stream.flush()

    def show(self, view: Any) -> None:
        self._write(format_view(view))

    def info(self, text: str) -> None:
        self._write(text)

    def error(self, text: str) -> None:
        self._write(f"error: {text}" if not text.startswith("warning:") else text)

    def banner(self, text: str) -> None:
        self._write(f"> {text}")

    def echo(self, text: str) -> None:
        self._write(text)
