"""``gradscope watch MODEL --steps N``: train with a live gradient table; find where NaN/Inf start."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.waivers import ignore_option
from gradscope.cli.options import debug_option, engine_option, format_option, model_argument, seed_option
from gradscope.cli.settings import option
from gradscope.cli.startup import DEFAULT_BUNDLE
from gradscope.cli.view_options import layers_option

if TYPE_CHECKING:
    from gradscope.cli.common import LogWriter


@click.command("watch")
@model_argument
@option("steps", "Training steps to run.", default=10)
@option("nan", "Stop at the first NaN (loss, activation, gradient or parameter) and show where it started.")
@option("inf", "The same for infinite values.")
@option("clip", "Clip the total gradient norm to this value before each update.")
@option("lr", "Learning rate of the default SGD optimizer (a model's make_optimizer wins).", default=0.01)
@option("log", "Append one JSON record per step to this file (flushed every step).")
@option("tensorboard", "Also write each step's loss and gradient norms as TensorBoard scalars into this directory "
                       "(needs the tensorboard package).")
@option("bundle", "Where --nan/--inf write the replay bundle of the failing step.",
        default=DEFAULT_BUNDLE)
@layers_option
@format_option("table", "json")
@ignore_option
@seed_option
@engine_option
@debug_option
@click.pass_context
def watch(ctx: click.Context, **_: Any) -> None:
    """Train MODEL for N steps, showing loss, total and per-layer gradient norms each step.

    On a terminal the view updates live: step k/N, elapsed time and an estimate of the rest, the
    loss, and one row per layer (--layers GLOB chooses which); when stdout is piped, one line per
    step. With --nan
    and/or --inf, training stops at the first non-finite value, and the failing step is run
    again with full instrumentation to report where it started: the step, the phase (forward,
    backward or update), the module, the autograd node and the line in the model file, and
    which modules only passed it on. That step is saved as a replay bundle for
    `gradscope replay`. Exits 1 when a non-finite value appeared, 130 on Ctrl-C and 143 on
    SIGTERM (after printing the summary so far).

    \b
    Examples:
      gradscope watch sample_models/mlp.py --steps 50
      gradscope watch sample_models/nan_forward.py --steps 10 --nan --log run.jsonl
      gradscope watch model.py --steps 200 --nan --inf --clip 1.0 --format json
      gradscope watch model.py --steps 100 --layers 'encoder.layers.*' 
    """
    from gradscope._tool.usercode import Terminated, passes_through
    from gradscope.cli.common import LogWriter, training_steps
    from gradscope.cli.startup import start
    from gradscope.monitor.watch import WatchOptions, Watcher

    from gradscope.cli.waivers import read_waivers

    run = start(ctx)
    stop = run["nan"] or run["inf"]
    log = run.output("log")
    tensorboard = run.output_directory("tensorboard")
    bundle = run.output("bundle") if stop else None
    if not stop and run.settings["bundle"].source.startswith("--"):
        run.app.warn(f"{run.settings['bundle'].source} {run['bundle']}: a replay bundle is only written with --nan "
                     "or --inf; ignored")
    waivers = read_waivers(run)
    layers = run["layers"] or ()
    workload = run.load_model()
    options = WatchOptions(steps=run["steps"], lr=run["lr"], nan=run["nan"], inf=run["inf"], clip=run["clip"],
                           waivers=waivers)
    watcher = Watcher(workload, options)
    output_format = ctx.params["output_format"]
    interrupt: KeyboardInterrupt | None = None
    writer = LogWriter(run, log, tensorboard)
    try:
        with training_steps():
            _run(run.app, watcher, writer, live=output_format == "table" and run.app.stdout_is_terminal,
                 plain=output_format == "table", layers=layers)
    except KeyboardInterrupt as exc:
        if not passes_through(exc):
            raise
        interrupt = exc
    finally:
        writer.close()
    snapshot = watcher.failing_snapshot
    if bundle is not None and snapshot is not None:
        extra = {"lr": run["lr"], "clip": run["clip"]}
        if run.write(bundle, lambda path: snapshot.save(path, extra=extra)):
            watcher.bundle = bundle.label
    report = watcher.report(interrupted=interrupt is not None)
    _print_report(run.app, report, output_format)
    if interrupt is not None:
        signal = "terminated (SIGTERM)" if isinstance(interrupt, Terminated) else "interrupted"
        run.app.err.print(f"{signal} after {report.steps_run} step(s): the summary covers the steps that finished",
                          style="yellow")
        run.app.exit(ExitCode.TERMINATED if isinstance(interrupt, Terminated) else ExitCode.INTERRUPTED)
    from gradscope.monitor.analysis import has_errors

    run.exit(ExitCode.OK if report.status == "ok" and not has_errors(report.findings) else ExitCode.FINDINGS)


def _run(app: App, watcher: Any, log: LogWriter, live: bool, plain: bool, layers: tuple[str, ...]) -> None:
    import time

    from gradscope.render.data import step_to_dict
    from gradscope.render.tables import watch_line, watch_table

    def write_log(record: Any) -> None:
        if log.active:  # without --log or --tensorboard, no record is built
            log.write(step_to_dict(record))

    from gradscope.cli.common import progress_on_terminal

    total = watcher.options.steps
    started = time.monotonic()
    if live:
        from rich.live import Live

        with Live(watch_table([], total, 0.0, layers), console=app.out, refresh_per_second=8) as view:
            def show_stage(stage: str, done: int, count: int) -> None:
                view.update(watch_table(watcher.history, total, time.monotonic() - started, layers,
                                        status=f"{stage} ({done + 1}/{count})"))

            watcher.progress = show_stage
            for record in watcher.steps():
                write_log(record)
                view.update(watch_table(watcher.history, total, time.monotonic() - started, layers))
        return
    with progress_on_terminal(app.err) as progress:
        watcher.progress = progress
        for record in watcher.steps():
            write_log(record)
            if plain:
                app.out.print(watch_line(record, app.out.width, layers), markup=False, highlight=False,
                              soft_wrap=True)


def _print_report(app: App, report: Any, output_format: str) -> None:
    from gradscope.render.tables import watch_summary

    if output_format == "json":
        from gradscope.render.data import watch_to_dict

        app.echo_json(watch_to_dict(report))
        app.err.print(watch_summary(report))
    else:
        app.out.print(watch_summary(report))
