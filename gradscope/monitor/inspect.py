"""``inspect``: one forward and backward pass with per-module and per-parameter gradient statistics."""
from __future__ import annotations

from typing import Sequence

from gradscope.engines import Engine
from gradscope.loading import Batch, Workload
from gradscope.monitor.analysis import (Thresholds, Waiver, apply_waivers, gradient_findings, group_no_grad,
                                        loss_broadcast_findings, zero_by_construction)
from gradscope.monitor.diagnose import GraphCuts, NormalizationInputs, loss_warnings, preserved
from gradscope.monitor.monitors import GradientMonitor
from gradscope.monitor.records import Finding, InspectReport
from gradscope.monitor.stats import parameter_records, total_norm


def inspect_model(workload: Workload, step: int = 0, thresholds: Thresholds = Thresholds(),
                  waivers: Sequence[Waiver] = ()) -> InspectReport:
    """Run forward and backward on ``batch(step)`` and measure the gradient flow.

    Parameter gradients are reset first and left in ``.grad`` afterwards; the parameters are not
    updated. When a parameter gets no gradient, the forward pass runs once more (buffers and
    random state put back afterwards) to find where the graph was cut.

    Args:
        workload: the model, its data and its loss.
        step: which batch to use.
        thresholds: limits for the vanishing/exploding/dead findings.
        waivers: findings to leave out of the report (``--ignore``).
    """
    model = workload.model
    model.zero_grad(set_to_none=True)
    batch = workload.batch(step)
    with GradientMonitor(model, workload.engine) as monitor, NormalizationInputs(model, workload.engine) as normalization:
        with loss_warnings() as messages:
            loss = workload.loss(batch)
        workload.backward(loss)
    parameters = parameter_records(model, workload.engine)
    loss_value = float(loss.item())
    findings = (loss_broadcast_findings(messages) + data_findings(loss_value, batch, step, workload.engine)
                + gradient_findings(parameters, thresholds))
    findings = zero_by_construction(findings, normalization.followed_by)
    if any(f.check == "no_grad" for f in findings):
        findings = locate_graph_cuts(workload, batch, findings)
    kept, _ = apply_waivers(findings, waivers)
    return InspectReport(model=workload.label, step=step, loss=loss_value, total_grad_norm=total_norm(parameters),
                         modules=monitor.module_records(), parameters=parameters, findings=kept)


def data_findings(loss_value: float, batch: Batch, step: int, engine: Engine) -> list[Finding]:
    """The ``nonfinite`` finding for a NaN/Inf loss, naming the batch's inputs or targets when the
    data itself already holds the non-finite value."""
    from gradscope.monitor.analysis import loss_findings

    findings = loss_findings(loss_value)
    if not findings:
        return findings
    for what, values in (("inputs", batch.inputs), ("targets", (batch.targets,))):
        kind = _data_kind(values, engine)
        if kind is not None:
            return [Finding(check="nonfinite", severity="error", value=loss_value,
                            message=f"the loss is {findings[0].message.rpartition(' ')[2]}: batch({step}) returned "
                                    f"{what} containing {kind}")]
    return findings


def locate_graph_cuts(workload: Workload, batch: Batch, findings: list[Finding]) -> list[Finding]:
    """One ``no_grad`` finding per module, pointing at the line that cut it from the graph when a
    forward-only re-run (with line tracing of the model file) finds it."""
    with preserved(workload.model, workload.engine), GraphCuts(workload.model, workload.path, workload.engine) \
            as cuts, loss_warnings():
        workload.loss(batch)
    return group_no_grad(findings, called=cuts.called, cuts=cuts.cuts)


def _data_kind(values: Sequence, engine: Engine) -> str | None:
    for value in values:
        for tensor in engine.tensors_in(value):
            kind = engine.nonfinite_kind(tensor)
            if kind is not None:
                return kind
    return None
