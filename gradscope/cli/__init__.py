"""``gradscope`` command line: the root ``click`` group; one module per command.

Only ``click`` is imported here, so ``gradscope --help`` stays fast: numpy, rich and the model code
are imported by a command when it runs.
"""
from __future__ import annotations

from typing import Any

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
    """Root group that turns every error escaping a command into one stderr line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        app = ctx.ensure_object(App)
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except KeyboardInterrupt as exc:
            app.abort("interrupted", ExitCode.INTERRUPTED, exc)
        except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
            from gradscope.errors import GradscopeError, ModelError

            if isinstance(exc, ModelError):
                app.abort(str(exc), ExitCode.MODEL_ERROR, exc.__cause__ or exc)
            if isinstance(exc, GradscopeError):
                app.abort(str(exc), ExitCode.USAGE, exc)
            hint = "" if app.debug else " (run with --debug for the traceback)"
            app.abort(f"internal error: {type(exc).__name__}: {exc}{hint}", ExitCode.INTERNAL_ERROR, exc)


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
                4 internal error, 130 interrupted.
    """
    app = ctx.ensure_object(App)
    app.debug = app.debug or debug


for command in (inspect_command, watch, clip, check, replay, debug, graph, run):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``gradscope`` and ``python -m gradscope``)."""
    cli.main(args=argv, prog_name="gradscope")
