"""``gradscope run --on-nonfinite skip``: a poisoned step never reaches the weights, on both engines.

The oracle of every skip test is the same script told to leave the bad steps out itself
(``omit``): skipping must leave the parameters and the optimizer state exactly as if the step had
never been taken, so both runs print the same numbers, digit for digit.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest


# argv: engine, steps, bad steps (comma-separated), then words: "omit" (the script leaves the bad
# steps out: the oracle), "accumulate" (two micro-batches per step, the first one poisoned), "inf"
# (the bad batch holds +inf instead of NaN), "clipvalue" (the script clips by value itself).
SCRIPT = '''
import sys
ENGINE = sys.argv[1]
if ENGINE == "torch":
    import torch as T
    from torch import nn
    T.set_num_threads(1)
else:
    import gradscope as T
    from gradscope import nn
steps, bad = int(sys.argv[2]), [int(v) for v in sys.argv[3].split(",") if v]
words = sys.argv[4:]
T.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = T.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.1)
x = T.rand(16, 4)
y = T.rand(16, 1)
for step in range(steps):
    if "omit" in words and step in bad:
        continue
    opt.zero_grad()
    poison = float("inf") if "inf" in words else float("nan")
    xb = x * poison if step in bad else x
    for part in range(2 if "accumulate" in words else 1):
        loss = ((model(xb if part == 0 else x) - y) ** 2).mean()
        loss.backward()
    if "clipvalue" in words:
        nn.utils.clip_grad_value_(model.parameters(), 0.01)
    opt.step()
    print(f"step {step} loss {loss.item():.6f}")
state = [opt.state[p] for p in model.parameters()]
print("adam steps", [float(s["step"]) for s in state])
print("parameters", [repr(float(v)) for p in model.parameters() for v in p.detach().reshape(-1)])
print("moments", [repr(float(v)) for s in state for v in s["exp_avg"].reshape(-1)],
      [repr(float(v)) for s in state for v in s["exp_avg_sq"].reshape(-1)])
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train_skip.py"
    path.write_text(SCRIPT)
    return path


def _final(stdout: str) -> list[str]:
    """The parameters and Adam state the script printed at its end."""
    return [line for line in stdout.splitlines() if not line.startswith("step ")]


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_skipped_steps_leave_parameters_and_adam_state_as_if_never_taken(gradscope, engine, script, tmp_path):
    oracle = gradscope("run", str(script), engine, "6", "2,3", "omit", code=0)
    log = tmp_path / "steps.jsonl"
    result = gradscope("run", "--on-nonfinite", "skip", "--log", str(log), str(script), engine, "6", "2,3", code=1)
    assert _final(result.stdout) == _final(oracle.stdout)
    assert "adam steps [4.0, 4.0, 4.0, 4.0]" in result.stdout  # two of six steps never counted
    assert "step 5 loss" in result.stdout  # the script went on to its end
    records = _log(log)
    assert [(r["step"], r["skip"], r["skipped"]) for r in records] == \
        [(0, None, False), (1, None, False), (2, "nonfinite", True), (3, "nonfinite", True), (4, None, False),
         (5, None, False)]
    assert records[2]["origin"] == {"step": 2, "rank": None, "phase": "forward", "module": None,
                                    "node": None, "source": "train_skip.py:25", "kind": "nan"}  # (the model call's line)
    assert "origin" not in records[0]
    assert "2 steps were skipped because a loss or gradient was not finite" in result.stderr
    assert ": 2, 3" in result.stderr


def test_json_document_counts_the_skips_and_keeps_the_first_origin(gradscope, engine, script):
    doc = json.loads(gradscope("run", "--on-nonfinite", "skip", "--format", "json", str(script), engine, "5", "1",
                               code=1).stdout)
    assert doc["status"] == "nonfinite" and doc["stopped"] is None and doc["steps_run"] == 5
    assert doc["skipped_steps"] == {"nonfinite": 1, "overflow": 0, "spike": 0}
    assert doc["first_nonfinite"]["step"] == 1 and doc["first_nonfinite"]["node"] is None \
        and doc["first_nonfinite"]["source"] == "train_skip.py:25"
    assert [h["skip"] for h in doc["history"]] == [None, "nonfinite", None, None, None]
    assert doc["history"][1]["origin"]["kind"] == "nan"


def test_gradient_accumulation_skips_the_whole_accumulated_step(gradscope, engine, script):
    oracle = gradscope("run", str(script), engine, "5", "2", "omit", "accumulate", code=0)
    result = gradscope("run", "--on-nonfinite", "skip", str(script), engine, "5", "2", "accumulate", code=1)
    assert _final(result.stdout) == _final(oracle.stdout)


def test_only_watched_kinds_are_skipped(gradscope, engine, script):
    oracle = gradscope("run", str(script), engine, "4", "1", "omit", "inf", code=0)
    result = gradscope("run", "--nan", "--inf", "--on-nonfinite", "skip", str(script), engine, "4", "1", "inf",
                       code=1)
    assert _final(result.stdout) == _final(oracle.stdout)
    # --inf alone does not watch NaN: the NaN step reaches the weights (and the run exits 1)
    doc = json.loads(gradscope("run", "--inf", "--on-nonfinite", "skip", "--format", "json", str(script), engine,
                               "4", "1", code=1).stdout)
    assert doc["skipped_steps"]["nonfinite"] == 0 and doc["history"][1]["skip"] is None


def test_clip_by_value_does_not_turn_a_poisoned_step_into_a_finite_update(gradscope, engine, script):
    oracle = gradscope("run", "--clip", "0.01", "--clip-mode", "value", str(script), engine, "5", "2", "omit", "inf",
                       code=0)
    result = gradscope("run", "--clip", "0.01", "--clip-mode", "value", "--on-nonfinite", "skip", str(script), engine,
                       "5", "2", "inf", code=1)
    assert _final(result.stdout) == _final(oracle.stdout)
    # without skipping, clipping by value makes the infinite gradients finite: the weights change
    clipped = gradscope("run", "--clip", "0.01", "--clip-mode", "value", str(script), engine, "5", "2", "inf",
                        code=1)
    assert _final(clipped.stdout) != _final(oracle.stdout)


def test_too_many_consecutive_skips_stop_the_run_with_exit_1(gradscope, engine, script):
    result = gradscope("run", "--on-nonfinite", "skip", "--max-skips", "2", "--format", "json", str(script), engine,
                       "8", "2,3,4", code=1)
    doc = json.loads(result.stdout)
    assert doc["stopped"] == "skips" and doc["steps_run"] == 4
    assert [h["skip"] for h in doc["history"]] == [None, None, "nonfinite", "nonfinite"]
    assert "stopped after 2 consecutive skipped steps (--max-skips)" in result.stderr
    assert "step 4 loss" not in result.stderr


def test_a_good_step_resets_the_consecutive_count(gradscope, engine, script):
    doc = json.loads(gradscope("run", "--on-nonfinite", "skip", "--max-skips", "2", "--format", "json", str(script),
                               engine, "7", "1,3,5", code=1).stdout)
    assert doc["stopped"] is None and doc["steps_run"] == 7 and doc["skipped_steps"]["nonfinite"] == 3


def test_stop_remains_the_default(gradscope, engine, script):
    doc = json.loads(gradscope("run", "--nan", "--format", "json", str(script), engine, "5", "2", code=1).stdout)
    assert doc["stopped"] == "nonfinite" and doc["steps_run"] == 3 and doc["history"][-1]["skip"] is None


def test_a_script_without_optimizer_cannot_skip_and_is_stopped(gradscope, tmp_path):
    script = tmp_path / "manual.py"
    script.write_text(
        "import gradscope as T\nfrom gradscope import nn\nT.manual_seed(0)\nmodel = nn.Linear(2, 1)\n"
        "for step in range(4):\n    model.zero_grad()\n"
        "    x = T.ones(3, 2) * (float('nan') if step == 1 else 1.0)\n"
        "    model(x).sum().backward()\n"
        "    with T.no_grad():\n        for p in model.parameters():\n            p.sub_(0.1 * p.grad)\n"
        "    print('step', step)\n")
    result = gradscope("run", "--on-nonfinite", "skip", "--format", "json", str(script), code=1)
    doc = json.loads(result.stdout)
    assert doc["stopped"] == "nonfinite" and doc["first_nonfinite"]["step"] == 1
    assert "cannot be skipped: the run was stopped instead" in result.stderr


def test_options_are_checked_from_flags_and_config_alike(gradscope, script, tmp_path):
    result = gradscope("run", "--on-nonfinite", "ignore", str(script), "gradscope", "2", "", code=2)
    assert "--on-nonfinite: expected one of stop, skip, got 'ignore'" in result.stderr
    result = gradscope("run", "--max-skips", "0", str(script), "gradscope", "2", "", code=2)
    assert "--max-skips: expected a whole number >= 1, got 0" in result.stderr
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope]\non_nonfinite = \"skip\"\nmax_skips = 1\n")
    doc = json.loads(gradscope("run", "--format", "json", str(script), "gradscope", "5", "2,3", code=1).stdout)
    assert doc["stopped"] == "skips" and doc["skipped_steps"]["nonfinite"] == 1
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope]\nmax_skips = -3\n")
    result = gradscope("run", str(script), "gradscope", "2", "", code=2)
    assert "max_skips" in result.stderr and "expected a whole number >= 1, got -3" in result.stderr


def test_gradient_scaler_overflow_is_an_overflow_skip_not_divergence(gradscope, tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "amp.py"
    # Step 1 and, with "always", every step from 1 on: sqrt'(0) = Inf in the gradients only (the
    # loss stays finite), which a gradient scaler treats as an fp16 overflow and skips itself.
    script.write_text(
        "import sys\nimport torch\ntorch.manual_seed(0)\nmodel = torch.nn.Linear(2, 1)\n"
        "optimizer = torch.optim.Adam(model.parameters(), lr=0.1)\n"
        "scaler = torch.amp.GradScaler('cpu', init_scale=1024.0)\n"
        "for step in range(7):\n    optimizer.zero_grad()\n    loss = model(torch.ones(1, 2)).sum()\n"
        "    if step == 1 or (sys.argv[1:] == ['always'] and step >= 1):\n"
        "        loss = loss + torch.sqrt(model(torch.ones(1, 2)) * 0).sum()\n"
        "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n")
    log = tmp_path / "amp.jsonl"
    result = gradscope("run", "--on-nonfinite", "skip", "--max-skips", "2", "--format", "json", "--log", str(log),
                       str(script), code=0)
    doc = json.loads(result.stdout)
    assert doc["status"] == "ok" and doc["skipped_steps"] == {"nonfinite": 0, "overflow": 1, "spike": 0}
    assert [h["skip"] for h in doc["history"]] == [None, "overflow", None, None, None, None, None]
    assert [r["scale"] for r in _log(log)][:3] == [1024.0, 1024.0, 512.0]
    assert "1 step was skipped by the gradient scaler (fp16 overflow, not divergence); scale 1024 -> " in result.stderr
    # overflowing at every scale: not counted towards --max-skips, but reported as a falling scale
    result = gradscope("run", "--on-nonfinite", "skip", "--max-skips", "2", "--format", "json", str(script),
                       "always", code=0)
    doc = json.loads(result.stdout)
    assert doc["stopped"] is None and doc["skipped_steps"]["overflow"] == 6
    assert [h["scale"] for h in doc["history"]] == [1024.0, 1024.0, 512.0, 256.0, 128.0, 64.0, 32.0]
    assert "the gradient scale kept falling: the last 5 steps all overflowed" in result.stderr


def test_batchnorm_statistics_are_not_updated_again_by_the_localising_rerun(gradscope, engine, tmp_path):
    script = tmp_path / "bn.py"
    script.write_text(SCRIPT.replace("nn.Sequential(nn.Linear(4, 8), nn.Tanh()",
                                     "nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh()")
                      .replace('print("adam steps"', 'print("batches", int(model[1].num_batches_tracked))\n'
                                                      'print("adam steps"'))
    result = gradscope("run", "--on-nonfinite", "skip", str(script), engine, "4", "1", code=1)
    assert "batches 4" in result.stdout  # the script's four forward passes, not five
