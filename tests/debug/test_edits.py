"""Gradient edits at the prompt change the rest of backward exactly as the same edit applied by
a plain hook does (a global module hook, or a node hook)."""
from __future__ import annotations

import re
import warnings
from typing import Callable

import numpy as np
import pytest

import gradscope as gs
from gradscope.nn.modules import module as module_file

from tests.debug.conftest import Mlp, grads, script, workload


def _scale(factor: float) -> Callable:
    return lambda grads_: tuple(None if g is None else g * factor for g in grads_)


def _clip_norm(limit: float) -> Callable:
    def edit(grads_: tuple) -> tuple:
        total = float(np.sqrt(sum(float(np.sum(g._data.astype(np.float64) ** 2)) for g in grads_ if g is not None)))
        factor = limit / (total + 1e-6)
        return tuple(None if g is None else (g * factor if factor < 1 else g) for g in grads_)
    return edit


def _clip_value(limit: float) -> Callable:
    return lambda grads_: tuple(None if g is None else gs.clamp(g, -limit, limit) for g in grads_)


def _zero(grads_: tuple) -> tuple:
    return tuple(None if g is None else gs.zeros_like(g) for g in grads_)


def _compose(*edits: Callable) -> Callable:
    def edit(grads_: tuple) -> tuple:
        for each in edits:
            grads_ = each(grads_)
        return grads_
    return edit


EDITS = [
    ("scale 0.5", _scale(0.5)),
    ("clip 0.05", _clip_norm(0.05)),
    ("clip 100", _clip_norm(100.0)),
    ("clip 0.01 value", _clip_value(0.01)),
    ("zero", _zero),
    ("set (grad_input or grad_output)[0] * 3", _scale(3.0)),
    ("scale 2; clip 0.1", _compose(_scale(2.0), _clip_norm(0.1))),
]


def _plain_run(phase: str, module_path: str, edit: Callable) -> dict:
    model, loss = workload(Mlp)
    target = model.get_submodule(module_path)
    if phase == "post":
        handle = module_file.register_module_full_backward_hook(
            lambda m, grad_input, grad_output: edit(grad_input) if m is target else None)
    else:
        handle = module_file.register_module_full_backward_pre_hook(
            lambda m, grad_output: edit(grad_output) if m is target else None)
    with handle, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loss().backward()
    return grads(model)


@pytest.mark.parametrize("phase, module_path", [("post", "act"), ("pre", "fc2"), ("pre", "act")])
@pytest.mark.parametrize("command, edit", EDITS, ids=[e[0] for e in EDITS])
def test_module_edit_matches_a_plain_hook(phase: str, module_path: str, command: str, edit: Callable) -> None:
    outcome, text, model = script(Mlp, f"{command}; finish", f"module {module_path} {phase}")
    assert outcome == "finished"
    assert "error" not in text, text
    expected = _plain_run(phase, module_path, edit)
    for name, value in grads(model).items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)


def test_node_edit_matches_a_plain_node_hook() -> None:
    outcome, text, model = script(Mlp, "scale 0.25; finish", "node TanhBackward0")
    assert outcome == "finished" and "error" not in text
    reference, loss = workload(Mlp)
    value = loss()
    stack, node = [value.grad_fn], None
    while stack:
        node = stack.pop()
        if node.name() == "TanhBackward0":
            break
        stack.extend(child for child, _ in node.next_functions if child is not None)
    node.register_hook(lambda grad_inputs, grad_outputs: _scale(0.25)(grad_inputs))
    value.backward()
    for name, grad in grads(model).items():
        np.testing.assert_array_equal(grad, grads(reference)[name], err_msg=name)


def test_table_shows_the_effect_upstream() -> None:
    _, text, _ = script(Mlp, "grads; zero; grads; continue; table; quit", "module act post", "module fc1 post")
    first, second = text.split("(gradscope) grads\n")[1:3]
    assert re.search(r"grad_input\[0\]\s+\[4, 5\]\s+[1-9.]", first)
    assert re.search(r"grad_input\[0\] \(edited\)\s+\[4, 5\]\s+0\s+0\s+0\s+0", second)
    assert "note: edited here: zero" in second
    table = text.split("(gradscope) table\n")[1]
    assert re.search(r"act\s+Tanh2\s+done\s+[\d.]+\s+0\s+-\s+0\s+post: zero", table)
    assert re.search(r"fc1\s+Linear\s+current \(post\)\s+0\s+-\s+0\s+0", table)


def test_set_checks_shapes_and_entries() -> None:
    _, text, _ = script(Mlp, "set gs.ones(3); set (1, 2); set np.ones((4, 5)); grads; quit", "module act post")
    assert "error: the new gradient has shape [3], expected [4, 5]" in text
    assert "error: grad_input has 1 entries; the value has 2" in text
    assert re.search(r"grad_input\[0\] \(edited\)\s+\[4, 5\]\s+4\.472\s+1\s+1", text)


def test_table_at_the_stop_shows_the_edited_value() -> None:
    _, text, _ = script(Mlp, "table; scale 0.5; table; quit", "module act post")
    before, after = text.split("(gradscope) table\n")[1:3]
    norm = float(re.search(r"^act\s+Tanh2\s+current \(post\)\s+[\d.]+\s+([\d.]+)", before, re.M).group(1))
    edited = float(re.search(r"^act\s+Tanh2\s+current \(post\)\s+[\d.]+\s+([\d.]+)", after, re.M).group(1))
    assert edited == pytest.approx(norm / 2, rel=1e-3)
    assert re.search(r"^act .* post: scale 0\.5$", after, re.M)
