"""``gradscope clip MODEL --max X``: gradient norms per parameter before and after clipping."""
from __future__ import annotations

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.options import debug_option, engine_option, format_option, model_argument, seed_option


@click.command("clip")
@model_argument
@click.option("--max", "max_value", type=click.FloatRange(min=0), required=True,
              help="The clipping limit: a norm (--mode norm) or an absolute value (--mode value).")
@click.option("--mode", type=click.Choice(["norm", "value"]), default="norm", show_default=True,
              help="norm: rescale to a 2-norm of at most MAX; value: clamp every entry to [-MAX, MAX].")
@click.option("--scope", type=click.Choice(["global", "module"]), default="global", show_default=True,
              help="global: clip parameter gradients after backward (clip_grad_norm_ / clip_grad_value_); "
                   "module: clip each module's grad_input in a global full backward hook.")
@click.option("--steps", type=click.IntRange(min=1), default=1, show_default=True,
              help="Training steps to run with clipping; the last one is reported.")
@click.option("--lr", type=click.FloatRange(min=0), default=0.01, show_default=True,
              help="Learning rate of the default SGD optimizer (a model's make_optimizer wins).")
@format_option("table", "json")
@seed_option
@engine_option
@debug_option
@click.pass_obj
def clip(app: App, model_file: str, max_value: float, mode: str, scope: str, steps: int, lr: float,
         output_format: str, seed: int) -> None:
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
    from gradscope.cli.common import quiet_numpy
    from gradscope.loading import load_model_file
    from gradscope.monitor.clip import clip_model

    workload = load_model_file(model_file, seed=seed, engine=app.engine)
    with quiet_numpy():
        report = clip_model(workload, max_value, mode=mode, scope=scope, steps=steps, lr=lr)
    if output_format == "json":
        from gradscope.render.data import clip_to_dict

        app.echo_json(clip_to_dict(report))
    else:
        from gradscope.render.tables import clip_view

        app.out.print(clip_view(report))
    app.exit(ExitCode.OK)
