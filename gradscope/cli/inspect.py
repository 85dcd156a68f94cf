"""``gradscope inspect MODEL``: one forward and backward pass, a per-layer gradient table."""
from __future__ import annotations

from pathlib import Path

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.options import (debug_option, engine_option, format_option, model_argument, seed_option,
                                   threshold_options)


@click.command("inspect")
@model_argument
@click.option("--step", type=click.IntRange(min=0), default=0, show_default=True,
              help="Use batch(STEP) instead of batch(0).")
@format_option("table", "json")
@click.option("--save", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Also export the table view to an .svg or .html file.")
@threshold_options
@seed_option
@engine_option
@debug_option
@click.pass_obj
def inspect_command(app: App, model_file: str, step: int, output_format: str, save: str | None,
                    max_norm: float | None, min_norm: float | None, seed: int) -> None:
    """Run one forward and backward pass of MODEL and show how the gradient flows.

    For every module (in forward order): grad_output and grad_input norms; for every parameter:
    gradient norm, mean, std, abs max, fraction of zeros, non-finite count, parameter norm and
    grad/param ratio, with a log10 bar; then the total gradient norm and the findings
    (non-finite, no gradient, dead, vanishing, exploding). Exits 1 when there are error findings.

    \b
    Examples:
      gradscope inspect sample_models/mlp.py
      gradscope inspect sample_models/deep_sigmoid.py --step 3 --save report.html
      gradscope inspect model.py --format json | jq .total_grad_norm
    """
    from gradscope.cli.common import thresholds_from
    from gradscope.loading import load_model_file
    from gradscope.monitor.analysis import has_errors
    from gradscope.monitor.inspect import inspect_model

    if save is not None and Path(save).suffix.lower() not in (".svg", ".html", ".htm"):
        app.abort(f"--save {save}: use a .svg or .html file name", ExitCode.USAGE)
    workload = load_model_file(model_file, seed=seed, engine=app.engine)
    report = inspect_model(workload, step=step, thresholds=thresholds_from(max_norm=max_norm, min_norm=min_norm))
    if output_format == "json":
        from gradscope.render.data import inspect_to_dict

        app.echo_json(inspect_to_dict(report))
    else:
        from gradscope.render.tables import inspect_view

        app.out.print(inspect_view(report))
    if save is not None:
        from gradscope.cli.common import export_view
        from gradscope.render.tables import inspect_view

        export_view(inspect_view(report), save, title=f"gradscope inspect {model_file}")
        app.note(f"saved {save}")
    app.exit(ExitCode.FINDINGS if has_errors(report.findings) else ExitCode.OK)
