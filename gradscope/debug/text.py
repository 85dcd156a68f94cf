"""Plain-text drawing of the debugger's views (for ``breakpoint_on`` outside the CLI, where
``rich`` is not used; the CLI draws the same records with ``gradscope.render.debug``)."""
from __future__ import annotations

import math
import shutil
import sys
from typing import IO, Any, Sequence

from gradscope.debug.graph import node_label, tree_lines
from gradscope.debug.stats import MissingTensor
from gradscope.debug.views import (BREAKPOINT_COLUMNS, GRADS_COLUMNS, LAYER_COLUMNS, PARAMS_COLUMNS, BreakpointList,
                                   GradsView, GraphView, LayerTable, ParamsView, Position, ViewColumn)

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


def format_view(view: Any, width: int | None = None) -> str:
    """Plain text of any view record; tables fit ``width`` columns (None: any width) by the
    rules of :mod:`gradscope.debug.views`."""
    if isinstance(view, Position):
        return format_position(view)
    if isinstance(view, GradsView):
        return format_grads(view, width)
    if isinstance(view, LayerTable):
        return format_layer_table(view, width)
    if isinstance(view, ParamsView):
        return format_params(view, width)
    if isinstance(view, BreakpointList):
        return format_breakpoints(view, width)
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


SEPARATOR = "  "


def fit_table(columns: Sequence[ViewColumn], rows: list[list[str]], width: int | None) -> list[str]:
    """The lines of a plain table that fits ``width`` (None: every column) without cutting a cell.

    Columns are left out as :mod:`gradscope.debug.views` says and named on a last line; when the
    columns that stay do not fit, each row becomes its name followed by ``header value`` pairs,
    wrapped between pairs.
    """
    widths = [max([len(column.header), *(len(row[index]) for row in rows)]) for index, column in enumerate(columns)]
    keep = list(range(len(columns)))

    def total(indices: list[int]) -> int:
        return sum(widths[index] for index in indices) + len(SEPARATOR) * max(len(indices) - 1, 0)

    if width is not None:
        order = sorted((index for index, column in enumerate(columns) if column.drop),
                       key=lambda index: (not _uniform(rows, index), -columns[index].drop))
        for index in order:
            if total(keep) <= width:
                break
            keep.remove(index)
        if total(keep) > width:
            return _blocks(columns, rows, width)

    def line(cells: list[str]) -> str:
        return SEPARATOR.join(cell.rjust(widths[index]) if columns[index].numeric else cell.ljust(widths[index])
                              for index, cell in zip(keep, cells)).rstrip()

    lines = [line([columns[index].header for index in keep])]
    lines += [line([row[index] for index in keep]) for row in rows]
    left_out = [_left_out_label(columns[index], rows, index) for index in range(len(columns)) if index not in keep]
    if left_out:
        lines.append(f"left out at this width: {', '.join(left_out)} (a wider terminal shows them)")
    return lines


def _blocks(columns: Sequence[ViewColumn], rows: list[list[str]], width: int) -> list[str]:
    lines = []
    for row in rows:
        lines.append(row[0])
        line = ""
        for column, cell in zip(columns[1:], row[1:]):
            if not column.stacked or not cell.strip():
                continue
            pair = f"{column.header} {cell}"
            if line and 2 + len(line) + 2 + len(pair) > width:
                lines.append("  " + line)
                line = ""
            line = f"{line}  {pair}" if line else pair
        if line:
            lines.append("  " + line)
    return lines


def _uniform(rows: list[list[str]], index: int) -> bool:
    return len({row[index] for row in rows}) <= 1


def _left_out_label(column: ViewColumn, rows: list[list[str]], index: int) -> str:
    if rows and column.stacked and _uniform(rows, index):
        value = rows[0][index]
        return f"{column.header} ({'all ' + value if value.strip() else 'none'})"
    return column.header


def _shape(shape: tuple) -> str:
    return "[" + ", ".join(str(size) for size in shape) + "]"


def format_grads(view: GradsView, width: int | None = None) -> str:
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
            rows.append([label, _shape(entry.shape), number(entry.norm), number(entry.mean), number(entry.abs_max),
                         str(entry.nonfinite), sparkline(entry.histogram), value_range])
    if rows:
        lines += fit_table(GRADS_COLUMNS, rows, width)
    lines += missing
    lines += [f"note: {note}" for note in view.notes]
    return "\n".join(lines)


def format_layer_table(view: LayerTable, width: int | None = None) -> str:
    rows = [[r.module, r.module_type, r.status, number(r.grad_output_norm), number(r.grad_input_norm),
             number(r.param_grad_norm), str(r.nonfinite), r.edits] for r in view.rows]
    lines = fit_table(LAYER_COLUMNS, rows, width)
    lines.append(f"total parameter gradient norm: {number(view.total_param_grad_norm)}")
    lines += [f"note: {note}" for note in view.notes]
    return "\n".join(lines)


def format_params(view: ParamsView, width: int | None = None) -> str:
    rows = [[r.name, _shape(r.shape), r.status, number(r.grad_norm), number(r.grad_mean), number(r.grad_abs_max),
             str(r.nonfinite), number(r.param_norm)] for r in view.rows]
    lines = [f"parameters of {view.module}"]
    lines += fit_table(PARAMS_COLUMNS, rows, width) if rows else ["(no parameters)"]
    lines += [f"note: {note}" for note in view.notes]
    return "\n".join(lines)


def format_breakpoints(view: BreakpointList, width: int | None = None) -> str:
    if not view.rows:
        return "no breakpoints"
    rows = [[str(r.number), r.condition, r.phases, "yes" if r.enabled else "no", str(r.hits)] for r in view.rows]
    return "\n".join(fit_table(BREAKPOINT_COLUMNS, rows, width))


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
    """Writes the views as plain text to a stream (default: standard output).

    Args:
        stream: where to write.
        width: the width tables fit; by default the terminal's when the stream is a terminal,
            else none (a transcript keeps every column).
    """

    def __init__(self, stream: IO | None = None, width: int | None = None) -> None:
        self.stream = stream
        self.width = width

    def _width(self) -> int | None:
        if self.width is not None:
            return self.width
        stream = self.stream or sys.stdout
        isatty = getattr(stream, "isatty", None)
        if isatty is not None and isatty():
            return shutil.get_terminal_size().columns
        return None

    def _write(self, text: str) -> None:
        stream = self.stream or sys.stdout
        stream.write(text + "\n")
        stream.flush()

    def show(self, view: Any) -> None:
        self._write(format_view(view, self._width()))

    def info(self, text: str) -> None:
        self._write(text)

    def error(self, text: str) -> None:
        self._write(f"error: {text}" if not text.startswith("warning:") else text)

    def banner(self, text: str) -> None:
        self._write(f"> {text}")

    def echo(self, text: str) -> None:
        self._write(text)
