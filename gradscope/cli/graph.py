"""``gradscope graph MODEL``: the autograd graph of one forward pass, as a tree or DOT."""
from __future__ import annotations

import click

from typing import Any

from gradscope.cli.app import ExitCode
from gradscope.cli.options import debug_option, engine_option, model_argument, seed_option
from gradscope.cli.settings import option


@click.command("graph")
@model_argument
@option("depth", "Draw at most this many levels below the loss [default: all].")
@click.option("--format", "output_format", type=click.Choice(["tree", "dot"]), default="tree", show_default=True,
              help="A tree on the terminal, or Graphviz DOT text.")
@option("step", "Run the forward pass on the batch of this step.", default=0)
@seed_option
@engine_option
@debug_option
@click.pass_context
def graph(ctx: click.Context, output_format: str, **_: Any) -> None:
    """Show the autograd graph of one forward pass of MODEL, from the loss down.

    Each node shows its name (e.g. MulBackward0), its output shapes and the module that
    created it; leaves show the parameter's name. Shared nodes are drawn once.

    \b
    Examples:
      gradscope graph sample_models/mlp.py
      gradscope graph model.py --depth 4
      gradscope graph model.py --format dot | dot -Tsvg > graph.svg
    """
    from gradscope.cli.startup import start
    from gradscope.debug import trace_graph
    from gradscope.render.debug import graph_to_dot, render_graph

    run = start(ctx)
    app, depth, step = run.app, run["depth"], run["step"]
    workload = run.load_model(need_parameters=False)
    batch = workload.batch(step)
    autograd_graph = trace_graph(workload.model, lambda: workload.loss(batch))
    if output_format == "dot":
        app.write(graph_to_dot(autograd_graph, depth))
    else:
        app.out.print(render_graph(autograd_graph, depth, title=f"autograd graph of {run.model_file} (step {step})"))
    run.exit(ExitCode.OK)
