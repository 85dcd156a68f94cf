"""``gradscope debug MODEL``: stop inside the backward pass, look at and edit gradients."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from gradscope.cli.app import ExitCode
from gradscope.cli.options import debug_option, engine_option, model_argument, seed_option
from gradscope.cli.settings import option

NO_TERMINAL = ("gradscope debug needs a terminal for its prompt. Without one, give the commands to run: "
               "--commands \"break nan; continue; where; grads; quit\" (separated by ';'), or "
               "--commands-file FILE (one command per line).")


def split_commands(text: str) -> list[str]:
    """``"break nan; continue"`` (or several lines) -> ``["break nan", "continue"]``."""
    return [part.strip() for line in text.splitlines() for part in line.split(";") if part.strip()]


def read_commands_file(path: str) -> list[str]:
    """One command per line; blank lines and lines starting with '#' are skipped.

    Raises:
        ValueError: the file cannot be read or is not UTF-8 text (the message says which).
    """
    try:
        lines = Path(path).read_bytes().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(f"--commands-file {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"--commands-file {path}: cannot read it: {exc.strerror or exc}") from None
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@click.command("debug")
@model_argument
@option("step", "Debug the forward and backward pass on the batch of this step.", default=0)
@click.option("--break", "conditions", multiple=True, metavar="COND",
              help="Stop when COND holds (repeatable): nan, inf, module GLOB, type NAME, norm > X, "
                   "grad_input norm < X, node NAME, forward ...")
@click.option("--commands", metavar="'CMD; CMD; ...'",
              help="Run these prompt commands instead of reading a terminal, printing what the prompt shows.")
@click.option("--commands-file", type=click.Path(exists=True, dir_okay=False),
              help="Like --commands, one command per line.")
@click.option("--bundle", "bundle_file", type=click.Path(dir_okay=False), metavar="BUNDLE",
              help="Debug the step saved in this replay bundle (written by watch --nan/--inf, by default "
                   ".gradscope/replay.npz), with its weights, optimizer state, batch and random state.")
@seed_option
@engine_option
@debug_option
@click.pass_context
def debug(ctx: click.Context, conditions: tuple[str, ...], commands: str | None, commands_file: str | None,
          bundle_file: str | None, **_: Any) -> None:
    """Pause inside the backward pass of MODEL, at breakpoints or step by step.

    Runs forward and backward on the batch of step K (or on the failing step saved in a replay
    bundle, with --bundle), on a gradscope or a PyTorch model. Without --break it stops before backward
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
      gradscope debug model.py --bundle .gradscope/replay.npz --break nan
    """
    from gradscope.cli.startup import start
    from gradscope.debug import ConditionError, DebuggerShell, parse_condition, run_debug_step
    from gradscope.monitor.tracing import relative_source
    from gradscope.render.debug import RichPresenter

    run = start(ctx)
    app = run.app
    step = run["step"]
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
        try:
            script = read_commands_file(commands_file)
        except ValueError as error:
            app.abort(str(error), ExitCode.USAGE)
    if script is None and not sys.stdin.isatty():
        app.abort(NO_TERMINAL, ExitCode.USAGE)

    if bundle_file is not None and ctx.get_parameter_source("step") == click.core.ParameterSource.COMMANDLINE:
        app.abort("give either --step or --bundle (the bundle holds its step), not both", ExitCode.USAGE)
    if bundle_file is not None:
        from gradscope.monitor.bundle_format import read_bundle

        read_bundle(os.path.abspath(bundle_file), label=bundle_file)
    workload = run.load_model()
    if bundle_file is None:
        batch = workload.batch(step)
    else:
        step, batch = _restore_bundle(workload, bundle_file)

    def locate(module_path: str) -> str | None:
        line = workload.module_line(module_path)
        return None if line is None else relative_source(str(workload.path), line)

    if any(parse_condition(condition).watches_forward_values() for condition in conditions):
        batch = _recording_inputs(batch)
    shell = DebuggerShell(RichPresenter(app.out), commands=script)
    run_debug_step(workload.model, lambda: workload.loss(batch), shell, conditions=list(conditions), step=step,
                   backward=workload.backward, locate=locate, engine=workload.engine,
                   forward_again=lambda: workload.loss(_recording_inputs(batch)))
    run.exit(ExitCode.OK)


def _recording_inputs(batch: Any) -> Any:
    """The batch with its floating-point input tensors made to require grad (detached copies), so
    that every operation of the forward pass records a node: a ``forward nan`` stop can then name
    the operation that made the NaN (``LogBackward0``) even when it only involves the inputs."""
    import dataclasses

    def recording(value: Any) -> Any:
        if hasattr(value, "requires_grad_") and value.is_floating_point() and not value.requires_grad:
            return value.detach().requires_grad_()
        return value

    return dataclasses.replace(batch, inputs=tuple(recording(value) for value in batch.inputs))


def _restore_bundle(workload: Any, bundle_file: str) -> tuple[int, Any]:
    """Put the model, its optimizer and the random generators in the state the bundle saved;
    returns the bundle's step and batch."""
    from gradscope.loading import Batch
    from gradscope.monitor.snapshot import Snapshot

    from gradscope.cli.common import naming_the_bundle

    with naming_the_bundle(bundle_file, workload.label):
        snapshot, meta = Snapshot.load(os.path.abspath(bundle_file))
        optimizer = workload.make_optimizer(float(meta.get("lr", 0.01)))
        return snapshot.step, Batch.from_raw(snapshot.restore(workload.model, optimizer))
