"""A module output that takes part in backward but gets no gradient (the unused half of a
``split``): both engines call its tensor hooks with None, and no monitor may trip over it."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gradscope as gs
from gradscope.monitor.clip import ModuleGradientClipper
from gradscope.monitor.monitors import BackwardNonFiniteTracer, GradientMonitor


def _library(engine: str):
    return pytest.importorskip("torch") if engine == "torch" else gs


def _model(T, nonfinite: bool):
    class Halves(T.nn.Module):
        def forward(self, x):
            return (x * 2.0).split(3, dim=-1)  # made by a node inside the call: tensor hooks on both

    class Net(T.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = T.nn.Linear(4, 6)
            self.halves = Halves()
            self.head = T.nn.Linear(3, 1)

        def forward(self, x):
            used, _unused = self.halves(self.fc(x))
            if nonfinite:
                used = T.sqrt(used * 0.0)  # sqrt'(0) = inf: the first non-finite gradients
            return self.head(used).sum()

    T.manual_seed(0)
    net = Net()
    with T.no_grad():
        for index, parameter in enumerate(net.parameters()):
            parameter.copy_(T.tensor(np.linspace(-1, 1, parameter.numel(), dtype=np.float32).reshape(
                tuple(parameter.shape)) * (index + 1)))
    return net, T.tensor(np.linspace(-2, 2, 20, dtype=np.float32).reshape(5, 4))


@pytest.mark.parametrize("engine", ["gradscope", "torch"])
def test_gradient_monitor_counts_only_the_gradient_that_arrived(engine):
    T = _library(engine)
    net, x = _model(T, nonfinite=False)
    with GradientMonitor(net) as monitor:
        net(x).backward()
    records = {record.name: record for record in monitor.module_records()}
    halves = records["halves"]
    # grad_output is the gradient of the used half only; grad_input spreads it over fc's output
    head_weight = net.head.weight.detach().numpy().reshape(-1)
    expected = math.sqrt(5 * float(np.sum(head_weight.astype(np.float64) ** 2)))
    assert halves.grad_output_norm == pytest.approx(expected, rel=1e-5)
    assert halves.grad_input_norm == pytest.approx(2 * expected, rel=1e-5)
    assert records["fc"].grad_output_norm == pytest.approx(2 * expected, rel=1e-5)


@pytest.mark.parametrize("engine", ["gradscope", "torch"])
def test_backward_tracer_and_clipper_ignore_the_missing_gradient(engine):
    T = _library(engine)
    net, x = _model(T, nonfinite=True)
    with BackwardNonFiniteTracer(net) as tracer:
        loss = net(x)
        tracer.watch(loss)
        loss.backward()
    assert tracer.node == "SqrtBackward0" and tracer.kind == "nan"  # (0 / 0 where a head weight is 0)
    net, x = _model(T, nonfinite=False)
    with ModuleGradientClipper(net, 1.0):
        net(x).backward()
    assert all(parameter.grad is not None for parameter in net.parameters())
