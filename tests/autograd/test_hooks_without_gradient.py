"""Hooks of tensors that take part in backward but get no gradient: PyTorch calls them with None.

A node that runs calls the tensor hooks of every one of its outputs, with None for an output
that got no gradient (the unused half of a ``split``, an input a custom Function's backward
returns None for); a leaf's accumulator likewise calls the leaf's hooks and post-accumulate-grad
hooks. Such a hook may not return a gradient. Each scenario runs on both engines.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradscope as gs


def f32(data: Any) -> np.ndarray:
    return np.asarray(data, dtype=np.float32)


def grad_or_none(grad: Any) -> Any:
    return "None" if grad is None else grad


def test_unused_split_outputs_get_none_in_registration_order(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1, 2, 3, 4, 5, 6]), requires_grad=True)
        a, b, c = x.split(2)
        c.register_hook(lambda g: log.append(["c", grad_or_none(g)]))
        a.register_hook(lambda g: log.append(["a", grad_or_none(g)]))
        b.register_hook(lambda g: log.append(["b", grad_or_none(g)]))
        (a * 3.0).sum().backward()
        return log + [x.grad]

    assert same_as_torch(scenario) == [["c", "None"], ["a", [3.0, 3.0]], ["b", "None"],
                                       [3.0, 3.0, 0.0, 0.0, 0.0, 0.0]]


def test_unbind_calls_every_output_hook(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([[1, 2], [3, 4], [5, 6]]), requires_grad=True)
        rows = x.unbind(0)
        for index, row in enumerate(rows):
            row.register_hook(lambda g, index=index: log.append([index, grad_or_none(g)]))
        rows[1].sum().backward()
        return log

    assert same_as_torch(scenario) == [[0, "None"], [1, [1.0, 1.0]], [2, "None"]]


def test_none_from_a_custom_function_reaches_node_tensor_and_leaf_hooks(same_as_torch) -> None:
    def scenario(T):
        log = []

        class FirstOnly(T.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a * 1.0 + b * 1.0

            @staticmethod
            def backward(ctx, grad):
                return grad, None

        x = T.tensor(f32([1, 2]), requires_grad=True)
        y = T.tensor(f32([3, 4]), requires_grad=True)
        h = y * 2.0
        y.register_hook(lambda g: log.append(["y", grad_or_none(g)]))
        y.register_post_accumulate_grad_hook(lambda p: log.append(["y accumulated", grad_or_none(p.grad)]))
        h.register_hook(lambda g: log.append(["h", grad_or_none(g)]))
        FirstOnly.apply(x, h).sum().backward()
        return log + [x.grad, grad_or_none(y.grad)]

    assert same_as_torch(scenario) == [["h", "None"], ["y", "None"], ["y accumulated", "None"], [1.0, 1.0],
                                       "None"]


def test_a_leaf_without_gradient_keeps_its_earlier_grad(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1, 2, 3, 4]), requires_grad=True)
        x.sum().backward()
        a, b = x.split(2)
        b.register_hook(lambda g: log.append(["b", grad_or_none(g)]))
        (a * 2.0).sum().backward()
        return log + [x.grad]

    assert same_as_torch(scenario) == [["b", "None"], [3.0, 3.0, 1.0, 1.0]]


def test_autograd_grad_calls_hooks_of_unused_outputs(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1, 2, 3, 4]), requires_grad=True)
        a, b = x.split(2)
        b.register_hook(lambda g: log.append(["b", grad_or_none(g)]))
        return log + list(T.autograd.grad((a * 2.0).sum(), x))

    assert same_as_torch(scenario) == [["b", "None"], [2.0, 2.0, 0.0, 0.0]]


@pytest.mark.parametrize("engine", ["gradscope", "torch"])
def test_a_hook_may_not_replace_a_missing_gradient(engine) -> None:
    T = pytest.importorskip("torch") if engine == "torch" else gs
    x = T.tensor(f32([1, 2, 3, 4]), requires_grad=True)
    a, b = x.split(2)
    b.register_hook(lambda g: T.ones(2) if g is None else None)
    with pytest.raises(RuntimeError, match="can't replace a None gradient with a non-None value"):
        (a * 2.0).sum().backward()
