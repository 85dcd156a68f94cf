"""``gradscope inspect MODEL``: one forward and backward pass, a per-layer gradient table."""
from __future__ import annotations

from typing import Any

import click

from gradscope.cli.app import ExitCode
from gradscope.cli.options import (debug_option, engine_option, format_option, model_argument, seed_option,
                                   threshold_options)
from gradscope.cli.settings import option
from gradscope.cli.view_options import layers_option
from gradscope.cli.waivers import ignore_option


@click.command("inspect")
@model_argument
@option("step", "Use batch(STEP) instead of batch(0).", default=0)
@format_option("table", "json")
@option("save", "Also export the table view to an .svg or .html file.")
@layers_option
@threshold_options
@ignore_option
@seed_option
@engine_option
@debug_option
@click.pass_context
def inspect_command(ctx: click.Context, **_: Any) -> None:
    """Run one forward and backward pass of MODEL and show how the gradient flows.

    For every module (in forward order): grad_output and grad_input norms; for every parameter:
    gradient norm, mean, std, abs max, fraction of zeros, non-finite count, parameter norm and
    grad/param ratio, with a log10 bar; then the total gradient norm and the findings
    (non-finite, no gradient, dead, vanishing, exploding). Exits 1 when there are error findings.

    \b
    Examples:
      gradscope inspect sample_models/mlp.py
      gradscope inspect sample_models/deep_sigmoid.py --step 3 --save report.html
      gradscope inspect model.py --layers 'encoder.*' --format json | jq .total_grad_norm
    """
    from gradscope.cli.common import thresholds_from
    from gradscope.cli.startup import start
    from gradscope.monitor.analysis import has_errors
    from gradscope.monitor.inspect import inspect_model

    from gradscope.cli.waivers import read_waivers

    run = start(ctx, config_only=["min_ratio"])
    save = run.output("save", suffixes=(".svg", ".html", ".htm"))
    waivers = read_waivers(run)
    layers = run["layers"] or ()
    workload = run.load_model()
    thresholds = thresholds_from(max_norm=run["max_norm"], min_norm=run["min_norm"], min_ratio=run["min_ratio"])
    report = inspect_model(workload, step=run["step"], thresholds=thresholds, waivers=waivers)
    app = run.app
    if ctx.params["output_format"] == "json":
        from gradscope.render.data import inspect_to_dict

        app.echo_json(inspect_to_dict(report, layers))
    else:
        from gradscope.render.tables import inspect_view

        app.out.print(inspect_view(report, layers))
    if save is not None:
        from gradscope.cli.common import export_view
        from gradscope.render.tables import inspect_view

        view = inspect_view(report, layers)
        if run.write(save, lambda path: export_view(view, path, title=f"gradscope inspect {workload.label}")):
            app.note(f"saved {save.label}")
    run.exit(ExitCode.FINDINGS if has_errors(report.findings) else ExitCode.OK)
