"""Monitors attach through the global hooks, record the right numbers and always detach."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn
from gradscope.monitor.clip import ModuleGradientClipper
from gradscope.engines import get_engine
from gradscope.monitor.monitors import BackwardNonFiniteTracer, ForwardNonFiniteTracer, GradientMonitor
from gradscope.nn.modules import module as module_file

GLOBAL_DICTS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                "_global_backward_hooks")


def hook_counts() -> tuple[int, ...]:
    return tuple(len(getattr(module_file, name)) for name in GLOBAL_DICTS)


def mlp() -> nn.Module:
    gs.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))


@pytest.mark.parametrize("make", [lambda m: GradientMonitor(m), lambda m: ForwardNonFiniteTracer(m),
                                  lambda m: BackwardNonFiniteTracer(m), lambda m: ModuleGradientClipper(m, 1.0)])
def test_every_monitor_removes_its_hooks_also_on_error(make):
    model = mlp()
    before = hook_counts()
    with make(model):
        assert hook_counts() != before
    assert hook_counts() == before
    with pytest.raises(ZeroDivisionError):
        with make(model):
            raise ZeroDivisionError
    assert hook_counts() == before


def test_gradient_monitor_norms_match_manual_computation():
    model = mlp()
    x = gs.randn(4, 3, requires_grad=True)
    captured = {}
    model[1].register_full_backward_hook(lambda m, gi, go: captured.update(gi=gi[0].numpy().copy(),
                                                                          go=go[0].numpy().copy()))
    with GradientMonitor(model) as monitor:
        model(x).pow(2).sum().backward()
    records = {r.name: r for r in monitor.module_records()}
    assert [r.name for r in monitor.module_records()] == ["", "0", "1", "2"]
    assert records["1"].grad_input_norm == pytest.approx(float(np.linalg.norm(captured["gi"])), rel=1e-5)
    assert records["1"].grad_output_norm == pytest.approx(float(np.linalg.norm(captured["go"])), rel=1e-5)
    assert records[""].grad_input_norm == pytest.approx(float(np.linalg.norm(x.grad.numpy())), rel=1e-5)
    assert all(r.calls == 1 and r.nonfinite == 0 for r in records.values())


def test_gradient_monitor_ignores_modules_outside_the_model_and_sums_calls():
    model = nn.Linear(2, 2)
    loss_module = nn.MSELoss()
    x = gs.randn(3, 2, requires_grad=True)
    with GradientMonitor(model) as monitor:
        loss_module(model(model(x)), gs.zeros(3, 2)).backward()
    (record,) = monitor.module_records()
    assert record.name == "" and record.calls == 2


def test_gradient_monitor_does_not_change_gradients():
    model = mlp()
    x = gs.randn(4, 3)
    model(x).sum().backward()
    plain = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    with GradientMonitor(model):
        model(x).sum().backward()
    for expected, p in zip(plain, model.parameters()):
        np.testing.assert_array_equal(p.grad.numpy(), expected)


class LogModule(nn.Module):
    def forward(self, x):
        shifted = x - 10.0
        return gs.log(shifted)


def test_forward_tracer_finds_origin_line_and_propagation():
    gs.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), LogModule(), nn.Linear(2, 1))
    with gs.no_grad():
        model[0].weight.copy_(gs.eye(2))
        model[0].bias.zero_()
    tracer = ForwardNonFiniteTracer(model, Path(__file__))
    with tracer:
        model(gs.ones(1, 2, requires_grad=True))
    assert tracer.module == "1" and tracer.kind == "nan"
    assert tracer.node == "LogBackward0"
    assert tracer.propagated == ["2"]
    line = next(number for number, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "return gs.log(shifted)" in text)
    assert tracer.source == (__file__, line)


def test_forward_tracer_finite_run_finds_nothing():
    tracer = ForwardNonFiniteTracer(mlp(), Path(__file__))
    with tracer:
        mlp()(gs.randn(2, 3))
    assert not tracer.module_found and tracer.source is None


def test_backward_tracer_finds_module_whose_backward_makes_nan():
    class SqrtModule(nn.Module):
        def forward(self, x):
            return gs.sqrt(x) * 0.0

    class MaskReLU(nn.Module):  # multiplies by its mask, so it passes NaN gradients on (nn.ReLU selects)
        def forward(self, x):
            return x * (x > 0).float()

    model = nn.Sequential(nn.Linear(2, 2), MaskReLU(), SqrtModule(), nn.Linear(2, 1))
    with gs.no_grad():
        model[0].bias.fill_(-100.0)  # exact zeros: sqrt'(0) * 0 = inf * 0 = nan
    tracer = BackwardNonFiniteTracer(model)
    with tracer:
        loss = model(gs.randn(3, 2, requires_grad=True)).sum()
        tracer.watch(loss)
        loss.backward()
    assert tracer.module == "2" and tracer.kind == "nan"
    assert tracer.node == "SqrtBackward0" and tracer.node_module == "2"
    assert "1" in tracer.propagated


def test_module_clipper_clips_what_flows_upstream():
    inner = nn.Sequential(nn.Linear(2, 2))
    model = nn.Sequential(inner)
    x = gs.randn(5, 2, requires_grad=True)
    (model(x) * 100).sum().backward()
    unclipped = float(np.linalg.norm(x.grad.numpy()))
    x.grad = None
    with ModuleGradientClipper(model, 1.0, "norm") as clipper:
        (model(x) * 100).sum().backward()
    assert clipper.clipped >= 1
    assert unclipped > 1.0 and float(np.linalg.norm(x.grad.numpy())) <= 1.0 + 1e-4
    x.grad = None
    with ModuleGradientClipper(model, 0.01, "value"):
        (model(x) * 100).sum().backward()
    assert float(np.abs(x.grad.numpy()).max()) <= 0.01 + 1e-7


def test_node_name_looks_through_backward_hook_identity():
    model = nn.Linear(2, 2)
    engine = get_engine("gradscope")
    with model.register_full_backward_hook(lambda module, grad_input, grad_output: None):
        out = model(gs.randn(1, 2, requires_grad=True))
    assert out.grad_fn.name() == "BackwardHookFunctionBackward"
    assert engine.node_name(out) == "AddmmBackward0"
    assert engine.node_name(gs.ones(2)) is None
    assert math.isfinite(float(out.sum().item()))


def _monitored_records(lib) -> tuple:
    """``GradientMonitor`` records of one backward pass through modules whose calls take each path
    of the monitor's forward post-hook, on the engine of ``lib`` (``gradscope`` or ``torch``), with
    the model, its input and its keyword leaf ``factor``."""
    nn_ = lib.nn

    class Split(nn_.Module):  # two outputs: one made by the node at the inputs, one by a later node
        def forward(self, x):
            doubled = x * 2.0
            return doubled, doubled.tanh()

    class Scale(nn_.Module):  # a keyword tensor argument that is a leaf requiring grad
        def forward(self, x, *, factor):
            return x * factor

    class Net(nn_.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn_.Linear(3, 3)
            self.split = Split()
            self.scale = Scale()
            self.frozen = nn_.Linear(3, 3)
            self.frozen.requires_grad_(False)

        def forward(self, x, factor):
            kept, squashed = self.split(self.fc(x))
            return (self.scale(kept, factor=factor).sum() + self.fc(squashed).pow(2).sum()
                    + self.frozen(x.detach()).sum())

    lib.manual_seed(0)
    model = Net()
    with lib.no_grad():
        for index, parameter in enumerate(model.parameters()):
            parameter.copy_(lib.tensor(np.linspace(-1.0, 1.0, parameter.numel()).reshape(tuple(parameter.shape))
                                       * (index + 1) / 4, dtype=lib.float32))
    x = lib.tensor(np.linspace(-2.0, 2.0, 12).reshape(4, 3), dtype=lib.float32)
    factor = lib.tensor(np.array([0.5, -1.5, 2.0]), dtype=lib.float32, requires_grad=True)
    with GradientMonitor(model, get_engine(lib.__name__)) as monitor:
        model(x, factor).backward()
    return monitor.module_records(), model, x, factor


def test_gradient_monitor_records_match_torch_on_every_call_shape():
    torch = pytest.importorskip("torch")
    ours, theirs = _monitored_records(gs)[0], _monitored_records(torch)[0]
    assert [(r.name, r.type, r.calls, r.nonfinite) for r in ours] == \
        [(r.name, r.type, r.calls, r.nonfinite) for r in theirs] == \
        [("", "Net", 1, 0), ("fc", "Linear", 2, 0), ("split", "Split", 1, 0), ("scale", "Scale", 1, 0),
         ("frozen", "Linear", 1, 0)]
    for mine, reference in zip(ours, theirs):
        for field in ("grad_output_norm", "grad_input_norm"):
            expected = getattr(reference, field)
            assert getattr(mine, field) == (None if expected is None else pytest.approx(expected, rel=1e-5)), \
                (mine.name, field)
    records = {r.name: r for r in ours}
    assert records["frozen"].grad_output_norm is None and records["frozen"].grad_input_norm is None
    assert records["scale"].grad_input_norm is not None  # (the keyword leaf's gradient)


def test_gradient_monitor_records_are_the_norms_of_the_gradients():
    torch = pytest.importorskip("torch")
    records = {r.name: r for r in _monitored_records(gs)[0]}
    _, model, x, factor = _monitored_records(torch)
    # the same computation, written out, with the gradient of every intermediate value
    hidden = model.fc(x)
    doubled = hidden * 2.0
    squashed = doubled.tanh()
    scaled = doubled * factor
    second = model.fc(squashed)
    for value in (hidden, doubled, squashed, scaled, second):
        value.retain_grad()
    factor.grad = None
    (scaled.sum() + second.pow(2).sum()).backward()

    def norm(*tensors):
        return math.sqrt(sum(float((t.double() ** 2).sum()) for t in tensors))

    expected = {"": (1.0, norm(factor.grad)),
                "fc": (norm(hidden.grad, second.grad), norm(squashed.grad)),
                "split": (norm(doubled.grad, squashed.grad), norm(hidden.grad)),
                "scale": (norm(scaled.grad), norm(factor.detach().expand(4, 3), factor.grad))}
    for name, (grad_output, grad_input) in expected.items():
        assert records[name].grad_output_norm == pytest.approx(grad_output, rel=1e-5), name
        assert records[name].grad_input_norm == pytest.approx(grad_input, rel=1e-5), name
