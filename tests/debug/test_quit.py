"""quit aborts cleanly: the pass stops, every hook is gone, the model is as it was before."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

import gradscope as gs
from gradscope.debug import DebuggerQuit, DebuggerShell, TextPresenter, breakpoint_on, run_debug_step

from tests.debug.conftest import Mlp, NanBackward, global_hook_counts, grads, workload


def _state(model) -> tuple:
    return ({n: p._data.copy() for n, p in model.named_parameters()}, grads(model))


def _assert_same(model, before: tuple) -> None:
    values, old_grads = before
    for name, param in model.named_parameters():
        np.testing.assert_array_equal(param._data, values[name])
        if old_grads[name] is None:
            assert param.grad is None, name
        else:
            np.testing.assert_array_equal(param.grad._data, old_grads[name])


def _all_nodes(loss) -> list:
    seen, stack = [], [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.append(node)
        stack.extend(child for child, _ in node.next_functions)
    return seen


@pytest.mark.parametrize("commands, conditions", [
    ("quit", ()),                                  # at the start point
    ("step; step; step; quit", ()),                # in the middle of backward
    ("quit", ("module fc1 post",)),                # after fc1's parameters accumulated
    ("scale 3; continue; quit", ("module act post", "module fc1 post")),  # after an edit
    ("print model.fc1.weight._data.fill(7); quit", ("module fc2",)),       # the user changed a value
    ("quit", ("forward module act",)),             # in the forward pass
    ("finish; quit", ("module fc2",)),             # after backward finished
    ("step; step", ()),                            # commands ran out in the middle: same as quit
])
def test_quit_restores_the_model_and_removes_every_hook(commands: str, conditions: tuple) -> None:
    model, loss = workload(Mlp)
    for param in model.parameters():
        param.grad = gs.full(param.shape, 0.5)
    before = _state(model)
    hooks = global_hook_counts()
    losses = []

    def compute():
        losses.append(loss())
        return losses[-1]

    shell = DebuggerShell(TextPresenter(io.StringIO()), commands=commands.split(";"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run_debug_step(model, compute, shell, conditions=list(conditions)) == "quit"
    _assert_same(model, before)
    assert global_hook_counts() == hooks
    assert all(p._hooks in (None, {}) for p in model.parameters())
    if losses:  # the identity nodes of module backward hooks keep theirs (made at forward time)
        for node in _all_nodes(losses[0]):
            post_hooks = node._extras.post_hooks if node._extras is not None else None
            assert not any("DebugSession" in hook.__qualname__ for hook in (post_hooks or {}).values())


def test_quit_aborts_backward_in_a_training_loop() -> None:
    model, loss = workload(Mlp)
    out = io.StringIO()
    session = breakpoint_on(model, "module act post", commands="continue; zero; quit", stdout=out)
    loss().backward()                       # pass 1: stops at act, continue
    first = grads(model)
    with pytest.raises(DebuggerQuit):
        loss().backward()                   # pass 2: zero, then quit
    assert not session.attached
    for name, value in grads(model).items():
        np.testing.assert_array_equal(value, first[name])
    assert "(gradscope) quit" in out.getvalue()


def test_breakpoint_on_without_terminal_reports_and_finishes(monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    model, loss = workload(NanBackward)
    out = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with breakpoint_on(model, "nan", stdout=out):
            loss().backward()
            loss().backward()
    text = out.getvalue()
    assert text.count("> stopped at root (SqrtRelu) · post") == 2
    assert text.count("(gradscope) finish") == 2
    assert "first non-finite gradient of this pass: produced by SqrtBackward0 in root" in text


def test_breakpoint_on_runs_again_in_every_pass_and_detaches() -> None:
    model, loss = workload(Mlp)
    out = io.StringIO()
    session = breakpoint_on(model, "module fc2", commands=["where", "continue"] * 3, stdout=out)
    try:
        for _ in range(3):
            loss().backward()
    finally:
        session.detach()
    assert out.getvalue().count("backward, pre point of fc2 (Linear)") == 3
    reference, reference_loss = workload(Mlp)
    for _ in range(3):
        reference_loss().backward()
    for name, value in grads(model).items():
        np.testing.assert_array_equal(value, grads(reference)[name])
    loss().backward()                       # detached: no stop, no output
    assert out.getvalue().count("(gradscope)") == 6
