"""Anomaly mode as PyTorch reports it (issue 25): a warning when it is turned on, and for any
error raised while backward runs a node (not only NaN/Inf) a warning naming the node with the
traceback of the forward call that created it."""
from __future__ import annotations

import io
import sys
import warnings
from typing import Any

import pytest


def _backward_of_modified_input(T: Any) -> None:
    a = T.randn(5, requires_grad=True)
    d1 = a + 1
    d2 = d1 ** 2  # line of the forward call that the warning must show
    d1 += 1
    T.autograd.grad(d2.sum(), a)


def _messages(caught: list) -> list:
    return [str(w.message) for w in caught]


def test_detect_anomaly_warns_and_names_the_node_of_any_backward_error(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                with T.autograd.detect_anomaly():
                    _backward_of_modified_input(T)
        messages = _messages(caught)
        return [len(messages), "Anomaly Detection has been enabled" in messages[0],
                messages[1].startswith("Error detected in PowBackward0. Traceback of forward call"),
                "d2 = d1 ** 2" in messages[1]]

    assert same_as_torch(scenario) == [2, True, True, True]


def test_error_note_goes_to_stderr_when_warnings_are_errors(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        stderr = io.StringIO()
        with warnings.catch_warnings(record=True) as caught:
            with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                with T.autograd.detect_anomaly():
                    warnings.simplefilter("error")
                    saved, sys.stderr = sys.stderr, stderr
                    try:
                        _backward_of_modified_input(T)
                    finally:
                        sys.stderr = saved
        return [len(caught), "Error detected in PowBackward0" in stderr.getvalue()]

    assert same_as_torch(scenario) == [1, True]


def test_node_created_before_anomaly_mode_has_no_forward_information(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        class Fails(T.autograd.Function):
            @staticmethod
            def forward(ctx: Any, x: Any) -> Any:
                return x.clone()

            @staticmethod
            def backward(ctx: Any, g: Any) -> Any:
                raise ValueError("broken backward")

        out = Fails.apply(T.ones(2, requires_grad=True)).sum()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ValueError, match="broken backward"):
                with T.autograd.detect_anomaly():
                    out.backward()
        notes = [m for m in _messages(caught) if m.startswith("Error detected")]
        return [len(notes), "Error detected in FailsBackward" in notes[0], "No forward pass information" in notes[0]]

    assert same_as_torch(scenario) == [1, True, True]


def test_nan_in_backward_is_raised_and_noted(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with T.autograd.detect_anomaly():
                x = T.tensor([0.0, 1.0], requires_grad=True)
                y = (x * 0).log()
                with pytest.raises(RuntimeError, match="Function 'LogBackward0' returned nan values in its 0th output"):
                    (y * 0).sum().backward()
        notes = [m for m in _messages(caught) if m.startswith("Error detected")]
        return [len(notes), notes[0].startswith("Error detected in LogBackward0")]

    assert same_as_torch(scenario) == [1, True]


def test_set_detect_anomaly_does_not_warn(same_as_torch: Any) -> None:
    def scenario(T: Any) -> list:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with T.autograd.set_detect_anomaly(True):
                (T.ones(2, requires_grad=True) * 2).sum().backward()
        return _messages(caught)

    assert same_as_torch(scenario) == []
