"""Scripted debugging sessions on small models: what each command shows, and stepping order."""
from __future__ import annotations

import re

import numpy as np

from tests.debug.conftest import Mlp, NanBackward, Unrolled, grads, script, workload


def _stops(transcript: str) -> list[str]:
    return [line[2:] for line in transcript.splitlines() if line.startswith("> ")]


def test_without_breakpoints_it_stops_before_backward() -> None:
    outcome, text, model = script(Mlp, "where; continue")
    assert outcome == "finished"
    assert _stops(text)[0].startswith("stopped before backward (loss = ")
    assert "before backward\n  modules: 0 done, 4 pending" in text
    assert "reason:  forward done, backward not started" in text
    assert _stops(text)[-1] == "backward finished"
    assert all(g is not None for g in grads(model).values())


def test_step_visits_every_module_pre_then_post_in_backward_order() -> None:
    _, text, _ = script(Mlp, ";".join(["step"] * 9))
    places = [re.match(r"stopped at (\S+) \(\w+\) · (\w+)", s).groups() for s in _stops(text)[1:-1]]
    assert places == [("model", "pre"), ("fc2", "pre"), ("fc2", "post"), ("act", "pre"), ("act", "post"),
                      ("fc1", "pre"), ("fc1", "post"), ("model", "post")]


def test_next_steps_over_nested_modules() -> None:
    _, text, _ = script(Mlp, "next; step; next", "module model")
    assert _stops(text) == ["stopped at model (Mlp) · pre: grad_output known, before its backward · breakpoint 1 "
                            "(module model)",
                            "stopped at model (Mlp) · post: grad_input known, after its backward · next",
                            "backward finished"]
    _, text, _ = script(Mlp, "step; next; next; quit", "module model")
    assert [s.split(":")[0] for s in _stops(text)] == [
        "stopped at model (Mlp) · pre", "stopped at fc2 (Linear) · pre", "stopped at fc2 (Linear) · post",
        "stopped at act (Tanh2) · pre"]


def test_where_at_a_post_point() -> None:
    _, text, _ = script(Mlp, "where; quit", "module fc2 post")
    where = text.split("(gradscope) where\n")[1]
    assert where.startswith("backward, post point of fc2 (Linear)")
    assert "node:    AddmmBackward0 (produced grad_input)" in where
    assert "modules: 1 done, 3 pending" in where
    assert re.search(r"source:  .*conftest\.py:\d+", where)
    assert "reason:  breakpoint 1 (module fc2 and post)" in where


def test_first_layer_post_point_waits_for_its_parameters() -> None:
    _, text, _ = script(Mlp, "where; params; quit", "module fc1 post")
    assert "note:    no input of this module requires grad: grad_input is None" in text
    params = text.split("(gradscope) params\n")[1]
    assert re.search(r"fc1\.weight\s+\[5, 3\]\s+accumulated\s+\d", params)
    assert re.search(r"fc1\.bias\s+\[5\]\s+accumulated\s+\d", params)


def test_nan_breakpoint_stops_where_it_started() -> None:
    outcome, text, model = script(NanBackward, "where; grads; table; quit", "nan")
    assert outcome == "quit"
    assert _stops(text)[0] == "stopped at root (SqrtRelu) · post: grad_input known, after its backward · " \
                              "breakpoint 1 (nan)"
    assert "first non-finite gradient of this pass: produced by SqrtBackward0 in root (created at " in text
    assert "conftest.py" in text.split("produced by SqrtBackward0")[1].splitlines()[0]
    grads_text = text.split("(gradscope) grads\n")[1].split("(gradscope) table")[0]
    assert re.search(r"grad_output\[0\]\s+\[4, 5\]\s+[\d.]+\s", grads_text)
    assert re.search(r"grad_input\[0\]\s+\[4, 5\]\s+nan\s+nan\s+nan\s+\d+", grads_text)
    table = text.split("(gradscope) table\n")[1]
    assert re.search(r"root\s+SqrtRelu\s+current \(post\)\s+[\d.]+\s+nan", table)
    assert re.search(r"fc2\s+Linear\s+done", table)
    assert re.search(r"fc1\s+Linear\s+pending", table)
    assert all(g is None for g in grads(model).values())


def test_node_breakpoint() -> None:
    _, text, _ = script(NanBackward, "where; grads; quit", "node SqrtBackward0")
    assert _stops(text)[0] == "stopped at SqrtBackward0 in root · node: node ran · breakpoint 1 (node SqrtBackward0)"
    assert "node:    SqrtBackward0 (just ran)" in text
    assert re.search(r"source:  .*conftest\.py:\d+ in forward", text)


def test_forward_breakpoint_stops_in_forward() -> None:
    _, text, _ = script(Mlp, "where; grads; step; continue", "forward module act")
    stops = _stops(text)
    assert stops[0] == "stopped at act (Tanh2) · forward: output computed · breakpoint 1 (forward and module act)"
    assert "forward, output of act (Tanh2)" in text
    assert "modules: 2 done, 1 pending" in text
    assert "node:    MulBackward0 (created)" in text
    assert re.search(r"output\[0\]\s+\[4, 5\]", text)
    assert stops[1].startswith("stopped at fc2 (Linear) · forward")
    assert stops[-1] == "backward finished"


def test_norm_breakpoint() -> None:
    _, text, _ = script(Mlp, "quit", "grad_input norm > 1e9")
    assert _stops(text) == ["backward finished"]
    _, text, _ = script(Mlp, "quit", "grad_input norm > 0")
    assert _stops(text)[0].startswith("stopped at fc2 (Linear) · post")


def test_repeated_calls_are_told_apart() -> None:
    _, text, _ = script(Unrolled, "table; step; quit", "module cell post")
    assert _stops(text)[0].startswith("stopped at cell[2] (Linear) · post")
    assert _stops(text)[1].startswith("stopped at cell[1] (Linear) · pre")
    table = text.split("(gradscope) table\n")[1]
    assert re.findall(r"^(\S+)\s+(\S+)\s+(current \(post\)|\w+)", table, re.M)[1:6] == [
        ("model", "Unrolled", "running"), ("cell", "Linear", "pending"), ("cell[1]", "Linear", "pending"),
        ("cell[2]", "Linear", "current (post)"), ("head", "Linear", "done")]


def test_breakpoint_management() -> None:
    _, text, _ = script(Mlp, "break nan; break module fc*; break bogus; disable 2; breakpoints; delete 1; "
                             "enable; breakpoints; delete 7; break module nothing; quit")
    assert "breakpoint 1: nan (checked at pre/post points)" in text
    assert "breakpoint 2: module fc* (checked at pre points)" in text
    assert "error: unknown word 'bogus'" in text
    listing = text.split("(gradscope) breakpoints\n")[1]
    assert re.search(r"2\s+module fc\*\s+pre\s+no\s+0", listing)
    assert "error: no breakpoint '7'" in text
    assert "warning: no module matches 'nothing'" in text


def test_graph_from_loss_to_current_point() -> None:
    _, text, _ = script(Mlp, "graph; graph all; quit", "module act post")
    frontier = text.split("(gradscope) graph\n")[1].split("(gradscope) graph all")[0]
    lines = frontier.splitlines()
    assert lines[0] == "MeanBackward0 [] ✓"
    assert any("MulBackward0 [4, 5] · act ✓ ◀ here" in line for line in lines)
    assert any("AddmmBackward0 [4, 5] · fc1 ○" in line for line in lines)
    assert "AccumulateGrad fc1.weight" not in frontier
    assert "AccumulateGrad fc2.weight [2, 5] · fc2 ✓" in frontier
    everything = text.split("(gradscope) graph all\n")[1]
    assert "AccumulateGrad fc1.weight [5, 3] · fc1 ○" in everything


def test_print_and_errors() -> None:
    _, text, _ = script(Mlp, "print grad_output[0].shape; print module; print 1/0; print undefined_name; "
                             "scale x; frobnicate; quit", "module fc2")
    assert "gradscope.Size([4, 2])" in text
    assert "Linear(in_features=5, out_features=2, bias=True)" in text
    assert "error: ZeroDivisionError: division by zero" in text
    assert "error: NameError: name 'undefined_name' is not defined" in text
    assert "error: usage: scale F (a number, got 'x')" in text
    assert "error: unknown command 'frobnicate' (type help)" in text


def test_edits_are_refused_where_nothing_can_be_edited() -> None:
    _, text, _ = script(Mlp, "zero; continue; zero; quit", "module fc1 post")
    assert "error: no gradient to edit at a start point" not in text
    assert "error: grad_input is all None here: nothing to edit" in text


def test_finish_shows_the_table_and_later_commands_see_the_end() -> None:
    outcome, text, model = script(Mlp, "finish; table; step", "module fc2")
    assert outcome == "finished"
    after_finish = text.split("(gradscope) finish\n")[1]
    assert re.search(r"fc1\s+Linear\s+done", after_finish)
    assert "error: the backward pass has finished" in text
    reference, loss = workload(Mlp)
    loss().backward()
    for name, value in grads(model).items():
        np.testing.assert_array_equal(value, grads(reference)[name])


def test_help_lists_every_command() -> None:
    _, text, _ = script(Mlp, "help; help clip; quit")
    for command in ("break", "delete", "disable", "enable", "breakpoints", "step", "next", "continue", "finish",
                    "where", "graph", "grads", "print", "table", "params", "scale", "clip", "zero", "set",
                    "quit"):
        assert re.search(rf"^{command}\b", text, re.M), command
    assert "clip X [norm|value]: clip the gradient here" in text
