"""``gradscope check MODEL``: gradient sanity checks for CI (exit 1 when one fails)."""
from __future__ import annotations

from pathlib import Path

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.options import debug_option, engine_option, format_option, model_argument, seed_option


@click.command("check")
@model_argument
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Training steps the checks look at, and the length of --overfit [default: 5].")
@click.option("--max-norm", type=click.FloatRange(min=0), default=None,
              help="Exploding limit for a parameter's gradient norm [default: 1000].")
@click.option("--min-norm", type=click.FloatRange(min=0), default=None,
              help="Vanishing limit for a parameter's gradient norm "
                   "[default: 1e-4 x the largest parameter gradient norm].")
@click.option("--overfit/--no-overfit", default=None,
              help="Also check that the loss goes down when training on batch 0 for --steps steps.")
@click.option("--gradcheck/--no-gradcheck", default=None,
              help="Also compare gradients with finite differences on a float64 copy of the model.")
@click.option("--lr", type=click.FloatRange(min=0), default=None,
              help="Learning rate of the default SGD optimizer [default: 0.01].")
@format_option("table", "json", "junit", "github")
@seed_option
@engine_option
@debug_option
@click.pass_obj
def check(app: App, model_file: str, steps: int | None, max_norm: float | None, min_norm: float | None,
          overfit: bool | None, gradcheck: bool | None, lr: float | None, output_format: str, seed: int) -> None:
    """Run gradient sanity checks on MODEL; exit 0 when all pass, 1 when any fails.

    Checks: loss and gradients finite; every parameter receives a gradient (unused layers,
    .detach() bugs); no parameter with an identically zero gradient (dead units); no vanishing
    or exploding gradient norms; the optimizer step changes the parameters; with --overfit, the
    loss goes down on one batch; with --gradcheck, gradients match finite differences.
    Defaults come from [tool.gradscope] in the nearest pyproject.toml (keys: steps, lr,
    max_norm, min_norm, min_ratio, overfit, gradcheck); flags win.

    \b
    Examples:
      gradscope check sample_models/mlp.py --overfit
      gradscope check model.py --max-norm 100 --format junit > gradscope-junit.xml
      gradscope check model.py --format github   # annotations in GitHub Actions
    """
    from gradscope.cli.common import quiet_numpy
    from gradscope.cli.config import ConfigError, read_config
    from gradscope.loading import load_model_file
    from gradscope.monitor.analysis import Thresholds
    from gradscope.monitor.check import CheckOptions, check_model

    try:
        config, _, note = read_config(Path.cwd())
    except ConfigError as error:
        app.abort(str(error), ExitCode.USAGE)
    if note:
        app.note(note)
    defaults = CheckOptions()

    def pick(flag, key, default):  # noqa: ANN001, ANN202 - flag > pyproject > default
        return flag if flag is not None else config.get(key, default)

    thresholds = Thresholds(max_norm=pick(max_norm, "max_norm", Thresholds.max_norm),
                            min_norm=pick(min_norm, "min_norm", None),
                            min_ratio=config.get("min_ratio", Thresholds.min_ratio))
    options = CheckOptions(steps=pick(steps, "steps", defaults.steps), lr=pick(lr, "lr", defaults.lr),
                           thresholds=thresholds, overfit=pick(overfit, "overfit", False),
                           gradcheck=pick(gradcheck, "gradcheck", False))
    workload = load_model_file(model_file, seed=seed, engine=app.engine)
    with quiet_numpy():
        report = check_model(workload, options)
    if output_format == "json":
        from gradscope.render.data import check_to_dict

        app.echo_json(check_to_dict(report))
    elif output_format == "junit":
        from gradscope.render.ci import check_to_junit

        click.echo(check_to_junit(report), nl=False)
    elif output_format == "github":
        from gradscope.render.ci import check_to_github

        lines = {f.module or "": workload.module_line(f.module or "") or 1 for f in report.findings}
        click.echo(check_to_github(report, model_file, lines), nl=False)
    else:
        from gradscope.render.tables import check_view

        app.out.print(check_view(report))
    app.exit(ExitCode.OK if report.passed else ExitCode.FINDINGS)
