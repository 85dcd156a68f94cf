"""Options shared by several commands (each one declared in :mod:`gradscope.cli.settings`)."""
from __future__ import annotations

from typing import Any, Callable

import click

from gradscope.cli.app import App
from gradscope.cli.settings import option

F = Callable[..., Any]


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.ensure_object(App).debug = True
    return value


def debug_option(fn: F) -> F:
    """``--debug``: full tracebacks for model and internal errors (also accepted before the command)."""
    return click.option("--debug", is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                        help="Show full tracebacks for model and internal errors.")(fn)


def engine_option(fn: F) -> F:
    """``--engine gradscope|torch`` (config key ``engine``): require the model to run on this engine."""
    from gradscope.cli.settings import option

    return option("engine", "Require this engine; by default the model's class decides "
                            "(a torch.nn.Module runs on PyTorch).")(fn)


#: The paragraph that every command taking MODEL ends its help with.
MODEL_HELP = ("MODEL is a Python file that defines `model` (an nn.Module, or `build_model()` returning one), "
              "`batch(step)` returning (inputs, targets) (or `inputs` and `targets`), and `loss_fn(output, "
              "targets)` (or `compute_loss(model, batch)`); optionally `make_optimizer(parameters)`. Without "
              "MODEL, `model = \"...\"` in [tool.gradscope] of pyproject.toml names it.")


def model_argument(fn: F) -> F:
    """The ``MODEL`` argument: a Python model file, or ``model`` in ``[tool.gradscope]`` when left out
    (existence is checked by the loader, exit code 3). Apply it right below ``@click.command``: it
    ends the command's help with :data:`MODEL_HELP`."""
    import inspect

    fn.__doc__ = f"{inspect.cleandoc(fn.__doc__ or '')}\n\n{MODEL_HELP}"
    return click.argument("model_file", metavar="MODEL", required=False)(fn)


def format_option(*choices: str) -> Callable[[F], F]:
    """``--format`` with the given choices; the first is the default."""
    return click.option("--format", "output_format", type=click.Choice(list(choices)), default=choices[0],
                        show_default=True,
                        help="table: for people; json: only JSON on stdout (schema in docs/json-and-exit-codes.md).")


def seed_option(fn: F) -> F:
    """``--seed``: seeds gradscope's generator (and torch's, for a torch model file) before the model
    file runs."""
    return option("seed", "Seed gradscope's random generator (and torch's, for a torch model file) "
                  "before loading MODEL "
                  "(-2**63 .. 2**64-1; negative seeds as in torch.manual_seed).", default=0)(fn)


def threshold_options(fn: F) -> F:
    """``--max-norm`` and ``--min-norm``: exploding / vanishing gradient limits."""
    fn = option("min_norm", "Vanishing limit for a parameter's gradient norm "
                "[default: 1e-4 x the largest parameter gradient norm].")(fn)
    return option("max_norm", "Exploding limit for a parameter's gradient norm", default=1000.0)(fn)

