"""``gradscope run [OPTIONS] SCRIPT [ARGS]...``: monitor an unmodified training script."""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.options import debug_option, format_option
from gradscope.cli.settings import option
from gradscope.cli.waivers import ignore_option

if TYPE_CHECKING:
    from gradscope.cli.common import LogWriter


@click.command("run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@option("nan", "Stop at the first NaN (loss, activation, gradient or parameter) and show where it started.")
@option("inf", "The same for infinite values.")
@option("log", "Append one JSON record per step to this file (flushed every step).")
@option("tensorboard", "Also write each step's loss and gradient norms as TensorBoard scalars into this directory "
                       "(needs the tensorboard package).")
@option("clip", "Clip the gradients to this value before each optimizer step.")
@option("mode", "How --clip clips: norm (total 2-norm of the optimizer's gradients) or value (each element).",
        default="norm", flag="--clip-mode")
@option("on_nonfinite", "What a watched non-finite loss or gradient does: stop the script, or skip that "
                        "optimizer step (weights and optimizer state unchanged) and go on. skip without "
                        "--nan/--inf watches both.", default="stop")
@option("max_skips", "With --on-nonfinite skip: stop after this many consecutive skipped steps.", default=10)
@option("on_spike", "What a loss or gradient-norm spike does (see docs/run-protection.md): report it, skip that "
                    "optimizer step, or stop the script.", default="warn")
@option("allow_inf", "With --inf: modules (glob on their path, repeatable) whose outputs may hold -inf by design, "
                     "e.g. an attention mask; NaN and +inf in them are still found.", multiple=True)
@option("health", "check's gradient rules over the run (vanishing, exploding, dead, no gradient, unchanged): "
                  "report them, or also fail the run (exit 1).", default="warn")
@option("max_norm", "With the health rules: exploding limit for a parameter's median gradient norm.", default=1000.0)
@option("min_norm", "With the health rules: vanishing limit for a parameter's median gradient norm "
        "[default: 1e-4 x the largest].")
@ignore_option
@option("debug_on_failure", "When the run stops at a non-finite value, open gradscope debug's prompt on the "
                            "failing step's model call, re-run with its inputs, random state and output gradients.")
@click.option("--commands", metavar="'CMD; CMD; ...'",
              help="With --debug-on-failure: run these prompt commands instead of reading a terminal.")
@click.option("--break", "conditions", multiple=True, metavar="COND",
              help="With --debug-on-failure: breakpoints set before the failing call runs again (repeatable), as "
                   "in gradscope debug: nan, inf, forward nan, module GLOB, ...")
@option("nproc", "Run the script on N local processes with torch.distributed's launcher (as torchrun "
                 "--nproc-per-node N); norms are combined over the ranks.")
@format_option("table", "json")
@click.option("-m", "module", is_flag=True,
              help="SCRIPT is a module, run as `python -m SCRIPT ARGS` runs it (package.train; found from the "
                   "current directory).")
@debug_option
@click.argument("script")
@click.argument("script_args", metavar="[ARGS]...", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(ctx: click.Context, script: str, script_args: tuple[str, ...], output_format: str, module: bool,
        commands: str | None, conditions: tuple[str, ...], **_: Any) -> None:
    """Run SCRIPT as `python SCRIPT ARGS` would, with gradscope watching every model it trains.

    Works on gradscope's engine and on PyTorch (hooks are attached when the script imports
    torch). A step is one optimizer.step() (one backward() in a script without optimizer).
    The script's output passes through; gradscope's summary (gradient norm per layer over the
    run) goes to stderr. With --nan/--inf the script is stopped at the first non-finite value
    and gradscope reports where it started: step, phase, module, autograd node and source
    line. With --on-nonfinite skip, such a step is skipped instead and the script goes on.
    Options go before SCRIPT. Exit codes: the script's own when nothing was found, 1 when a
    non-finite value appeared (steps skipped included), 3 when the script raised, 130 on
    Ctrl-C, 143 on SIGTERM.

    \b
    Examples:
      gradscope run train.py --epochs 3
      gradscope run --nan --inf --log steps.jsonl train.py --lr 0.1
      gradscope run --format json --clip 1.0 train.py > run.json
      gradscope run --nproc 2 --nan train_ddp.py
      gradscope run --nan -m package.train --epochs 3
      gradscope run --on-nonfinite skip --max-skips 5 train.py
      gradscope run --nan --debug-on-failure --break "forward nan" train.py
    """
    from gradscope.cli.startup import start
    from gradscope.cli.common import LogWriter, thresholds_from
    from gradscope.cli.waivers import read_waivers
    from gradscope.monitor.run import RunOptions

    started = start(ctx, model=False, config_only=["min_ratio"])
    started.protect(script, "the script")
    skip = started["on_nonfinite"] == "skip"
    watch_both = skip and not (started["nan"] or started["inf"])
    options = RunOptions(nan=started["nan"] or watch_both, inf=started["inf"] or watch_both, clip=started["clip"],
                         clip_mode=started["mode"], on_nonfinite=started["on_nonfinite"],
                         max_skips=started["max_skips"], on_spike=started["on_spike"],
                         allow_inf=tuple(started["allow_inf"] or ()),
                         thresholds=thresholds_from(max_norm=started["max_norm"], min_norm=started["min_norm"],
                                                    min_ratio=started["min_ratio"]),
                         waivers=read_waivers(started), health=started["health"])
    debugger = None
    if started["debug_on_failure"]:
        from gradscope.cli.debug import split_commands

        if not options.stops:
            started.app.abort("--debug-on-failure needs --nan or --inf (it opens on the step they stop at)",
                              ExitCode.USAGE)
        if commands is None and not sys.stdin.isatty():
            started.app.abort("--debug-on-failure needs a terminal for the debugger's prompt. Without one, give the "
                              "commands to run: --commands \"break nan; continue; where; grads; quit\"",
                              ExitCode.USAGE)
        from gradscope.debug import ConditionError, parse_condition

        for condition in conditions:
            try:
                parse_condition(condition)
            except ConditionError as error:
                started.app.abort(f"--break {condition!r}: {error}", ExitCode.USAGE)
        debugger = split_commands(commands) if commands is not None else []
    elif commands is not None or conditions:
        started.app.abort(f"{'--commands' if commands is not None else '--break'} needs --debug-on-failure",
                          ExitCode.USAGE)
    if options.clip == 0:
        started.app.abort(f"{started.settings['clip'].source}: expected a number above 0 (clipping to 0 would zero "
                          "every gradient), got 0", ExitCode.USAGE)
    if started["nproc"] is not None:
        from gradscope.cli.launch import launch

        output = started.output("log")
        tensorboard = started.output_directory("tensorboard")
        if debugger == []:
            started.app.abort("--debug-on-failure with --nproc needs --commands (the ranks have no terminal)",
                              ExitCode.USAGE)
        started.exit(launch(started.app, started["nproc"], script, list(script_args), options, output_format,
                            output.path if output is not None else None, started.app.debug, module=module,
                            tensorboard=tensorboard.path if tensorboard is not None else None,
                            debugger=debugger, conditions=conditions))
    from gradscope.cli.launch import Worker

    worker = Worker.from_environment()
    log = LogWriter(started, started.output("log") if worker.writes_log else None,
                    started.output_directory("tensorboard") if worker.writes_log else None)
    try:
        code = _run(started.app, script, list(script_args), options, log, output_format, worker, module, debugger,
                    conditions)
    finally:
        log.close()
    started.exit(code)


def _run(app: App, script: str, args: list[str], options: Any, log: LogWriter, output_format: str, worker: Any,
         module: bool = False, debugger: list[str] | None = None, conditions: tuple[str, ...] = ()) -> int:
    from gradscope.engines import attach_engines
    from gradscope.monitor.run import RunMonitor, StopRun
    from gradscope.render.data import run_step_to_dict
    from gradscope.render.tables import run_line
    from gradscope.scripts import ScriptError, run_module, run_script

    from gradscope.cli.common import quiet_numpy
    from gradscope.cli.status import StatusLine, output_below

    live = output_format == "table" and app.err.is_terminal and worker.writes_log
    status = StatusLine(sys.stderr) if live else None

    def on_step(record: Any) -> None:
        if log.active:  # without --log or --tensorboard, no record is built
            log.write(run_step_to_dict(record))
        if status is not None:
            status.show(run_line(record))

    from gradscope.cli.launch import FOLLOWED_ENV, worker_arguments
    from gradscope.scripts import ProcessFollower

    follower = ProcessFollower(script, lambda path, rest: worker_arguments(options, output_format, None, app.debug,
                                                                          path, rest), (FOLLOWED_ENV, "1"))
    reducer = worker.reducer(lambda: bool(follower.followed) and not follower.unfollowed)
    monitor = RunMonitor(options, on_step=on_step, main_globals=lambda: vars(sys.modules["__main__"]), reducer=reducer,
                         on_failure=None if debugger is None else _open_debugger(app, debugger or None, conditions,
                                                                                 status))
    result = None
    error: ScriptError | None = None
    stopped = False
    interrupt: KeyboardInterrupt | None = None
    try:
        with monitor:
            with attach_engines(monitor.attach), monitor.reducer.deferred_signals(), follower:
                try:
                    with output_below(status), quiet_numpy():
                        result = (run_module if module else run_script)(script, args)
                    monitor.finish()
                except StopRun:
                    stopped = True
                except ScriptError as exc:
                    error = exc
                except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (the script's own too: Python exits 130 then)
                    interrupt = exc
    finally:
        monitor.reducer.release()
        if status is not None:
            status.hide()
    if error is not None and getattr(reducer, "signalled", False):
        error, interrupt = None, KeyboardInterrupt()  # a collective failed because the job is being stopped
    if error is not None and _raised_by_monitor(error.original):
        raise error.original  # gradscope's own failure: the CLI reports an internal error (exit 4)
    if error is not None:
        sys.stderr.write(error.traceback_text)
        sys.stderr.flush()
    if result is not None and result.message is not None:
        sys.stderr.write(result.message + "\n")
        sys.stderr.flush()
    label = f"-m {script}" if module else script
    monitor.notes.extend(_process_notes(follower, reducer))
    report = monitor.report(label, interrupted=interrupt is not None, error=error is not None)
    lines: list[str] = []
    if error is not None:
        lines.append(f"error: {label}: {error}")
    if interrupt is not None:
        from gradscope._tool.usercode import Terminated

        terminated = isinstance(interrupt, Terminated)
        lines.append(f"{'terminated (SIGTERM)' if terminated else 'interrupted'} after {report.steps_run} step(s): "
                     "the summary covers the steps that finished")
        code = ExitCode.TERMINATED if terminated else ExitCode.INTERRUPTED
    elif error is not None:
        code = ExitCode.MODEL_ERROR
    elif stopped or report.status == "nonfinite" or \
            (options.health == "fail" and any(f.severity == "error" for f in report.findings)):
        code = ExitCode.FINDINGS
    else:
        code = result.exit_code if result is not None else ExitCode.OK
    if worker.prints_report:
        print_report(app, report, output_format)
        for line in lines:
            app.err.print(line, style="bold red" if line.startswith("error:") else "yellow", markup=False)
    return worker.finish(report, code, lines)


def _open_debugger(app: App, commands: list[str] | None, conditions: tuple[str, ...], status: Any) -> Any:
    """``on_failure`` for ``--debug-on-failure``: the failing step's model call under ``gradscope debug``'s
    prompt (drawn on stderr: stdout is the script's)."""
    def open_debugger(failing: Any) -> None:
        from gradscope.debug import DebuggerShell, run_debug_step
        from gradscope.render.debug import RichPresenter

        if status is not None:
            status.hide()
        app.err.print(f"gradscope: opening the debugger on step {failing.step}'s model call (run again with its "
                      "inputs, random state and output gradients)", style="bold", markup=False)
        shell = DebuggerShell(RichPresenter(app.err), commands=commands)
        run_debug_step(failing.model, failing.compute_loss, shell, conditions=list(conditions), step=failing.step,
                       engine=failing.engine)

    return open_debugger


def _process_notes(follower: Any, reducer: Any) -> list[str]:
    """What the report says about the processes the script started for other ranks."""
    notes = []
    if follower.followed:
        count = len(follower.followed)
        joined = getattr(reducer, "inner", None) is not None
        notes.append(f"the script started {count} process{'es' if count != 1 else ''} of its own to run itself "
                     f"for other ranks; gradscope followed {'them' if count != 1 else 'it'}"
                     + (f" and combined every step over the {reducer.world_size} ranks" if joined else ""))
    for command in follower.unfollowed:
        notes.append(f"the script started a process for another rank that gradscope could not follow and did "
                     f"not watch: {' '.join(command)} (gradscope run --nproc N starts and watches every rank)")
    return notes


def print_report(app: App, report: Any, output_format: str) -> None:
    """The run's report: the JSON document on stdout with ``--format json``, the summary on stderr."""
    from gradscope.render.tables import run_summary

    if output_format == "json":
        from gradscope.render.data import run_to_dict

        app.echo_json(run_to_dict(report))
    app.err.print(run_summary(report), soft_wrap=not app.err_wraps)


def _raised_by_monitor(exc: BaseException) -> bool:
    """True when gradscope's monitors or engine adapters raised ``exc``, not the script (the rule
    is :func:`gradscope._tool.frames.raised_by_instrumentation`)."""
    from gradscope._tool.frames import raised_by_instrumentation

    return raised_by_instrumentation(exc.__traceback__)
