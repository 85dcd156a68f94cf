"""Benchmark (not a test): what the commands users type cost, timed as whole processes.

Run from the repository root::

    python tests/benchmarks/bench_commands.py                 # every workload (~3-6 min)
    python tests/benchmarks/bench_commands.py --only watch --only inspect
    python tests/benchmarks/bench_commands.py --quick         # 3 rounds instead of 7
    python tests/benchmarks/bench_commands.py --json -        # JSON on stdout, the table on stderr

bench_monitor.py and bench_run.py time a re-creation of one monitored step inside one process:
good for diagnosis, but not what a user pays. This script runs the real commands
(``gradscope watch``, ``gradscope inspect``, ``gradscope run``) as separate processes next to a
plain script doing the same training steps, and cancels the start-up (interpreter, imports,
loading the model) by differencing: for every command and its plain twin it times a long and a
short run and keeps ``t(long) - t(short)``; rounds alternate monitored and plain runs, and each
figure is the median over the rounds (7, or 3 with ``--quick``). Times are the child's CPU time
(user + system, from ``wait4``): on a machine shared with other work the wall clock is inflated
by the other processes far more than the CPU time. Wall-clock medians are printed next to them.

Workloads and targets:

* ``watch``: deep narrow MLP (60 x (Linear(32, 32) + Tanh), batch 64, SGD, gradscope's engine),
  ``gradscope watch MODEL --nan --format json`` against a plain loop of the same steps,
  610 - 10 steps. Target <= 1.2x.
* ``inspect``: the same model, ``gradscope inspect MODEL --format json``. inspect runs one pass per
  process, which a whole-process difference cannot separate from start-up noise (a pass is a few
  ms, a start-up a few hundred), so one process runs the command's click entry point N times
  (``main([... ]``, as the ``gradscope`` script does, output included) against a plain
  process that loads the model file and runs one training pass N times; t(N=41) - t(N=1).
  Target <= 2x.
* ``run-mlp``: the benchmark MLP (784-512-512-10, batch 128, SGD) on PyTorch,
  ``gradscope run --nan --inf train.py`` against ``python train.py``, 210 - 10 steps.
  Target <= 1.1x per step; peak RSS <= 1.1x.
* ``run-gpt``: a GPT-2-shaped transformer on PyTorch (12 blocks, width 256, 4 heads, sequence
  128, batch 4, AdamW; 100+ modules), 25 - 5 steps. Target <= 1.1x per step; peak RSS <= 1.1x.
* ``run-wide``: the torch model of ``log`` below, ``gradscope run --nan --inf train.py`` against
  ``python train.py``, 105 - 5 steps: what a module call costs under the monitor where modules
  are tiny (no target; the GPT-2-shaped model above is the size the targets speak of).
* ``log``: a torch model of 1,000 modules (500 x (Linear(8, 8) + Tanh), batch 4, SGD),
  ``gradscope run --log FILE train.py`` against ``gradscope run train.py``, 105 - 5 steps: what
  writing a step record (a JSON line with 500 layer norms) adds to a step, and the records
  written per second. Target: a record costs less than the step (ratio <= 2).
* ``cold``: cold ``gradscope inspect sample_models/mlp.py --format json`` against
  ``python -c "import torch"``, wall clock, median of 7. Target <= 0.3x.
* ``nproc``: what ``run --nproc 2`` adds to torch's own launcher: ``gradscope run --nproc 2
  ddp.py`` against ``python -m torch.distributed.run --standalone --nproc-per-node 2 ddp.py`` (what
  ``torchrun`` runs), a DDP script of three tiny steps on gloo, wall clock from start to exit,
  median of the per-round differences. Target: under 2 s.

Every process runs single-threaded (``OMP_NUM_THREADS=1`` and friends; ``torch.set_num_threads(1)``
in the torch scripts).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_model import GPT_MODEL  # noqa: E402
THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

DEEP_MODEL = '''\
import numpy as np
import gradscope as gs
from gradscope import nn, optim

layers = []
for _ in range(60):
    layers += [nn.Linear(32, 32), nn.Tanh()]
model = nn.Sequential(*layers, nn.Linear(32, 10))
loss_fn = nn.CrossEntropyLoss()
_rng = np.random.default_rng(1)
inputs = gs.tensor(_rng.standard_normal((64, 32), dtype=np.float32))
targets = gs.tensor(_rng.integers(0, 10, 64))


def make_optimizer(parameters):
    return optim.SGD(parameters, lr=0.01)
'''

# What `gradscope watch MODEL --steps N` does for each step, without gradscope's monitors: the
# model file loaded the way the CLI loads it (seeded first), then N SGD steps on batch(step).
PLAIN_WATCH = '''\
import json, sys
import gradscope as gs
from gradscope.loading import load_model_file
workload = load_model_file(sys.argv[1], seed=0)
model, loss_fn = workload.model, workload.loss_fn
optimizer = workload.make_optimizer(0.01)
loss = None
for step in range(int(sys.argv[2])):
    inputs, targets = workload.batch_fn(step)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    loss = loss.item()
print(json.dumps({"loss": loss}))
'''

# gradscope inspect's click entry point N times in one process (output to /dev/null).
REPEAT_INSPECT = '''\
import contextlib, os, sys
from gradscope.cli import cli
with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
    for _ in range(int(sys.argv[2])):
        try:
            cli.main(["inspect", sys.argv[1], "--format", "json"], standalone_mode=False)
        except SystemExit:
            pass
'''

# The plain twin of REPEAT_INSPECT: load the model file and run one training pass, N times.
REPEAT_PLAIN = '''\
import sys
from gradscope.loading import load_model_file
for _ in range(int(sys.argv[2])):
    workload = load_model_file(sys.argv[1], seed=0)
    inputs, targets = workload.batch_fn(0)
    loss = workload.loss_fn(workload.model(inputs), targets)
    loss.backward()
    float(loss.item())
'''

TORCH_MLP_SCRIPT = '''\
import sys
import torch
from torch import nn
torch.set_num_threads(1)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
inputs, labels = torch.randn(128, 784), torch.randint(0, 10, (128,))
for step in range(int(sys.argv[1])):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
'''

TORCH_GPT_SCRIPT = '''\
import math, sys
import torch
from torch import nn
from torch.nn import functional as F
torch.set_num_threads(1)
torch.manual_seed(0)
WIDTH, HEADS, BLOCKS, SEQ, BATCH, VOCAB = 256, 4, 12, 128, 4, 512


''' + GPT_MODEL + '''

model = GPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
data = torch.randint(0, VOCAB, (BATCH, SEQ + 1))
for step in range(int(sys.argv[1])):
    loss = model(data[:, :-1], data[:, 1:])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
'''

# 1,000 modules whose layers are tiny: a step record (one norm per layer) is as large as it gets
# next to the step that produced it.
TORCH_WIDE_SCRIPT = '''\
import sys
import torch
from torch import nn
torch.set_num_threads(1)
torch.manual_seed(0)
layers = []
for _ in range(500):
    layers += [nn.Linear(8, 8), nn.Tanh()]
model = nn.Sequential(*layers)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
inputs = torch.randn(4, 8)
for step in range(int(sys.argv[1])):
    optimizer.zero_grad(set_to_none=True)
    loss = model(inputs).square().mean()
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f}")
'''


# Three DDP steps of a tiny model on gloo: the launch, the rendezvous and the imports are the work.
DDP_SCRIPT = '''\
import torch
import torch.distributed as dist
from torch import nn
torch.set_num_threads(1)
dist.init_process_group("gloo")
model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
dist.destroy_process_group()
'''


@dataclass
class Sample:
    cpu: float
    wall: float
    max_rss_kib: int


@dataclass
class Comparison:
    name: str
    what: str
    monitored: list[str]
    plain: list[str]
    long: int
    short: int
    target: float | None
    check_rss: bool = False
    times: dict[str, dict[int, list[Sample]]] = field(default_factory=dict)


def run_process(argv: list[str], cwd: Path) -> Sample:
    """Run ``argv`` to the end; its CPU time, wall time and peak RSS (from wait4)."""
    env = {**os.environ, **THREADS, "PYTHONPATH": str(ROOT)}
    env.pop("COLUMNS", None)
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = child.stderr.read() if child.stderr else b""
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {code}:\n{stderr.decode(errors='replace')[-2000:]}")
    return Sample(usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss)


def measure(comparison: Comparison, rounds: int, cwd: Path, log: Any) -> dict[str, Any]:
    runs = {"monitored": comparison.monitored, "plain": comparison.plain}
    samples: dict[str, dict[int, list[Sample]]] = {kind: {comparison.long: [], comparison.short: []} for kind in runs}
    for round_index in range(rounds):
        order = list(runs) if round_index % 2 == 0 else list(reversed(runs))
        for kind in order:
            for count in (comparison.long, comparison.short):
                argv = [part.replace("{N}", str(count)) for part in runs[kind]]
                samples[kind][count].append(run_process(argv, cwd))
        print(f"  {comparison.name}: round {round_index + 1}/{rounds}", file=log, flush=True)

    def per_round(kind: str, attr: str) -> list[float]:
        return [getattr(a, attr) - getattr(b, attr)
                for a, b in zip(samples[kind][comparison.long], samples[kind][comparison.short], strict=True)]

    result: dict[str, Any] = {"name": comparison.name, "what": comparison.what, "target": comparison.target,
                              "counts": [comparison.long, comparison.short]}
    for attr in ("cpu", "wall"):
        monitored, plain = per_round("monitored", attr), per_round("plain", attr)
        ratios = [m / p for m, p in zip(monitored, plain, strict=True) if p > 0]
        steps = comparison.long - comparison.short
        result[attr] = {"ratio": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
                        "monitored_ms_per_step": statistics.median(monitored) / steps * 1e3,
                        "plain_ms_per_step": statistics.median(plain) / steps * 1e3}
    if comparison.name == "log":  # (what a record adds to a step, and how many are written a second)
        extra = result["cpu"]["monitored_ms_per_step"] - result["cpu"]["plain_ms_per_step"]
        result["record_ms"] = extra
        result["records_per_second"] = 1e3 / extra if extra > 0 else None  # (None: below the noise)
    if comparison.check_rss:
        peak = {kind: statistics.median(s.max_rss_kib for s in samples[kind][comparison.long]) for kind in runs}
        result["peak_rss_mib"] = {kind: value / 1024 for kind, value in peak.items()}
        result["peak_rss_ratio"] = peak["monitored"] / peak["plain"]
    return result


def cold(rounds: int, cwd: Path, log: Any) -> dict[str, Any] | None:
    try:
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            return None
    except ImportError:
        return None
    gradscope = [sys.executable, "-m", "gradscope", "inspect", "sample_models/mlp.py", "--format", "json"]
    torch = [sys.executable, "-c", "import torch"]
    # A user's gradscope has its bytecode compiled (pip compiles an installed package; an editable one
    # writes __pycache__ on first import), as torch's has. Where PYTHONDONTWRITEBYTECODE is set, an
    # editable checkout would be compiled from source on every start: compile it once first.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "gradscope")], check=True)
    pairs = []
    run_process(gradscope, ROOT), run_process(torch, ROOT)  # warm the caches
    for _ in range(rounds):
        pairs.append((run_process(gradscope, ROOT).wall, run_process(torch, ROOT).wall))
    print("  cold: done", file=log, flush=True)
    ratios = [g / t for g, t in pairs]
    return {"name": "cold", "what": "cold `gradscope inspect sample_models/mlp.py --format json` / `python -c 'import "
            "torch'`, wall", "target": 0.3, "wall": {"ratio": statistics.median(ratios), "min": min(ratios),
                                                     "max": max(ratios)}}


def launch(rounds: int, cwd: Path, log: Any) -> dict[str, Any]:
    """``nproc``: wall time of ``gradscope run --nproc 2`` minus that of torch's launcher, same script."""
    (cwd / "ddp.py").write_text(DDP_SCRIPT)
    gradscope = [sys.executable, "-m", "gradscope", "run", "--nproc", "2", "ddp.py"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "ddp.py"]
    def wall(argv: list[str]) -> float:
        # (torch's own launcher, unmonitored, now and then loses a rank to SIGABRT as gloo shuts
        # down on this machine: such a run is started again, once, and said)
        try:
            return run_process(argv, cwd).wall
        except RuntimeError as exc:
            print(f"  nproc: a run failed, started again: {str(exc).splitlines()[0]}", file=log, flush=True)
            return run_process(argv, cwd).wall

    wall(gradscope), wall(torchrun)  # (warm the caches)
    pairs = []
    for round_index in range(rounds):
        order = [gradscope, torchrun] if round_index % 2 == 0 else [torchrun, gradscope]
        walls = {id(argv): wall(argv) for argv in order}
        pairs.append((walls[id(gradscope)], walls[id(torchrun)]))
        print(f"  nproc: round {round_index + 1}/{rounds}", file=log, flush=True)
    extra = [g - t for g, t in pairs]
    return {"name": "nproc", "what": "`gradscope run --nproc 2 ddp.py` - `python -m torch.distributed.run --standalone "
            "--nproc-per-node 2 ddp.py`, wall seconds", "target": 2.0,
            "seconds": {"extra": statistics.median(extra), "min": min(extra), "max": max(extra),
                        "gradscope": statistics.median(g for g, _ in pairs),
                        "torchrun": statistics.median(t for _, t in pairs)}}


def comparisons(tmp: Path, torch_available: bool) -> list[Comparison]:
    py = sys.executable
    (tmp / "deep.py").write_text(DEEP_MODEL)
    (tmp / "plain_watch.py").write_text(PLAIN_WATCH)
    (tmp / "repeat_inspect.py").write_text(REPEAT_INSPECT)
    (tmp / "repeat_plain.py").write_text(REPEAT_PLAIN)
    (tmp / "mlp_train.py").write_text(TORCH_MLP_SCRIPT)
    (tmp / "gpt_train.py").write_text(TORCH_GPT_SCRIPT)
    (tmp / "wide_train.py").write_text(TORCH_WIDE_SCRIPT)
    gradscope = [py, "-m", "gradscope"]
    result = [
        Comparison("watch", "deep narrow MLP: `gradscope watch MODEL --nan --format json` / plain loop, CPU",
                   [*gradscope, "watch", "deep.py", "--steps", "{N}", "--nan", "--format", "json"],
                   [py, "plain_watch.py", "deep.py", "{N}"], 610, 10, 1.2),
        Comparison("inspect", "deep narrow MLP: `gradscope inspect MODEL --format json` (click entry point, N "
                   "times in one process) / load + one pass, N times, CPU",
                   [py, "repeat_inspect.py", "deep.py", "{N}"], [py, "repeat_plain.py", "deep.py", "{N}"], 41, 1,
                   2.0),
    ]
    if torch_available:
        result += [
            Comparison("run-mlp", "torch MLP 784-512-512-10: `gradscope run --nan --inf train.py` / `python train.py`",
                       [*gradscope, "run", "--nan", "--inf", "mlp_train.py", "{N}"], [py, "mlp_train.py", "{N}"],
                       210, 10, 1.1, check_rss=True),
            Comparison("run-gpt", "GPT-2-shaped transformer (12 x 256, seq 128, batch 4, AdamW): `gradscope run --nan "
                       "--inf train.py` / `python train.py`",
                       [*gradscope, "run", "--nan", "--inf", "gpt_train.py", "{N}"], [py, "gpt_train.py", "{N}"],
                       25, 5, 1.1, check_rss=True),
            Comparison("run-wide", "torch model of 1,000 tiny modules (500 x Linear(8, 8) + Tanh): `gradscope run "
                       "--nan --inf train.py` / `python train.py` (the cost per module call, no target)",
                       [*gradscope, "run", "--nan", "--inf", "wide_train.py", "{N}"], [py, "wide_train.py", "{N}"],
                       105, 5, None),
            Comparison("log", "torch model of 1,000 modules: `gradscope run --log FILE train.py` / `gradscope run "
                       "train.py` (a step record against the step)",
                       [*gradscope, "run", "--log", "steps-{N}.jsonl", "wide_train.py", "{N}"],
                       [*gradscope, "run", "wide_train.py", "{N}"], 105, 5, 2.0),
        ]
    return result


def format_table(results: list[dict[str, Any]]) -> str:
    lines = [f"{'workload':<9} {'CPU ratio (range)':<22} {'wall ratio':<11} {'ms/step mon/plain':<19} "
             f"{'peak RSS':<16} target"]
    for result in results:
        if "seconds" in result:  # (nproc: an extra time, not a ratio)
            seconds = result["seconds"]
            verdict = "ok" if seconds["extra"] <= result["target"] else "MISSED"
            lines.append(f"{result['name']:<9} {'-':<22} {'-':<11} {'-':<19} {'-':<16} "
                         f"+{seconds['extra']:.2f} s ({seconds['gradscope']:.2f} / {seconds['torchrun']:.2f} s) "
                         f"<= {result['target']} s {verdict}")
            continue
        cpu = result.get("cpu")
        wall = result["wall"]
        cpu_text = f"{cpu['ratio']:.3f} ({cpu['min']:.2f}..{cpu['max']:.2f})" if cpu else "-"
        wall_text = f"{wall['ratio']:.3f}"
        per_step = (f"{cpu['monitored_ms_per_step']:.2f}/{cpu['plain_ms_per_step']:.2f}" if cpu else "-")
        rss = (f"{result['peak_rss_ratio']:.3f} ({result['peak_rss_mib']['monitored']:.0f}/"
               f"{result['peak_rss_mib']['plain']:.0f} MiB)" if "peak_rss_ratio" in result else "-")
        figure = cpu["ratio"] if cpu else wall["ratio"]
        verdict = "" if result["target"] is None else ("ok" if figure <= result["target"] else "MISSED")
        target = "-" if result["target"] is None else f"<= {result['target']}"
        lines.append(f"{result['name']:<9} {cpu_text:<22} {wall_text:<11} {per_step:<19} {rss:<16} "
                     f"{target} {verdict}".rstrip())
    lines.append("")
    lines += [f"{result['name']}: {result['what']}" for result in results]
    for result in results:
        if "record_ms" in result:
            rate = result["records_per_second"]
            lines.append(f"log: a record adds {result['record_ms']:.2f} ms of CPU to a step of "
                         f"{result['cpu']['plain_ms_per_step']:.2f} ms ("
                         + (f"{rate:.0f} records/s)" if rate else "below the measurement's noise)"))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="append", choices=["watch", "inspect", "run-mlp", "run-gpt", "run-wide", "log", "cold", "nproc"],
                        help="run only this workload (repeatable)")
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 7")
    parser.add_argument("--rounds", type=int, help="rounds per workload (default 7)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH ('-': stdout)")
    args = parser.parse_args()
    rounds = args.rounds or (3 if args.quick else 7)
    log = sys.stderr if args.json == "-" else sys.stdout
    try:
        import importlib.util

        torch_available = importlib.util.find_spec("torch") is not None
    except ImportError:
        torch_available = False
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gradscope-bench-") as folder:
        tmp = Path(folder)
        def attempt(name: str, work: Callable[[], dict[str, Any] | None]) -> None:
            """Run one workload; one that fails is reported and the others still are."""
            try:
                result = work()
            except RuntimeError as exc:
                print(f"  {name}: FAILED: {exc}", file=log, flush=True)
                failed.append(name)
                return
            if result is not None:
                results.append(result)

        failed: list[str] = []
        for comparison in comparisons(tmp, torch_available):
            if args.only and comparison.name not in args.only:
                continue
            attempt(comparison.name, lambda: measure(comparison, rounds, tmp, log))
        if not args.only or "cold" in args.only:
            attempt("cold", lambda: cold(rounds, tmp, log))
        if torch_available and (not args.only or "nproc" in args.only):
            attempt("nproc", lambda: launch(rounds, tmp, log))
    print(format_table(results), file=log)
    if failed:
        print(f"failed (see above): {', '.join(failed)}", file=log)
    if not torch_available:
        print("torch is not installed: run-mlp, run-gpt, run-wide, log, cold and nproc were not measured", file=log)
    if args.json:
        text = json.dumps({"rounds": rounds, "results": results, "failed": failed}, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
