"""Tables that fit the width they are drawn at, without cutting a name or a number.

A table is described as columns (with how readily each may be left out) and rows of cells. At a
given width, :func:`fit_table` keeps every column when they fit; otherwise it leaves out the least
useful columns first (a column whose cells all say the same thing, such as a non-finite count that
is 0 everywhere, before one that varies) and says which ones it left out; when even the columns
that must stay do not fit, each row becomes a block: the row's name on one line, then
``header value`` pairs wrapped between pairs, never inside one. Headers may wrap between words;
cells never wrap, so rich never needs to shorten one with an ellipsis.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

Cell = Union[str, Text]

# Columns added to the width of their cells by a table drawn without outer edges: one space each
# side of the separator between two columns.
SEPARATOR = 3


@dataclass(frozen=True)
class Column:
    """One column of a fitted table.

    Attributes:
        header: the header text (it may wrap between words).
        justify: ``"left"`` or ``"right"``.
        drop: 0 for a column that always stays; otherwise the larger, the sooner it is left out.
        style: the rich style of the whole column, or None.
        stacked: whether the column is shown when rows are drawn as blocks (bars are not).
    """

    header: str
    justify: str = "right"
    drop: int = 0
    style: str | None = None
    stacked: bool = True


def cell_width(cell: Cell) -> int:
    """Terminal cells a cell takes (its longest line)."""
    plain = cell.plain if isinstance(cell, Text) else cell
    return max((cell_len(line) for line in plain.split("\n")), default=0)


def column_widths(columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> list[int]:
    """The width each column needs: its widest cell, or its header's longest word if wider."""
    widths = []
    for index, column in enumerate(columns):
        words = max((cell_len(word) for word in column.header.split()), default=0)
        widths.append(max([words, *(cell_width(row[index]) for row in rows)]))
    return widths


def table_width(widths: Sequence[int]) -> int:
    """Width of a table without outer edges whose columns have these widths."""
    return sum(widths) + SEPARATOR * max(len(widths) - 1, 0)


def natural_width(columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> int:
    """The width at which every column fits with its header on one line."""
    widths = column_widths(columns, rows)
    full = [max(width, cell_len(column.header)) for width, column in zip(widths, columns)]
    return table_width(full)


def choose_columns(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int | None) -> list[int] | None:
    """Indices of the columns to draw at ``width`` (all when None), or None when the columns that
    must stay do not fit.

    Columns are left out in order of usefulness: first those whose cells are all the same, then
    by descending ``drop``; a column with ``drop == 0`` is never left out.
    """
    keep = list(range(len(columns)))
    if width is None:
        return keep
    widths = column_widths(columns, rows)
    order = sorted((index for index, column in enumerate(columns) if column.drop),
                   key=lambda index: (not _uniform(rows, index), -columns[index].drop))
    for index in order:
        if table_width([widths[i] for i in keep]) <= width:
            break
        keep.remove(index)
    if table_width([widths[i] for i in keep]) > width:
        return None
    return keep


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int | None,
              title: str | None = None, row_styles: Sequence[str] | None = None) -> RenderableType:
    """A table of ``rows`` that fits ``width`` terminal cells (None: any width) without cutting a cell.

    Args:
        columns: the columns; the first one names the row (it is the heading of a stacked block).
        rows: one sequence of cells per row, in column order.
        width: the width to fit, or None to draw every column.
        title: a line above the table.
        row_styles: a rich style per row ("" for none).
    """
    styles = list(row_styles) if row_styles is not None else [""] * len(rows)
    keep = choose_columns(columns, rows, width)
    if keep is None:
        return _stacked(columns, rows, width or 0, title, styles)
    widths = _spread([column_widths(columns, rows)[index] for index in keep],
                     [cell_len(columns[index].header) for index in keep], width)
    table = Table(show_edge=False, pad_edge=False, header_style="bold")
    for index, column_width in zip(keep, widths):
        column = columns[index]
        table.add_column(column.header, justify=column.justify, width=column_width, style=column.style,
                         overflow="fold")
    for row, style in zip(rows, styles):
        table.add_row(*(row[index] for index in keep), style=style or None)
    parts: list[RenderableType] = [Text(title, style="bold")] if title else []
    parts.append(table)
    left_out = [_left_out_label(columns[index], rows, index) for index in range(len(columns)) if index not in keep]
    if left_out:
        parts.append(Text(f"left out at this width: {', '.join(left_out)} "
                          "(a wider terminal or --format json shows them)", style="dim"))
    return Group(*parts)


def _stacked(columns: Sequence[Column], rows: Sequence[Sequence[Cell]], width: int, title: str | None,
             styles: Sequence[str]) -> RenderableType:
    """Each row as a block: its name, then ``header value`` pairs wrapped between pairs."""
    parts: list[RenderableType] = [Text(title, style="bold")] if title else []
    for row, style in zip(rows, styles):
        name = row[0] if isinstance(row[0], Text) else Text(row[0])
        parts.append(Text.assemble(name, style=style or "bold"))
        line = Text("  ")
        for column, cell in zip(columns[1:], row[1:]):
            if not column.stacked or not (cell.plain if isinstance(cell, Text) else cell).strip():
                continue
            pair = Text.assemble((column.header, "dim"), " ", cell if isinstance(cell, Text) else Text(cell))
            if line.cell_len > 2 and line.cell_len + 2 + pair.cell_len > width:
                parts.append(line)
                line = Text("  ")
            if line.cell_len > 2:
                line.append("  ")
            line.append_text(pair)
        if line.cell_len > 2:
            parts.append(line)
    return Group(*parts)


def _spread(widths: list[int], headers: list[int], width: int | None) -> list[int]:
    """Widen columns towards their header's full length (so it need not wrap) while room is left."""
    spare = None if width is None else width - table_width(widths)
    spread = []
    for column_width, header in zip(widths, headers):
        grow = max(header - column_width, 0)
        if spare is not None:
            grow = min(grow, spare)
            spare -= grow
        spread.append(column_width + grow)
    return spread


def _left_out_label(column: Column, rows: Sequence[Sequence[Cell]], index: int) -> str:
    if rows and column.stacked and _uniform(rows, index):
        value = rows[0][index]
        plain = value.plain if isinstance(value, Text) else value
        return f"{column.header} ({'all ' + plain if plain.strip() else 'none'})"
    return column.header


def _uniform(rows: Sequence[Sequence[Cell]], index: int) -> bool:
    values = {(cell.plain if isinstance(cell, Text) else cell) for cell in (row[index] for row in rows)}
    return len(values) <= 1


class FittedTable:
    """A renderable that lays its table out for the width of the console it is drawn on.

    It is measured as at least the width of its stacked form and at most its natural width, so
    an export sized with :class:`rich.measure.Measurement` shows every column with whole headers.
    """

    def __init__(self, columns: Sequence[Column], rows: Sequence[Sequence[Cell]], title: str | None = None,
                 row_styles: Sequence[str] | None = None) -> None:
        self.columns = list(columns)
        self.rows = [list(row) for row in rows]
        self.title = title
        self.row_styles = row_styles

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield fit_table(self.columns, self.rows, options.max_width, self.title, self.row_styles)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widest = max([cell_len(self.title or ""), natural_width(self.columns, self.rows)])
        names = max((cell_width(row[0]) for row in self.rows), default=0)
        return Measurement(min(names, widest), widest).clamp(max_width=options.max_width)

