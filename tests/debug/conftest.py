"""Fixtures for the debugger tests: small models, scripted sessions, global-hook hygiene."""
from __future__ import annotations

import io
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn
from gradscope.debug import DebuggerShell, TextPresenter, run_debug_step
from gradscope.nn.modules import module as module_file

GLOBAL_HOOK_DICTS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                     "_global_backward_hooks")


def global_hook_counts() -> dict[str, int]:
    return {name: len(getattr(module_file, name)) for name in GLOBAL_HOOK_DICTS}


@pytest.fixture(autouse=True)
def no_leftover_hooks():
    """Every test must leave no global hook and no warnings filter behind."""
    before = global_hook_counts()
    filters = len(warnings.filters)
    yield
    assert global_hook_counts() == before
    assert len(warnings.filters) == filters


class Tanh2(nn.Module):
    """A module without parameters that owns two nodes."""

    def forward(self, x):
        return gs.tanh(x) * 2.0


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.act = Tanh2()
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class SqrtRelu(nn.Module):
    """Finite forward, NaN in backward: sqrt'(0) is inf, and a relu written as a mask product turns
    inf * 0 into NaN (``gs.relu`` would select 0 there, as torch does)."""

    def forward(self, x):
        return gs.sqrt(x * (x > 0).float())


class NanBackward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.root = SqrtRelu()
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        return self.fc2(self.root(self.fc1(x)))


class Unrolled(nn.Module):
    """One cell called three times (an unrolled recurrence)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        h = x
        for _ in range(3):
            h = gs.tanh(self.cell(h))
        return self.head(h)


def workload(cls: type, seed: int = 0) -> tuple[nn.Module, Callable[[], Any]]:
    """A fresh model and its loss function (same weights and data for the same seed)."""
    gs.manual_seed(seed)
    model = cls()
    x = gs.randn(4, 4 if cls is Unrolled else 3)
    y = gs.randn(4, 1 if cls is Unrolled else 2)
    return model, lambda: ((model(x) - y) ** 2).mean()


def script(cls: type, commands: str, *conditions: str, seed: int = 0) -> tuple[str, str, nn.Module]:
    """Run a scripted session; returns (outcome, transcript, model)."""
    model, loss = workload(cls, seed)
    out = io.StringIO()
    shell = DebuggerShell(TextPresenter(out), commands=[c for c in commands.split(";")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("error", UserWarning)  # the debugger's own hooks must not warn
        outcome = run_debug_step(model, loss, shell, conditions=list(conditions))
    return outcome, out.getvalue(), model


def grads(model: nn.Module) -> dict[str, np.ndarray | None]:
    return {name: None if p.grad is None else p.grad._data.copy() for name, p in model.named_parameters()}
