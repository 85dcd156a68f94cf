"""``check``: gradient sanity checks for CI, each one pass / fail / skip."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from gradscope.engines import Engine
from gradscope.errors import ModelError
from gradscope.loading import Batch, Workload
from gradscope.monitor.analysis import (Thresholds, Waiver, apply_waivers, gradient_findings, has_errors,
                                        loss_broadcast_findings, zero_by_construction)
from gradscope.monitor.diagnose import NormalizationInputs, loss_warnings
from gradscope.monitor.inspect import data_findings, locate_graph_cuts, locate_nonfinite
from gradscope.monitor.records import CHECK_FINDINGS, CheckReport, CheckResult, Finding, ParameterRecord
from gradscope.monitor.snapshot import Snapshot
from gradscope.monitor.stats import module_of, parameter_records

_STRUCTURAL = ("no_grad", "dead")


@dataclass(frozen=True)
class CheckOptions:
    """What ``check`` runs.

    Attributes:
        steps: training steps the gradient checks look at, and the length of the overfit run.
        lr: learning rate of the default SGD optimizer.
        thresholds: vanishing / exploding / dead-unit limits.
        overfit: also check that the loss goes down when training ``steps`` steps on batch 0.
        gradcheck: also compare gradients with finite differences on a float64 copy.
        gradcheck_samples: entries checked per parameter by the gradient check.
        waivers: findings the user accepts (``--ignore``); they fail no check.
    """

    steps: int = 5
    lr: float = 0.01
    thresholds: Thresholds = Thresholds()
    overfit: bool = False
    gradcheck: bool = False
    gradcheck_samples: int = 3
    waivers: tuple[Waiver, ...] = ()


# ``progress(stage, done, total)``: called as a long check advances (the CLI draws it on a terminal).
Progress = Callable[[str, int, int], None]


def check_model(workload: Workload, options: CheckOptions = CheckOptions(),
                progress: Progress | None = None) -> CheckReport:
    """Run the gradient checks and return which passed.

    The gradient checks (finite, every parameter gets a gradient, no dead parameter, no vanishing
    or exploding gradient) look at ``options.steps`` training steps on batches 0, 1, ...: a
    finite/vanishing/exploding problem counts on any step, a missing or all-zero gradient only
    if it holds on every step. ``parameters_update`` checks the first optimizer step. The model is
    put back in its initial state before the overfit run and at the end. A bias that only feeds a
    normalisation layer gets an informational note instead of a vanishing/unchanged error.
    When a NaN/Inf appears, the failing step runs again with full instrumentation (``watch
    --nan``'s localisation): one ``nonfinite`` finding says at which step and where it started and
    lists the parameters it reached, and the report's ``first_nonfinite`` holds the origin.
    """
    report = progress or _no_progress
    model = workload.model
    engine = workload.engine
    optimizer = workload.make_optimizer(options.lr)
    initial = Snapshot.capture(0, model, optimizer, None, engine=engine)
    per_step: list[list[Finding]] = []
    unchanged: list[Finding] = []
    broadcast: list[Finding] = []
    normalization = NormalizationInputs(model, engine)
    origin = None
    snapshot: Snapshot | None = None
    for step in range(options.steps):
        report("gradient checks", step, options.steps)
        batch = workload.batch(step)
        previous, snapshot = snapshot, Snapshot.capture(step, model, optimizer, batch.raw, workload.label, engine)
        optimizer.zero_grad(set_to_none=True)
        with loss_warnings() as messages, normalization if step == 0 else contextlib.nullcontext():
            loss = workload.loss(batch)
        broadcast = broadcast or loss_broadcast_findings(messages)
        workload.backward(loss)
        records = parameter_records(model, engine)
        per_step.append(data_findings(float(loss.item()), batch, step, engine)
                        + gradient_findings(records, options.thresholds))
        before = {name: np.array(engine.to_numpy(p)) for name, p in model.named_parameters()} if step == 0 \
            else None
        optimizer.step()
        if before is not None:
            unchanged = _unchanged(workload, records, before, optimizer)
        if any(f.check == "nonfinite" for f in per_step[-1]):
            failing = previous if previous is not None and _holds_nonfinite(engine, snapshot) else snapshot
            per_step[-1], origin = locate_nonfinite(workload, failing, optimizer, per_step[-1])
            break
    findings = zero_by_construction(broadcast + _combine(per_step) + unchanged, normalization.followed_by)
    if any(f.check == "no_grad" for f in findings):
        initial.restore(model, optimizer)
        findings = locate_graph_cuts(workload, workload.batch(0), findings)
    findings, waived = apply_waivers(findings, options.waivers)
    findings = list(findings)
    results = [_result(name, findings) if per_step else CheckResult(name, "fail", "no training step ran (steps < 1)")
               for name in ("loss_shapes_match", "finite", "gradients_reach_parameters", "no_dead_parameters",
                            "no_vanishing_gradients", "no_exploding_gradients", "parameters_update")]
    if options.overfit:
        initial.restore(model, optimizer)
        overfit = _overfit(workload, optimizer, options.steps, report)
        findings += apply_waivers(overfit, options.waivers)[0]
        results.append(_result("loss_decreases", findings))
    else:
        results.append(CheckResult("loss_decreases", "skip", "not run (use --overfit)"))
    if options.gradcheck:
        initial.restore(model, optimizer)
        try:
            findings += apply_waivers(_gradcheck(workload, options.gradcheck_samples, report), options.waivers)[0]
            results.append(_result("gradcheck", findings))
        except ModelError as error:
            results.append(CheckResult("gradcheck", "skip", f"the model does not run in float64: {error}"))
    else:
        results.append(CheckResult("gradcheck", "skip", "not run (use --gradcheck)"))
    initial.restore(model, optimizer)
    return CheckReport(model=workload.label, passed=all(r.status != "fail" for r in results),
                       checks=tuple(results), findings=tuple(findings), waived=len(waived), first_nonfinite=origin)


def _holds_nonfinite(engine: Engine, snapshot: Snapshot) -> bool:
    """Whether a parameter was already NaN/Inf when the snapshot's step started (the update of the
    step before made it so)."""
    return not all(math.isfinite(square) for square in engine.squared_norms(list(snapshot.parameters.values())))


def _no_progress(stage: str, done: int, total: int) -> None:
    """The progress callback when nobody listens."""


def _combine(per_step: list[list[Finding]]) -> list[Finding]:
    """Findings from several steps: structural ones only if present on every step, others once."""
    combined: list[Finding] = []
    seen: set[tuple] = set()
    every_step = [{(f.check, f.parameter) for f in findings} for findings in per_step]
    for findings in per_step:
        for finding in findings:
            key = (finding.check, finding.parameter)
            if key in seen:
                continue
            if finding.check in _STRUCTURAL and not all(key in keys for keys in every_step):
                continue
            seen.add(key)
            combined.append(finding)
    return combined


def _result(name: str, findings: list[Finding]) -> CheckResult:
    kinds = CHECK_FINDINGS[name]
    relevant = [f for f in findings if f.check in kinds]
    if not has_errors(relevant):
        notes = [f"{n} {label}{'s' if n != 1 else ''}" for label, n in
                 (("warning", sum(f.severity == "warning" for f in relevant)),
                  ("note", sum(f.severity == "info" for f in relevant))) if n]
        return CheckResult(name, "pass", _PASS_MESSAGES[name] + (f" ({', '.join(notes)})" if notes else ""))
    errors = [f for f in relevant if f.severity == "error"]
    if name == "finite":  # one finding: at which step and where it started, then what it reached
        return CheckResult(name, "fail", errors[0].message)
    subjects = [subject for f in errors for subject in (f.parameters or (f.parameter,)) if subject is not None]
    if not subjects:
        return CheckResult(name, "fail", errors[0].message)
    shown = ", ".join(subjects[:4]) + (f" and {len(subjects) - 4} more" if len(subjects) > 4 else "")
    return CheckResult(name, "fail", f"{_FAIL_MESSAGES[name]}: {shown}")


_PASS_MESSAGES = {
    "loss_shapes_match": "the loss compares outputs and targets of the same shape",
    "finite": "loss and gradients are finite",
    "gradients_reach_parameters": "every parameter receives a gradient",
    "no_dead_parameters": "no parameter has an identically zero gradient",
    "no_vanishing_gradients": "no gradient norm below the vanishing limit",
    "no_exploding_gradients": "no gradient norm above the exploding limit",
    "parameters_update": "the optimizer step changes every parameter that has a gradient",
    "loss_decreases": "the loss goes down when overfitting one batch",
    "gradcheck": "gradients match finite differences",
}
_FAIL_MESSAGES = {
    "loss_shapes_match": "the loss broadcasts outputs against targets",
    "finite": "non-finite values",
    "gradients_reach_parameters": "no gradient reaches",
    "no_dead_parameters": "identically zero gradient",
    "no_vanishing_gradients": "vanishing gradients",
    "no_exploding_gradients": "exploding gradients",
    "parameters_update": "not changed by the optimizer step",
    "loss_decreases": "the loss does not go down when overfitting one batch",
    "gradcheck": "gradients differ from finite differences",
}


def _unchanged(workload: Workload, records: tuple[ParameterRecord, ...], before: dict[str, np.ndarray],
               optimizer: Any) -> list[Finding]:
    """An ``unchanged`` error for each parameter with a finite, non-zero gradient that the first
    optimizer step left exactly as it was, saying why: not among the optimizer's parameters, or
    an update too small to change its floating-point values (below their resolution)."""
    findings = []
    current = dict(workload.model.named_parameters())
    optimized = _optimized(optimizer)
    for record in records:
        if not record.has_grad or not record.grad_norm or not math.isfinite(record.grad_norm):
            continue
        values = workload.engine.to_numpy(current[record.name])
        if not np.array_equal(values, before[record.name]):
            continue
        head = f"{record.name} has a gradient (norm {record.grad_norm:.3g})"
        if optimized is None:
            message = f"{head} but the optimizer step did not change it: is it missing from the optimizer's parameters?"
        elif id(current[record.name]) not in optimized:
            message = (f"{head} but the optimizer step did not change it: it is missing from the optimizer's "
                       "parameters")
        elif optimized[id(current[record.name])] == 0:
            message = f"{head} but the optimizer step did not change it: its parameter group's learning rate is 0"
        else:
            message = (f"{head} and is among the optimizer's parameters, but the step did not change it: the update "
                       f"is below its {values.dtype} resolution ({_resolution(values)}; a vanishing gradient, or "
                       f"a learning rate too small for {values.dtype})")
        findings.append(Finding(check="unchanged", severity="error", module=record.module, parameter=record.name,
                                value=record.grad_norm, message=message))
    return findings


def _optimized(optimizer: Any) -> dict[int, Any] | None:
    """``id() -> learning rate`` of every parameter the optimizer updates, or None when it does
    not say (no ``param_groups``)."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, (list, tuple)):
        return None
    try:
        return {id(parameter): group.get("lr") for group in groups for parameter in group["params"]}
    except (AttributeError, KeyError, TypeError):
        return None


def _resolution(values: np.ndarray) -> str:
    """How far apart the representable values near the parameter's entries are, in words."""
    magnitudes = np.abs(values[np.isfinite(values)])
    if magnitudes.size == 0:
        return "no finite entry"
    spacing = np.spacing(magnitudes.astype(values.dtype, copy=False))
    return f"{values.dtype} values near its entries are {float(spacing.min()):.3g} to {float(spacing.max()):.3g} apart"


def _overfit(workload: Workload, optimizer: Any, steps: int, progress: Progress) -> list[Finding]:
    batch = workload.batch(0)
    losses = []
    total = max(steps, 2)
    for step in range(total):
        progress("overfitting batch 0", step, total)
        optimizer.zero_grad(set_to_none=True)
        with loss_warnings():  # a broadcasting loss is already a finding
            loss = workload.loss(batch)
        losses.append(float(loss.item()))
        workload.backward(loss)
        optimizer.step()
    if losses[-1] < losses[0]:
        return []
    return [Finding(check="loss_not_decreasing", severity="error", value=losses[-1], threshold=losses[0],
                    message=f"training {len(losses)} steps on batch 0 took the loss from {losses[0]:.4g} to "
                            f"{losses[-1]:.4g}; it should go down (learning rate, loss or wiring problem)")]


def _gradcheck(workload: Workload, samples: int, progress: Progress, eps: float = 1e-6, atol: float = 1e-5,
               rtol: float = 1e-3) -> list[Finding]:
    """Central differences on a float64 copy, for ``samples`` random entries of each parameter."""
    engine = workload.engine
    model64 = copy.deepcopy(workload.model).double()
    work64 = dataclasses.replace(workload, model=model64)
    batch = workload.batch(0)
    batch64 = Batch(inputs=_double(batch.inputs), targets=_double(batch.targets), raw=_double(batch.raw))
    rng_state = engine.get_rng_state()

    def loss_value() -> Any:
        engine.set_rng_state(rng_state)
        with loss_warnings():  # a broadcasting loss is already a finding
            return work64.loss(batch64)

    model64.zero_grad(set_to_none=True)
    work64.backward(loss_value())
    chooser = np.random.default_rng(0)
    findings = []
    checked = [(name, p) for name, p in model64.named_parameters() if p.requires_grad and p.grad is not None]
    for done, (name, parameter) in enumerate(checked):
        progress("gradcheck (finite differences)", done, len(checked))
        values = engine.to_numpy(parameter).reshape(-1)
        analytic = engine.to_numpy(parameter.grad).reshape(-1)
        for index in chooser.choice(values.size, size=min(samples, values.size), replace=False):
            numeric = _central_difference(engine, parameter, int(index), eps, loss_value)
            error = abs(float(analytic[index]) - numeric)
            limit = atol + rtol * abs(numeric)
            if not error <= limit:
                findings.append(Finding(
                    check="gradcheck", severity="error", module=module_of(name), parameter=name, value=error,
                    threshold=limit,
                    message=f"{name}[{int(index)}]: backward gives {float(analytic[index]):.6g}, finite differences "
                            f"{numeric:.6g} (float64, eps {eps:g})"))
                break
    return findings


def _central_difference(engine: Engine, parameter: Any, index: int, eps: float, loss_value: Any) -> float:
    original = float(engine.to_numpy(parameter).reshape(-1)[index])
    results = []
    for shifted in (original + eps, original - eps):
        _set_entry(engine, parameter, index, shifted)
        results.append(float(loss_value().item()))
    _set_entry(engine, parameter, index, original)
    return (results[0] - results[1]) / (2 * eps)


def _set_entry(engine: Engine, parameter: Any, index: int, value: float) -> None:
    values = np.array(engine.to_numpy(parameter))
    values.reshape(-1)[index] = value
    engine.copy_into(parameter, values)


def _double(value: Any) -> Any:
    if hasattr(value, "is_floating_point") and value.is_floating_point():
        return value.detach().double()
    if isinstance(value, tuple):
        return tuple(_double(item) for item in value)
    if isinstance(value, list):
        return [_double(item) for item in value]
    return value
