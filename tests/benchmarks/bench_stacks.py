"""Per-step cost of ``gradscope run --nan --inf`` on the HF Trainer script of tests/stacks.

Run from the repository root (needs transformers)::

    python tests/benchmarks/bench_stacks.py [STEPS]

Runs ``tests/stacks/scripts/hf/trainer_masked_loss.py STEPS -1`` (no padded batch: a healthy run)
as ``python SCRIPT`` and as ``gradscope run --nan --inf SCRIPT``, alternating, three times each;
the script writes the wall-clock and CPU time at the end of each optimizer step, and the
per-step time is the median of the differences after the first five steps (start-up excluded),
one thread per process. Prints both medians and their ratio (target: <= 1.25x), for wall-clock
time and for CPU time (the one to trust on a machine shared with other work).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "stacks" / "scripts" / "hf" / "trainer_masked_loss.py"


def step_time(command: list[str], steps: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as directory:
        times_path = os.path.join(directory, "times.json")
        env = dict(os.environ, PYTHONPATH=str(ROOT), STEP_TIMES=times_path, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
        subprocess.run([*command, str(SCRIPT), str(steps), "-1"], cwd=SCRIPT.parent, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(times_path) as file:
            times = json.load(file)
    return tuple(statistics.median(later[kind] - earlier[kind] for earlier, later in zip(times[5:], times[6:]))
                 for kind in (0, 1))


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    plain, watched = [], []
    for _ in range(3):
        plain.append(step_time([sys.executable], steps))
        watched.append(step_time([sys.executable, "-m", "gradscope", "run", "--nan", "--inf"], steps))
    for kind, label in ((0, "wall-clock"), (1, "CPU")):
        base = statistics.median(times[kind] for times in plain)
        run = statistics.median(times[kind] for times in watched)
        print(f"{label}: python SCRIPT {base * 1e3:.2f} ms/step, gradscope run --nan --inf SCRIPT "
              f"{run * 1e3:.2f} ms/step, ratio {run / base:.2f}x (target <= 1.25x)")


if __name__ == "__main__":
    main()
