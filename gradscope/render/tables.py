"""Reports -> rich renderables (tables, bars, findings). Pure functions: nothing is printed here."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterable, Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from gradscope.monitor.records import (CheckReport, ClipReport, Finding, InspectReport,
                                           NonFiniteOrigin, RunReport, StepRecord, WatchReport)

BAR_LOW = -12.0
BAR_HIGH = 4.0
BAR_WIDTH = 16
_BLOCKS = " ▏▎▍▌▋▊▉█"
_SPARKS = "▁▂▃▄▅▆▇█"
_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}
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


def module_label(name: str | None) -> str:
    """How a module path is shown: the root module as ``(model)``."""
    if name is None:
        return "(outside modules)"
    return name or "(model)"


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


def sparkline(values: Sequence[float]) -> str:
    """A one-line sparkline of ``values`` (non-finite values shown as ``!``)."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "!" * len(values)
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    return "".join(_SPARKS[min(int((v - low) / span * len(_SPARKS)), len(_SPARKS) - 1)]
                   if math.isfinite(v) else "!" for v in values)


def findings_view(findings: Iterable["Finding"]) -> RenderableType:
    """Findings as a list, errors in red, or a green line when there are none."""
    findings = list(findings)
    if not findings:
        return Text("No findings: gradients look healthy.", style="green")
    lines = [Text(f"{len(findings)} finding{'s' if len(findings) != 1 else ''}:", style="bold")]
    for finding in findings:
        line = Text("  ")
        line.append(f"{finding.severity:<7}", style=_SEVERITY_STYLE.get(finding.severity, ""))
        line.append(f" {finding.check:<19} ", style="bold")
        line.append(finding.message)
        lines.append(line)
    return Group(*lines)


def inspect_view(report: "InspectReport") -> RenderableType:
    """The ``inspect`` view: per-module and per-parameter gradient tables, total norm, findings."""
    modules = Table(title=f"Gradient flow through modules ({report.model}, step {report.step})",
                    title_justify="left", header_style="bold")
    for column in ("module", "type", "calls", "grad_output norm", "grad_input norm", "non-finite"):
        modules.add_column(column, justify="left" if column in ("module", "type") else "right")
    modules.add_column(f"log10 |grad_output| [{BAR_LOW:g}, {BAR_HIGH:g}]", no_wrap=True)
    for record in report.modules:
        modules.add_row(module_label(record.name), record.type, str(record.calls), fmt(record.grad_output_norm),
                        fmt(record.grad_input_norm), _count(record.nonfinite), norm_bar(record.grad_output_norm))

    parameters = Table(title="Parameter gradients", title_justify="left", header_style="bold")
    for column in ("parameter", "shape", "grad norm", "mean", "std", "abs max", "zeros", "non-finite",
                   "param norm", "grad/param"):
        parameters.add_column(column, justify="left" if column in ("parameter", "shape") else "right")
    parameters.add_column(f"log10 |grad| [{BAR_LOW:g}, {BAR_HIGH:g}]", no_wrap=True)
    for p in report.parameters:
        shape = "x".join(str(size) for size in p.shape) or "scalar"
        if not p.has_grad:
            parameters.add_row(p.name, shape, Text("no grad", style="bold red"), "-", "-", "-", "-", "-",
                               fmt(p.param_norm), "-", norm_bar(None))
            continue
        zeros = f"{p.zero_fraction:.0%}" if p.zero_fraction is not None else "-"
        parameters.add_row(p.name, shape, fmt(p.grad_norm), fmt(p.grad_mean), fmt(p.grad_std),
                           fmt(p.grad_abs_max), zeros, _count(p.nonfinite), fmt(p.param_norm),
                           fmt(p.grad_to_param), norm_bar(p.grad_norm))
    summary = Text(f"loss {fmt(report.loss)}   total gradient norm {fmt(report.total_grad_norm)}", style="bold")
    return Group(modules, Text(""), parameters, Text(""), summary, findings_view(report.findings))


def watch_table(history: Sequence["StepRecord"], max_rows: int = 20, max_layers: int = 6) -> Table:
    """The live ``watch`` table: the last ``max_rows`` steps with loss, total and per-layer norms."""
    layers = [name for name, _ in history[-1].layer_norms][:max_layers] if history else []
    table = Table(title="gradscope watch", title_justify="left", header_style="bold")
    table.add_column("step", justify="right")
    table.add_column("loss", justify="right")
    table.add_column("total grad norm", justify="right")
    table.add_column("log10 |grad|", no_wrap=True)
    for layer in layers:
        table.add_column(module_label(layer), justify="right")
    for record in history[-max_rows:]:
        norms = dict(record.layer_norms)
        style = "bold red" if record.nonfinite else ""
        table.add_row(str(record.step), fmt(record.loss), fmt(record.total_grad_norm),
                      norm_bar(record.total_grad_norm), *(fmt(norms.get(layer)) for layer in layers), style=style)
    if history:
        table.caption = f"loss {sparkline([r.loss for r in history])}"
    return table


def watch_line(record: "StepRecord") -> str:
    """One plain line per step, for when stdout is not a terminal."""
    layers = " ".join(f"{module_label(name)}={fmt(norm)}" for name, norm in record.layer_norms)
    flag = f"  NON-FINITE {record.nonfinite}" if record.nonfinite else ""
    return f"step {record.step:>4}  loss {fmt(record.loss):>9}  grad_norm {fmt(record.total_grad_norm):>9}  " \
           f"{layers}{flag}"


def origin_view(origin: "NonFiniteOrigin") -> RenderableType:
    """Where the first non-finite value started, and which modules only passed it on."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
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
        parts.append(Text(f"{report.steps_run} step{'s' if report.steps_run != 1 else ''} run   "
                          f"loss {fmt(losses[0])} -> {fmt(losses[-1])}   {sparkline(losses)}", style="bold"))
    else:
        parts.append(Text("no step completed", style="bold"))
    if report.status == "interrupted":
        parts.append(Text("interrupted: the summary covers the steps that finished", style="yellow"))
    if report.first_nonfinite is not None:
        parts.append(origin_view(report.first_nonfinite))
    elif report.status == "nonfinite":
        parts.append(Text("a non-finite value appeared (run with --nan/--inf to locate it)", style="bold red"))
    if report.bundle:
        parts.append(Text(f"replay bundle: {report.bundle}"))
    return Group(*parts)


def clip_view(report: "ClipReport") -> RenderableType:
    """Per-parameter gradient norms before and after clipping."""
    table = Table(title=f"Gradient clipping: mode={report.mode} scope={report.scope} max={fmt(report.max)} "
                        f"(step {report.steps - 1})", title_justify="left", header_style="bold")
    table.add_column("parameter")
    table.add_column("norm before", justify="right")
    table.add_column("norm after", justify="right")
    table.add_column("after / before", justify="right")
    for p in report.parameters:
        ratio = (p.norm_after / p.norm_before if p.norm_before and p.norm_after is not None
                 and math.isfinite(p.norm_before) else None)
        table.add_row(p.name, fmt(p.norm_before), fmt(p.norm_after), fmt(ratio))
    summary = Text(f"total gradient norm {fmt(report.total_norm_before)} -> {fmt(report.total_norm_after)}",
                   style="bold")
    return Group(table, summary)


def check_view(report: "CheckReport") -> RenderableType:
    """Each check with pass/fail/skip, then the findings."""
    table = Table(title=f"gradscope check {report.model}", title_justify="left", header_style="bold")
    table.add_column("check")
    table.add_column("status")
    table.add_column("details")
    for check in report.checks:
        table.add_row(check.name, Text(check.status.upper(), style=_STATUS_STYLE[check.status]), check.message)
    verdict = Text("all checks passed" if report.passed else "some checks failed",
                   style="bold green" if report.passed else "bold red")
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
        losses = [r.loss for r in history]
        parts.append(Text(f"gradscope run {report.script}: {report.steps_run} step{'s' if report.steps_run != 1 else ''}"
                          f"   loss {fmt(losses[0])} -> {fmt(losses[-1])}   {sparkline(losses)}", style="bold"))
        table = Table(title="Gradient norm per layer over the run", title_justify="left", header_style="bold")
        table.add_column("layer")
        for column in ("first", "last", "min", "max"):
            table.add_column(column, justify="right")
        table.add_column(f"log10 last [{BAR_LOW:g}, {BAR_HIGH:g}]", no_wrap=True)
        series: dict[str, list[float]] = {}
        for record in history:
            for name, norm in record.layer_norms:
                if norm is not None:
                    series.setdefault(name, []).append(norm)
        for name, values in series.items():
            finite = [v for v in values if math.isfinite(v)]
            table.add_row(module_label(name), fmt(values[0]), fmt(values[-1]), fmt(min(finite) if finite else None),
                          fmt(max(finite) if finite else None), norm_bar(values[-1]))
        parts.append(table)
    else:
        parts.append(Text(f"gradscope run {report.script}: no step completed", style="bold"))
    if report.status == "interrupted":
        parts.append(Text("interrupted: the summary covers the steps that finished", style="yellow"))
    for note in report.notes:
        parts.append(Text(f"note: {note}", style="yellow"))
    if report.first_nonfinite is not None:
        parts.append(origin_view(report.first_nonfinite))
    elif report.status == "nonfinite":
        parts.append(Text("a non-finite value appeared (run with --nan/--inf to locate it)", style="bold red"))
    elif report.status == "ok":
        parts.append(Text("No findings: every loss, gradient and parameter stayed finite.", style="green"))
    return Group(*parts)
