"""Reports -> rich renderables (tables, bars, findings). Pure functions: nothing is printed here."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Sequence

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from gradscope.monitor.run_series import RunSeries
from gradscope.render.layout import Column, FittedTable, cell_width
from gradscope.render.names import layer_selected, module_label

if TYPE_CHECKING:
    from gradscope.monitor.records import (CheckReport, ClipReport, Divergence, Finding, InspectReport,
                                           NonFiniteOrigin, RunReport, StepRecord, WatchReport)

BAR_LOW = -12.0
BAR_HIGH = 4.0
BAR_WIDTH = 16
_BLOCKS = " ▏▎▍▌▋▊▉█"
_SPARKS = "▁▂▃▄▅▆▇█"
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
_STATUS_STYLE = {"pass": "green", "fail": "bold red", "skip": "dim"}


def fmt(value: float | None) -> str:
    """A number in 3 significant digits; ``-`` for None; ``nan``/``inf`` as such."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0:
        return "0"
    return f"{value:.3g}"


def norm_bar(value: float | None, low: float = BAR_LOW, high: float = BAR_HIGH, width: int = BAR_WIDTH) -> Text:
    """A horizontal bar whose length is log10(value) on the scale ``[low, high]``.

    Zero and missing values give an empty bar, non-finite values a red ``!!``.
    """
    if value is None or value == 0:
        return Text(" " * width)
    if not math.isfinite(value):
        return Text("!!".ljust(width), style="bold red")
    position = (math.log10(value) - low) / (high - low)
    eighths = round(min(max(position, 0.0), 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    bar = "█" * full + (_BLOCKS[part] if part else "")
    style = "red" if value > 1e3 else "yellow" if value < 1e-6 else "cyan"
    return Text(bar.ljust(width), style=style)


def sparkline(values: Sequence[float], width: int | None = None) -> str:
    """A one-line sparkline of ``values`` (non-finite values shown as ``!``), at most ``width``
    characters long (None: one character per value).

    A longer series is resampled (see :func:`resample`): each character stands for a run of
    consecutive values, and a run that holds a non-finite value shows ``!``, so the first
    non-finite step stays visible however long the series is.
    """
    values = resample(values, width) if width is not None else list(values)
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "!" * len(values)
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    return "".join(_SPARKS[min(int((v - low) / span * len(_SPARKS)), len(_SPARKS) - 1)]
                   if math.isfinite(v) else "!" for v in values)


def resample(values: Sequence[float], width: int) -> list[float]:
    """``values`` in at most ``width`` buckets of consecutive values (the first buckets one value
    longer when the length does not divide evenly): the mean of each bucket, or NaN when the
    bucket holds a non-finite value."""
    values = list(values)
    width = max(width, 1)
    if len(values) <= width:
        return values
    size, extra = divmod(len(values), width)
    buckets, start = [], 0
    for index in range(width):
        end = start + size + (index < extra)
        bucket = values[start:end]
        buckets.append(sum(bucket) / len(bucket) if all(math.isfinite(v) for v in bucket) else math.nan)
        start = end
    return buckets


class TrendLine:
    """A line of text followed by a sparkline of ``values`` that fits the console it is drawn on.

    The sparkline takes the room left on the line (resampled when the series is longer, see
    :func:`sparkline`); when less than ``MIN_WIDTH`` characters are left it goes on a line of its
    own, indented by two spaces. Without a known width (a measurement), it is one character per value.

    Args:
        text: what comes before the sparkline.
        values: the series.
        style: the rich style of the whole line.
    """

    MIN_WIDTH = 12

    def __init__(self, text: str, values: Sequence[float], style: str = "") -> None:
        self.text = text
        self.values = list(values)
        self.style = style

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        room = width - cell_width(self.text) - 1
        if room >= min(self.MIN_WIDTH, len(self.values)):
            yield Text(f"{self.text}{' ' if self.text else ''}{sparkline(self.values, room)}", style=self.style)
            return
        yield Text(self.text.rstrip(), style=self.style)
        yield Text("  " + sparkline(self.values, max(width - 2, 1)), style=self.style)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        natural = cell_width(self.text) + 1 + len(self.values)
        return Measurement(min(cell_width(self.text), natural), natural).clamp(max_width=options.max_width)


def findings_view(findings: Iterable["Finding"]) -> RenderableType:
    """Findings as a list, errors in red, or a green line when there are none."""
    findings = list(findings)
    if not findings:
        return Text("No findings: gradients look healthy.", style="green")
    counts = ", ".join(f"{n} {severity}{'s' if n != 1 and severity != 'info' else ''}" for severity, n in
                       ((severity, sum(f.severity == severity for f in findings))
                        for severity in ("error", "warning", "info")) if n)
    heading = Text(f"{len(findings)} finding{'s' if len(findings) != 1 else ''} ({counts}):", style="bold")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(ratio=1, overflow="fold")
    for finding in findings:
        grid.add_row(" ", Text(finding.severity, style=_SEVERITY_STYLE.get(finding.severity, "")), finding.check,
                     finding.message)
    return Group(heading, grid)


def inspect_view(report: "InspectReport", layers: Sequence[str] = ()) -> RenderableType:
    """The ``inspect`` view: per-module and per-parameter gradient tables, total norm, findings.

    The tables fit the console they are drawn on (see :mod:`gradscope.render.layout`).

    Args:
        report: what ``inspect`` measured.
        layers: module-path globs (``--layers``); when given, only matching modules and their
            parameters are listed (the findings and the totals still cover the whole model).
    """
    modules = [m for m in report.modules if layer_selected(m.name, layers)]
    parameters = [p for p in report.parameters if layer_selected(p.module, layers) or layer_selected(p.name, layers)]
    module_columns = [Column("module", "left"), Column("type", "left", drop=3), Column("calls", drop=5),
                      Column("grad_output norm"), Column("grad_input norm", drop=4), Column("non-finite", drop=1),
                      Column(f"log10 |grad_output| [{BAR_LOW:g}, {BAR_HIGH:g}]", "left", drop=7, stacked=False)]
    module_rows = [[module_label(m.name), m.type, str(m.calls), fmt(m.grad_output_norm), fmt(m.grad_input_norm),
                    _count(m.nonfinite), norm_bar(m.grad_output_norm)] for m in modules]
    parameter_columns = [Column("parameter", "left"), Column("shape", "left", drop=3), Column("grad norm"),
                         Column("mean", drop=8), Column("std", drop=9), Column("abs max", drop=7),
                         Column("zeros", drop=6), Column("non-finite", drop=1), Column("param norm", drop=5),
                         Column("grad/param", drop=4),
                         Column(f"log10 |grad| [{BAR_LOW:g}, {BAR_HIGH:g}]", "left", drop=10, stacked=False)]
    parameter_rows = []
    for p in parameters:
        shape = "x".join(str(size) for size in p.shape) or "scalar"
        if not p.has_grad:
            parameter_rows.append([p.name, shape, Text("no grad", style="bold red"), "-", "-", "-", "-", "-",
                                   fmt(p.param_norm), "-", norm_bar(None)])
            continue
        zeros = f"{p.zero_fraction:.0%}" if p.zero_fraction is not None else "-"
        parameter_rows.append([p.name, shape, fmt(p.grad_norm), fmt(p.grad_mean), fmt(p.grad_std),
                               fmt(p.grad_abs_max), zeros, _count(p.nonfinite), fmt(p.param_norm),
                               fmt(p.grad_to_param), norm_bar(p.grad_norm)])
    parts: list[RenderableType] = [
        FittedTable(module_columns, module_rows, title=f"Gradient flow through modules ({report.model}, step "
                                                       f"{report.step})"),
        Text(""),
        FittedTable(parameter_columns, parameter_rows, title="Parameter gradients"),
        Text(""),
    ]
    if layers:
        parts.append(Text(f"--layers {' '.join(layers)}: {len(modules)} of {len(report.modules)} modules, "
                          f"{len(parameters)} of {len(report.parameters)} parameters", style="dim"))
    parts.append(Text(f"loss {fmt(report.loss)}   total gradient norm {fmt(report.total_grad_norm)}", style="bold"))
    parts.append(findings_view(report.findings))
    return Group(*parts)


class WatchView:
    """The live ``watch`` view: progress, loss, then one row per layer with its latest gradient
    norm, a log10 bar and its trend over the last steps.

    It fits the console it is drawn on: layers that do not fit the height are counted in a
    "+N more layers" line, columns that do not fit the width are left out (names and numbers are
    never cut).

    Args:
        history: the finished steps.
        total_steps: how many steps the run has, or None.
        elapsed: seconds since the run started, or None.
        layers: module-path globs (``--layers``) choosing the layers to list.
        trend_steps: how many of the last steps the trend sparkline covers.
        status: what a long operation is doing right now (e.g. localising a NaN), or None.
    """

    def __init__(self, history: Sequence["StepRecord"], total_steps: int | None = None,
                 elapsed: float | None = None, layers: Sequence[str] = (), trend_steps: int = 20,
                 status: str | None = None) -> None:
        self.history = list(history)
        self.status = status
        self.total_steps = total_steps
        self.elapsed = elapsed
        self.layers = tuple(layers)
        self.trend_steps = trend_steps

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = options.height or console.height
        yield from self.parts(max_rows=max(height - 7, 3))

    def parts(self, max_rows: int | None = None) -> list[RenderableType]:
        """The view's lines and table; at most ``max_rows`` layer rows (None: all)."""
        header = Text("gradscope watch · " + progress_text(len(self.history), self.total_steps, self.elapsed),
                      style="bold")
        status = [Text(self.status, style="yellow")] if self.status else []
        if not self.history:
            return [header, *status]
        last = self.history[-1]
        header.append(f"   loss {fmt(last.loss)}   total grad norm {fmt(last.total_grad_norm)}")
        if last.nonfinite:
            header.append(f"   non-finite {last.nonfinite}", style="bold red")
        names = [name for name, _ in last.layer_norms if layer_selected(name, self.layers)]
        shown = names if max_rows is None else names[:max_rows]
        recent = self.history[-self.trend_steps:]
        rows, styles = [], []
        for name in shown:
            norms = [dict(record.layer_norms).get(name) for record in recent]
            latest = norms[-1]
            rows.append([module_label(name), fmt(latest), norm_bar(latest),
                         sparkline([math.nan if n is None else n for n in norms])])
            styles.append("bold red" if latest is not None and not math.isfinite(latest) else "")
        columns = [Column("layer", "left"), Column("grad norm"),
                   Column(f"log10 |grad| [{BAR_LOW:g}, {BAR_HIGH:g}]", "left", drop=2, stacked=False),
                   Column(f"last {len(recent)} steps", "left", drop=1)]
        parts: list[RenderableType] = [header, FittedTable(columns, rows, row_styles=styles)]
        hidden = len(last.layer_norms) - len(shown)
        if hidden:
            parts.append(Text(f"+{hidden} more layer{'s' if hidden != 1 else ''} "
                              f"(choose which with --layers GLOB)", style="dim"))
        parts.append(Text(f"loss {sparkline([r.loss for r in recent])}"))
        return parts + status


def watch_table(history: Sequence["StepRecord"], total_steps: int | None = None, elapsed: float | None = None,
                layers: Sequence[str] = (), status: str | None = None) -> WatchView:
    """The live ``watch`` view for ``history`` (see :class:`WatchView`)."""
    return WatchView(history, total_steps=total_steps, elapsed=elapsed, layers=layers, status=status)


def progress_text(done: int, total: int | None, elapsed: float | None) -> str:
    """``step k/N · 3.1s elapsed · about 9s left`` (parts that are not known are left out)."""
    text = f"step {done}/{total}" if total is not None else f"step {done}"
    if elapsed is not None:
        text += f" · {duration(elapsed)} elapsed"
        if total is not None and 0 < done < total:
            text += f" · about {duration(elapsed / done * (total - done))} left"
    return text


def duration(seconds: float) -> str:
    """``0.4s``, ``12s``, ``3m05s``, ``1h02m``."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def watch_line(record: "StepRecord", width: int = 160, layers: Sequence[str] = ()) -> str:
    """One plain line per step, for when stdout is not a terminal.

    The per-layer norms are listed while the line stays within ``width``; for a deeper model the
    line names the layers with the smallest and the largest norm instead (``--layers`` chooses the
    layers considered; ``--log`` records all of them).
    """
    flag = f"  NON-FINITE {record.nonfinite}" if record.nonfinite else ""
    head = f"step {record.step:>4}  loss {fmt(record.loss):>9}  grad_norm {fmt(record.total_grad_norm):>9}  "
    selected = [(name, norm) for name, norm in record.layer_norms if layer_selected(name, layers)]
    listed = " ".join(f"{module_label(name)}={fmt(norm)}" for name, norm in selected)
    if len(head) + len(listed) + len(flag) <= width or len(selected) <= 2:
        return f"{head}{listed}{flag}"
    finite = [(norm, name) for name, norm in selected if math.isfinite(norm)]
    summary = f"{len(selected)} layers"
    if finite:
        low, high = min(finite), max(finite)
        summary += f": min {module_label(low[1])}={fmt(low[0])} max {module_label(high[1])}={fmt(high[0])}"
    bad = [name for name, norm in selected if not math.isfinite(norm)]
    if bad:
        summary += f" non-finite {module_label(bad[0])}" + (f" +{len(bad) - 1}" if len(bad) > 1 else "")
    return f"{head}{summary}{flag}"


def origin_view(origin: "NonFiniteOrigin") -> RenderableType:
    """Where the first non-finite value started, and which modules only passed it on."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    if origin.rank is not None:
        table.add_row("rank", str(origin.rank))
    table.add_row("step", str(origin.step))
    table.add_row("phase", origin.phase)
    table.add_row("module", module_label(origin.module))
    table.add_row("node", origin.node or "-")
    table.add_row("source", origin.source or "-")
    table.add_row("kind", origin.kind)
    if origin.propagated:
        shown = ", ".join(module_label(name) for name in origin.propagated[:8])
        more = f" (+{len(origin.propagated) - 8} more)" if len(origin.propagated) > 8 else ""
        table.add_row("passed on by", shown + more)
    title = Text(f"First non-finite value ({origin.kind}) started here:", style="bold red")
    parts: list[RenderableType] = [title, table]
    if origin.detail:
        parts.append(Text(origin.detail))
    return Group(*parts)


def watch_summary(report: "WatchReport") -> RenderableType:
    """The closing summary of ``watch``: steps, last loss, loss sparkline, and the origin if any."""
    parts: list[RenderableType] = []
    if report.history:
        losses = [r.loss for r in report.history]
        parts.append(TrendLine(f"{report.steps_run} step{'s' if report.steps_run != 1 else ''} run   "
                               f"loss {fmt(losses[0])} -> {fmt(losses[-1])}  ", losses, style="bold"))
    else:
        parts.append(Text("no step completed", style="bold"))
    if report.first_nonfinite is not None:
        parts.append(origin_view(report.first_nonfinite))
    elif report.status == "nonfinite":
        parts.append(Text("a non-finite value appeared (run with --nan/--inf to locate it)", style="bold red"))
    if report.divergence is not None:
        parts.append(divergence_view(report.divergence))
    if report.findings:
        parts.append(findings_view(report.findings))
    if report.bundle:
        parts.append(Text(f"replay bundle: {report.bundle}"))
    return Group(*parts)


def divergence_view(divergence: "Divergence") -> RenderableType:
    """The loss jump and the update-to-parameter ratio of every parameter in the update before it
    (largest first), with the layers whose gradients became exactly zero."""
    title = (f"The loss jumped from {fmt(divergence.loss_before)} to {fmt(divergence.loss_after)} at step "
             f"{divergence.step}: the update of step {divergence.step - 1} changed these parameters by")
    from gradscope.monitor.analysis import largest_update_ratios

    rows = [[name, fmt(ratio), norm_bar(ratio)] if math.isfinite(ratio) else [name, "from 0", norm_bar(None)]
            for name, ratio in largest_update_ratios(divergence.update_ratios)]
    columns = [Column("parameter", "left"), Column("|update| / |parameter|"),
               Column(f"log10 [{BAR_LOW:g}, {BAR_HIGH:g}]", "left", drop=1, stacked=False)]
    parts: list[RenderableType] = [FittedTable(columns, rows, title=title)]
    if divergence.zeroed_layers:
        parts.append(Text("gradients exactly zero since then: " +
                          ", ".join(module_label(name) for name in divergence.zeroed_layers), style="bold red"))
    return Group(*parts)


def clip_view(report: "ClipReport") -> RenderableType:
    """Per-parameter gradient norms before and after clipping."""
    columns = [Column("parameter", "left"), Column("norm before"), Column("norm after"),
               Column("after / before", drop=1)]
    rows = []
    for p in report.parameters:
        ratio = (p.norm_after / p.norm_before if p.norm_before and p.norm_after is not None
                 and math.isfinite(p.norm_before) else None)
        rows.append([p.name, fmt(p.norm_before), fmt(p.norm_after), fmt(ratio)])
    title = (f"Gradient clipping: mode={report.mode} scope={report.scope} max={fmt(report.max)} "
             f"(step {report.steps - 1})")
    summary = Text(f"total gradient norm {fmt(report.total_norm_before)} -> {fmt(report.total_norm_after)}",
                   style="bold")
    return Group(FittedTable(columns, rows, title=title), summary)


def check_view(report: "CheckReport") -> RenderableType:
    """Each check with pass/fail/skip, then the findings. Check names never wrap; details do."""
    table = Table(title=f"gradscope check {report.model}", title_justify="left", header_style="bold",
                  show_edge=False, pad_edge=False)
    table.add_column("check", width=max([5, *(cell_width(c.name) for c in report.checks)]), no_wrap=True)
    table.add_column("status", width=6, no_wrap=True)
    table.add_column("details", ratio=1, overflow="fold")
    for check in report.checks:
        table.add_row(check.name, Text(check.status.upper(), style=_STATUS_STYLE[check.status]), check.message)
    verdict = Text("all checks passed" if report.passed else "some checks failed",
                   style="bold green" if report.passed else "bold red")
    if report.waived:
        verdict.append(f" ({report.waived} finding{'s' if report.waived != 1 else ''} waived by ignore)",
                       style="dim")
    parts: list[RenderableType] = [table, verdict]
    if report.findings:
        parts.append(findings_view(report.findings))
    return Group(*parts)


def _count(value: int) -> Text:
    return Text(str(value), style="bold red") if value else Text("0")


def run_line(record: "StepRecord") -> str:
    """The live one-line status of ``run`` (terminal only)."""
    flag = "  NON-FINITE " + record.nonfinite if record.nonfinite else "  skipped" if record.skipped else ""
    return f"gradscope: step {record.step}  loss {fmt(record.loss)}  grad_norm {fmt(record.total_grad_norm)}{flag}"


def run_summary(report: "RunReport") -> RenderableType:
    """The closing summary of ``run``: gradient flow per layer over the run, then the findings."""
    parts: list[RenderableType] = []
    history = report.history
    if history:
        losses = [r.loss for r in history if r.loss is not None] or [math.nan]
        parts.append(TrendLine(f"gradscope run {report.script}: {report.steps_run} "
                               f"step{'s' if report.steps_run != 1 else ''}   loss {fmt(losses[0])} -> "
                               f"{fmt(losses[-1])}  ", losses, style="bold"))
        columns = [Column("layer", "left"), Column("first", drop=3), Column("last"), Column("min", drop=2),
                   Column("max", drop=1), Column(f"log10 last [{BAR_LOW:g}, {BAR_HIGH:g}]", "left", drop=4,
                                                 stacked=False)]
        series = report.series if report.series is not None else RunSeries.of(history)
        rows = [[module_label(name), fmt(span.first), fmt(span.last), fmt(span.low), fmt(span.high),
                 norm_bar(span.last)] for name, span in series.layers.items()]
        parts.append(FittedTable(columns, rows, title="Gradient norm per layer over the run"))
    else:
        parts.append(Text(f"gradscope run {report.script}: no step completed", style="bold"))
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    findings = getattr(report, "findings", ())
    if findings:
        parts.append(findings_view(findings))
    if report.first_nonfinite is not None:
        parts.append(origin_view(report.first_nonfinite))
    elif report.status == "nonfinite":
        parts.append(Text("a non-finite value appeared (run with --nan/--inf to locate it)", style="bold red"))
    elif report.status == "ok":
        parts.append(Text(f"{'No non-finite value' if findings else 'No findings'}: every loss, gradient and "
                          "parameter stayed finite.", style="green"))
    return Group(*parts)
