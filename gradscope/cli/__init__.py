"""``gradscope`` command line: the root ``click`` group; one module per command.

Only ``click`` is imported here, so ``gradscope --help`` stays fast: a command's module (and its
options) is imported when that command is named, and numpy, rich and the model code when it runs.
"""
from __future__ import annotations

from typing import Any, NoReturn

import click

from gradscope.cli.app import App, ExitCode

__all__ = ["App", "ExitCode", "COMMANDS", "main"]

#: Every command: name -> (module, function, the first sentence of its help for the overview).
#: tests/cli/test_help.py checks the sentences against the commands' own help.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "inspect": ("gradscope.cli.inspect", "inspect_command",
                "Run one forward and backward pass of MODEL and show how the gradient flows."),
    "watch": ("gradscope.cli.watch", "watch",
              "Train MODEL for N steps, showing loss, total and per-layer gradient norms each step."),
    "clip": ("gradscope.cli.clip", "clip",
             "Clip the gradients of MODEL and show each parameter's gradient norm before and after."),
    "check": ("gradscope.cli.check", "check",
              "Run gradient sanity checks on MODEL; exit 0 when all pass, 1 when any fails."),
    "replay": ("gradscope.cli.replay", "replay",
               "Reproduce the step stored in BUNDLE (written by `watch --nan/--inf`) on MODEL."),
    "debug": ("gradscope.cli.debug", "debug",
              "Pause inside the backward pass of MODEL, at breakpoints or step by step."),
    "graph": ("gradscope.cli.graph", "graph",
              "Show the autograd graph of one forward pass of MODEL, from the loss down."),
    "run": ("gradscope.cli.run", "run",
            "Run SCRIPT as `python SCRIPT ARGS` would, with gradscope watching every model it trains."),
}


class _RootGroup(click.Group):
    """Root group: the CLI's error boundary. Every error escaping a command becomes one stderr line
    and a documented exit code; SIGINT and SIGTERM are handled as interrupts while a command runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        import importlib

        module, function, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), function)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                           list[str]]:
        """As click's, and a mistyped command name gets "did you mean", as a mistyped option does."""
        name = click.utils.make_str(args[0]) if args else ""
        if name and name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            import difflib

            matches = difflib.get_close_matches(name.lower(), sorted(COMMANDS), n=3, cutoff=0.6)
            matches += [command for command in sorted(COMMANDS) if command.startswith(name.lower()) and
                        command not in matches]
            if matches:
                quoted = ", ".join(f"'{match}'" for match in matches)
                hint = f"Did you mean {quoted}?" if len(matches) == 1 else f"Did you mean one of: {quoted}?"
                raise click.UsageError(f"No such command '{name}'. ({hint})", ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command overview from :data:`COMMANDS`, without importing every command; each
        summary is a whole sentence, wrapped to the width rather than cut with "..."."""
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]  # whole sentences, wrapped, never cut
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            _usage_error(App(), error)

    def invoke(self, ctx: click.Context) -> Any:
        from gradscope._tool.usercode import signal_handlers

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
    from gradscope._tool.usercode import Terminated, describe_raise, passes_through
    from gradscope.errors import GradscopeError, ModelError

    if _stdout_closed(exc):
        _silence_stdout()
        app.exit(ExitCode.STDOUT_CLOSED)
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


def _stdout_closed(exc: BaseException) -> bool:
    """True when ``exc`` says the reader of stdout went away (``gradscope ... | head``): a
    ``BrokenPipeError``, or the ``SystemExit`` that rich raises on one."""
    return isinstance(exc, BrokenPipeError) or (isinstance(exc, SystemExit) and
                                                isinstance(exc.__context__, BrokenPipeError))


def _silence_stdout() -> None:
    """Point stdout at the null device, so that flushing it at exit raises nothing more."""
    import os
    import sys

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


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
    Exit codes: 0 ok, 1 findings, 2 usage, 3 model error, 4 internal error,
                130 interrupted, 141 stdout closed early, 143 terminated.
    """
    app = ctx.ensure_object(App)
    app.debug = app.debug or debug


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``gradscope`` and ``python -m gradscope``)."""
    cli.main(args=argv, prog_name="gradscope")
