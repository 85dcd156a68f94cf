"""``clip``: gradient clipping, globally on parameter gradients or per module on ``grad_input``."""
from __future__ import annotations

import math
from typing import Any

from gradscope.engines import Engine
from gradscope.loading import Workload
from gradscope.monitor.monitors import ModuleCall, ModuleGradientHooks
from gradscope.monitor.records import ClipParameterRecord, ClipReport

MODES = ("norm", "value")
SCOPES = ("global", "module")


class ModuleGradientClipper(ModuleGradientHooks):
    """Clip the gradient every module call sends to its inputs (its ``grad_input``).

    A post-hook on each autograd node through which a call sends gradient to its inputs returns
    the clipped gradients (``mode="norm"``: scaled so their joint 2-norm is at most
    ``max_value``; ``mode="value"``: clamped to ``[-max_value, max_value]``), so clipping changes
    what flows upstream while module outputs stay plain tensors (in-place operations on them keep
    working). It applies at every module boundary of ``model``, containers included, so its effect
    compounds along a path. When a call's input reaches several of its nodes, each node's share is
    clipped on its own.

    Attributes:
        clipped: how many times a gradient was changed.
    """

    def __init__(self, model: Any, max_value: float, mode: str = "norm", engine: Engine | None = None) -> None:
        super().__init__(model, engine)
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.max_value = max_value
        self.mode = mode
        self.clipped = 0

    def _grad_input(self, call: ModuleCall, grads: list) -> list | None:
        if all(g is None for g in grads):
            return None
        if self.mode == "value":
            self.clipped += 1
            return [g.clamp(-self.max_value, self.max_value) if g is not None else None for g in grads]
        total = math.sqrt(sum(value for value in self.engine.squared_norms(grads) if value is not None))
        if not total > self.max_value:
            return None
        self.clipped += 1
        scale = self.max_value / (total + 1e-6)
        return [g * scale if g is not None else None for g in grads]


def clip_model(workload: Workload, max_value: float, mode: str = "norm", scope: str = "global", steps: int = 1,
               lr: float = 0.01) -> ClipReport:
    """Train ``steps`` steps with clipping and report the last step's norms before and after.

    ``scope="global"`` clips the parameter gradients after backward (``clip_grad_norm_`` or
    ``clip_grad_value_``). ``scope="module"`` runs each step's backward twice from the same
    state: once plain (the "before" norms) and once with :class:`ModuleGradientClipper`
    (the "after" norms, which the update uses).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    model = workload.model
    engine = workload.engine
    optimizer = workload.make_optimizer(lr)
    parameters = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    before: list[float | None] = []
    after: list[float | None] = []
    for step in range(steps):
        batch = workload.batch(step)
        rng_state = engine.get_rng_state()
        optimizer.zero_grad(set_to_none=True)
        workload.backward(workload.loss(batch))
        before = _norms(engine, parameters)
        if scope == "global":
            grads = [p for _, p in parameters if p.grad is not None]
            if mode == "norm":
                engine.clip_grad_norm_(grads, max_value)
            else:
                engine.clip_grad_value_(grads, max_value)
        else:
            optimizer.zero_grad(set_to_none=True)
            engine.set_rng_state(rng_state)
            with ModuleGradientClipper(model, max_value, mode, engine):
                workload.backward(workload.loss(batch))
        after = _norms(engine, parameters)
        optimizer.step()
    records = tuple(ClipParameterRecord(name=name, norm_before=b, norm_after=a)
                    for (name, _), b, a in zip(parameters, before, after))
    return ClipReport(model=workload.label, mode=mode, scope=scope, max=max_value, steps=steps,
                      total_norm_before=_total(before), total_norm_after=_total(after), parameters=records)


def _norms(engine: Engine, parameters: list[tuple[str, Any]]) -> list[float | None]:
    squares = engine.squared_norms([p.grad for _, p in parameters])
    return [None if square is None else math.sqrt(square) for square in squares]


def _total(norms: list[float | None]) -> float:
    return math.sqrt(sum(n * n for n in norms if n is not None))
