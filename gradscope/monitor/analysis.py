"""Pure analysis: records in, findings out."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from gradscope.monitor.records import Finding, ParameterRecord


@dataclass(frozen=True)
class Thresholds:
    """Limits the gradient checks compare against.

    Attributes:
        max_norm: a parameter gradient norm above this is exploding.
        min_norm: a parameter gradient norm below this is vanishing; when None, ``min_ratio`` times
            the largest parameter gradient norm is used instead.
        min_ratio: the relative vanishing limit used when ``min_norm`` is None.
        dead_units: warn when at least this fraction of a layer's output units get no gradient.
    """

    max_norm: float = 1e3
    min_norm: float | None = None
    min_ratio: float = 1e-4
    dead_units: float = 0.5

    def vanishing_limit(self, parameters: Sequence[ParameterRecord]) -> float:
        """The absolute vanishing threshold for these parameters."""
        if self.min_norm is not None:
            return self.min_norm
        largest = max((p.grad_norm for p in parameters if p.grad_norm is not None and math.isfinite(p.grad_norm)),
                      default=0.0)
        return self.min_ratio * largest


def loss_findings(loss: float) -> list[Finding]:
    """A ``nonfinite`` error when the loss is NaN or Inf."""
    if math.isfinite(loss):
        return []
    return [Finding(check="nonfinite", severity="error", value=loss,
                    message=f"the loss is {_word(loss)}")]


def gradient_findings(parameters: Sequence[ParameterRecord], thresholds: Thresholds = Thresholds()) -> list[Finding]:
    """Findings about parameter gradients: nonfinite, no_grad, dead, vanishing, exploding.

    A parameter gets at most one finding, the most specific one, in that order.
    """
    findings: list[Finding] = []
    vanishing = thresholds.vanishing_limit(parameters)
    for p in parameters:
        if not p.has_grad:
            findings.append(Finding(
                check="no_grad", severity="error", module=p.module, parameter=p.name,
                message=f"{p.name} receives no gradient: its module is never used in the loss, or its output "
                        "is cut from the graph (.detach(), .numpy(), no_grad)"))
        elif p.nonfinite:
            findings.append(Finding(
                check="nonfinite", severity="error", module=p.module, parameter=p.name, value=float(p.nonfinite),
                message=f"{p.name} has {p.nonfinite} non-finite gradient value{'s' if p.nonfinite != 1 else ''}"))
        elif p.zero_fraction == 1.0:
            findings.append(Finding(
                check="dead", severity="error", module=p.module, parameter=p.name, value=0.0,
                message=f"the gradient of {p.name} is identically zero (dead units, e.g. ReLUs that never fire)"))
        elif p.grad_norm is not None and p.grad_norm > thresholds.max_norm:
            findings.append(Finding(
                check="exploding", severity="error", module=p.module, parameter=p.name, value=p.grad_norm,
                threshold=thresholds.max_norm,
                message=f"the gradient norm of {p.name} is {p.grad_norm:.3g}, above {thresholds.max_norm:.3g}"))
        elif p.grad_norm is not None and p.grad_norm < vanishing:
            basis = "" if thresholds.min_norm is not None else \
                f" ({thresholds.min_ratio:g} x the largest parameter gradient norm)"
            findings.append(Finding(
                check="vanishing", severity="error", module=p.module, parameter=p.name, value=p.grad_norm,
                threshold=vanishing,
                message=f"the gradient norm of {p.name} is {p.grad_norm:.3g}, below {vanishing:.3g}{basis}"))
        elif p.dead_unit_fraction is not None and p.dead_unit_fraction >= thresholds.dead_units:
            findings.append(Finding(
                check="dead", severity="warning", module=p.module, parameter=p.name, value=p.dead_unit_fraction,
                threshold=thresholds.dead_units,
                message=f"{p.dead_unit_fraction:.0%} of the output units of {p.module} get no gradient "
                        f"({p.name} has all-zero rows)"))
    return findings


def merge_findings(batches: Iterable[Iterable[Finding]]) -> tuple[Finding, ...]:
    """Findings from several steps, keeping the first per (check, parameter, module)."""
    seen: set[tuple] = set()
    merged = []
    for findings in batches:
        for finding in findings:
            key = (finding.check, finding.parameter, finding.module)
            if key not in seen:
                seen.add(key)
                merged.append(finding)
    return tuple(merged)


def has_errors(findings: Iterable[Finding]) -> bool:
    """True if any finding has severity ``"error"``."""
    return any(finding.severity == "error" for finding in findings)


def _word(value: float) -> str:
    return "NaN" if math.isnan(value) else "infinite"
