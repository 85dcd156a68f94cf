"""Reports -> JSON-serialisable dicts, following the schemas documented in docs/json-and-exit-codes.md.

JSON has no NaN or Infinity, so a non-finite number is written as the string ``"nan"``, ``"inf"``
or ``"-inf"``; a number that does not exist (a parameter without a gradient) is ``null``.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from gradscope.render.names import layer_selected

if TYPE_CHECKING:
    from gradscope.monitor.records import (CheckReport, ClipReport, Finding, InspectReport,
                                           NonFiniteOrigin, RunReport, StepRecord, WatchReport)

INSPECT_SCHEMA = "gradscope.inspect/1"
WATCH_SCHEMA = "gradscope.watch/1"
WATCH_STEP_SCHEMA = "gradscope.watch.step/1"
CLIP_SCHEMA = "gradscope.clip/1"
CHECK_SCHEMA = "gradscope.check/1"
RUN_SCHEMA = "gradscope.run/1"
RUN_STEP_SCHEMA = "gradscope.run.step/1"


def number(value: float | None) -> float | str | None:
    """A float for JSON: finite floats as they are, NaN/Inf as strings, None as None."""
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def finding_to_dict(finding: "Finding") -> dict[str, Any]:
    """``{"check", "severity", "module", "parameter", "message", "value", "threshold", "source",
    "parameters"}`` (``parameters``: every parameter a per-module finding covers)."""
    return {"check": finding.check, "severity": finding.severity, "module": finding.module,
            "parameter": finding.parameter, "message": finding.message, "value": number(finding.value),
            "threshold": number(finding.threshold), "source": finding.source,
            "parameters": list(finding.parameters)}


def inspect_to_dict(report: "InspectReport", layers: Sequence[str] = ()) -> dict[str, Any]:
    """The ``gradscope.inspect/1`` document (``layers``: module-path globs choosing the modules and
    parameters listed; the totals and findings cover the whole model)."""
    modules = [m for m in report.modules if layer_selected(m.name, layers)]
    parameters = [p for p in report.parameters if layer_selected(p.module, layers) or layer_selected(p.name, layers)]
    return {
        "schema": INSPECT_SCHEMA,
        "model": report.model,
        "step": report.step,
        "loss": number(report.loss),
        "total_grad_norm": number(report.total_grad_norm),
        "modules": [{"name": m.name, "type": m.type, "calls": m.calls, "grad_output_norm": number(m.grad_output_norm),
                     "grad_input_norm": number(m.grad_input_norm), "nonfinite": m.nonfinite}
                    for m in modules],
        "parameters": [{"name": p.name, "module": p.module, "shape": list(p.shape), "has_grad": p.has_grad,
                        "grad_norm": number(p.grad_norm), "grad_mean": number(p.grad_mean),
                        "grad_std": number(p.grad_std), "grad_abs_max": number(p.grad_abs_max),
                        "nonfinite": p.nonfinite, "zero_fraction": number(p.zero_fraction),
                        "param_norm": number(p.param_norm), "grad_to_param": number(p.grad_to_param)}
                       for p in parameters],
        "findings": [finding_to_dict(f) for f in report.findings],
    }


def origin_to_dict(origin: "NonFiniteOrigin | None") -> dict[str, Any] | None:
    """``{"step", "phase", "module", "node", "source", "kind", "propagated", "detail"}`` or None.

    ``propagated`` lists the modules that only passed the value on, in the order it reached them.
    """
    if origin is None:
        return None
    return {"step": origin.step, "phase": origin.phase, "module": origin.module, "node": origin.node,
            "source": origin.source, "kind": origin.kind, "propagated": list(origin.propagated),
            "detail": origin.detail}


def watch_to_dict(report: "WatchReport") -> dict[str, Any]:
    """The ``gradscope.watch/1`` document."""
    return {
        "schema": WATCH_SCHEMA,
        "steps_run": report.steps_run,
        "status": report.status,
        "first_nonfinite": origin_to_dict(report.first_nonfinite),
        "history": [{"step": r.step, "loss": number(r.loss), "total_grad_norm": number(r.total_grad_norm)}
                    for r in report.history],
        "bundle": report.bundle,
        "divergence": None if report.divergence is None else {
            "step": report.divergence.step, "loss_before": number(report.divergence.loss_before),
            "loss_after": number(report.divergence.loss_after),
            "update_ratios": {name: number(ratio) for name, ratio in report.divergence.update_ratios},
            "zeroed_layers": list(report.divergence.zeroed_layers)},
        "findings": [finding_to_dict(f) for f in report.findings],
    }


def step_to_dict(record: "StepRecord") -> dict[str, Any]:
    """One ``--log`` line: ``{"schema", "step", "loss", "total_grad_norm", "layers", "nonfinite"}``."""
    return {"schema": WATCH_STEP_SCHEMA, "step": record.step, "loss": number(record.loss),
            "total_grad_norm": number(record.total_grad_norm),
            "layers": {name: number(norm) for name, norm in record.layer_norms},
            "nonfinite": record.nonfinite}


def clip_to_dict(report: "ClipReport") -> dict[str, Any]:
    """The ``gradscope.clip/1`` document."""
    return {
        "schema": CLIP_SCHEMA,
        "mode": report.mode,
        "scope": report.scope,
        "max": number(report.max),
        "total_norm_before": number(report.total_norm_before),
        "total_norm_after": number(report.total_norm_after),
        "parameters": [{"name": p.name, "norm_before": number(p.norm_before), "norm_after": number(p.norm_after)}
                       for p in report.parameters],
    }


def check_to_dict(report: "CheckReport") -> dict[str, Any]:
    """The ``gradscope.check/1`` document."""
    return {
        "schema": CHECK_SCHEMA,
        "passed": report.passed,
        "waived": report.waived,
        "checks": [{"name": c.name, "status": c.status, "message": c.message} for c in report.checks],
        "findings": [finding_to_dict(f) for f in report.findings],
    }


def run_origin_to_dict(origin: "NonFiniteOrigin | None", rank: int | None = None) -> dict[str, Any] | None:
    """``{"step", "rank", "phase", "module", "node", "source", "kind"}`` or None."""
    data = origin_to_dict(origin)
    if data is None:
        return None
    return {"step": data["step"], "rank": origin.rank if rank is None else rank, **{key: data[key] for key in ("phase", "module", "node", "source",
                                                                                "kind")}}


def run_to_dict(report: "RunReport", rank: int | None = None) -> dict[str, Any]:
    """The ``gradscope.run/1`` document."""
    return {
        "schema": RUN_SCHEMA,
        "status": report.status,
        "steps_run": report.steps_run,
        "first_nonfinite": run_origin_to_dict(report.first_nonfinite, rank),
        "stopped": report.stopped,
        "skipped_steps": {kind: sum(1 for r in report.history if r.skip == kind)
                          for kind in ("nonfinite", "overflow", "spike")},
        "spikes": [{"step": s.step, "quantity": s.quantity, "layer": s.layer, "value": number(s.value),
                    "baseline": number(s.baseline),
                    "score": number(s.score), "cause": s.cause, "action": s.action,
                    "layers": [{"layer": layer, "factor": number(factor), "first_step": first}
                               for layer, factor, first in s.layers]} for s in report.spikes],
        "findings": [finding_to_dict(f) for f in report.findings],
        "waived": len(report.waived),
        "history": [{"step": r.step, "loss": number(r.loss), "total_grad_norm": number(r.total_grad_norm),
                     "skipped": r.skipped, **_skip(r, rank), **_ranks(r)} for r in report.history],
    }


def _skip(record: "StepRecord", rank: int | None = None) -> dict[str, Any]:
    """``skip`` (why the step left the weights unchanged, or None), ``origin`` of a non-finite skip and
    the gradient scaler's ``scale`` (only when the script uses one)."""
    data: dict[str, Any] = {"skip": record.skip}
    if record.origin is not None:
        data["origin"] = run_origin_to_dict(record.origin, rank)
    if record.scale is not None:
        data["scale"] = number(record.scale)
    return data


def _ranks(record: "StepRecord") -> dict[str, Any]:
    """``{"ranks": [{"rank", "loss", "total_grad_norm"}, ...]}`` for a distributed run's step, else ``{}``."""
    if not record.ranks:
        return {}
    return {"ranks": [{"rank": r.rank, "loss": number(r.loss), "total_grad_norm": number(r.total_grad_norm)}
                      for r in record.ranks]}


def run_step_to_dict(record: "StepRecord") -> dict[str, Any]:
    """One ``run --log`` line (``gradscope.run.step/1``); ``clipped`` holds the norms after ``--clip``."""
    data: dict[str, Any] = {
        "schema": RUN_STEP_SCHEMA, "step": record.step, "loss": number(record.loss),
        "total_grad_norm": number(record.total_grad_norm),
        "layers": {name: number(norm) for name, norm in record.layer_norms},
        "parameters": {name: number(norm) for name, norm in record.parameter_norms},
        "nonfinite": record.nonfinite,
        "skipped": record.skipped,
        **_skip(record),
        **_ranks(record),
    }
    if record.clipped_total_grad_norm is not None:
        data["clipped"] = {"total_grad_norm": number(record.clipped_total_grad_norm),
                           "parameters": {name: number(norm) for name, norm in record.clipped_parameter_norms}}
    return data
