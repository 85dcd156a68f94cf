"""``gradscope run --nproc 2 --on-nonfinite skip``: every rank skips the same poisoned step (gloo, CPU).

Rank 1's batch at step 2 holds a row of zeros, which the first module turns into NaN (0 / 0).
Every rank decides from the numbers combined over the ranks (the one ``all_reduce`` a step that
``run`` makes anyway), so both skip step 2; the oracle is the same job told to leave step 2 out.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90

SCRIPT = """
import sys
import torch
import torch.distributed as dist
from torch import nn


class Normalize(nn.Module):
    def forward(self, x):
        return x / x.norm(dim=1, keepdim=True)


omit, fsdp = "omit" in sys.argv[1:], "fsdp" in sys.argv[1:]
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(Normalize(), nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
if fsdp:
    from torch.distributed.fsdp import fully_shard

    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
else:
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)


def values():
    return [repr(float(v)) for p in model.parameters()
            for v in (p.detach().full_tensor() if hasattr(p, "full_tensor") else p.detach()).reshape(-1)]


for step in range(5):
    if omit and step == 2:
        continue
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(100 * step + rank))
    if step == 2 and rank == 1:
        x[2] = 0.0
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("adam", sorted({float(s["step"]) for s in optimizer.state.values()}), "parameters", values(), flush=True)
dist.destroy_process_group()
"""


def _gradscope(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", NO_COLOR="1")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return subprocess.run([sys.executable, "-m", "gradscope", "run", "--nproc", "2", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)


def _finals(stderr: str) -> dict[str, str]:
    return {line.split("]", 1)[0]: line.split("] ", 1)[1] for line in stderr.splitlines()
            if line.startswith("[rank") and "] adam " in line}


@pytest.mark.parametrize("wrapper", ["ddp", "fsdp"])
def test_every_rank_skips_the_poisoned_step(tmp_path, wrapper):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    words = ["fsdp"] if wrapper == "fsdp" else []
    oracle = _gradscope(str(script), "omit", *words, cwd=tmp_path)
    assert oracle.returncode == 0, oracle.stderr
    done = _gradscope("--on-nonfinite", "skip", "--format", "json", str(script), *words, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    expected, finals = _finals(oracle.stdout + oracle.stderr), _finals(done.stderr)
    assert set(finals) == {"[rank0", "[rank1"} and finals == expected
    assert finals["[rank0"].startswith("adam [4.0] parameters")
    document = json.loads(done.stdout)
    assert [step["skip"] for step in document["history"]] == [None, None, "nonfinite", None, None]
    origin = document["history"][2]["origin"]
    # DDP: rank 1 re-runs its model call alone and names the node. FSDP2: a re-run on one rank would
    # leave its sharding state out of step with the other rank's in a run that goes on, so the
    # origin names the rank, the step and the phase only.
    expected_origin = (1, 2, "forward", "0", "DivBackward0", "nan") if wrapper == "ddp" else \
        (1, 2, "forward", None, None, "nan")
    assert (origin["rank"], origin["step"], origin["phase"], origin["module"], origin["node"], origin["kind"]) == \
        expected_origin
    assert document["stopped"] is None and document["skipped_steps"]["nonfinite"] == 1


def test_debug_on_failure_opens_on_the_rank_that_found_it(tmp_path):
    script = ROOT / "sample_scripts" / "train_ddp.py"
    done = _gradscope("--nan", "--debug-on-failure", "--commands", "break nan; continue; where; quit", str(script),
                      "--steps", "4", "--bad-step", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    output = done.stdout + done.stderr
    assert "[rank1] gradscope: opening the debugger on step 2's model call" in output
    assert "[rank0] gradscope: opening the debugger" not in output
    assert "[rank1] (gradscope) where" in output and "[rank1]   step:    2" in output
    assert "[rank1] quit: the pass was aborted" in output


def test_debug_on_failure_says_it_cannot_open_on_a_sharded_model(tmp_path):
    """FSDP2: the failing call's re-run would gather the shards on one rank while the others wait;
    the debugger is not opened, the rank says why, and the run ends as a plain --nan stop (it once
    ended with an internal error, then a crashed rank)."""
    script = ROOT / "sample_scripts" / "train_ddp.py"
    done = _gradscope("--nan", "--debug-on-failure", "--commands", "where; quit", str(script),
                      "--steps", "4", "--bad-step", "2", "--fsdp", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert ("[rank1] gradscope: the model is sharded over the ranks (FSDP2): --debug-on-failure cannot re-run its "
            "call on one rank, so the debugger was not opened") in done.stderr
    assert "(gradscope)" not in done.stderr and "error:" not in done.stderr
    assert "DivBackward0" in done.stderr and "train_ddp.py:22" in done.stderr  # the origin, as without the debugger
