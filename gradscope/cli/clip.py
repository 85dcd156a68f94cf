"""``gradscope clip MODEL --max X``: gradient norms per parameter before and after clipping."""
from __future__ import annotations

import math
from typing import Any

import click

from gradscope.cli.app import ExitCode
from gradscope.cli.options import debug_option, engine_option, format_option, model_argument, seed_option
from gradscope.cli.settings import option


@click.command("clip")
@model_argument
@option("max", "The clipping limit: a norm (--mode norm) or an absolute value (--mode value).", required=True)
@option("mode", "norm: rescale to a 2-norm of at most MAX; value: clamp every entry to [-MAX, MAX].",
        default="norm")
@option("scope", "global: clip parameter gradients after backward (clip_grad_norm_ / clip_grad_value_); "
        "module: clip each module's grad_input in a global full backward hook.", default="global")
@option("steps", "Training steps to run with clipping; the last one is reported.", default=1)
@option("lr", "Learning rate of the default SGD optimizer (a model's make_optimizer wins).", default=0.01)
@format_option("table", "json")
@seed_option
@engine_option
@debug_option
@click.pass_context
def clip(ctx: click.Context, **_: Any) -> None:
    """Clip the gradients of MODEL and show each parameter's gradient norm before and after.

    --scope global clips the parameter gradients after backward, like clip_grad_norm_ or
    clip_grad_value_. --scope module clips every module's grad_input inside a global full
    backward hook, so clipping also changes what flows upstream (and compounds through nested
    modules); the "before" column then comes from the same step run without clipping.

    \b
    Examples:
      gradscope clip sample_models/rnn_exploding.py --max 1.0
      gradscope clip sample_models/rnn_exploding.py --max 0.5 --mode value --scope module
      gradscope clip model.py --max 5 --steps 10 --format json
    """
    from gradscope.cli.common import training_steps
    from gradscope.cli.startup import start
    from gradscope.monitor.clip import clip_model

    run = start(ctx)
    workload = run.load_model()
    with training_steps():
        report = clip_model(workload, run["max"], mode=run["mode"], scope=run["scope"], steps=run["steps"],
                            lr=run["lr"])
    app = run.app
    if not math.isfinite(report.total_norm_before):
        kind = "nan" if math.isnan(report.total_norm_before) else "inf"
        app.warn(f"the gradients hold {kind} before clipping; clipping cannot make them finite "
                 f"(find where it starts: gradscope watch {workload.label} --nan --inf)")
    if ctx.params["output_format"] == "json":
        from gradscope.render.data import clip_to_dict

        app.echo_json(clip_to_dict(report))
    else:
        from gradscope.render.tables import clip_view

        app.out.print(clip_view(report))
    run.exit(ExitCode.OK)
