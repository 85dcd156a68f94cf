"""``gradscope run --inf --allow-inf GLOB``: a module whose output holds -inf by design (an attention
mask) does not stop the run, while NaN and +inf elsewhere, or +inf in it, are still found (both engines).

The model: scores = q(x) k(x)^T; ``mask`` adds a causal mask of -inf above the diagonal; softmax;
``out``; ``root`` takes sqrt(h * h + offset); ``boost`` multiplies by a factor. argv: engine,
mode ("healthy"; "nan": offset -1e6 at step 2, so ``root`` makes NaN; "inf": factor 1e39 at step 2,
so ``boost`` overflows to +inf; "mask_inf": the mask adds +inf at step 2, which it must not).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

SCRIPT = '''
import sys
ENGINE, mode = sys.argv[1], sys.argv[2]
if ENGINE == "torch":
    import torch as T
    from torch import nn
    T.set_num_threads(1)
else:
    import gradscope as T
    from gradscope import nn


class Mask(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("bias", T.triu(T.full((n, n), float("-inf")), diagonal=1))
        self.extra = 0.0

    def forward(self, scores):
        return scores + self.bias + self.extra * (self.bias == 0)


class Root(nn.Module):
    offset = 0.0

    def forward(self, h):
        return T.sqrt(h * h + 1.0 + self.offset)


class Boost(nn.Module):
    factor = 1.0

    def forward(self, h):
        return h * self.factor


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.mask = nn.Linear(4, 4), nn.Linear(4, 4), Mask(5)
        self.out, self.root, self.boost = nn.Linear(4, 1), Root(), Boost()

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(-1, -2)
        weights = T.softmax(self.mask(scores), dim=-1)
        return self.boost(self.root(self.out(weights @ x)))


T.manual_seed(0)
model = Attention()
optimizer = T.optim.SGD(model.parameters(), lr=0.01)
x = T.rand(3, 5, 4)
for step in range(4):
    model.root.offset = -1e6 if (mode == "nan" and step == 2) else 0.0
    model.boost.factor = 1e39 if (mode == "inf" and step == 2) else 1.0
    model.mask.extra = float("inf") if (mode == "mask_inf" and step == 2) else 0.0
    optimizer.zero_grad()
    model(x).mean().backward()
    optimizer.step()
    print("step", step)
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "attention.py"
    path.write_text(SCRIPT)
    return path


def _doc(gradscope, *args: str, code: int) -> dict:
    return json.loads(gradscope("run", "--format", "json", *args, code=code).stdout)


def test_without_allow_inf_the_mask_stops_the_run(gradscope, engine, script):
    origin = _doc(gradscope, "--inf", str(script), engine, "healthy", code=1)["first_nonfinite"]
    assert (origin["step"], origin["module"], origin["kind"]) == (0, "mask", "inf")


def test_allowed_mask_runs_to_the_end(gradscope, engine, script):
    doc = _doc(gradscope, "--nan", "--inf", "--allow-inf", "mask", str(script), engine, "healthy", code=0)
    assert doc["status"] == "ok" and doc["steps_run"] == 4


def test_nan_elsewhere_is_still_found_and_named(gradscope, engine, script):
    origin = _doc(gradscope, "--nan", "--inf", "--allow-inf", "mask", str(script), engine, "nan",
                  code=1)["first_nonfinite"]
    assert (origin["step"], origin["phase"], origin["module"], origin["kind"]) == (2, "forward", "root", "nan")


def test_plus_inf_elsewhere_is_still_found(gradscope, engine, script):
    origin = _doc(gradscope, "--inf", "--allow-inf", "m*sk", str(script), engine, "inf", code=1)["first_nonfinite"]
    assert (origin["step"], origin["phase"], origin["module"], origin["kind"]) == (2, "forward", "boost", "inf")


def test_plus_inf_in_the_allowed_module_is_still_found(gradscope, engine, script):
    origin = _doc(gradscope, "--nan", "--inf", "--allow-inf", "mask", str(script), engine, "mask_inf",
                  code=1)["first_nonfinite"]
    assert (origin["step"], origin["module"]) == (2, "mask")


def test_allow_inf_from_the_config_file(gradscope, engine, script, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.gradscope]\nallow_inf = ["mask"]\ninf = true\n')
    assert _doc(gradscope, str(script), engine, "healthy", code=0)["status"] == "ok"
