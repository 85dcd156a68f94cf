"""``gradscope replay BUNDLE MODEL``: run the failing step saved by ``watch`` again, exactly."""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import click

from gradscope.cli.app import ExitCode
from gradscope.cli.options import debug_option, engine_option, format_option, model_argument, seed_option


@click.command("replay")
@click.argument("bundle", type=click.Path(dir_okay=False))
@model_argument
@format_option("table", "json")
@seed_option
@engine_option
@debug_option
@click.pass_context
def replay(ctx: click.Context, bundle: str, **_: Any) -> None:
    """Reproduce the step stored in BUNDLE (written by `watch --nan/--inf`) on MODEL.

    Restores the parameters, buffers, optimizer state, batch and random generator state saved
    before the failing step, runs that step again and reports where the non-finite value
    started, in the same format as `watch` (schema gradscope.watch/1). Exits 1 when the step
    produces a non-finite value again, 0 when it does not.

    \b
    Examples:
      gradscope watch sample_models/nan_backward.py --steps 5 --nan --bundle nan.npz
      gradscope replay nan.npz sample_models/nan_backward.py
      gradscope replay nan.npz sample_models/nan_backward.py --format json
    """
    from gradscope.cli.common import naming_the_bundle, quiet_numpy
    from gradscope.cli.startup import start
    from gradscope.monitor.bundle_format import read_bundle
    from gradscope.monitor.watch import replay as replay_bundle
    from gradscope.render.tables import watch_line, watch_summary

    run = start(ctx)
    path = os.path.abspath(bundle)
    read_bundle(path, label=bundle)
    workload = run.load_model()
    with quiet_numpy(), naming_the_bundle(bundle, workload.label):
        report = dataclasses.replace(replay_bundle(workload, path), bundle=None)  # replay writes no bundle
    app = run.app
    if ctx.params["output_format"] == "json":
        from gradscope.render.data import watch_to_dict

        app.echo_json(watch_to_dict(report))
        app.err.print(watch_summary(report), soft_wrap=not app.err_wraps)
    else:
        for record in report.history:
            app.out.print(watch_line(record), markup=False, soft_wrap=True)
        app.out.print(watch_summary(report))
    if report.status == "ok":
        app.note(f"step {report.history[0].step} of {bundle} ran without a non-finite value: not reproduced")
        run.exit(ExitCode.OK)
    run.exit(ExitCode.FINDINGS)
