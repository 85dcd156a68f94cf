"""``gradscope graph MODEL``: the autograd graph of one forward pass, as a tree or DOT."""
from __future__ import annotations

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.options import debug_option, engine_option


@click.command("graph")
@click.argument("model_file", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option("--depth", type=click.IntRange(min=0), default=None,
              help="Draw at most this many levels below the loss (default: all).")
@click.option("--format", "output_format", type=click.Choice(["tree", "dot"]), default="tree", show_default=True,
              help="A tree on the terminal, or Graphviz DOT text.")
@click.option("--step", default=0, show_default=True, type=click.IntRange(min=0),
              help="Run the forward pass on the batch of this step.")
@engine_option
@debug_option
@click.pass_obj
def graph(app: App, model_file: str, depth: int | None, output_format: str, step: int) -> None:
    """Show the autograd graph of one forward pass of MODEL, from the loss down.

    Each node shows its name (e.g. MulBackward0), its output shapes and the module that
    created it; leaves show the parameter's name. Shared nodes are drawn once.

    \b
    Examples:
      gradscope graph sample_models/mlp.py
      gradscope graph model.py --depth 4
      gradscope graph model.py --format dot | dot -Tsvg > graph.svg
    """
    from gradscope.debug import trace_graph
    from gradscope.loading import load_model_file
    from gradscope.render.debug import graph_to_dot, render_graph

    workload = load_model_file(model_file, engine=app.engine)
    batch = workload.batch(step)
    autograd_graph = trace_graph(workload.model, lambda: workload.loss(batch))
    if output_format == "dot":
        click.echo(graph_to_dot(autograd_graph, depth), nl=False)
    else:
        app.out.print(render_graph(autograd_graph, depth, title=f"autograd graph of {model_file} (step {step})"))
    app.exit(ExitCode.OK)
