"""``gradscope check MODEL``: gradient sanity checks for CI (exit 1 when one fails)."""
from __future__ import annotations

from typing import Any

import click

from gradscope.cli.app import ExitCode
from gradscope.cli.waivers import ignore_option
from gradscope.cli.options import debug_option, engine_option, format_option, model_argument, seed_option
from gradscope.cli.settings import option


@click.command("check")
@model_argument
@option("steps", "Training steps the checks look at, and the length of --overfit.", default=5)
@option("max_norm", "Exploding limit for a parameter's gradient norm.", default=1000.0)
@option("min_norm", "Vanishing limit for a parameter's gradient norm "
        "[default: 1e-4 x the largest parameter gradient norm].")
@option("overfit", "Also check that the loss goes down when training on batch 0 for --steps steps.",
        secondary="--no-overfit")
@option("gradcheck", "Also compare gradients with finite differences on a float64 copy of the model.",
        secondary="--no-gradcheck")
@option("lr", "Learning rate of the default SGD optimizer.", default=0.01)
@format_option("table", "json", "junit", "github")
@ignore_option
@seed_option
@engine_option
@debug_option
@click.pass_context
def check(ctx: click.Context, **_: Any) -> None:
    """Run gradient sanity checks on MODEL; exit 0 when all pass, 1 when any fails.

    Checks: loss and gradients finite; every parameter receives a gradient (unused layers,
    .detach() bugs); no parameter with an identically zero gradient (dead units); no vanishing
    or exploding gradient norms; the optimizer step changes the parameters; with --overfit, the
    loss goes down on one batch; with --gradcheck, gradients match finite differences.
    Defaults come from [tool.gradscope] in the nearest pyproject.toml (any option, plus
    min_ratio and model); flags win. --ignore GLOB[:KIND] accepts findings (e.g.
    conv1.bias:vanishing); a bias that only feeds a BatchNorm is a note, not a failure.

    \b
    Examples:
      gradscope check sample_models/mlp.py --overfit
      gradscope check model.py --max-norm 100 --format junit > gradscope-junit.xml
      gradscope check model.py --format github   # annotations in GitHub Actions
      gradscope check model.py --ignore 'encoder.*:no_grad' 
    """
    from gradscope.cli.common import progress_on_terminal, training_steps, thresholds_from
    from gradscope.cli.startup import start
    from gradscope.cli.waivers import read_waivers
    from gradscope.monitor.check import CheckOptions, check_model

    run = start(ctx, config_only=["min_ratio"])
    thresholds = thresholds_from(max_norm=run["max_norm"], min_norm=run["min_norm"], min_ratio=run["min_ratio"])
    options = CheckOptions(steps=run["steps"], lr=run["lr"], thresholds=thresholds, overfit=run["overfit"],
                           gradcheck=run["gradcheck"], waivers=read_waivers(run))
    workload = run.load_model()
    app = run.app
    with training_steps(), progress_on_terminal(app.err) as progress:
        report = check_model(workload, options, progress=progress)
    output_format = ctx.params["output_format"]
    if output_format == "json":
        from gradscope.render.data import check_to_dict

        app.echo_json(check_to_dict(report))
    elif output_format == "junit":
        from gradscope.render.ci import check_to_junit

        app.write(check_to_junit(report))
    elif output_format == "github":
        from gradscope.monitor.definitions import ModuleDefinitions
        from gradscope.monitor.tracing import relative_source
        from gradscope.render.ci import check_to_github

        defined = ModuleDefinitions(workload.model, workload.path)
        places = {}
        for finding in report.findings:
            found = defined(finding.module)
            if found is not None:
                path, _, line = relative_source(*found).rpartition(":")
                places[finding.module or ""] = (path, int(line))
        app.write(check_to_github(report, run.model_file, places))
    else:
        from gradscope.render.tables import check_view

        app.out.print(check_view(report))
    run.exit(ExitCode.OK if report.passed else ExitCode.FINDINGS)
