"""``gradscope run --nan --inf`` on real training stacks: where the first non-finite value started.

Each case runs a script of ``scripts/`` as its users would (a nanoGPT-style loop with its CUDA AMP
pattern on the CPU, an HF ``Trainer``, a timm-style ResNet under CPU bf16 autocast, a Lightning
``Trainer`` on two DDP processes, plain DDP started with ``torch.multiprocessing.spawn``). The truth
of each fault (step, rank, phase, module, node, source line) is established without gradscope:
by the script's construction, by torch's anomaly mode, or by the same operation run in torch
alone; the ``--format json`` report must agree field by field.
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
TIMEOUT = 180
FIELDS = ("step", "rank", "phase", "module", "node", "source", "kind")


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", NO_COLOR="1", PYTHONWARNINGS="ignore")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "GRADSCOPE_RUN_FOLLOWED"):
        env.pop(name, None)
    return env


def _run(folder: str, *args: str) -> tuple[int, dict, str]:
    """``gradscope run --nan --inf --format json ARGS`` in ``scripts/FOLDER``: exit code, JSON, stderr."""
    done = subprocess.run([sys.executable, "-m", "gradscope", "run", "--nan", "--inf", "--format", "json", *args],
                          cwd=SCRIPTS / folder, env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    try:
        document = json.loads(done.stdout[done.stdout.index("{"):])
    except ValueError:
        pytest.fail(f"no JSON report (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.returncode, document, done.stderr


def _line(path: Path, text: str) -> int:
    """The only line of ``path`` that contains ``text``."""
    numbers = [number for number, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    assert len(numbers) == 1, (text, numbers)
    return numbers[0]


def _origin(document: dict) -> dict:
    return {field: document["first_nonfinite"][field] for field in FIELDS}


def _history_agrees(document: dict, step: int) -> None:
    """The report never contradicts its own numbers: finite steps before the origin, the origin's
    step is the last one recorded, and its gradient norm is not finite."""
    history = document["history"]
    assert [record["step"] for record in history] == list(range(step + 1))
    assert all(isinstance(record["total_grad_norm"], float) for record in history[:step])
    assert history[step]["total_grad_norm"] in ("nan", "inf", "-inf")


# ---------------------------------------------------------------------------- nanoGPT: disabled scalers
@functools.lru_cache(maxsize=None)
def _anomaly_truth(folder: str, script: str) -> tuple[int, str, str]:
    """``(step, node, file:line)`` of the first NaN of the script's backward passes, from torch's
    anomaly mode alone (no gradscope): the iteration it failed in, the node it names and the
    innermost frame of the script's folder in the forward traceback it prints."""
    code = ("import runpy, sys, torch; torch.autograd.set_detect_anomaly(True); "
            f"sys.argv = [{script!r}]; runpy.run_path({script!r}, run_name='__main__')")
    env = _env()
    env.pop("PYTHONWARNINGS")  # anomaly mode prints the forward traceback as a warning
    done = subprocess.run([sys.executable, "-c", code], cwd=SCRIPTS / folder, env=env, capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert done.returncode != 0
    node = re.search(r"Function '(\w+)' returned nan values", done.stderr)[1]
    frames = re.findall(r'File "([^"]+)", line (\d+)', done.stderr.split("Traceback of forward call")[1])
    local = [(Path(file).name, int(line)) for file, line in frames if Path(file).parent == SCRIPTS / folder]
    step = len(re.findall(r"^iter \d+:", done.stdout, re.MULTILINE))
    return step, node, f"{local[-1][0]}:{local[-1][1]}"


@pytest.mark.parametrize("scaler", ["config", "cuda"])
def test_nanogpt_disabled_gradient_scaler_keeps_checking_gradients(scaler):
    """``GradScaler(enabled=(dtype == 'float16'))`` on float32, and ``GradScaler('cuda')`` that
    disables itself without CUDA: ``scale()`` returns the loss unchanged, so the gradients are
    checked and the NaN is found in the backward pass that made it, not blamed on AdamW."""
    step, node, source = _anomaly_truth("nanogpt", "train.py")
    assert (step, node, source) == (3, "MulBackward0", f"model.py:{_line(SCRIPTS / 'nanogpt' / 'model.py', 'e * torch.rsqrt(n)')}")
    code, document, stderr = _run("nanogpt", "train.py", f"--scaler_kind={scaler}")
    assert code == 1
    assert _origin(document) == {"step": step, "rank": None, "phase": "backward", "module": "transformer.wte",
                                 "node": node, "source": source, "kind": "nan"}
    _history_agrees(document, step)
    assert "although its gradient was finite" not in stderr


# ---------------------------------------------------------------------------- HF Trainer: the loss computation
def test_hf_trainer_masked_mean_nan_is_named_in_the_loss_computation():
    """A Trainer whose compute_loss divides by mask.sum(): an all-padding batch gives 0/0. The
    report names the division's node and line, outside every module."""
    pytest.importorskip("transformers")
    script = SCRIPTS / "hf" / "trainer_masked_loss.py"
    token_loss, mask = torch.ones(2, 3, requires_grad=True), torch.zeros(2, 3)
    made = (token_loss * mask).sum() / mask.sum()  # the script's expression on an all-padding mask
    assert torch.isnan(made) and made.grad_fn.name() == "DivBackward0"
    code, document, _ = _run("hf", script.name)
    assert code == 1
    assert _origin(document) == {"step": 3, "rank": None, "phase": "forward", "module": None,
                                 "node": made.grad_fn.name(), "source": f"{script.name}:{_line(script, '/ mask.sum()')}",
                                 "kind": "nan"}
    _history_agrees(document, 3)


def test_hf_trainer_healthy_run_is_unchanged_by_watching():
    """Without a padded batch: the same output as ``python SCRIPT`` (the Trainer's own logged
    losses and gradient norms), exit 0, one record per optimizer step with the Trainer's losses."""
    pytest.importorskip("transformers")
    plain = subprocess.run([sys.executable, "trainer_masked_loss.py", "5", "-1"], cwd=SCRIPTS / "hf", env=_env(),
                           capture_output=True, text=True, timeout=TIMEOUT)
    code, document, stderr = _run("hf", "trainer_masked_loss.py", "5", "-1")
    logged = [line for line in plain.stdout.splitlines() if line.startswith("step ")]
    assert plain.returncode == code == 0 and document["status"] == "ok" and len(logged) == 5
    assert [line for line in stderr.splitlines() if line.startswith("step ")] == logged
    losses = [float(line.split()[3]) for line in logged]
    assert [record["loss"] for record in document["history"]] == pytest.approx(losses, rel=1e-6)


# ---------------------------------------------------------------------------- accelerate: the targets
def test_accelerate_loop_nan_made_from_targets_names_the_operation_and_line():
    """log() of a negative target: no autograd node made the NaN (the targets need no gradient),
    so ``node`` is null and the source is the loss line; the model's bf16 forward (accelerate's
    autocast wrapper) stays finite."""
    pytest.importorskip("accelerate")
    script = SCRIPTS / "accelerate" / "loop_log_target.py"
    assert torch.isnan(torch.log(torch.tensor(-1.0))) and torch.log(torch.tensor(-1.0)).grad_fn is None
    code, document, stderr = _run("accelerate", script.name)
    assert code == 1
    assert _origin(document) == {"step": 3, "rank": None, "phase": "forward", "module": None, "node": None,
                                 "source": f"{script.name}:{_line(script, 'torch.log(target)')}", "kind": "nan"}
    _history_agrees(document, 3)
    assert "log() in the loss computation made nan" in " ".join(stderr.split())


# ---------------------------------------------------------------------------- timm-style: NaN in the data
def test_timm_style_resnet_blank_image_names_the_calling_line_input_and_batch_element():
    """A Dataset standardises a blank image (std 0): batch 3 element 1 is NaN. No node (the value
    was made by no autograd node); the source is the line that called the model with it."""
    script = SCRIPTS / "timm" / "resnet_blank_image.py"
    image = torch.full((3, 16, 16), 0.5)
    assert torch.isnan((image - image.mean()) / image.std()).all()  # what the Dataset hands on
    code, document, stderr = _run("timm", script.name)
    assert code == 1
    assert _origin(document) == {"step": 3, "rank": None, "phase": "forward", "module": None, "node": None,
                                 "source": f"{script.name}:{_line(script, 'logits = model(images)')}",
                                 "kind": "nan"}
    assert "input 'x', batch element 1 of 4" in " ".join(stderr.split())


# ---------------------------------------------------------------------------- Lightning DDP
def _lightning_truth() -> dict:
    """Rank 1 takes samples 1, 3, 5, ...: its step 2 holds sample 9, whose count is 0; the guarded
    division's backward makes the NaN (torch alone says which node)."""
    x, counts = torch.ones(2, 3, requires_grad=True), torch.tensor([[0.0], [2.0]])
    torch.where(counts > 0, x / counts, torch.zeros_like(x)).sum().backward()
    assert torch.isnan(x.grad[0]).all() and torch.isfinite(x.grad[1]).all()
    script = SCRIPTS / "lightning" / "ddp_counts.py"
    return {"step": 2, "rank": 1, "phase": "backward", "module": "norm", "node": "DivBackward0",
            "source": f"{script.name}:{_line(script, 'x / counts')}", "kind": "nan"}


def _lightning_ready() -> None:
    pytest.importorskip("lightning")
    dist = pytest.importorskip("torch.distributed")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")


def test_lightning_ddp_under_nproc_reruns_the_redirected_training_step():
    """Under --nproc 2, Lightning calls the DDP-wrapped module through a forward redirection to
    training_step; the localising re-run calls the same, and finds the node on rank 1."""
    _lightning_ready()
    code, document, _ = _run_nproc("lightning", "ddp_counts.py")
    assert code == 1
    assert _origin(document) == _lightning_truth()
    _history_agrees(document, 2)


def _run_nproc(folder: str, script: str) -> tuple[int, dict, str]:
    done = subprocess.run([sys.executable, "-m", "gradscope", "run", "--nproc", "2", "--nan", "--inf", "--format",
                           "json", script], cwd=SCRIPTS / folder, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT)
    return done.returncode, json.loads(done.stdout[done.stdout.index("{\n"):]), done.stderr


def test_lightning_devices_2_launching_its_own_rank_is_followed():
    """Without --nproc, Lightning re-runs the script for rank 1; gradscope follows that process,
    so the report is the one --nproc 2 gives, and says that it followed it."""
    _lightning_ready()
    code, document, stderr = _run("lightning", "ddp_counts.py")
    assert code == 1
    assert _origin(document) == _lightning_truth()
    _history_agrees(document, 2)
    assert [[entry["rank"] for entry in record["ranks"]] for record in document["history"]] == [[0, 1]] * 3
    assert "gradscope followed it and combined every step over the 2 ranks" in " ".join(stderr.split())


# ---------------------------------------------------------------------------- plain DDP, torch.multiprocessing.spawn
@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_ranks_started_with_torch_multiprocessing_are_followed(start):
    """The script's own process trains nothing; the two processes torch.multiprocessing starts
    (spawn, or start_processes with fork, whose children inherit the script's monitor) are
    watched, their steps combined, and the report is theirs: rank 1 was handed a NaN at its
    step 1 (element 2 of its batch), at the line that called the model."""
    dist = pytest.importorskip("torch.distributed")
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("torch.distributed with gloo is not available")
    script = SCRIPTS / "ddp" / "spawn_two.py"
    code, document, stderr = _run("ddp", script.name, "--bad", *(["--fork"] if start == "fork" else []))
    assert code == 1
    assert _origin(document) == {"step": 1, "rank": 1, "phase": "forward", "module": None, "node": None,
                                 "source": f"{script.name}:{_line(script, 'loss = model(batch)')}", "kind": "nan"}
    _history_agrees(document, 1)
    assert [[entry["rank"] for entry in record["ranks"]] for record in document["history"]] == [[0, 1]] * 2
    text = " ".join(stderr.split())
    assert "the script started 2 processes running train() with torch.multiprocessing; gradscope followed them " \
           "and combined every step over their ranks" in text
    assert "input 'input', batch element 2 of 8" in text
