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
"""
from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import contextlib  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
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
    return [Workload("monitor", "nn MLP training step (SGD) with hooks / monitors", builders,
                     ratios, reference=reference, rtol=1e-4, atol=1e-6, skipped=skipped)]


if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], workloads))
