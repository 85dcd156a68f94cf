"""Options shared by several commands."""
from __future__ import annotations

from typing import Any, Callable

import click

from gradscope.cli.app import App

F = Callable[..., Any]


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.ensure_object(App).debug = True
    return value


def debug_option(fn: F) -> F:
    """``--debug``: full tracebacks for model and internal errors (also accepted before the command)."""
    return click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                        help="Show full tracebacks for model and internal errors.")(fn)


def _set_engine(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        ctx.ensure_object(App).engine = value
    return value


def engine_option(fn: F) -> F:
    """``--engine gradscope|torch``: require the model to run on this engine (default: the model's own)."""
    return click.option("--engine", type=click.Choice(["gradscope", "torch"]), default=None, expose_value=False,
                        callback=_set_engine,
                        help="Require this engine; by default the model's class decides "
                             "(a torch.nn.Module runs on PyTorch).")(fn)


def model_argument(fn: F) -> F:
    """The ``MODEL`` argument: a Python model file (existence is checked by the loader, exit code 3)."""
    return click.argument("model_file", metavar="MODEL", type=click.Path(dir_okay=True))(fn)


def format_option(*choices: str) -> Callable[[F], F]:
    """``--format`` with the given choices; the first is the default."""
    return click.option("--format", "output_format", type=click.Choice(list(choices)), default=choices[0],
                        show_default=True,
                        help="table: for people; json: only JSON on stdout (schema in the README).")


def seed_option(fn: F) -> F:
    """``--seed``: seeds gradscope's generator before the model file runs."""
    return click.option("--seed", type=int, default=0, show_default=True,
                        help="Seed gradscope's random generator before loading MODEL.")(fn)


def threshold_options(fn: F) -> F:
    """``--max-norm`` and ``--min-norm``: exploding / vanishing gradient limits."""
    fn = click.option("--min-norm", type=click.FloatRange(min=0), default=None,
                      help="Vanishing limit for a parameter's gradient norm "
                           "[default: 1e-4 x the largest parameter gradient norm].")(fn)
    return click.option("--max-norm", type=click.FloatRange(min=0), default=None,
                        help="Exploding limit for a parameter's gradient norm [default: 1000].")(fn)
