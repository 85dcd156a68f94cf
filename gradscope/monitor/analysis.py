"""Pure analysis: records in, findings out."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from typing import Iterable, Mapping, Sequence

from gradscope.monitor.records import CHECKS, Finding, ParameterRecord


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


# ---- waivers: --ignore GLOB[:KIND] and ignore = [...] in [tool.gradscope]

@dataclass(frozen=True)
class Waiver:
    """A finding the user chose to accept: ``pattern`` is a glob on the parameter (or module)
    name, ``kind`` a finding kind from :data:`CHECKS` or ``"*"`` for every kind."""

    pattern: str
    kind: str = "*"

    def matches(self, finding: Finding) -> bool:
        """True when the finding is of this kind and names a matching parameter or module."""
        if self.kind != "*" and finding.check != self.kind:
            return False
        names = [name for name in (finding.parameter, *finding.parameters) if name is not None]
        if finding.module is not None:
            names.append(finding.module or "model")
        if finding.module is None and finding.parameter is None:
            names.append("loss")
        return any(fnmatchcase(name, self.pattern) for name in names)

    def __str__(self) -> str:
        return self.pattern if self.kind == "*" else f"{self.pattern}:{self.kind}"


def parse_waiver(text: str) -> Waiver:
    """``"conv1.bias:vanishing"`` -> ``Waiver("conv1.bias", "vanishing")``; ``"encoder.*"`` waives
    every kind.

    Raises:
        ValueError: empty pattern or unknown kind (the message lists the kinds).
    """
    pattern, _, kind = text.strip().rpartition(":") if ":" in text else (text.strip(), "", "*")
    pattern, kind = pattern.strip(), (kind.strip() or "*")
    if not pattern:
        raise ValueError(f"{text!r}: expected PARAMETER_GLOB[:KIND], e.g. conv1.bias:vanishing")
    if kind != "*" and kind not in CHECKS:
        raise ValueError(f"{text!r}: unknown finding kind {kind!r}; kinds: {', '.join(CHECKS)}")
    return Waiver(pattern, kind)


def apply_waivers(findings: Iterable[Finding], waivers: Sequence[Waiver]) -> tuple[tuple[Finding, ...],
                                                                                   tuple[Finding, ...]]:
    """``(kept, waived)``: the findings that no waiver matches, and those that one does."""
    kept, waived = [], []
    for finding in findings:
        (waived if any(waiver.matches(finding) for waiver in waivers) else kept).append(finding)
    return tuple(kept), tuple(waived)


# ---- gradients that are zero by construction

_BY_CONSTRUCTION = ("vanishing", "dead", "unchanged")


def zero_by_construction(findings: Iterable[Finding], normalized: Mapping[str, tuple[str, str]]) -> list[Finding]:
    """Turn a vanishing / dead / unchanged finding on the bias of a layer whose output goes straight
    into a normalisation layer into an informational note: the normalisation subtracts the mean
    that the bias shifts, so the bias cannot change the loss and its gradient is zero up to rounding.

    Args:
        findings: the findings so far.
        normalized: module path -> (path, type) of the normalisation layer its output goes into.
    """
    result = []
    for finding in findings:
        module, _, leaf = (finding.parameter or "").rpartition(".")
        follower = normalized.get(module) if leaf == "bias" else None
        if finding.check not in _BY_CONSTRUCTION or follower is None:
            result.append(finding)
            continue
        norm_path, norm_type = follower
        result.append(replace(
            finding, severity="info",
            message=f"the gradient of {finding.parameter} is zero by construction: the output of {module} goes "
                    f"straight into {norm_type} {norm_path!r}, which subtracts the mean the bias shifts, so the bias "
                    f"cannot change the loss (create {module} with bias=False to drop it)"))
    return result


# ---- a loss that broadcasts its input against its target

_BROADCAST = re.compile(r"target size \((?:\w+\.)?Size\(\[([\d, ]*)\]\)\) that is different to the input size "
                        r"\((?:\w+\.)?Size\(\[([\d, ]*)\]\)\)")


def loss_broadcast_findings(messages: Iterable[str]) -> list[Finding]:
    """A ``loss_broadcast`` error for each distinct "Using a target size ... different to the input
    size" warning that the loss function emitted (PyTorch's and gradscope's wording)."""
    findings, seen = [], set()
    for message in messages:
        match = _BROADCAST.search(message)
        if match is None or match.groups() in seen:
            continue
        seen.add(match.groups())
        target, output = (tuple(int(size) for size in group.replace(" ", "").split(",") if size)
                          for group in match.groups())
        combined = _broadcast_shape(output, target)
        findings.append(Finding(
            check="loss_broadcast", severity="error",
            message=f"the loss compares an output of shape {list(output)} with targets of shape {list(target)}: "
                    f"they broadcast to {list(combined) if combined else 'an error'}, so outputs are compared with "
                    "the wrong targets; make the shapes equal (e.g. output.squeeze(-1) or targets.unsqueeze(-1))"))
    return findings


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    size = max(len(a), len(b))
    a, b = (1,) * (size - len(a)) + a, (1,) * (size - len(b)) + b
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    return tuple(max(x, y) for x, y in zip(a, b))


# ---- parameters without a gradient, one finding per module

def group_no_grad(findings: Iterable[Finding], called: Iterable[str] | None = None,
                  cuts: Mapping[str, str] | None = None) -> list[Finding]:
    """Merge the per-parameter ``no_grad`` findings into one per module, saying why when known.

    Args:
        findings: the findings so far (others are kept as they are, in order).
        called: the modules forward called (None: not known).
        cuts: module path -> ``file:line`` where its output was cut from the graph.
    """
    cuts = cuts or {}
    called = set(called) if called is not None else None
    by_module: dict[str, list[Finding]] = {}
    for finding in findings:
        if finding.check == "no_grad" and finding.parameter is not None:
            by_module.setdefault(finding.module or "", []).append(finding)
    result, done = [], set()
    for finding in findings:
        if finding.check != "no_grad" or finding.parameter is None:
            result.append(finding)
            continue
        module = finding.module or ""
        if module in done:
            continue
        done.add(module)
        names = tuple(f.parameter for f in by_module[module] if f.parameter is not None)
        listed = ", ".join(names)
        label = f"module {module!r}" if module else "the model's own parameters"
        source = None
        if called is not None and module and module not in called:
            why = f"{label} is never called in forward"
        elif (source := _cut_for(module, cuts)) is not None:
            why = f"{label} is cut from the autograd graph at {source} (.detach(), .numpy() or no_grad)"
        else:
            why = (f"{label} is never used in the loss, or its output is cut from the graph "
                   "(.detach(), .numpy(), no_grad)")
        result.append(Finding(check="no_grad", severity="error", module=module, parameter=None, source=source,
                              parameters=names,
                              message=f"{listed} receive{'s' if len(names) == 1 else ''} no gradient: {why}"))
    return result


def _cut_for(module: str, cuts: Mapping[str, str]) -> str | None:
    """Where ``module`` was cut off: its own cut, an enclosing module's, or the only cut there is."""
    path = module
    while True:
        if path in cuts:
            return cuts[path]
        if not path:
            break
        path = path.rpartition(".")[0]
    places = set(cuts.values())
    return places.pop() if len(places) == 1 else None


# ---- divergence: the loss jumps by orders of magnitude after an update

DIVERGENCE_FACTOR = 100.0


def diverged(loss_before: float, loss_after: float, factor: float = DIVERGENCE_FACTOR,
             highest: float | None = None) -> bool:
    """True when the loss grew by at least ``factor`` from one step to the next (both finite) and,
    when ``highest`` (the largest loss of the earlier steps) is given, rose above it: a loss that
    training had brought down to 0.001 and that bounces back to 0.1 has not diverged."""
    if not (math.isfinite(loss_before) and math.isfinite(loss_after)):
        return False
    if highest is not None and abs(loss_after) <= highest:
        return False
    return abs(loss_after) >= factor * max(abs(loss_before), 1e-12)


def largest_update_ratios(update_ratios: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """``(parameter, |Δp| / |p|)`` largest first; parameters that were exactly zero before the
    update (a ratio of inf: a zero-initialised bias) come after every finite ratio, as they say
    nothing about the learning rate."""
    return sorted(update_ratios, key=lambda item: (not math.isfinite(item[1]),
                                                   -item[1] if math.isfinite(item[1]) else 0.0))


def divergence_finding(step: int, loss_before: float, loss_after: float,
                       update_ratios: Sequence[tuple[str, float]], zeroed: Sequence[str]) -> Finding:
    """The ``divergence`` error: the loss jump after the update of ``step - 1``, the largest
    update-to-parameter ratios (``|Δp| / |p|`` of that update) and the layers whose gradients
    became exactly zero after it."""
    largest = largest_update_ratios(update_ratios)[:3]
    shown = ", ".join(f"{name} {ratio:.3g}" if math.isfinite(ratio) else f"{name} (from 0)" for name, ratio in largest)
    growth = abs(loss_after) / max(abs(loss_before), 1e-12)
    message = (f"the loss jumped from {loss_before:.4g} to {loss_after:.4g} (x{growth:.3g}) "
               f"after the update of step {step - 1}")
    if shown:
        message += (f"; largest update/parameter ratios: {shown} (above ~1e-2 the learning rate is usually "
                    "too high)")
    if zeroed:
        message += f"; gradients exactly zero since then: {', '.join(zeroed)} (dead units)"
    return Finding(check="divergence", severity="error", message=message, value=growth, threshold=DIVERGENCE_FACTOR,
                   parameter=largest[0][0] if largest else None)
