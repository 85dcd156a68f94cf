"""Anomaly mode (``detect_anomaly``) and ``gradcheck``."""
from __future__ import annotations

import inspect
import os
import re
from typing import Any

import numpy as np
import pytest

import gradscope as gs

FILE = os.path.basename(__file__)


def f32(data: Any) -> np.ndarray:
    return np.asarray(data, dtype=np.float32)


def names_location(message: str, line: int) -> bool:
    """Whether ``message`` points at line ``line`` of this file (``file.py:12`` or ``file.py", line 12``)."""
    return re.search(rf"{re.escape(FILE)}\"?(?::|, line ){line}\b", message) is not None


# --------------------------------------------------------------------------------------------------
# detect_anomaly
# --------------------------------------------------------------------------------------------------

def test_nan_in_backward_names_node_and_forward_line() -> None:
    x = gs.tensor(f32([0.0, 1.0]), requires_grad=True)
    with gs.autograd.detect_anomaly():
        line = inspect.currentframe().f_lineno + 1
        root = x.sqrt()
        loss = (root * 0.0).sum()
        with pytest.raises(RuntimeError) as info:
            loss.backward()
    message = str(info.value)
    assert "SqrtBackward0" in message
    assert "nan" in message.lower()
    assert names_location(message, line), message


def test_nan_from_division_names_div_node() -> None:
    a = gs.tensor(f32([0.0, 1.0]), requires_grad=True)
    b = gs.tensor(f32([0.0, 2.0]), requires_grad=True)
    with gs.autograd.detect_anomaly():
        line = inspect.currentframe().f_lineno + 1
        quotient = a / b
        with pytest.raises(RuntimeError) as info:
            quotient.sum().backward()
    assert "DivBackward0" in str(info.value)
    assert names_location(str(info.value), line), str(info.value)


def test_without_anomaly_mode_nan_flows_silently(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([0.0, 1.0]), requires_grad=True)
        (x.sqrt() * 0.0).sum().backward()
        return x.grad

    assert same_as_torch(scenario) == ["nan", 0.0]


def test_nan_in_forward_only_is_not_an_error() -> None:
    x = gs.tensor(f32([-1.0, 1.0]), requires_grad=True)
    with gs.autograd.detect_anomaly():
        y = x.log()
        y.sum().backward()
    assert np.isnan(y.detach().numpy()[0])
    np.testing.assert_allclose(x.grad.numpy(), [-1.0, 1.0])


def test_inf_is_caught_only_with_check_inf() -> None:
    x = gs.tensor(f32([0.0, 1.0]), requires_grad=True)
    with gs.autograd.detect_anomaly():
        x.sqrt().sum().backward()
    assert np.isinf(x.grad.numpy()[0])
    x.grad = None
    with gs.autograd.detect_anomaly(check_inf=True):
        line = inspect.currentframe().f_lineno + 1
        root = x.sqrt()
        with pytest.raises(RuntimeError) as info:
            root.sum().backward()
    assert "SqrtBackward0" in str(info.value)
    assert "inf" in str(info.value).lower()
    assert names_location(str(info.value), line), str(info.value)


def test_anomaly_mode_is_restored() -> None:
    assert not gs.is_anomaly_enabled()
    with pytest.raises(ValueError):
        with gs.autograd.detect_anomaly():
            assert gs.is_anomaly_enabled()
            raise ValueError("boom")
    assert not gs.is_anomaly_enabled()
    gs.autograd.set_detect_anomaly(True)
    try:
        assert gs.is_anomaly_enabled()
    finally:
        gs.autograd.set_detect_anomaly(False)
    assert not gs.is_anomaly_enabled()


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_anomaly_mode_does_not_change_results(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([0.5, 1.5]), requires_grad=True)
        with T.autograd.detect_anomaly():
            (x.exp() * x.tanh()).sum().backward()
        return x.grad

    same_as_torch(scenario)


# --------------------------------------------------------------------------------------------------
# gradcheck
# --------------------------------------------------------------------------------------------------

def f64(data: Any) -> gs.Tensor:
    return gs.tensor(np.asarray(data, dtype=np.float64), requires_grad=True)


@pytest.mark.parametrize("fn,shapes", [
    (lambda a, b: (a * b).sum(), [(2, 3), (2, 3)]),
    (lambda a, b: a @ b, [(2, 3), (3, 2)]),
    (lambda a: a.tanh().softmax(dim=-1), [(2, 3)]),
    (lambda a, b: (a / b, a.exp() * b), [(3,), (3,)]),
    (lambda a: a[[0, 0, 1]].logsumexp(dim=0), [(2, 3)]),
], ids=["mul_sum", "matmul", "tanh_softmax", "two_outputs", "index_logsumexp"])
def test_gradcheck_passes_for_correct_functions(fn, shapes) -> None:
    rng = np.random.default_rng(0)
    inputs = [f64(rng.uniform(0.5, 2.0, size=s)) for s in shapes]
    assert gs.autograd.gradcheck(fn, inputs) is True


def make_wrong_function() -> Any:
    class WrongAtOneElement(gs.autograd.Function):
        """out = sum(a) + sum(b * b); the gradient of b is off by +5 at b[1, 2] only."""

        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(b)
            return a.sum() + (b * b).sum()

        @staticmethod
        def backward(ctx, grad):
            (b,) = ctx.saved_tensors
            offset = np.zeros((2, 3))
            offset[1, 2] = 5.0
            return grad * gs.ones(2, 2, dtype=gs.float64), grad * (2.0 * b + gs.tensor(offset))

    return WrongAtOneElement


def wrong_inputs() -> tuple:
    b = np.array([[0.1, -0.2, 0.3], [0.4, -0.5, 0.75]])
    return f64(np.full((2, 2), 0.5)), f64(b)


def test_gradcheck_raises_for_wrong_gradient() -> None:
    wrong = make_wrong_function()
    with pytest.raises(RuntimeError) as info:
        gs.autograd.gradcheck(wrong.apply, wrong_inputs())
    message = str(info.value)
    assert re.search(r"input\D{0,3}1\b", message), message
    numbers = [float(n) for n in re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", message)]
    assert any(abs(n - 6.5) < 1e-3 for n in numbers), message
    assert any(abs(n - 1.5) < 1e-3 for n in numbers), message


def test_gradcheck_error_names_worst_element_and_both_values() -> None:
    wrong = make_wrong_function()
    with pytest.raises(RuntimeError) as info:
        gs.autograd.gradcheck(wrong.apply, wrong_inputs())
    message = str(info.value)
    assert re.search(r"[\(\[]\s*1\s*,\s*2\s*[\)\]]", message), message
    assert re.search(r"analytic\w*\W+6\.5", message), message
    assert re.search(r"numeric\w*\W+1\.5", message), message


def test_gradcheck_without_raising_returns_false() -> None:
    wrong = make_wrong_function()
    assert gs.autograd.gradcheck(wrong.apply, wrong_inputs(), raise_exception=False) is False


def test_set_detect_anomaly_is_also_a_context_manager_as_in_torch():
    torch = pytest.importorskip("torch")
    for lib, enabled in ((gs, gs.is_anomaly_enabled), (torch, torch.is_anomaly_enabled)):
        assert not enabled()
        with lib.autograd.set_detect_anomaly(True):
            assert enabled()
            with lib.autograd.set_detect_anomaly(False):
                assert not enabled()
            assert enabled()
        assert not enabled()
        assert lib.set_anomaly_enabled(True) is None and enabled()
        lib.set_anomaly_enabled(False)
        assert not enabled()
