"""``Engine.trace_nonfinite_ops`` on both engines: every operation whose output holds NaN/Inf is
recorded in order, and ``OpTrace.origin(tensor)`` names the one that made the first NaN/Inf a
tensor holds, whatever the line layout (``log(x).mean()`` on one line: ``LogBackward0``)."""
from __future__ import annotations

import sys
from typing import Any

import pytest

import gradscope as gs
from gradscope.engines import get_engine
from gradscope.monitor.monitors import ForwardNonFiniteTracer


@pytest.fixture(params=["gradscope", "torch"])
def lib(request: pytest.FixtureRequest) -> Any:
    return gs if request.param == "gradscope" else pytest.importorskip("torch")


def _engine(lib: Any) -> Any:
    return get_engine("gradscope" if lib is gs else "torch")


def _line(marker: str) -> int:
    source = open(__file__).read().splitlines()
    return next(number for number, text in enumerate(source, 1) if marker in text and "_line(" not in text)


def test_one_line_log_mean_is_blamed_on_log(lib) -> None:
    x = lib.tensor([1.0, -1.0, 2.0], requires_grad=True)
    previous = sys.getprofile()
    with _engine(lib).trace_nonfinite_ops() as trace:
        loss = lib.log(x).mean()  # one line: log makes the NaN, mean passes it on
    assert sys.getprofile() is previous
    assert [output.node for output in trace.outputs] == ["LogBackward0", "MeanBackward0"]
    assert (trace.node, trace.kind) == ("LogBackward0", "nan")
    origin = trace.origin(loss)
    assert origin is trace.outputs[0] and origin.grad_fn is loss.grad_fn.next_functions[0][0]
    assert origin.frames[-1][0] != __file__  # the operation's own frame is innermost ...
    assert (__file__, _line("one line: log makes the NaN")) in origin.frames  # ... called from this line


def test_a_masked_nan_is_not_the_origin_of_a_later_one(lib) -> None:
    x = lib.tensor([1.0, -1.0, 2.0], requires_grad=True)
    with _engine(lib).trace_nonfinite_ops() as trace:
        safe = lib.where(x > 0, lib.log(x), lib.zeros_like(x))  # log's NaN does not get through
        ratio = (safe * 0.0) / 0.0
    assert trace.node == "LogBackward0"
    assert trace.origin(safe) is None  # finite: no recorded operation made it
    assert trace.origin(ratio).node == "DivBackward0"


def test_nothing_recorded_when_everything_is_finite(lib) -> None:
    x = lib.tensor([1.0, 2.0], requires_grad=True)
    with _engine(lib).trace_nonfinite_ops() as trace:
        y = lib.log(x).sum()
    assert trace.outputs == [] and trace.op is None and trace.node is None and trace.frames == []
    assert trace.origin(y) is None


def test_the_origin_is_found_through_module_backward_hooks(lib) -> None:
    class Log(lib.nn.Module):
        def forward(self, h):
            return lib.log(h).sum(1)

    module = Log()
    module.register_full_backward_hook(lambda *args: None)  # its output goes through an identity node
    x = lib.tensor([[1.0, -1.0]], requires_grad=True)
    with _engine(lib).trace_nonfinite_ops() as trace:
        out = module(x)
    assert out.grad_fn.name() == "BackwardHookFunctionBackward"
    assert trace.origin(out).node == "LogBackward0"


def test_forward_tracer_names_the_operation_of_a_one_line_module(lib) -> None:
    class Head(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = lib.nn.Parameter(lib.ones(2))

        def forward(self, h):
            safe = lib.where(h > 0, lib.log(h), lib.zeros_like(h))  # masked: not the origin
            return (lib.log(-h * self.scale) + safe).mean(1)

    model = lib.nn.Sequential(Head())
    with ForwardNonFiniteTracer(model, engine=_engine(lib)) as tracer:
        model(lib.tensor([[1.0, -2.0]], requires_grad=True))
    assert (tracer.module, tracer.node, tracer.kind) == ("0", "LogBackward0", "nan")
    first, second = tracer.ops.outputs[:2]
    assert first.node == second.node == "LogBackward0"
    assert tracer.op is second  # the second log, not the masked first one
    assert tracer.op.tensor.grad_fn is tracer.op.grad_fn
