"""Cost of ``gradscope run`` under DDP: 2 ranks on CPU (gloo), single-threaded per rank.

Run from the repository root::

    python tests/benchmarks/bench_distributed.py            # 2 ranks, 12 blocks of 20 steps
    python tests/benchmarks/bench_distributed.py --blocks 4 --steps 10

Started without ``RANK`` in the environment, the script launches itself on 2 local processes
with torch's elastic agent (what ``torchrun`` runs). Each rank trains the MLP of bench_run.py
(784-512-512-10, batch 128, ``CrossEntropyLoss``, SGD) wrapped in ``DistributedDataParallel``,
``torch.set_num_threads(1)``. Blocks alternate between the unmonitored step and the step under
the ``RunMonitor`` that ``gradscope run`` attaches (with the distributed reducer: one
``all_reduce`` per step), plain and with ``--nan --inf``, and, for comparison, plain with the
one-process reducer (rank-local norms, no collective: what the reduction itself costs); both ranks run the same schedule, so
their collectives line up. Rank 0 prints the median over blocks of the ratio of a monitored
block's time to the unmonitored block before it, and the collectives the monitor added per step.
Target: at most 1.2x.
"""
from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=12, help="blocks per variant")
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    return parser.parse_args()


def launch() -> int:
    from gradscope.engines.torch.launch import launch_local

    with tempfile.TemporaryDirectory() as directory:
        outcome = launch_local(2, [str(Path(__file__).resolve()), *sys.argv[1:]], directory)
    return 0 if outcome.failed_rank is None and outcome.signal is None else 1


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    from gradscope.engines import get_engine
    from gradscope.monitor.distributed import DistributedReducer, StepReducer
    from gradscope.monitor.run import RunMonitor, RunOptions

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(rank)
    x = torch.randn(128, 784, generator=generator)
    y = torch.randint(0, 10, (128,), generator=generator)
    engine = get_engine("torch")

    def step() -> None:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    def block(monitor: RunMonitor | None) -> float:
        if monitor is not None:
            monitor.attach(engine)
        dist.barrier()
        start = time.perf_counter()
        try:
            for _ in range(args.steps):
                step()
        finally:
            elapsed = time.perf_counter() - start
            if monitor is not None:
                monitor.close()
        return elapsed / args.steps

    for _ in range(3):
        step()
    variants = {"run": RunOptions(), "run --nan --inf": RunOptions(nan=True, inf=True),
                "run, no reduction": RunOptions()}
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    plain: list[float] = []
    collectives: dict[str, float] = {}
    for _ in range(args.blocks):
        for name, options in variants.items():
            reducer = DistributedReducer(rank, world) if name != "run, no reduction" else StepReducer()
            monitor = RunMonitor(options, reducer=reducer)
            base = block(None)
            plain.append(base)
            ratios[name].append(block(monitor) / base)
            collectives[name] = getattr(reducer, "collectives", 0) / args.steps
    if rank == 0:
        print(f"DDP, 2 ranks (gloo, CPU), 1 thread per rank, MLP 784-512-512-10 batch 128: "
              f"unmonitored step {statistics.median(plain) * 1e3:.2f} ms (median)")
        for name, values in ratios.items():
            print(f"  gradscope {name:<18} {statistics.median(values):.3f}x the unmonitored step "
                  f"(min {min(values):.3f}, max {max(values):.3f}; {collectives[name]:g} collective(s) per step)")
    dist.destroy_process_group()


def main() -> int:
    args = parse_args()
    if "RANK" not in os.environ:
        return launch()
    worker(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
