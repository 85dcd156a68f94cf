"""``gradscope debug MODEL``: stop inside the backward pass, look at and edit gradients."""
from __future__ import annotations

from pathlib import Path

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.options import debug_option, engine_option

NO_TERMINAL = ("gradscope debug needs a terminal for its prompt. Without one, give the commands to run: "
               "--commands \"break nan; continue; where; grads; quit\" (separated by ';'), or "
               "--commands-file FILE (one command per line).")


def split_commands(text: str) -> list[str]:
    """``"break nan; continue"`` (or several lines) -> ``["break nan", "continue"]``."""
    return [part.strip() for line in text.splitlines() for part in line.split(";") if part.strip()]


def read_commands_file(path: str) -> list[str]:
    """One command per line; blank lines and lines starting with '#' are skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@click.command("debug")
@click.argument("model_file", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--step", default=0, show_default=True, type=click.IntRange(min=0),
              help="Debug the forward and backward pass on the batch of this step.")
@click.option("--break", "conditions", multiple=True, metavar="COND",
              help="Stop when COND holds (repeatable): nan, inf, module GLOB, type NAME, norm > X, "
                   "grad_input norm < X, node NAME, forward ...")
@click.option("--commands", metavar="'CMD; CMD; ...'",
              help="Run these prompt commands instead of reading a terminal, printing what the prompt shows.")
@click.option("--commands-file", type=click.Path(exists=True, dir_okay=False),
              help="Like --commands, one command per line.")
@engine_option
@debug_option
@click.pass_obj
def debug(app: App, model_file: str, step: int, conditions: tuple[str, ...], commands: str | None,
          commands_file: str | None) -> None:
    """Pause inside the backward pass of MODEL, at breakpoints or step by step.

    Runs forward and backward on the batch of step K. Without --break it stops before backward
    starts; with --break it runs to the first breakpoint. At the (gradscope) prompt: break,
    delete, disable, enable, breakpoints; step, next, continue, finish, where, graph; grads,
    print EXPR, table, params; scale F, clip X, zero, set EXPR (edit the gradient at this
    point: the rest of backward uses it); quit (abort; the model is left as it was).
    Type help at the prompt for details.

    \b
    Examples:
      gradscope debug sample_models/nan_backward.py --break nan
      gradscope debug model.py --break "module encoder.*" --break "grad_input norm > 100"
      gradscope debug model.py --break nan --commands "where; grads; table; quit"
    """
    from gradscope.debug import ConditionError, DebuggerShell, parse_condition, run_debug_step
    from gradscope.loading import load_model_file
    from gradscope.render.debug import RichPresenter

    if commands is not None and commands_file is not None:
        app.abort("give either --commands or --commands-file, not both", ExitCode.USAGE)
    for condition in conditions:
        try:
            parse_condition(condition)
        except ConditionError as error:
            app.abort(f"--break {condition!r}: {error}", ExitCode.USAGE)
    script = None
    if commands is not None:
        script = split_commands(commands)
    elif commands_file is not None:
        script = read_commands_file(commands_file)
    if script is None and not click.get_text_stream("stdin").isatty():
        app.abort(NO_TERMINAL, ExitCode.USAGE)

    workload = load_model_file(model_file, engine=app.engine)
    if workload.engine.name != "gradscope":
        app.abort(f"{model_file}: debug does not support torch models yet", ExitCode.MODEL_ERROR)
    batch = workload.batch(step)

    def locate(module_path: str) -> str | None:
        line = workload.module_line(module_path)
        return None if line is None else f"{workload.path}:{line}"

    shell = DebuggerShell(RichPresenter(app.out), commands=script)
    run_debug_step(workload.model, lambda: workload.loss(batch), shell, conditions=list(conditions), step=step,
                   backward=workload.backward, locate=locate)
    app.exit(ExitCode.OK)
