"""Benchmark (not a test): the cost of monitoring, measured in one process, single-threaded.

Run: ``python tests/benchmarks/bench_cli.py``. On the MLP 784-512-512-10 (batch 128, ReLU,
cross-entropy, SGD) written with ``nn`` layers it prints, as medians of per-block ratios over
alternating blocks:

* ``watch --nan`` step (per-layer norms, non-finite detection, snapshot for localisation) /
  plain training step (target <= 1.15);
* ``inspect``-style step (GradientMonitor hooks + full per-parameter statistics) / plain step
  (target <= 1.3);

and, from a cold start, ``gradscope inspect sample_models/mlp.py --format json`` vs
``python -c "import torch"`` (target <= 1/3) and ``gradscope --help`` vs ``python -c pass``
(target <= 2), each run in turns with its baseline; ``--cold-only`` prints just these. Cold
starts run with bytecode caches, as an installed package has them.
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gradscope as gs  # noqa: E402
from gradscope import nn, optim  # noqa: E402
from gradscope.loading import Workload  # noqa: E402
from gradscope.monitor.monitors import GradientMonitor  # noqa: E402
from gradscope.monitor.stats import parameter_records  # noqa: E402
from gradscope.monitor.watch import Watcher, WatchOptions  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def make_workload() -> Workload:
    gs.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    inputs, labels = gs.randn(128, 784), gs.randint(0, 10, (128,))
    return Workload(model=model, batch_fn=lambda step: (inputs, labels), loss_fn=nn.CrossEntropyLoss(),
                    optimizer_fn=lambda parameters: optim.SGD(parameters, lr=1e-3))


def plain_steps(workload: Workload, steps: int) -> float:
    model = workload.model
    optimizer = workload.make_optimizer(1e-3)
    loss_fn = workload.loss_fn
    start = time.perf_counter()
    for step in range(steps):
        inputs, labels = workload.batch_fn(step)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start


def watch_steps(workload: Workload, steps: int) -> float:
    watcher = Watcher(workload, WatchOptions(steps=steps, nan=True, inf=True))
    start = time.perf_counter()
    for _ in watcher.steps():
        pass
    return time.perf_counter() - start


def inspect_steps(workload: Workload, steps: int) -> float:
    model = workload.model
    optimizer = workload.make_optimizer(1e-3)
    start = time.perf_counter()
    for step in range(steps):
        inputs, labels = workload.batch_fn(step)
        optimizer.zero_grad(set_to_none=True)
        with GradientMonitor(model) as monitor:
            loss = workload.loss_fn(model(inputs), labels)
            loss.backward()
        monitor.module_records()
        parameter_records(model, workload.engine)
        optimizer.step()
    return time.perf_counter() - start


def block_ratios(variant, blocks: int = 7, steps: int = 5) -> list[float]:
    workload = make_workload()
    plain_steps(workload, 2)
    variant(workload, 2)
    ratios = []
    for _ in range(blocks):
        base = plain_steps(workload, steps)
        ratios.append(variant(workload, steps) / base)
    return ratios


def _cold_env() -> dict[str, str]:
    """The environment of a cold start: this checkout first on the path, and bytecode caches
    allowed (an installed package has its ``.pyc`` files; ``PYTHONDONTWRITEBYTECODE`` would make
    every run compile gradscope's sources again and time the compiler instead)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _run_cold(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, capture_output=True, check=False, env=env)
    return time.perf_counter() - start


def cold_ratio(command: list[str], baseline: list[str], repeats: int = 15) -> tuple[float, float, float]:
    """Cold-start times of ``command`` and ``baseline`` run in turns after one warm-up run each
    (which also writes the bytecode caches): (median time, median baseline time, median ratio of
    the pairs)."""
    env = _cold_env()
    _run_cold(command, env)
    _run_cold(baseline, env)
    times, base_times, ratios = [], [], []
    for _ in range(repeats):
        seconds = _run_cold(command, env)
        base = _run_cold(baseline, env)
        times.append(seconds)
        base_times.append(base)
        ratios.append(seconds / base)
    return statistics.median(times), statistics.median(base_times), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold-only", action="store_true", help="only the cold-start figures")
    args = parser.parse_args()
    if not args.cold_only:
        watch = statistics.median(block_ratios(watch_steps))
        inspect = statistics.median(block_ratios(inspect_steps))
        print(f"watch --nan monitoring / plain step: {watch:.3f}x (target <= 1.15)")
        print(f"inspect statistics / plain step:      {inspect:.3f}x (target <= 1.30)")
    python = sys.executable
    inspect_cold, torch_cold, ratio = cold_ratio(
        [python, "-m", "gradscope", "inspect", "sample_models/mlp.py", "--format", "json"],
        [python, "-c", "import torch"], repeats=7)
    print(f"cold inspect --format json: {inspect_cold:.3f}s, import torch: {torch_cold:.3f}s, "
          f"ratio {ratio:.2f} (target <= 0.33)")
    help_cold, bare, ratio = cold_ratio([python, "-m", "gradscope", "--help"], [python, "-c", "pass"])
    print(f"cold gradscope --help: {help_cold:.3f}s, python -c pass: {bare:.3f}s, "
          f"ratio {ratio:.2f} (target <= 2)")


if __name__ == "__main__":
    main()
