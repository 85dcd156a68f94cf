"""``gradscope run [OPTIONS] SCRIPT [ARGS]...``: monitor an unmodified training script."""
from __future__ import annotations

import contextlib
import sys
from typing import Any

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.options import debug_option, format_option


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--nan", "stop_on_nan", is_flag=True,
              help="Stop at the first NaN (loss, activation, gradient or parameter) and show where it started.")
@click.option("--inf", "stop_on_inf", is_flag=True, help="The same for infinite values.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write one JSON record per step to this file (flushed every step).")
@click.option("--clip", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Clip the gradients to this value before each optimizer step.")
@click.option("--clip-mode", type=click.Choice(["norm", "value"]), default="norm", show_default=True,
              help="norm: the total 2-norm of the optimizer's gradients; value: each element.")
@format_option("table", "json")
@debug_option
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", metavar="[ARGS]...", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def run(app: App, script: str, script_args: tuple[str, ...], stop_on_nan: bool, stop_on_inf: bool,
        log_path: str | None, clip: float | None, clip_mode: str, output_format: str) -> None:
    """Run SCRIPT as `python SCRIPT ARGS` would, with gradscope watching every model it trains.

    Works on gradscope's engine and on PyTorch (hooks are attached when the script imports
    torch). A step is one optimizer.step() (one backward() in a script without optimizer).
    The script's output passes through; gradscope's summary (gradient norm per layer over the
    run) goes to stderr. With --nan/--inf the script is stopped at the first non-finite value
    and gradscope reports where it started: step, phase, module, autograd node and source
    line. Exit codes: the script's own when nothing was found, 1 when a non-finite value
    appeared, 3 when the script raised, 130 on Ctrl-C.

    \b
    Examples:
      gradscope run train.py --epochs 3
      gradscope run --nan --inf --log steps.jsonl train.py --lr 0.1
      gradscope run --format json --clip 1.0 train.py > run.json
    """
    from gradscope.monitor.run import RunOptions

    options = RunOptions(nan=stop_on_nan, inf=stop_on_inf, clip=clip, clip_mode=clip_mode)
    log = open(log_path, "w", encoding="utf-8") if log_path else None  # noqa: SIM115 - closed below
    try:
        code = _run(app, script, list(script_args), options, log, output_format)
    finally:
        if log is not None:
            log.close()
    app.exit(code)


def _run(app: App, script: str, args: list[str], options: Any, log: Any, output_format: str) -> int:
    from gradscope.engines import get_engine
    from gradscope.monitor.run import RunMonitor, StopRun
    from gradscope.render.data import run_step_to_dict
    from gradscope.render.tables import run_line
    from gradscope.scripts import ScriptError, run_script, when_imported

    live = output_format == "table" and app.err.is_terminal

    def on_step(record: Any) -> None:
        if log is not None:
            import json

            log.write(json.dumps(run_step_to_dict(record), allow_nan=False) + "\n")
            log.flush()
        if live:
            sys.stderr.write("\r\x1b[2K" + run_line(record))
            sys.stderr.flush()

    monitor = RunMonitor(options, on_step=on_step, main_globals=lambda: vars(sys.modules["__main__"]))
    result = None
    error: ScriptError | None = None
    stopped = interrupted = False
    redirect = contextlib.redirect_stdout(sys.stderr) if output_format == "json" else contextlib.nullcontext()
    try:
        monitor.attach(get_engine("gradscope"))
        with redirect, when_imported("torch", lambda: monitor.attach(get_engine("torch"))):
            try:
                result = run_script(script, args)
                monitor.finish()
            except StopRun:
                stopped = True
            except ScriptError as exc:
                error = exc
            except KeyboardInterrupt:
                interrupted = True
    finally:
        monitor.close()
        if live:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()
    if error is not None:
        sys.stderr.write(error.traceback_text)
        sys.stderr.flush()
    if result is not None and result.message is not None:
        sys.stderr.write(result.message + "\n")
        sys.stderr.flush()
    report = monitor.report(script, interrupted=interrupted, error=error is not None)
    _print_report(app, report, output_format)
    if interrupted:
        return ExitCode.INTERRUPTED
    if error is not None:
        return ExitCode.MODEL_ERROR
    if stopped or report.status == "nonfinite":
        return ExitCode.FINDINGS
    return result.exit_code if result is not None else ExitCode.OK


def _print_report(app: App, report: Any, output_format: str) -> None:
    from gradscope.render.tables import run_summary

    if output_format == "json":
        from gradscope.render.data import run_to_dict

        app.echo_json(run_to_dict(report))
    app.err.print(run_summary(report))
