"""``gradscope`` command line: the root ``click`` group; one module per command.

Only ``click`` is imported here, so ``gradscope --help`` stays fast: numpy, rich and the model code
are imported by a command when it runs.
"""
from __future__ import annotations

from typing import Any, NoReturn

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.check import check
from gradscope.cli.clip import clip
from gradscope.cli.debug import debug
from gradscope.cli.graph import graph
from gradscope.cli.inspect import inspect_command
from gradscope.cli.replay import replay
from gradscope.cli.run import run
from gradscope.cli.watch import watch

__all__ = ["App", "ExitCode", "main"]


class _RootGroup(click.Group):
    """Root group: the CLI's error boundary. Every error escaping a command becomes one stderr line
    and a documented exit code; SIGINT and SIGTERM are handled as interrupts while a command runs."""

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            _usage_error(App(), error)

    def invoke(self, ctx: click.Context) -> Any:
        from gradscope.utils.usercode import signal_handlers

        app = ctx.ensure_object(App)
        try:
            with signal_handlers():
                return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            _usage_error(app, error)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BaseException as exc:  # noqa: BLE001 - the CLI's last line of defence
            _fail(app, exc)


def _usage_error(app: App, error: click.UsageError) -> NoReturn:
    """One line for a usage error, with where to find help."""
    command = error.ctx.command_path if error.ctx is not None else "gradscope"
    app.abort(f"{error.format_message()} (see '{command} --help')", ExitCode.USAGE)


def _fail(app: App, exc: BaseException) -> NoReturn:
    from gradscope.errors import GradscopeError, ModelError
    from gradscope.utils.usercode import Terminated, describe_raise, passes_through

    if isinstance(exc, KeyboardInterrupt) and passes_through(exc):
        if isinstance(exc, Terminated):
            app.abort("terminated (SIGTERM)", ExitCode.TERMINATED, exc)
        app.abort("interrupted", ExitCode.INTERRUPTED, exc)
    if isinstance(exc, ModelError):
        app.abort(str(exc), ExitCode.MODEL_ERROR, exc.__cause__ or exc)
    if isinstance(exc, GradscopeError):
        app.abort(str(exc), ExitCode.USAGE, exc)
    line = _model_line(app, exc)
    if line is not None:
        app.abort(f"{app.model_path}: the model's code {describe_raise(exc)} (line {line})", ExitCode.MODEL_ERROR, exc)
    hint = "" if app.debug else " (run with --debug for the traceback)"
    app.abort(f"internal error: {type(exc).__name__}: {exc}{hint}", ExitCode.INTERNAL_ERROR, exc)


def _model_line(app: App, exc: BaseException) -> int | None:
    """The last line of the model file in ``exc``'s traceback: the user's code raised it there."""
    from pathlib import Path

    if app.model_path is None:
        return None
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename) == app.model_path:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


@click.group("gradscope", cls=_RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gradscope", prog_name="gradscope")
@click.option("--debug", is_flag=True, help="Show full tracebacks for model and internal errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """gradscope: see how gradients flow through your model.

    \b
    Examples:
      gradscope inspect sample_models/mlp.py
      gradscope watch sample_models/nan_forward.py --steps 20 --nan
      gradscope check sample_models/mlp.py --format junit > gradscope.xml
      gradscope run --nan train.py --epochs 3

    \b
    Exit codes: 0 ok, 1 findings, 2 usage, 3 model error,
                4 internal error, 130 interrupted, 143 terminated.
    """
    app = ctx.ensure_object(App)
    app.debug = app.debug or debug


for command in (inspect_command, watch, clip, check, replay, debug, graph, run):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``gradscope`` and ``python -m gradscope``)."""
    cli.main(args=argv, prog_name="gradscope")
