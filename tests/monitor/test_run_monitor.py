"""RunMonitor on its own (no script): steps, names and the pitfalls of real training loops."""
from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest

from gradscope.engines import get_engine
from gradscope.monitor.run import RunMonitor, RunOptions, StopRun


def _monitor(engine_name: str, **options) -> RunMonitor:
    monitor = RunMonitor(RunOptions(**options), main_globals=lambda: {})
    monitor.attach(get_engine(engine_name))
    return monitor


def test_native_names_steps_and_restores_backward():
    import gradscope as gs
    from gradscope import autograd, nn
    from gradscope.autograd import engine

    before = (engine.backward, autograd.backward)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer = gs.optim.SGD(model.parameters(), lr=0.1)
    with _monitor("gradscope", nan=True) as monitor:
        for _ in range(2):
            optimizer.zero_grad()
            loss = model(gs.ones(2, 3)).sum()
            loss.backward()
            optimizer.step()
    assert (engine.backward, autograd.backward) == before
    assert [record.step for record in monitor.history] == [0, 1]
    assert [name for name, _ in monitor.history[0].parameter_norms] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    expected = math.sqrt(sum(float((p.grad * p.grad).sum().item()) for p in model.parameters()))
    assert monitor.history[1].total_grad_norm == pytest.approx(expected, rel=1e-6)


def test_two_models_are_named_by_their_variables():
    import gradscope as gs
    from gradscope import nn

    encoder, decoder = nn.Linear(3, 2), nn.Linear(2, 3)
    optimizer = gs.optim.SGD([*encoder.parameters(), *decoder.parameters()], lr=0.1)
    with RunMonitor(RunOptions(), main_globals=lambda: {"encoder": encoder, "decoder": decoder}) as monitor:
        monitor.attach(get_engine("gradscope"))
        decoder(encoder(gs.ones(1, 3))).sum().backward()
        optimizer.step()
    assert [name for name, _ in monitor.history[0].layer_norms] == ["encoder", "decoder"]


def test_torch_lbfgs_closure_reads_gradients_after_the_step():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=4)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    losses = []

    def closure():
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        losses.append(loss.item())
        return loss

    with _monitor("torch", nan=True, inf=True) as monitor:
        for _ in range(2):
            optimizer.step(closure)
    assert len(monitor.history) == 2
    assert monitor.history[0].loss == pytest.approx(losses[0], rel=1e-6)  # the loss before the step
    last = math.sqrt(sum(float((p.grad ** 2).sum()) for p in model.parameters()))
    assert monitor.history[1].total_grad_norm == pytest.approx(last, rel=1e-5)  # the last closure's gradients


def test_torch_activation_checkpointing_recompute_is_not_a_model_call():
    torch = pytest.importorskip("torch")
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh())
    head = torch.nn.Linear(4, 1)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block, self.head = block, head

        def forward(self, x):
            return self.head(checkpoint(self.block, x, use_reentrant=False))

    model = Model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with _monitor("torch", nan=True) as monitor:
        optimizer.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    names = [name for name, _ in monitor.history[0].parameter_norms]
    assert names == ["block.0.weight", "block.0.bias", "head.weight", "head.bias"]
    assert all(norm is not None and norm > 0 for _, norm in monitor.history[0].parameter_norms)


def test_torch_inplace_relu_and_results_unchanged():
    torch = pytest.importorskip("torch")

    def train(monitored: bool) -> list[float]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(inplace=True), torch.nn.Dropout(0.5),
                                    torch.nn.Linear(8, 1))
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        monitor = _monitor("torch", nan=True, inf=True) if monitored else None
        losses = []
        try:
            for _ in range(3):
                optimizer.zero_grad()
                loss = model(torch.randn(5, 4)).pow(2).mean()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
        finally:
            if monitor is not None:
                monitor.close()
        return losses

    assert train(True) == train(False)


def test_native_stop_raises_a_base_exception_not_caught_by_except_exception():
    import gradscope as gs
    from gradscope import nn

    model = nn.Linear(2, 1)
    caught = False
    with _monitor("gradscope", nan=True) as monitor:
        with pytest.raises(StopRun):
            try:
                model(gs.tensor([[float("nan"), 1.0]])).sum().backward()
            except Exception:  # noqa: BLE001 - what a script might do
                caught = True
    assert not caught
    origin = monitor.origin
    assert origin is not None and origin.node is None and origin.module is None and origin.phase == "forward"
    call_line = next(number for number, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                     if 'model(gs.tensor([[float("nan"), 1.0]]))' in text and "call_line" not in text)
    assert origin.source == f"tests/monitor/test_run_monitor.py:{call_line}"  # the line that called the model with it
    assert origin.detail.endswith("(the data): input 'input', batch element 0 of 1")


def test_torch_gradient_scaler_skipped_step_is_reported_as_skipped_not_as_a_finding():
    torch = pytest.importorskip("torch")
    from torch.amp import GradScaler

    original = GradScaler.__dict__["step"], GradScaler.__dict__["scale"]
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = GradScaler("cpu", init_scale=1024.0)
    losses = []
    with _monitor("torch", nan=True, inf=True) as monitor:
        for overflow in (False, True, False):
            optimizer.zero_grad()
            loss = model(torch.ones(1, 2)).sum()
            if overflow:  # sqrt'(0) = Inf: the scaled gradients are not finite, the scaler skips
                loss = loss + torch.sqrt(model(torch.ones(1, 2)) * 0).sum()
            losses.append(loss.item())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    assert (GradScaler.__dict__["step"], GradScaler.__dict__["scale"]) == original
    assert [record.skipped for record in monitor.history] == [False, True, False]
    assert monitor.origin is None and monitor.report("s.py").status == "ok"
    assert [record.loss for record in monitor.history] == pytest.approx(losses, rel=1e-6)  # unscaled
    assert monitor.history[0].total_grad_norm == pytest.approx(3 ** 0.5, rel=1e-6)  # unscaled: x = (1, 1), b


def test_torch_compiled_model_is_reported_as_not_observed_inside():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    compiled = torch.compile(model, backend="eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # newer torch warns about global module hooks around a compiled module (2.13 does, 2.6 does not)
    warns = hasattr(torch.nn.modules.module, "_has_any_global_hook")
    with _monitor("torch", nan=True, inf=True) as monitor:
        with pytest.warns(UserWarning, match="global hooks on modules") if warns else contextlib.nullcontext():
            for _ in range(2):
                optimizer.zero_grad()
                compiled(torch.randn(5, 3)).sum().backward()
                optimizer.step()
    report = monitor.report("s.py")
    assert report.status == "ok" and report.steps_run == 2
    assert report.notes == ("module (model) is compiled (torch.compile): the modules inside it are not observed",)
    assert [name for name, _ in report.history[0].parameter_norms] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_close_leaves_an_entry_point_that_someone_rewrapped_after_the_monitor():
    """close() puts an original back only where the attribute still holds the monitor's wrapper:
    the script's own wrapper, installed around the monitor's, survives, and the monitor's wrapper
    inside it passes every call straight on (no step is recorded after close)."""
    import gradscope as gs
    from gradscope import autograd, nn
    from gradscope.autograd import engine

    original = engine.backward
    model = nn.Linear(2, 1)
    calls = []
    try:
        with _monitor("gradscope", nan=True) as monitor:
            ours = engine.backward
            assert ours is not original

            def theirs(*args, **kwargs):
                calls.append(args)
                return ours(*args, **kwargs)

            engine.backward = theirs  # the script (or a library) wraps backward after the monitor attached
            model(gs.ones(1, 2)).sum().backward()
            assert len(calls) == 1 and len(monitor.step.passes) == 1  # seen by the monitor while attached
        assert engine.backward is theirs  # theirs survives close()
        assert autograd.backward is original  # an entry point nobody replaced is restored
        recorded = len(monitor.history)
        model.zero_grad()
        model(gs.ones(1, 2)).sum().backward()
        assert len(calls) == 2 and model.weight.grad is not None  # through theirs and ours to the original
        assert len(monitor.history) == recorded and len(monitor.step.passes) == 1  # the monitor saw nothing new
    finally:
        engine.backward = original


def test_close_restores_the_originals_and_the_monitor_can_attach_again():
    torch = pytest.importorskip("torch")
    from torch.amp import GradScaler

    before = (torch.autograd.backward, GradScaler.__dict__["scale"], GradScaler.__dict__["step"])
    with _monitor("torch", nan=True) as monitor:
        assert torch.autograd.backward is not before[0]
        assert GradScaler.__dict__["scale"] is not before[1]
    assert (torch.autograd.backward, GradScaler.__dict__["scale"], GradScaler.__dict__["step"]) == before
    assert monitor.engines == []
    monitor.close()  # idempotent
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with monitor:
        monitor.attach(get_engine("torch"))
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
    assert len(monitor.history) == 1 and torch.autograd.backward is before[0]


def test_a_wrapper_left_inside_someone_elses_stays_inert_when_the_monitor_attaches_again():
    import gradscope as gs
    from gradscope import nn
    from gradscope.autograd import engine

    original = engine.backward
    model = nn.Linear(2, 1)
    optimizer = gs.optim.SGD(model.parameters(), lr=0.1)
    try:
        monitor = _monitor("gradscope")
        ours = engine.backward

        def theirs(*args, **kwargs):
            return ours(*args, **kwargs)

        engine.backward = theirs
        monitor.close()  # ours stays inside theirs
        monitor.attach(get_engine("gradscope"))  # a new wrapper, around theirs
        with monitor:
            assert engine.backward is not theirs
            model(gs.ones(1, 2)).sum().backward()
            assert len(monitor.step.passes) == 1  # one pass seen once, by the new wrapper only
            optimizer.step()
        assert engine.backward is theirs and len(monitor.history) == 1
    finally:
        engine.backward = original


@pytest.mark.parametrize("engine_name", ["gradscope", "torch"])
def test_a_deep_model_is_adopted_once_per_module_not_once_per_pair(engine_name, monkeypatch):
    """The first pass of a model calls each inner module before the model's own forward returns:
    each is adopted as a model in turn, then all are absorbed by the outer one. Naming the models
    known so far again at each adoption made that quadratic (4.4 s of the first step of a model of
    1,000 modules); each module is now named a bounded number of times, and the names, parameters
    and per-layer norms are those of the whole model."""
    if engine_name == "torch":
        torch = pytest.importorskip("torch")
        lib, nn, optim = torch, torch.nn, torch.optim
    else:
        import gradscope as lib
        from gradscope import nn, optim
    named = []  # (each naming of a model's modules asks the engine for the module inside a compiled one)
    engine = get_engine(engine_name)
    original = engine.uncompiled
    monkeypatch.setattr(engine, "uncompiled", lambda module: (named.append(id(module)), original(module))[1])
    depth = 120
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(3, 3), nn.Tanh()]
    model = nn.Sequential(*layers)
    optimizer = optim.SGD(model.parameters(), lr=0.01)
    with _monitor(engine_name, nan=True) as monitor:
        for _ in range(2):
            optimizer.zero_grad()
            model(lib.ones(2, 3)).sum().backward()
            optimizer.step()
    assert len(named) <= 2 * depth + 2, f"{len(named)} namings for {depth} layers"
    assert monitor.models == [model]
    assert [name for name, _ in monitor.parameters] == [name for name, _ in model.named_parameters()]
    assert [name for name, _ in monitor.history[-1].layer_norms] == [str(2 * index) for index in range(depth)]
