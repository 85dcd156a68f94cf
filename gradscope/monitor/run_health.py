"""``check``'s gradient rules applied over a ``gradscope run``: pure, the run's series in, findings out.

For each parameter, the run's figure is the **median of its gradient norm over the steps that
updated the weights** (skipped steps left out), and :func:`~gradscope.monitor.analysis.gradient_findings`
applies ``check``'s rules to it with the same thresholds (``max_norm``, ``min_norm`` /
``min_ratio``): ``no_grad`` (no gradient at any step), ``dead`` (a gradient that is exactly zero
at every step), ``exploding``, ``vanishing``. ``unchanged``: a parameter that had a non-zero
gradient but whose values never changed over the run (its norm, read with the gradients each
step, stayed bit-for-bit the same, and so did a float64 sum of squares of its values, taken at
the first step and at the end). When the optimizer holds it, the update was below the
parameter's float32 resolution (the rounding swallowed it); otherwise it is missing from the
optimizer. The waivers are ``check``'s (``--ignore``, ``ignore = [...]``).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from gradscope.engines import Engine
from gradscope.monitor.analysis import Thresholds, Waiver, apply_waivers, gradient_findings, group_no_grad
from gradscope.monitor.records import Finding, ParameterRecord
from gradscope.monitor.run_series import RunSeries
from gradscope.monitor.stats import module_of

__all__ = ["ParameterChanges", "run_findings"]


class ParameterChanges:
    """Whether each parameter's values changed over the run.

    The squared norms read at every step show most changes. A float32 norm can stay put while an
    update moves a few entries of a large tensor, so a parameter whose norm never moved is checked
    once more when the run ends (:meth:`settle`), against a float64 sum of squares of its values
    taken at the first step (:meth:`Engine.fine_squared_norms`: two passes over the parameters
    in a run, not one a step).
    """

    def __init__(self) -> None:
        self.first: list[float | None] = []
        self.changed: list[bool] = []
        self._start: tuple[Engine, list, list[float]] | None = None  # engine, parameters, fine squares

    def observe(self, squares: Sequence[float | None], engine: Engine | None = None,
                parameters: Sequence[Any] | None = None) -> None:
        """The parameters' squared norms at one backward pass (model order; the list may grow);
        ``engine`` and ``parameters`` (the tensors of ``squares``) let :meth:`settle` look closer
        (when every one of them is the engine's)."""
        if len(squares) != len(self.first):
            self.first, self.changed = list(squares), [False] * len(squares)
            self._start = None
            if engine is not None and parameters is not None and len(parameters) == len(squares) \
                    and all(map(engine.is_tensor, parameters)):
                self._start = (engine, list(parameters), engine.fine_squared_norms(parameters))
            return
        for index, square in enumerate(squares):
            if square != self.first[index]:
                self.changed[index] = True

    def settle(self) -> None:
        """Compare each parameter whose norm never moved with its values at the first step."""
        if self._start is None:
            return
        engine, parameters, start = self._start
        self._start = None
        unsure = [index for index, changed in enumerate(self.changed) if not changed]
        if unsure:
            now = engine.fine_squared_norms([parameters[index] for index in unsure])
            for index, value in zip(unsure, now):
                if value != start[index]:
                    self.changed[index] = True


def run_findings(series: RunSeries, thresholds: Thresholds, waivers: Sequence[Waiver],
                 changes: ParameterChanges, optimized: Iterable[str]) -> tuple[tuple[Finding, ...],
                                                                                tuple[Finding, ...]]:
    """``(kept, waived)`` findings of ``check``'s rules over the run (see the module docstring).

    Args:
        series: the run's gradient norms, step by step (:class:`~gradscope.monitor.run_series.RunSeries`).
        thresholds: ``check``'s limits.
        waivers: accepted findings.
        changes: whether each parameter (in model order) changed.
        optimized: names of the parameters some optimizer holds.
    """
    if not series.steps:
        return (), ()
    names = series.names
    records = []
    for name in names:
        median = series.median(name)
        highest = series.highest(name)
        # A gradient that was NaN/Inf at every step is still a gradient: the run's non-finite report
        # speaks of it, and no rule over finite norms applies (grad_norm None).
        records.append(ParameterRecord(
            name=name, module=module_of(name), module_type="", shape=(), has_grad=series.reached(name),
            grad_norm=median, grad_mean=None, grad_std=None, grad_abs_max=None, nonfinite=0,
            zero_fraction=None if highest is None else 1.0 if highest == 0.0 else 0.0,
            dead_unit_fraction=None, param_norm=0.0, grad_to_param=None))
    findings = group_no_grad(gradient_findings(records, thresholds))
    optimized = set(optimized)
    for index, record in enumerate(records):
        if series.steps < 2 or index >= len(changes.changed) or changes.changed[index] or not record.grad_norm:
            continue
        why = ("the update is below the parameter's float32 resolution (the optimizer holds it, but rounding "
               "swallows every update: raise the learning rate or keep a float32 master copy)"
               if record.name in optimized else "is it missing from the optimizer's parameters?")
        findings.append(Finding(
            check="unchanged", severity="error", module=record.module, parameter=record.name,
            value=record.grad_norm,
            message=f"{record.name} has a gradient (median norm {record.grad_norm:.3g}) but its values never "
                    f"changed over {series.steps} steps: {why}"))
    return apply_waivers(findings, waivers)
