"""``inspect``: one forward and backward pass with per-module and per-parameter gradient statistics."""
from __future__ import annotations

from typing import Any, Sequence

from gradscope.engines import Engine
from gradscope.loading import Batch, Workload
from gradscope.monitor.analysis import (Thresholds, Waiver, apply_waivers, gradient_findings, group_no_grad,
                                        loss_broadcast_findings, zero_by_construction)
from gradscope.monitor.diagnose import GraphCuts, NormalizationInputs, loss_warnings, preserved
from gradscope.monitor.monitors import GradientMonitor
from gradscope.monitor.records import Finding, InspectReport, NonFiniteOrigin
from gradscope.monitor.snapshot import Snapshot
from gradscope.monitor.stats import parameter_records, total_grad_norm
from gradscope.monitor.tracing import module_words

# How many affected parameters the message of the one ``nonfinite`` finding names (all of them are
# in its ``parameters``).
NAMED_AFTER_ORIGIN = 6


def inspect_model(workload: Workload, step: int = 0, thresholds: Thresholds = Thresholds(),
                  waivers: Sequence[Waiver] = ()) -> InspectReport:
    """Run forward and backward on ``batch(step)`` and measure the gradient flow.

    Parameter gradients are reset first and left in ``.grad`` afterwards; the parameters are not
    updated. When a parameter gets no gradient, the forward pass runs once more (buffers and
    random state put back afterwards) to find where the graph was cut. When the loss or a
    gradient is NaN/Inf, the pass runs again with full instrumentation (as ``watch --nan`` does) and
    the report holds one ``nonfinite`` finding that says where the value started and lists the
    parameters it reached (see :func:`one_nonfinite_finding`).

    Args:
        workload: the model, its data and its loss.
        step: which batch to use.
        thresholds: limits for the vanishing/exploding/dead findings.
        waivers: findings to leave out of the report (``--ignore``).
    """
    model = workload.model
    model.zero_grad(set_to_none=True)
    batch = workload.batch(step)
    snapshot = Snapshot.capture(step, model, NO_UPDATE, batch.raw, workload.label, workload.engine)
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
    origin = None
    if any(f.check == "nonfinite" for f in findings):
        grads = [(p, p.grad) for p in model.parameters()]
        findings, origin = locate_nonfinite(workload, snapshot, NO_UPDATE, findings)
        for p, grad in grads:  # (the gradients of the measured pass stay in .grad)
            p.grad = grad
    kept, _ = apply_waivers(findings, waivers)
    return InspectReport(model=workload.label, step=step, loss=loss_value, total_grad_norm=total_grad_norm(parameters),
                         modules=monitor.module_records(), parameters=parameters, findings=kept,
                         first_nonfinite=origin)


class _NoUpdate:
    """The optimizer of a pass that updates nothing (``inspect``): what a snapshot and
    :func:`~gradscope.monitor.watch.localize_from_snapshot` ask of an optimizer, doing nothing."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing to restore."""

    def step(self) -> None:
        """Nothing to update."""


NO_UPDATE = _NoUpdate()


def locate_nonfinite(workload: Workload, snapshot: Snapshot, optimizer: Any,
                     findings: Sequence[Finding]) -> tuple[list[Finding], NonFiniteOrigin | None]:
    """Re-run the snapshot's step with full instrumentation (``watch --nan``'s localisation) and
    fold the ``nonfinite`` findings into one that says where the value started.

    The model and optimizer are left in the snapshot's state with gradients reset.

    Returns:
        The findings (one ``nonfinite`` finding in place of the first one, the others left out)
        and the origin, or None when the re-run did not find one.
    """
    from gradscope.monitor.watch import localize_from_snapshot

    origin = localize_from_snapshot(workload, snapshot, optimizer)
    return one_nonfinite_finding(findings, origin, snapshot.step), origin


def one_nonfinite_finding(findings: Sequence[Finding], origin: NonFiniteOrigin | None, step: int) -> list[Finding]:
    """``findings`` with their ``nonfinite`` findings (the loss, one per parameter) folded into one.

    Its message says once at which step and where the first NaN/Inf started (phase, module,
    autograd node, ``file:line``), then names the loss and the parameters it reached; its
    ``module`` and ``source`` are the origin's, its ``parameters`` every affected parameter.
    When the batch itself held the value, the loss's finding already names it and is kept as it is.
    """
    nonfinite = [f for f in findings if f.check == "nonfinite"]
    if not nonfinite:
        return list(findings)
    affected = tuple(f.parameter for f in nonfinite if f.parameter is not None)
    loss = [f for f in nonfinite if f.parameter is None]
    reached = (["the loss"] if loss else []) + list(affected)
    if origin is not None and origin.node in ("input data", "target data") and loss:
        message = loss[0].message
    elif origin is not None:
        phase = "the optimizer step" if origin.phase == "update" else f"the {origin.phase} pass"
        at = ", ".join(part for part in (origin.node, origin.source) if part)
        message = (f"step {step}: the first {origin.kind} appeared in {phase}: {module_words(origin.module)}"
                   + (f" ({at})" if at else ""))
        if reached:
            message += "; after it: " + _listed(reached)
    else:
        message = f"step {step}: non-finite values in " + _listed(reached)
    combined = Finding(check="nonfinite", severity="error", message=message,
                       module=origin.module if origin is not None else None,
                       value=loss[0].value if loss else None,
                       source=origin.source if origin is not None else None, parameters=affected)
    first = findings.index(nonfinite[0])
    return [*findings[:first], combined, *(f for f in findings[first + 1:] if f.check != "nonfinite")]


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED_AFTER_ORIGIN])
    more = len(names) - NAMED_AFTER_ORIGIN
    return shown + (f" and {more} more" if more > 0 else "")


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
