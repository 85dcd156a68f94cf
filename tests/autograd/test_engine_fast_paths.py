"""Behaviour the engine's shortcuts must keep, compared with torch: leaf accumulators run
without the general path when they have no hooks, node post-hooks share one set of argument
tensors, and single-input nodes hand their hooks a tuple aligned with ``next_functions``."""
from __future__ import annotations

from typing import Any

import numpy as np

X = np.array([0.5, -1.0, 2.0], dtype=np.float32)
W = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], dtype=np.float32)


def test_leaves_given_one_gradient_array_get_separate_grads(same_as_torch) -> None:
    def scenario(T):
        a = T.tensor(X, requires_grad=True)
        b = T.tensor(X * 2, requires_grad=True)
        (a + b).sum().backward()  # one array reaches both accumulators
        a.grad.mul_(10)
        first = [a.grad.clone(), b.grad.clone()]
        (a + b).sum().backward()
        return first + [a.grad, b.grad]

    assert same_as_torch(scenario) == [[10.0] * 3, [1.0] * 3, [11.0] * 3, [2.0] * 3]


def test_leaf_grad_from_a_transposed_gradient_owns_its_memory(same_as_torch) -> None:
    def scenario(T):
        w = T.tensor(W, requires_grad=True)
        x = T.tensor(X, requires_grad=True)
        (w.t() * x[:, None]).sum().backward()  # the weight's gradient arrives as a transpose
        grad = w.grad
        x.grad.zero_()
        grad_before = grad.clone()
        (w.t() * x[:, None]).sum().backward()
        return [grad_before, w.grad, grad.is_contiguous(), x.grad]

    got = same_as_torch(scenario)
    assert got[2] is True


def test_accumulation_into_existing_grad_and_post_accumulate_hook(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(X, requires_grad=True)
        y = T.tensor(X, requires_grad=True)
        y.register_post_accumulate_grad_hook(lambda t: log.append(t.grad.clone()))
        for _ in range(2):
            (x * y).sum().backward()
        return [x.grad, y.grad] + log

    x = X.tolist()
    assert same_as_torch(scenario) == [[2 * v for v in x], [2 * v for v in x], x, [2 * v for v in x]]


def test_node_post_hooks_see_the_same_tensors_until_one_replaces_them(same_as_torch) -> None:
    def scenario(T):
        log: list[Any] = []
        x = T.tensor(X, requires_grad=True)
        y = (x * 3.0).sin()
        node = y.grad_fn
        seen = []
        node.register_hook(lambda grad_inputs, grad_outputs: seen.append((grad_inputs, grad_outputs)))
        node.register_hook(lambda grad_inputs, grad_outputs: seen.append((grad_inputs, grad_outputs)))
        node.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0] * 2,))
        node.register_hook(lambda grad_inputs, grad_outputs: seen.append((grad_inputs, grad_outputs)))
        y.sum().backward()
        (first_in, first_out), (second_in, second_out), (third_in, third_out) = seen
        log.append(first_in[0] is second_in[0] and first_out[0] is second_out[0])
        log.append(third_out[0] is first_out[0])
        log += [first_in[0], third_in[0], x.grad]
        return log

    got = same_as_torch(scenario)
    assert got[:2] == [True, True]
    np.testing.assert_allclose(got[3], 2 * np.asarray(got[2]), atol=1e-4)  # (logs keep 5 decimals)
    np.testing.assert_allclose(got[4], 3 * np.asarray(got[3]), atol=1e-4)


def test_post_hook_of_a_scalar_operand_node_gets_one_slot_per_next_function(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(X, requires_grad=True)
        y = x * 2.0
        z = y.tanh()
        y.grad_fn.register_hook(lambda grad_inputs, grad_outputs: log.append(
            [len(y.grad_fn.next_functions), len(grad_inputs), grad_inputs[1] is None]))
        z.grad_fn.register_hook(lambda grad_inputs, grad_outputs: log.append(
            [len(z.grad_fn.next_functions), len(grad_inputs)]))
        z.sum().backward()
        return log

    assert same_as_torch(scenario) == [[1, 1], [2, 2, True]]


def test_second_backward_after_modifying_a_freed_saved_output_reports_the_freed_graph(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        y = x.tanh()  # saves its output, whose version is first looked at below
        out = y.sum()
        out.backward()
        with T.no_grad():
            y.add_(1.0)
        try:
            out.backward()
        except RuntimeError as error:
            return ["backward through the graph a second time" in str(error)]
        return ["no error"]

    assert same_as_torch(scenario) == [True]
