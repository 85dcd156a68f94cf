"""Cost of hooks and monitors on one training step of the nn MLP (784-512-512-10, batch 128).

Run from the repository root::

    python tests/benchmarks/bench_monitor.py            # check, then time
    python tests/benchmarks/bench_monitor.py --quick --json -

One training step = ``zero_grad``, forward, ``CrossEntropyLoss``, backward, ``SGD.step``.
Variants (same methodology as bench_engine.py: alternating blocks, median of per-block ratios):

1. ``gs_plain``: the unmonitored step.
2. ``gs_hook``: the same step under one global full backward hook
   (``gs.nn.modules.module.register_module_full_backward_hook``) that only computes the squared
   norm of each ``grad_input`` tensor. Target: <= 1.15x ``gs_plain``.
3. ``gs_gradient_monitor`` and 4. ``gs_nonfinite_tracer``: the CLI's monitors from
   ``gradscope.monitor`` (see ``monitor_variants``).

``torch_plain`` and ``torch_hook`` are PyTorch's versions of 1. and 2., for reference.

What the CLI runs per training step, through the engine adapters (``monitored_step``):

* ``*_watch``: ``gradscope watch --nan --inf`` (a snapshot for localisation, the loss and the
  squared norms of every gradient and parameter in one host transfer, the SGD step);
* ``*_inspect``: ``gradscope inspect``'s statistics every step (``GradientMonitor``: tensor hooks
  on module outputs and node hooks at module inputs; then ``parameter_records``).

on three models: the MLP above (gradscope: no regression; PyTorch: ``torch_watch`` <= 1.15x
``torch_plain``), and a deep narrow MLP (60 blocks of ``Linear(32, 32)`` + ``Tanh``) on
gradscope's engine, where per-call costs dominate (targets: watch <= 1.2x, inspect <= 2x).
"""
from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import contextlib  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
from typing import Any, Callable, ContextManager, Iterator  # noqa: E402

from bench_engine import NN_NAMES, mlp_data, mlp_model, nn_layout  # noqa: E402
from benchlib import (Ratio, Variant, Workload, gradscope_nn, import_gradscope,  # noqa: E402
                      import_torch, main)

LEARNING_RATE = 0.01

# The first Linear's input needs no gradient, so PyTorch and gradscope warn that its full backward
# hook fires early (with grad_input None): expected here.
warnings.filterwarnings("ignore", message="Full backward hook")


def squared_norm_hook(norms: list[Any]) -> Callable[..., None]:
    """A full backward hook that appends the squared norm of each gradient in ``grad_input``."""

    def hook(module: Any, grad_input: tuple[Any, ...], grad_output: tuple[Any, ...]) -> None:
        for grad in grad_input:
            if grad is not None:
                norms.append((grad * grad).sum())

    return hook


def training_step(lib: Any, nn: Any, name: str, data: dict[str, Any],
                  instrument: Callable[[Any], ContextManager[Any]] | None = None) -> Variant:
    """One SGD training step of the nn MLP, inside ``with instrument(model):`` when given.

    Instruments are entered and left around every step, so that the variants timed in the same
    process never see each other's (global) hooks.
    """
    model = mlp_model(nn)
    params = list(model.parameters())
    with lib.no_grad():
        for param, array in zip(params, nn_layout(data["params"]), strict=True):
            param.copy_(lib.tensor(array))
    optimizer = importlib.import_module(lib.__name__ + ".optim").SGD(params, lr=LEARNING_RATE)
    loss_fn = nn.CrossEntropyLoss()
    inputs, targets = lib.tensor(data["x"]), lib.tensor(data["y"])

    def train() -> Any:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    def step() -> Any:
        if instrument is None:
            return train()
        with instrument(model):
            return train()

    def grads() -> list[Any]:
        return [param.grad.numpy().copy() for param in params]

    return Variant(name, step, grads)


def global_norm_hook(nn: Any) -> Callable[[Any], ContextManager[Any]]:
    """Instrument: the global full backward hook of ``squared_norm_hook`` (its handle is the
    context manager)."""
    norms: list[Any] = []
    hook = squared_norm_hook(norms)

    def instrument(model: Any) -> ContextManager[Any]:
        norms.clear()
        return nn.modules.module.register_module_full_backward_hook(hook)

    return instrument


def monitor_variants(gs: Any, data: dict[str, Any], unusable: str | None
                     ) -> tuple[dict[str, Callable[[], Variant]], dict[str, str]]:
    """Variants 3. and 4.: the training step under the monitors the CLI uses.

    3. ``gs_gradient_monitor``: ``GradientMonitor`` (what ``gradscope inspect`` attaches: global
       forward pre-hook + global full backward hook adding up squared norms), entered around
       every step, with its per-module records built after it.
    4. ``gs_nonfinite_tracer``: ``BackwardNonFiniteTracer`` (localisation of the first
       non-finite gradient: global full backward pre-hook and hook, plus a tensor hook on every
       parameter), entered around every step.

    Args:
        gs: the gradscope module.
        data: the MLP's data (``mlp_data()``).
        unusable: why gradscope's plain training step cannot run, or ``None`` when it can.

    Returns:
        ``(builders, skipped)``: variant name -> builder, and variant name -> reason for skipping.
    """
    names = ("gs_gradient_monitor", "gs_nonfinite_tracer")
    if unusable is None:
        monitors = _optional_module("gradscope.monitor.monitors")
        missing = [attr for attr in ("GradientMonitor", "BackwardNonFiniteTracer")
                   if not hasattr(monitors, attr)]
        if missing:
            unusable = "gradscope.monitor.monitors lacks " + ", ".join(missing)
    if unusable is not None:
        return {}, {name: unusable for name in names}
    nn = importlib.import_module("gradscope.nn")

    @contextlib.contextmanager
    def gradient_monitor(model: Any) -> Iterator[Any]:
        with monitors.GradientMonitor(model) as monitor:
            yield monitor
        monitor.module_records()

    return {
        names[0]: lambda: training_step(gs, nn, names[0], data, gradient_monitor),
        names[1]: lambda: training_step(gs, nn, names[1], data,
                                        monitors.BackwardNonFiniteTracer),
    }, {}


DEEP_BLOCKS = 60
DEEP_WIDTH = 32


def deep_model(nn: Any) -> Any:
    layers: list[Any] = []
    for _ in range(DEEP_BLOCKS):
        layers += [nn.Linear(DEEP_WIDTH, DEEP_WIDTH), nn.Tanh()]
    return nn.Sequential(*layers, nn.Linear(DEEP_WIDTH, 10))


def monitored_step(lib: Any, name: str, make_model: Callable[[Any], Any], inputs: Any, targets: Any,
                   kind: str, initial: list[np.ndarray] | None = None) -> Variant:
    """One SGD training step of ``make_model(lib.nn)``: ``kind`` is ``"plain"``, ``"watch"``
    (``Watcher`` with ``--nan --inf``) or ``"inspect"`` (``GradientMonitor`` + parameter statistics).
    ``initial``: parameter values to start from (default: the library's initialisation, seed 0)."""
    from gradscope.loading import Workload as ModelWorkload
    from gradscope.monitor.monitors import GradientMonitor
    from gradscope.monitor.stats import parameter_records
    from gradscope.monitor.watch import Watcher, WatchOptions

    lib.manual_seed(0)
    model = make_model(lib.nn)
    optimizer_class = importlib.import_module(lib.__name__ + ".optim").SGD
    workload = ModelWorkload(model=model, batch_fn=lambda step: (inputs, targets), loss_fn=lib.nn.CrossEntropyLoss(),
                             optimizer_fn=lambda parameters: optimizer_class(parameters, lr=LEARNING_RATE))
    engine = workload.engine
    params = list(model.parameters())
    for param, array in zip(params, initial or (), strict=bool(initial)):
        engine.copy_into(param, array)
    if kind == "watch":
        watcher = Watcher(workload, WatchOptions(steps=10 ** 12, lr=LEARNING_RATE, nan=True, inf=True))
        records = watcher.steps()

        def step() -> Any:
            record = next(records)
            watcher.history.clear()
            return record.loss
    else:
        optimizer = workload.make_optimizer(LEARNING_RATE)
        loss_fn = workload.loss_fn

        def step() -> Any:
            optimizer.zero_grad(set_to_none=True)
            if kind == "inspect":
                with GradientMonitor(model, engine) as monitor:
                    loss = loss_fn(model(inputs), targets)
                    loss.backward()
                monitor.module_records()
                parameter_records(model, engine)
            else:
                loss = loss_fn(model(inputs), targets)
                loss.backward()
            optimizer.step()
            return loss

    return Variant(name, step, lambda: [engine.to_numpy(p.grad).copy() for p in params])


def deep_workload(gs: Any) -> Workload:
    """The deep narrow MLP on gradscope's engine: plain, watch and inspect steps."""
    rng = np.random.default_rng(1)
    inputs = gs.tensor(rng.standard_normal((64, DEEP_WIDTH), dtype=np.float32))
    targets = gs.tensor(rng.integers(0, 10, 64))
    builders = {f"deep_{kind}": (lambda kind=kind: monitored_step(gs, f"deep_{kind}", deep_model, inputs, targets,
                                                                   kind))
                for kind in ("plain", "watch", "inspect")}
    ratios = [Ratio("deep_watch", "deep_plain", 1.2), Ratio("deep_inspect", "deep_plain", 2.0)]
    return Workload("deep", f"deep narrow MLP ({DEEP_BLOCKS} x Linear({DEEP_WIDTH}, {DEEP_WIDTH}) + Tanh), "
                    "gradscope: watch / inspect monitoring", builders, ratios, reference="deep_plain",
                    rtol=1e-4, atol=1e-6)


def mlp_monitoring_workload(gs: Any, torch: Any, data: dict[str, Any]) -> Workload:
    """The MLP's watch / inspect steps through the engine adapters, on both engines."""
    builders: dict[str, Callable[[], Variant]] = {}
    skipped: dict[str, str] = {}
    ratios: list[Ratio] = []
    for prefix, lib in (("gs", gs), ("torch", torch)):
        if lib is None:
            skipped.update({f"{prefix}_{kind}": "not installed" for kind in ("plain", "watch", "inspect")})
            continue
        inputs, targets = lib.tensor(data["x"]), lib.tensor(data["y"])
        for kind in ("plain", "watch", "inspect"):
            builders[f"{prefix}_{kind}"] = (lambda lib=lib, name=f"{prefix}_{kind}", kind=kind, inputs=inputs,
                                            targets=targets: monitored_step(lib, name, mlp_model, inputs, targets,
                                                                            kind, nn_layout(data["params"])))
        ratios += [Ratio(f"{prefix}_watch", f"{prefix}_plain", 1.15 if prefix == "torch" else None),
                   Ratio(f"{prefix}_inspect", f"{prefix}_plain")]
    return Workload("mlp-monitoring", "nn MLP training step: watch --nan / inspect monitoring, both engines",
                    builders, ratios, reference="gs_plain" if gs is not None else "torch_plain",
                    rtol=1e-3, atol=1e-5, skipped=skipped)


def _optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def workloads() -> list[Workload]:
    torch = import_torch()
    gs, reason = import_gradscope()
    data = mlp_data()
    builders: dict[str, Callable[[], Variant]] = {}
    skipped: dict[str, str] = {}
    gs_nn = None
    if gs is not None:
        gs_nn, reason = gradscope_nn(gs, NN_NAMES)
        if gs_nn is not None and not hasattr(_optional_module("gradscope.optim"), "SGD"):
            gs_nn, reason = None, "gradscope.optim.SGD does not exist yet"
    if gs_nn is None:
        skipped.update({"gs_plain": reason, "gs_hook": reason})
    else:
        builders["gs_plain"] = lambda: training_step(gs, gs_nn, "gs_plain", data)
        builders["gs_hook"] = lambda: training_step(gs, gs_nn, "gs_hook", data,
                                                    global_norm_hook(gs_nn))
    monitor_builders, monitor_skipped = monitor_variants(gs, data,
                                                         None if gs_nn is not None else reason)
    builders.update(monitor_builders)
    skipped.update(monitor_skipped)
    if torch is None:
        skipped.update({"torch_plain": "torch is not installed",
                        "torch_hook": "torch is not installed"})
    else:
        builders["torch_plain"] = lambda: training_step(torch, torch.nn, "torch_plain", data)
        builders["torch_hook"] = lambda: training_step(torch, torch.nn, "torch_hook", data,
                                                       global_norm_hook(torch.nn))
    ratios = [Ratio("gs_hook", "gs_plain", 1.15), Ratio("torch_hook", "torch_plain"),
              Ratio("gs_plain", "torch_plain"), Ratio("gs_hook", "torch_hook")]
    ratios += [Ratio(name, "gs_plain") for name in ("gs_gradient_monitor", "gs_nonfinite_tracer")]
    reference = "torch_plain" if torch is not None else "gs_plain"
    result = [Workload("monitor", "nn MLP training step (SGD) with hooks / monitors", builders,
                       ratios, reference=reference, rtol=1e-4, atol=1e-6, skipped=skipped)]
    if gs_nn is not None:
        result += [mlp_monitoring_workload(gs, torch, data), deep_workload(gs)]
    return result


if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], workloads))
