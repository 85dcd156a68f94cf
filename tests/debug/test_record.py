"""The session's records and what is built from them, without a session: a pass's bookkeeping
(PassRecord), the gradient edits at a stop (GradientEdit) and the views' builders."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs
from gradscope.debug.edits import GradientEdit
from gradscope.debug.errors import DebugCommandError
from gradscope.debug.record import PassRecord, Stop
from gradscope.debug.tracking import Call
from gradscope.debug.views import banner, grads_view
from gradscope.engines import engine_of


class Node:
    """A stand-in autograd node: a name and the edges to the nodes it sends gradients to."""

    def __init__(self, name: str, *next_functions: tuple) -> None:
        self._name = name
        self.next_functions = next_functions

    def name(self) -> str:
        return self._name


def _call(path: str, index: int = 0, parent: Call | None = None, **fields) -> Call:
    return Call(index=index, path=path, module=gs.nn.Linear(2, 2), occurrence=0, parent=parent,
                source="model.py:1", **fields)


def _engine():
    return engine_of(gs.nn.Linear(1, 1))


def test_a_call_is_done_when_its_last_pending_node_ran_then_its_parent() -> None:
    inner_node, outer_node = Node("MmBackward0"), Node("AddBackward0")
    outer = _call("", nodes={inner_node, outer_node}, has_grad_outputs=True)
    inner = _call("fc", index=1, parent=outer, nodes={inner_node}, has_grad_outputs=True)
    record = PassRecord()
    assert record.start_call(outer) and record.start_call(inner)
    assert not record.start_call(inner)                     # a second output node of the same call
    assert list(record.calls_done_by(outer_node, outer)) == []
    assert list(record.calls_done_by(inner_node, inner)) == [inner, outer]
    assert record.unfinished_calls() == [inner, outer]     # newest first; none finished yet
    record.finish_call(inner)
    assert record.unfinished_calls() == [outer]


def test_a_call_not_started_is_never_done() -> None:
    node = Node("MmBackward0")
    call = _call("fc", nodes={node})
    record = PassRecord()
    assert list(record.calls_done_by(node, call)) == []


def test_grad_input_is_what_the_calls_nodes_sent_and_an_edit_replaces_it() -> None:
    receiver = Node("AccumulateGrad")
    sender, other = Node("MmBackward0", (receiver, 0)), Node("MulBackward0", (receiver, 0))
    call = _call("fc", nodes={sender}, input_edges=[(receiver, 0), None], has_grad_inputs=True)
    record = PassRecord()
    record.watch_edges(call)
    record.note_sent(sender, (np.array([1.0, 2.0]),), None, np.asarray)
    record.note_sent(other, (np.array([10.0, 10.0]),), None, np.asarray)   # not the call's node
    grad_input = record.finish_call(call)
    np.testing.assert_array_equal(grad_input[0], [1.0, 2.0])
    assert grad_input[1] is None
    assert record.state(call).grad_input_norm == pytest.approx(np.sqrt(5.0))
    changed = record.edit_grad_input(call, grad_input, [np.array([0.0, 0.0]), None])
    assert changed == [(receiver, 0)]
    # the receiving node gets the other node's part plus the edit
    np.testing.assert_array_equal(record.edges[(receiver, 0)].total(np.array([11.0, 12.0])), [10.0, 10.0])


def _pre_stop(*arrays) -> Stop:
    return Stop("pre", _call("fc"), None, "step", {"grad_output": list(arrays)}, editable="grad_output")


def test_scale_edits_the_stop_and_notes_it_on_the_call() -> None:
    stop, record = _pre_stop(np.ones((2, 2)), None), PassRecord()
    GradientEdit(stop, record, _engine()).scale(2)
    np.testing.assert_array_equal(stop.groups["grad_output"][0], np.full((2, 2), 2.0))
    assert stop.groups["grad_output"][1] is None
    assert stop.edited and stop.edits == ["scale 2"]
    state = record.state(stop.call)
    assert state.edits == ["pre: scale 2"]
    assert state.grad_output_norm == pytest.approx(4.0)


def test_clip_by_norm_and_by_value() -> None:
    stop = _pre_stop(np.array([3.0, 4.0]))
    GradientEdit(stop, PassRecord(), _engine()).clip(1.0)
    assert np.linalg.norm(stop.groups["grad_output"][0]) == pytest.approx(1.0, rel=1e-5)
    stop = _pre_stop(np.array([3.0, -4.0, 0.5]))
    GradientEdit(stop, PassRecord(), _engine()).clip(1.0, "value")
    np.testing.assert_array_equal(stop.groups["grad_output"][0], [1.0, -1.0, 0.5])
    with pytest.raises(DebugCommandError, match="clip mode must be"):
        GradientEdit(stop, PassRecord(), _engine()).clip(1.0, "max")


def test_set_keeps_shape_and_dtype_and_refuses_other_shapes() -> None:
    stop = _pre_stop(np.ones((2, 3), dtype=np.float32))
    edit = GradientEdit(stop, PassRecord(), _engine())
    edit.set("0.5", lambda expression: float(expression))
    assert stop.groups["grad_output"][0].dtype == np.float32
    np.testing.assert_array_equal(stop.groups["grad_output"][0], np.full((2, 3), 0.5))
    with pytest.raises(DebugCommandError, match=r"has shape \[4\], expected \[2, 3\]"):
        edit.set("x", lambda expression: np.zeros(4))


@pytest.mark.parametrize("stop, message", [
    (None, "no gradient to edit here"),
    (Stop("post", None, None, "step", {"grad_input": [np.ones(2)]}), "whose grad_input has already been passed on"),
    (Stop("pre", None, None, "step", {"grad_output": [None]}, editable="grad_output"), "all None here"),
])
def test_nothing_to_edit(stop: Stop | None, message: str) -> None:
    with pytest.raises(DebugCommandError, match=message):
        GradientEdit(stop, PassRecord(), _engine()).zero()


def test_banner_and_grads_title_from_a_stop() -> None:
    start = Stop("start", None, None, "step", {})
    assert banner(start, "start", loss=1.5, loss_kind="nan").startswith(
        "stopped before backward (loss = 1.5): forward done, backward not started · the loss is already nan")
    assert banner(None, "finished") == "backward finished"
    stop = Stop("node", None, Node("LogBackward0"), "breakpoint 1 (node LogBackward0)",
                {"grad_input": [np.ones(2)]}, editable="grad_input")
    text = banner(stop, "backward")
    assert text == ("stopped at LogBackward0 in (outside the model's modules) · node: node ran · "
                    "breakpoint 1 (node LogBackward0)")
    view = grads_view(stop, "backward")
    assert view.title == text.removeprefix("stopped at ")
    with pytest.raises(DebugCommandError, match="no gradients at this point"):
        grads_view(start, "start")
