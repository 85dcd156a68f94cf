"""Custom ``autograd.Function``: forward/backward, ctx, apply, multiple outputs, errors."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradscope as gs


def f32(data: Any) -> np.ndarray:
    return np.asarray(data, dtype=np.float32)


def make_functions(T: Any, log: list) -> dict:
    """The custom Functions used below, built for backend ``T``; they record into ``log``."""

    class Square(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            log.append(["forward", T.is_grad_enabled()])
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            log.append(["backward", grad, T.is_grad_enabled()])
            return 2.0 * x * grad

    class ScaleShift(T.autograd.Function):
        """y = x * w + shift, with ``shift`` a python float; checks needs_input_grad and ctx attributes."""

        @staticmethod
        def forward(ctx, x, w, shift):
            ctx.save_for_backward(x, w)
            ctx.shift = shift
            log.append(["needs_input_grad", list(ctx.needs_input_grad)])
            return x * w + shift

        @staticmethod
        def backward(ctx, grad):
            x, w = ctx.saved_tensors
            log.append(["shift", ctx.shift, list(ctx.needs_input_grad)])
            grad_x = grad * w if ctx.needs_input_grad[0] else None
            grad_w = grad * x if ctx.needs_input_grad[1] else None
            return grad_x, grad_w, None

    class TwoOutputs(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0, x * 3.0

        @staticmethod
        def backward(ctx, grad_double, grad_triple):
            log.append(["grads", grad_double, grad_triple])
            return grad_double * 2.0 + grad_triple * 3.0

    class ExpSavesOutput(T.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            result = x.exp()
            ctx.save_for_backward(result)
            return result

        @staticmethod
        def backward(ctx, grad):
            (result,) = ctx.saved_tensors
            return grad * result

    return {"Square": Square, "ScaleShift": ScaleShift, "TwoOutputs": TwoOutputs,
            "ExpSavesOutput": ExpSavesOutput}


def test_apply_forward_backward(same_as_torch) -> None:
    def scenario(T):
        log: list = []
        Square = make_functions(T, log)["Square"]
        x = T.tensor(f32([1.0, -2.0, 3.0]), requires_grad=True)
        y = Square.apply(x)
        log.append([y, y.requires_grad, y.grad_fn.name(), y.is_leaf])
        (y * T.tensor(f32([1.0, 2.0, 3.0]))).sum().backward()
        log.append(x.grad)
        return log

    log = same_as_torch(scenario)
    assert log[0] == ["forward", False]
    assert log[1] == [[1.0, 4.0, 9.0], True, "SquareBackward", False]
    assert log[2] == ["backward", [1.0, 2.0, 3.0], False]
    assert log[3] == [2.0, -8.0, 18.0]


def test_needs_input_grad_and_ctx_attributes(same_as_torch) -> None:
    def scenario(T):
        log: list = []
        ScaleShift = make_functions(T, log)["ScaleShift"]
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        w = T.tensor(f32([3.0, 4.0]))
        y = ScaleShift.apply(x, w, 0.5)
        y.sum().backward()
        log += [y, x.grad, w.grad]
        return log

    log = same_as_torch(scenario)
    assert log[0] == ["needs_input_grad", [True, False, False]]
    assert log[1] == ["shift", 0.5, [True, False, False]]
    assert log[2:] == [[3.5, 8.5], [3.0, 4.0], None]


def test_next_functions_of_custom_node(same_as_torch) -> None:
    def scenario(T):
        ScaleShift = make_functions(T, [])["ScaleShift"]
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        w = T.tensor(f32([3.0, 4.0]), requires_grad=True)
        y = ScaleShift.apply(x.exp(), w, 0.5)
        return [(n.name() if n is not None else None, i) for n, i in y.grad_fn.next_functions]

    log = same_as_torch(scenario)
    assert log[:2] == [["ExpBackward0", 0], ["torch::autograd::AccumulateGrad", 0]]


def test_multiple_outputs(same_as_torch) -> None:
    def scenario(T):
        log: list = []
        TwoOutputs = make_functions(T, log)["TwoOutputs"]
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        double, triple = TwoOutputs.apply(x)
        log.append([double, triple, double.grad_fn is triple.grad_fn])
        (double * triple).sum().backward()
        log.append(x.grad)
        x.grad = None
        double, triple = TwoOutputs.apply(x)
        double.sum().backward()
        log.append(x.grad)
        return log

    log = same_as_torch(scenario)
    assert log[0] == [[2.0, 4.0], [3.0, 6.0], True]
    assert log[2] == [12.0, 24.0]
    assert log[3] == ["grads", [1.0, 1.0], [0.0, 0.0]]
    assert log[4] == [2.0, 2.0]


def test_saving_the_output(same_as_torch) -> None:
    def scenario(T):
        ExpSavesOutput = make_functions(T, [])["ExpSavesOutput"]
        x = T.tensor(f32([0.0, 1.0]), requires_grad=True)
        ExpSavesOutput.apply(x).sum().backward()
        return x.grad

    np.testing.assert_allclose(same_as_torch(scenario), [1.0, np.e], rtol=1e-5)


def test_saved_input_modified_in_place_raises() -> None:
    Square = make_functions(gs, [])["Square"]
    x = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    h = x * 1.0
    y = Square.apply(h)
    h.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_second_backward_of_custom_function_needs_retain_graph() -> None:
    Square = make_functions(gs, [])["Square"]
    x = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    y = Square.apply(x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(RuntimeError, match="(?i)second time"):
        y.backward()


def test_no_graph_without_grad_inputs_or_under_no_grad() -> None:
    Square = make_functions(gs, [])["Square"]
    y = Square.apply(gs.tensor(f32([1.0, 2.0])))
    assert not y.requires_grad and y.grad_fn is None
    x = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    with gs.no_grad():
        y = Square.apply(x)
    assert not y.requires_grad and y.grad_fn is None


def test_custom_function_inside_larger_graph_with_hooks(same_as_torch) -> None:
    def scenario(T):
        log: list = []
        Square = make_functions(T, log)["Square"]
        x = T.tensor(f32([0.5, -1.0]), requires_grad=True)
        h = x.tanh()
        h.register_hook(lambda g: log.append(["hook:h", g]))
        y = Square.apply(h)
        y.register_hook(lambda g: log.append(["hook:y", g]))
        (y * 3.0).sum().backward()
        log.append(x.grad)
        return log

    same_as_torch(scenario)


def test_wrong_number_of_gradients_raises() -> None:
    class Bad(gs.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            return x * w

        @staticmethod
        def backward(ctx, grad):
            return grad

    x = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    w = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    with pytest.raises(RuntimeError, match="(?i)number of gradients"):
        Bad.apply(x, w).sum().backward()


def test_wrong_gradient_shape_raises() -> None:
    class BadShape(gs.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, grad):
            return gs.ones(3)

    x = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    with pytest.raises(RuntimeError, match="BadShapeBackward"):
        BadShape.apply(x).sum().backward()
    assert x.grad is None


def test_custom_function_passes_gradcheck() -> None:
    Square = make_functions(gs, [])["Square"]
    x = gs.tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
    assert gs.autograd.gradcheck(Square.apply, (x,))
