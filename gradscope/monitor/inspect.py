"""``inspect``: one forward and backward pass with per-module and per-parameter gradient statistics."""
from __future__ import annotations

from gradscope.loading import Workload
from gradscope.monitor.analysis import Thresholds, gradient_findings, loss_findings
from gradscope.monitor.monitors import GradientMonitor
from gradscope.monitor.records import InspectReport
from gradscope.monitor.stats import parameter_records, total_norm


def inspect_model(workload: Workload, step: int = 0, thresholds: Thresholds = Thresholds()) -> InspectReport:
    """Run forward and backward on ``batch(step)`` and measure the gradient flow.

    Parameter gradients are reset first and left in ``.grad`` afterwards; the parameters are not
    updated.

    Args:
        workload: the model, its data and its loss.
        step: which batch to use.
        thresholds: limits for the vanishing/exploding/dead findings.
    """
    model = workload.model
    model.zero_grad(set_to_none=True)
    batch = workload.batch(step)
    with GradientMonitor(model, workload.engine) as monitor:
        loss = workload.loss(batch)
        workload.backward(loss)
    parameters = parameter_records(model, workload.engine)
    loss_value = float(loss.item())
    findings = loss_findings(loss_value) + gradient_findings(parameters, thresholds)
    return InspectReport(model=workload.label, step=step, loss=loss_value, total_grad_norm=total_norm(parameters),
                         modules=monitor.module_records(), parameters=parameters, findings=tuple(findings))
