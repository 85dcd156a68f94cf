"""``gradscope watch MODEL --steps N``: train with a live gradient table; find where NaN/Inf start."""
from __future__ import annotations

from typing import Any

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.options import debug_option, engine_option, format_option, model_argument, seed_option


@click.command("watch")
@model_argument
@click.option("--steps", type=click.IntRange(min=1), default=10, show_default=True, help="Training steps to run.")
@click.option("--nan", "stop_on_nan", is_flag=True,
              help="Stop at the first NaN (loss, activation, gradient or parameter) and show where it started.")
@click.option("--inf", "stop_on_inf", is_flag=True, help="The same for infinite values.")
@click.option("--clip", type=click.FloatRange(min=0), default=None,
              help="Clip the total gradient norm to this value before each update.")
@click.option("--lr", type=click.FloatRange(min=0), default=0.01, show_default=True,
              help="Learning rate of the default SGD optimizer (a model's make_optimizer wins).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Append one JSON record per step to this file (flushed every step).")
@click.option("--bundle", type=click.Path(dir_okay=False, writable=True), default="gradscope-replay.npz",
              show_default=True, help="Where --nan/--inf write the replay bundle of the failing step.")
@format_option("table", "json")
@seed_option
@engine_option
@debug_option
@click.pass_obj
def watch(app: App, model_file: str, steps: int, stop_on_nan: bool, stop_on_inf: bool, clip: float | None,
          lr: float, log_path: str | None, bundle: str, output_format: str, seed: int) -> None:
    """Train MODEL for N steps, showing loss, total and per-layer gradient norms each step.

    On a terminal the table updates live; when stdout is piped, one line per step. With --nan
    and/or --inf, training stops at the first non-finite value, and the failing step is run
    again with full instrumentation to report where it started: the step, the phase (forward,
    backward or update), the module, the autograd node and the line in the model file, and
    which modules only passed it on. That step is saved as a replay bundle for
    `gradscope replay`. Exits 1 when a non-finite value appeared, 130 on Ctrl-C (after
    printing the summary so far).

    \b
    Examples:
      gradscope watch sample_models/mlp.py --steps 50
      gradscope watch sample_models/nan_forward.py --steps 10 --nan --log run.jsonl
      gradscope watch model.py --steps 200 --nan --inf --clip 1.0 --format json
    """
    from gradscope.cli.common import quiet_numpy
    from gradscope.loading import load_model_file
    from gradscope.monitor.watch import WatchOptions, Watcher

    workload = load_model_file(model_file, seed=seed, engine=app.engine)
    options = WatchOptions(steps=steps, lr=lr, nan=stop_on_nan, inf=stop_on_inf, clip=clip,
                           bundle=bundle if (stop_on_nan or stop_on_inf) else None)
    watcher = Watcher(workload, options)
    log = open(log_path, "a", encoding="utf-8") if log_path else None
    interrupted = False
    try:
        with quiet_numpy():
            _run(app, watcher, log, live=output_format == "table" and app.stdout_is_terminal,
                 plain=output_format == "table")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if log is not None:
            log.close()
    report = watcher.report(interrupted=interrupted)
    _print_report(app, report, output_format)
    if interrupted:
        app.err.print(f"interrupted after {report.steps_run} step(s)", style="yellow")
        app.exit(ExitCode.INTERRUPTED)
    app.exit(ExitCode.OK if report.status == "ok" else ExitCode.FINDINGS)


def _run(app: App, watcher: Any, log: Any, live: bool, plain: bool) -> None:
    from gradscope.render.data import step_to_dict
    from gradscope.render.tables import watch_line, watch_table

    def write_log(record: Any) -> None:
        if log is not None:
            import json

            log.write(json.dumps(step_to_dict(record), allow_nan=False) + "\n")
            log.flush()

    if live:
        from rich.live import Live

        with Live(watch_table([]), console=app.out, refresh_per_second=8) as view:
            for record in watcher.steps():
                write_log(record)
                view.update(watch_table(watcher.history))
        return
    for record in watcher.steps():
        write_log(record)
        if plain:
            app.out.print(watch_line(record), markup=False, highlight=False, soft_wrap=True)


def _print_report(app: App, report: Any, output_format: str) -> None:
    from gradscope.render.tables import watch_summary

    if output_format == "json":
        from gradscope.render.data import watch_to_dict

        app.echo_json(watch_to_dict(report))
        app.err.print(watch_summary(report))
    else:
        app.out.print(watch_summary(report))
