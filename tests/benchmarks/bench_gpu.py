"""Benchmark (not a test): ``gradscope run --nan --inf`` on a CUDA device, and its host synchronisations.

Run on a machine with a CUDA GPU, from the repository root (a few minutes)::

    python tests/benchmarks/bench_gpu.py
    python tests/benchmarks/bench_gpu.py --device cpu --steps 6   # a dry run of the plumbing on CPU

gradscope's design on PyTorch keeps every per-step statistic on the device and makes one host
synchronisation per step (the transfer of the step's packed norms). This script checks that and
prices it, on two training scripts run as users run them (whole processes; each script times its own
steps from the third on, between two device synchronisations, so that start-up, which on a
sandboxed GPU machine varies by seconds, is left out; median over rounds):

* an MLP 4096-4096-4096-10, batch 512, SGD;
* a GPT-2-shaped transformer (12 blocks, width 768, 12 heads, sequence 512, batch 8, AdamW,
  bf16 autocast).

For each it prints ms per step plain and under ``gradscope run --nan --inf``, the ratio, the peak
device memory of both, and the number of synchronising CUDA calls per step, counted with
``torch.cuda.set_sync_debug_mode("warn")`` from the third step on (the plain scripts make none:
they read the loss only after the last step). Expected: 1 per step under gradscope, 0 plain.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt_model import GPT_MODEL  # noqa: E402

COMMON = '''\
import json, os, sys, time, warnings
import torch
DEVICE = os.environ.get("BENCH_DEVICE", "cuda")
STEPS = int(sys.argv[1])
COUNT_FROM = 2
syncs = []
started = []  # when the timed steps began (after a synchronisation)


def start_counting(step):
    if step != COUNT_FROM:
        return
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        warnings.simplefilter("always")
        original = warnings.showwarning

        def count(message, category, *args, **kwargs):
            if "synchroniz" in str(message):
                syncs.append(step_box[0])
            else:
                original(message, category, *args, **kwargs)

        warnings.showwarning = count
    started.append(time.perf_counter())


step_box = [0]


def finish(loss):
    if DEVICE == "cuda":
        torch.cuda.set_sync_debug_mode(0)
        torch.cuda.synchronize()
    timed = max(STEPS - COUNT_FROM, 0)
    step_ms = (time.perf_counter() - started[0]) / timed * 1e3 if started and timed else None
    report = {"loss": float(loss), "syncs": len(syncs), "counted_steps": timed, "step_ms": step_ms,
              "peak_bytes": torch.cuda.max_memory_allocated() if DEVICE == "cuda" else 0}
    out = os.environ.get("BENCH_REPORT")
    if out:
        with open(out, "w") as handle:
            json.dump(report, handle)
'''

MLP = COMMON + '''
from torch import nn
torch.manual_seed(0)
W = 4096 if DEVICE == "cuda" else 256  # a CPU dry run only checks the plumbing
model = nn.Sequential(nn.Linear(W, W), nn.ReLU(), nn.Linear(W, W), nn.ReLU(), nn.Linear(W, 10)).to(DEVICE)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
inputs = torch.randn(512, W, device=DEVICE)
labels = torch.randint(0, 10, (512,), device=DEVICE)
loss = torch.zeros(())
for step in range(STEPS):
    step_box[0] = step
    start_counting(step)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
finish(loss.detach().cpu())
'''

GPT = COMMON + '''
from torch import nn
from torch.nn import functional as F
torch.manual_seed(0)
WIDTH, HEADS, BLOCKS, SEQ, BATCH, VOCAB = 768, 12, 12, 512, 8, 8192
if DEVICE != "cuda":  # a CPU dry run only checks the plumbing
    WIDTH, HEADS, BLOCKS, SEQ, BATCH, VOCAB = 64, 4, 2, 32, 2, 128


''' + GPT_MODEL + '''

model = GPT().to(DEVICE)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
data = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=DEVICE)
dtype = torch.bfloat16
loss = torch.zeros(())
for step in range(STEPS):
    step_box[0] = step
    start_counting(step)
    with torch.autocast(device_type=DEVICE, dtype=dtype):
        loss = model(data[:, :-1], data[:, 1:])
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
finish(loss.detach().float().cpu())
'''


def run(argv: list[str], cwd: Path, device: str, report: Path) -> tuple[float, dict]:
    env = {**os.environ, "BENCH_DEVICE": device, "BENCH_REPORT": str(report), "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, json.loads(report.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=60, help="steps per run (the first two are not timed)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    args = parser.parse_args()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: nothing measured (use --device cpu for a dry run)")
        return 0
    if args.steps <= 3:
        parser.error("--steps must be at least 4 (steps 0 and 1 are warm-up)")
    results = []
    with tempfile.TemporaryDirectory(prefix="gradscope-gpu-bench-") as folder:
        tmp = Path(folder)
        report = tmp / "report.json"
        for name, source in (("mlp", MLP), ("gpt", GPT)):
            script = tmp / f"{name}.py"
            script.write_text(source)
            commands = {"plain": [sys.executable, str(script)],
                        "gradscope": [sys.executable, "-m", "gradscope", "run", "--nan", "--inf", str(script)]}
            per_step: dict[str, list[float]] = {kind: [] for kind in commands}
            last: dict[str, dict] = {}
            for round_index in range(args.rounds):
                for kind in (commands if round_index % 2 == 0 else reversed(list(commands))):
                    _, last[kind] = run([*commands[kind], str(args.steps)], tmp, args.device, report)
                    per_step[kind].append(last[kind]["step_ms"] / 1e3)
                print(f"  {name}: round {round_index + 1}/{args.rounds}", flush=True)
            plain, monitored = statistics.median(per_step["plain"]), statistics.median(per_step["gradscope"])
            result = {"workload": name, "plain_ms_per_step": plain * 1e3, "gradscope_ms_per_step": monitored * 1e3,
                      "ratio": monitored / plain,
                      "peak_mib": {kind: last[kind]["peak_bytes"] / 2 ** 20 for kind in commands},
                      "syncs_per_step": {kind: (last[kind]["syncs"] / last[kind]["counted_steps"]
                                                if last[kind]["counted_steps"] else None) for kind in commands}}
            results.append(result)
    print(f"{'workload':<9} {'plain ms':>9} {'gradscope ms':>13} {'ratio':>6} {'peak MiB plain/gs':>18} "
          f"{'syncs/step plain/gs':>20}")
    for r in results:
        syncs = r["syncs_per_step"]
        fmt = (lambda v: "n/a" if v is None or args.device != "cuda" else f"{v:.2f}")
        print(f"{r['workload']:<9} {r['plain_ms_per_step']:9.2f} {r['gradscope_ms_per_step']:13.2f} {r['ratio']:6.3f} "
              f"{r['peak_mib']['plain']:8.0f}/{r['peak_mib']['gradscope']:<9.0f} "
              f"{fmt(syncs['plain']):>9}/{fmt(syncs['gradscope']):<10}")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
