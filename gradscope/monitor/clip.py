"""``clip``: gradient clipping, globally on parameter gradients or per module on ``grad_input``."""
from __future__ import annotations

import math
from typing import Any

from gradscope.loading import Workload
from gradscope.monitor.monitors import _HookOwner
from gradscope.monitor.records import ClipParameterRecord, ClipReport
from gradscope.monitor.stats import squared_norm, to_numpy
from gradscope.nn.modules import module as module_hooks

MODES = ("norm", "value")
SCOPES = ("global", "module")


class ModuleGradientClipper(_HookOwner):
    """Clip every module's ``grad_input`` inside a global full backward hook.

    The hook ``hook(module, grad_input, grad_output) -> tuple | None`` returns the clipped
    ``grad_input`` (``mode="norm"``: scaled so its 2-norm is at most ``max_value``; ``mode="value"``:
    clamped to ``[-max_value, max_value]``), so clipping changes what flows upstream. It applies at
    every module boundary of ``model``, containers included, so its effect compounds along a path.

    Attributes:
        clipped: how many module calls had their ``grad_input`` changed.
    """

    def __init__(self, model: Any, max_value: float, mode: str = "norm") -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self._names = {id(module) for module in model.modules()}
        self.max_value = max_value
        self.mode = mode
        self.clipped = 0

    def _attach(self) -> None:
        self._handles.append(module_hooks.register_module_full_backward_hook(self._hook))

    def _hook(self, module: Any, grad_input: tuple, grad_output: tuple) -> tuple | None:
        if id(module) not in self._names or all(g is None for g in grad_input):
            return None
        if self.mode == "value":
            self.clipped += 1
            return tuple(g.clamp(-self.max_value, self.max_value) if g is not None else None for g in grad_input)
        total = math.sqrt(sum(squared_norm(to_numpy(g)) for g in grad_input if g is not None))
        if not total > self.max_value:
            return None
        self.clipped += 1
        scale = self.max_value / (total + 1e-6)
        return tuple(g * scale if g is not None else None for g in grad_input)


def clip_model(workload: Workload, max_value: float, mode: str = "norm", scope: str = "global", steps: int = 1,
               lr: float = 0.01) -> ClipReport:
    """Train ``steps`` steps with clipping and report the last step's norms before and after.

    ``scope="global"`` clips the parameter gradients after backward (``clip_grad_norm_`` or
    ``clip_grad_value_``). ``scope="module"`` runs each step's backward twice from the same
    state: once plain (the "before" norms) and once with :class:`ModuleGradientClipper`
    (the "after" norms, which the update uses).
    """
    import gradscope as gs
    from gradscope.nn.utils import clip_grad_norm_, clip_grad_value_

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    model = workload.model
    optimizer = workload.make_optimizer(lr)
    parameters = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    before: list[float | None] = []
    after: list[float | None] = []
    for step in range(steps):
        batch = workload.batch(step)
        rng_state = gs.get_rng_state()
        optimizer.zero_grad(set_to_none=True)
        workload.backward(workload.loss(batch))
        before = _norms(parameters)
        if scope == "global":
            grads = [p for _, p in parameters if p.grad is not None]
            if mode == "norm":
                clip_grad_norm_(grads, max_value)
            else:
                clip_grad_value_(grads, max_value)
        else:
            optimizer.zero_grad(set_to_none=True)
            gs.set_rng_state(rng_state)
            with ModuleGradientClipper(model, max_value, mode):
                workload.backward(workload.loss(batch))
        after = _norms(parameters)
        optimizer.step()
    records = tuple(ClipParameterRecord(name=name, norm_before=b, norm_after=a)
                    for (name, _), b, a in zip(parameters, before, after))
    return ClipReport(model=workload.label, mode=mode, scope=scope, max=max_value, steps=steps,
                      total_norm_before=_total(before), total_norm_after=_total(after), parameters=records)


def _norms(parameters: list[tuple[str, Any]]) -> list[float | None]:
    return [math.sqrt(squared_norm(to_numpy(p.grad))) if p.grad is not None else None for _, p in parameters]


def _total(norms: list[float | None]) -> float:
    return math.sqrt(sum(n * n for n in norms if n is not None))
