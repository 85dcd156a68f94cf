"""The autograd graph: owners, parameter names, shapes; tree lines, DOT and rich drawing."""
from __future__ import annotations

import io

from rich.console import Console

from gradscope.debug import trace_graph
from gradscope.debug.graph import node_label, tree_lines
from gradscope.render.debug import graph_to_dot, render_graph

from tests.debug.conftest import Mlp, Unrolled, workload


def _graph(cls: type = Mlp):
    model, loss = workload(cls)
    return trace_graph(model, loss)


def test_nodes_have_owner_shapes_and_parameter_names() -> None:
    graph = _graph()
    by_label = {node_label(node): node for node in graph.nodes}
    assert graph.nodes[graph.roots[0]].name == "MeanBackward0"
    assert by_label["AddmmBackward0 [4, 2]"].module == "fc2"
    assert by_label["AddmmBackward0 [4, 5]"].module == "fc1"
    assert by_label["TanhBackward0 [4, 5]"].module == "act"
    assert by_label["MulBackward0 [4, 5]"].module == "act"
    assert by_label["AccumulateGrad fc1.weight [5, 3]"].module == "fc1"
    assert by_label["AccumulateGrad fc2.bias [2]"].parameter == "fc2.bias"
    assert by_label["PowBackward0 [4, 2]"].module is None
    assert all(node.state == "unknown" for node in graph.nodes)
    assert graph.hidden_hook_nodes == 0


def test_shared_parameters_are_drawn_once() -> None:
    graph = _graph(Unrolled)
    lines = tree_lines(graph)
    weights = [line for line in lines if line.node.parameter == "cell.weight"]
    assert [line.repeat for line in weights] == [False, True, True]
    owners = {node.module for node in graph.nodes if node.name == "AddmmBackward0"}
    assert owners == {"cell", "cell[1]", "cell[2]", "head"}


def test_depth_limit() -> None:
    lines = tree_lines(_graph(), max_depth=2)
    assert max(line.depth for line in lines) == 2
    assert lines[-1].hidden_inputs > 0


def test_dot() -> None:
    dot = graph_to_dot(_graph())
    assert dot.startswith('digraph "gradscope" {')
    assert 'label="fc1"' in dot and 'label="act"' in dot
    assert '[label="AccumulateGrad fc1.weight [5, 3]", shape=ellipse];' in dot
    node_count = dot.count("shape=box") + dot.count("shape=ellipse")
    assert node_count == len(_graph().nodes)
    assert dot.count(" -> ") == sum(len(node.inputs) for node in _graph().nodes)
    assert dot.rstrip().endswith("}")


def test_rich_tree() -> None:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(render_graph(_graph(), title="graph of the MLP"))
    text = console.file.getvalue()
    assert text.startswith("graph of the MLP\n└── MeanBackward0 []")
    assert "AddmmBackward0 [4, 5] · fc1" in text
    assert "AccumulateGrad fc2.weight [2, 5] · fc2" in text
