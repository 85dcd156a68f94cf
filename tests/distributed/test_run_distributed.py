"""``gradscope run --nproc 2`` on torch.distributed (gloo, CPU, localhost): real processes.

Every launch has a subprocess timeout, so a hang fails the test instead of blocking the suite.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "sample_scripts" / "train_ddp.py"
#: The line of train_ddp.py that divides by a zero norm.
DIVIDE_LINE = next(number for number, line in enumerate(SCRIPT.read_text().splitlines(), 1) if "x / x.norm" in line)
TIMEOUT = 90
#: FSDP2 on the CPU: torch 2.6's fully_shard records events on a torch.cpu.Stream, which has no
#: record_event before later releases (2.13 has it).
needs_fsdp2_on_cpu = pytest.mark.skipif(
    not hasattr(torch.cpu.Stream, "record_event"),
    reason=f"FSDP2 (fully_shard) cannot run on the CPU with torch {torch.__version__}: "
           "torch.cpu.Stream has no record_event")


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", NO_COLOR="1")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def _gradscope(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradscope", "run", "--nproc", "2", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=TIMEOUT)


def _pids(output: str) -> list[int]:
    return [int(line.rsplit(" ", 1)[1]) for line in output.splitlines() if line.split("] ", 1)[-1].startswith("pid ")]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def _assert_all_exited(pids: list[int]) -> None:
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if _alive(pid)], "a rank outlived the launcher"


def test_ddp_bad_batch_on_rank_1_names_the_rank_step_and_module(tmp_path):
    log = tmp_path / "steps.jsonl"
    done = _gradscope("--nan", "--format", "json", "--log", str(log), str(SCRIPT), "--steps", "6", "--bad-step", "2",
                      "--print-pid", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    origin = document["first_nonfinite"]
    assert (origin["rank"], origin["step"], origin["phase"], origin["module"], origin["node"], origin["kind"]) == \
        (1, 2, "forward", "0", "DivBackward0", "nan")
    assert origin["source"] == f"{SCRIPT}:{DIVIDE_LINE}"
    assert document["status"] == "nonfinite" and document["steps_run"] == 3
    assert [len(step["ranks"]) for step in document["history"]] == [2, 2, 2]
    # the user's output passes through, prefixed with the rank; rank 1 never printed step 2
    assert "[rank0] step 1: loss" in done.stderr and "[rank1] step 1: loss" in done.stderr
    assert "[rank1] step 2: loss" not in done.stderr
    assert "Warning" not in done.stderr  # gradscope's collectives use torch's current API names
    pids = _pids(done.stderr)
    assert len(pids) == 2
    _assert_all_exited(pids)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 1, 2]  # rank 0 alone writes the log
    assert lines[2]["nonfinite"] == "loss"


def _reference_parameter_norms(steps: int) -> list[dict[str, float]]:
    """The same model trained in one process on the union of both ranks' batches."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import train_ddp as train
    finally:
        sys.path.pop(0)
    model = train.make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []
    for step in range(steps):
        x = torch.cat([train.batch(step, 0), train.batch(step, 1)])
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        norms.append({name: float(p.grad.norm()) for name, p in model.named_parameters()})
        optimizer.step()
    return norms


@needs_fsdp2_on_cpu
def test_fsdp2_parameter_norms_are_the_global_ones_and_a_bad_batch_is_localised(tmp_path):
    """Steps 0-2 are healthy: their norms are the one-process ones. At step 3 rank 1's batch makes
    the first module divide by zero: the sharded model is gathered on every rank and re-run on
    rank 1 alone, so the origin is as complete as under DDP."""
    log = tmp_path / "steps.jsonl"
    done = _gradscope("--nan", "--format", "json", "--log", str(log), str(SCRIPT), "--fsdp", "--steps", "5",
                      "--bad-step", "3", "--print-pid", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["first_nonfinite"] == {
        "step": 3, "rank": 1, "phase": "forward", "module": "0", "node": "DivBackward0",
        "source": f"{SCRIPT}:{DIVIDE_LINE}", "kind": "nan"}
    _assert_all_exited(_pids(done.stderr))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["nonfinite"] for line in lines] == [None, None, None, "loss"]
    reference = _reference_parameter_norms(3)
    for line, expected in zip(lines, reference):
        assert set(line["parameters"]) == set(expected)
        for name, norm in expected.items():
            assert line["parameters"][name] == pytest.approx(norm, rel=1e-5, abs=1e-7), (line["step"], name)
        # each rank holds a shard: its own norm is below the global one, their squares add up to it
        shards = [rank["total_grad_norm"] for rank in line["ranks"]]
        assert sum(s * s for s in shards) == pytest.approx(line["total_grad_norm"] ** 2, rel=1e-6)
        assert all(shard < line["total_grad_norm"] for shard in shards)


#: An FSDP2 script whose rank 1 gets a row of zeros at step 1: module "1" takes the square root of
#: that row's exact zero sum of squares, so only the backward pass turns non-finite (sqrt' = Inf).
FSDP_BACKWARD = """
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.weight


class RowNorm(nn.Module):
    def forward(self, h):
        return torch.sqrt((h * h).sum(-1, keepdim=True))


torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(Scale(), RowNorm(), nn.Linear(1, 2))
for layer in (model[0], model[2], model):
    fully_shard(layer)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
print(f"pid {os.getpid()}", flush=True)
for step in range(4):
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(10 * step + rank))
    if step == 1 and rank == 1:
        x[3] = 0.0
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
"""


@needs_fsdp2_on_cpu
def test_fsdp2_backward_only_nonfinite_names_the_node(tmp_path):
    script = tmp_path / "fsdp_backward.py"
    script.write_text(FSDP_BACKWARD)
    done = _gradscope("--nan", "--format", "json", str(script), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    line = next(number for number, text in enumerate(script.read_text().splitlines(), 1) if "torch.sqrt" in text)
    assert json.loads(done.stdout)["first_nonfinite"] == {
        "step": 1, "rank": 1, "phase": "backward", "module": "1", "node": "SqrtBackward0",
        "source": f"{script.name}:{line}", "kind": "inf"}
    _assert_all_exited(_pids(done.stderr))


#: An FSDP2 script (one root ``fully_shard``) whose last update overflows only row 1 of the weight
#: and bias[1]: rank 1's shards. Nothing is non-finite before the script's end.
FSDP_LAST_UPDATE = """
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 2))
fully_shard(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
print(f"pid {os.getpid()}", flush=True)
for step in range(3):
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(10 * step + rank))
    if step == 2:
        optimizer.param_groups[0]["lr"] = 1e38
    loss = model(x)[:, 1].pow(2).mean() * (1e6 if step == 2 else 1.0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
"""


@needs_fsdp2_on_cpu
def test_fsdp2_end_of_run_parameter_check_combines_the_ranks(tmp_path):
    """Only rank 1 holds the parameters the last update made Inf: the end-of-run check runs on
    every rank when the script tears its group down, and rank 0's report names rank 1."""
    script = tmp_path / "fsdp_last_update.py"
    script.write_text(FSDP_LAST_UPDATE)
    done = _gradscope("--inf", "--format", "json", str(script), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert document["first_nonfinite"] == {"step": 2, "rank": 1, "phase": "update", "module": "0",
                                           "node": "SGD.step", "source": None, "kind": "inf"}
    assert document["status"] == "nonfinite" and document["steps_run"] == 3
    assert "[rank1] step 2: loss" in done.stderr
    _assert_all_exited(_pids(done.stderr))


def test_ctrl_c_stops_every_rank_and_exits_130(tmp_path):
    launcher = subprocess.Popen([sys.executable, "-m", "gradscope", "run", "--nproc", "2", str(SCRIPT), "--steps", "400",
                                 "--sleep", "0.05", "--print-pid"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
    output: list[str] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            line = launcher.stdout.readline()
            if not line:
                break
            output.append(line)
            if sum("] step 3: loss" in seen for seen in output) == 2:
                break
        assert sum("] step 3: loss" in seen for seen in output) == 2, "".join(output)
        launcher.send_signal(signal.SIGINT)
        rest, _ = launcher.communicate(timeout=TIMEOUT)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    text = "".join(output) + rest
    assert launcher.returncode == 130, text
    assert "interrupted after" in text and "Gradient norm per layer" in text
    assert "Traceback" not in text
    _assert_all_exited(_pids(text))
