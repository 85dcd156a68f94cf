"""Cost of ``gradscope run`` on one training step of the nn MLP (784-512-512-10, batch 128).

Run from the repository root::

    python tests/benchmarks/bench_run.py            # check, then time
    python tests/benchmarks/bench_run.py --quick --json -

The step is bench_monitor.py's (``zero_grad``, forward, ``CrossEntropyLoss``, backward,
``SGD.step``), on gradscope's engine and on PyTorch (single-threaded). The monitored variants run
it under the ``RunMonitor`` that ``gradscope run`` attaches (global forward hooks, global
optimizer step hooks, the wrapped ``autograd.backward``), attached around every step:

* ``*_run``: plain ``gradscope run`` (per-step loss and per-parameter gradient norms, one host
  transfer per step);
* ``*_run_nan``: ``gradscope run --nan --inf`` (also keeps the model's inputs, random state and
  output gradients for localisation, and checks every module's outputs). Target: <= 1.25x the
  unmonitored step on both engines;
* ``*_run_skip``: ``gradscope run --nan --inf --on-nonfinite skip`` (the same, deciding at each
  step whether to skip it; spike detection is on in every variant). Target: <= 1.25x.

The ``run_transformer_*`` workloads time the same three variants on a transformer of 125 modules
(``Linear(16, 64)``, a 12-layer ``TransformerEncoder`` of width 64 with 4 heads, ``Linear(64, 4)``;
batch 16 x 32 tokens, MSE loss, Adam), one workload per engine.
"""
from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import contextlib  # noqa: E402
import sys  # noqa: E402
from typing import Any, Callable, ContextManager, Iterator  # noqa: E402

from bench_engine import NN_NAMES, mlp_data  # noqa: E402
from bench_monitor import training_step  # noqa: E402
from benchlib import Ratio, Variant, Workload, gradscope_nn, import_gradscope, import_torch, main  # noqa: E402


def run_monitor(engine_name: str, **options: Any) -> Callable[[Any], ContextManager[Any]]:
    """Instrument: one ``RunMonitor`` attached to the engine around every step."""
    from gradscope.engines import get_engine
    from gradscope.monitor.run import RunMonitor, RunOptions

    monitor = RunMonitor(RunOptions(**options))
    engine = get_engine(engine_name)

    @contextlib.contextmanager
    def instrument(model: Any) -> Iterator[Any]:
        monitor.attach(engine)
        try:
            yield monitor
        finally:
            monitor.close()
            monitor.history.clear()

    return instrument


def workloads() -> list[Workload]:
    torch = import_torch()
    gs, reason = import_gradscope()
    data = mlp_data()
    builders: dict[str, Callable[[], Variant]] = {}
    skipped: dict[str, str] = {}
    gs_nn = None
    if gs is not None:
        gs_nn, reason = gradscope_nn(gs, NN_NAMES)
    if gs_nn is None:
        skipped.update({name: reason for name in ("gs_plain", "gs_run", "gs_run_nan", "gs_run_skip")})
    else:
        builders["gs_plain"] = lambda: training_step(gs, gs_nn, "gs_plain", data)
        builders["gs_run"] = lambda: training_step(gs, gs_nn, "gs_run", data, run_monitor("gradscope"))
        builders["gs_run_nan"] = lambda: training_step(gs, gs_nn, "gs_run_nan", data,
                                                       run_monitor("gradscope", nan=True, inf=True))
        builders["gs_run_skip"] = lambda: training_step(gs, gs_nn, "gs_run_skip", data,
                                                        run_monitor("gradscope", nan=True, inf=True,
                                                                    on_nonfinite="skip"))
    if torch is None:
        skipped.update({name: "torch is not installed"
                        for name in ("torch_plain", "torch_run", "torch_run_nan", "torch_run_skip")})
    else:
        builders["torch_plain"] = lambda: training_step(torch, torch.nn, "torch_plain", data)
        builders["torch_run"] = lambda: training_step(torch, torch.nn, "torch_run", data, run_monitor("torch"))
        builders["torch_run_nan"] = lambda: training_step(torch, torch.nn, "torch_run_nan", data,
                                                          run_monitor("torch", nan=True, inf=True))
        builders["torch_run_skip"] = lambda: training_step(torch, torch.nn, "torch_run_skip", data,
                                                           run_monitor("torch", nan=True, inf=True,
                                                                       on_nonfinite="skip"))
    ratios = [Ratio("gs_run", "gs_plain"), Ratio("gs_run_nan", "gs_plain", 1.25),
              Ratio("gs_run_skip", "gs_plain", 1.25), Ratio("torch_run", "torch_plain"),
              Ratio("torch_run_nan", "torch_plain", 1.25), Ratio("torch_run_skip", "torch_plain", 1.25)]
    reference = "torch_plain" if torch is not None else "gs_plain"
    return [Workload("run", "nn MLP training step (SGD) under gradscope run's monitor", builders, ratios,
                     reference=reference, rtol=1e-4, atol=1e-6, skipped=skipped)]


def transformer_step(lib: Any, name: str, instrument: Callable[[Any], ContextManager[Any]] | None = None) -> Variant:
    """One Adam step of a 125-module transformer on ``lib`` (gradscope or torch), seeded identically."""
    from benchlib import Variant

    nn = lib.nn
    lib.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    extra = {"enable_nested_tensor": False} if lib.__name__ == "torch" else {}
    model = nn.Sequential(nn.Linear(16, 64), nn.TransformerEncoder(layer, 12, **extra), nn.Linear(64, 4))
    params = list(model.parameters())
    optimizer = lib.optim.Adam(params, lr=1e-3)
    inputs, targets = lib.randn(16, 32, 16), lib.randn(16, 32, 4)

    def train() -> Any:
        optimizer.zero_grad()
        loss = ((model(inputs) - targets) ** 2).mean()
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


def transformer_workloads() -> list[Workload]:
    found = []
    for prefix, engine_name, lib in (("gs", "gradscope", import_gradscope()[0]), ("torch", "torch", import_torch())):
        if lib is None:
            continue
        builders: dict[str, Callable[[], Variant]] = {
            f"{prefix}_plain": lambda lib=lib, p=prefix: transformer_step(lib, f"{p}_plain"),
            f"{prefix}_run_nan": lambda lib=lib, p=prefix, e=engine_name: transformer_step(
                lib, f"{p}_run_nan", run_monitor(e, nan=True, inf=True)),
            f"{prefix}_run_skip": lambda lib=lib, p=prefix, e=engine_name: transformer_step(
                lib, f"{p}_run_skip", run_monitor(e, nan=True, inf=True, on_nonfinite="skip")),
        }
        found.append(Workload(f"run_transformer_{prefix}", f"125-module transformer (Adam) on {engine_name}",
                              builders, [Ratio(f"{prefix}_run_nan", f"{prefix}_plain", 1.25),
                                         Ratio(f"{prefix}_run_skip", f"{prefix}_plain", 1.25)],
                              reference=f"{prefix}_plain", rtol=1e-4, atol=1e-6))
    return found


if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], lambda: workloads() + transformer_workloads()))
