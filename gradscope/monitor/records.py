"""Plain, frozen records that monitors produce and renderers consume (stdlib only).

Numbers are Python floats; a norm of a tensor that holds NaN or Inf is NaN or Inf, and a value
that does not exist (a parameter without a gradient) is None.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradscope.monitor.run_series import RunSeries

CHECKS = ("nonfinite", "no_grad", "dead", "vanishing", "exploding", "unchanged", "loss_not_decreasing",
          "gradcheck", "loss_broadcast", "divergence")

# The named checks of ``gradscope check`` and the finding kinds each one fails on, in run order.
CHECK_FINDINGS = {
    "loss_shapes_match": ("loss_broadcast",),
    "finite": ("nonfinite",),
    "gradients_reach_parameters": ("no_grad",),
    "no_dead_parameters": ("dead",),
    "no_vanishing_gradients": ("vanishing",),
    "no_exploding_gradients": ("exploding",),
    "parameters_update": ("unchanged",),
    "loss_decreases": ("loss_not_decreasing",),
    "gradcheck": ("gradcheck",),
}


@dataclass(frozen=True)
class Finding:
    """One problem found by an analysis.

    Attributes:
        check: one of :data:`CHECKS`.
        severity: ``"error"``, ``"warning"`` or ``"info"`` (a note that fails nothing, e.g. a
            gradient that is zero by construction).
        message: one sentence a person can act on.
        module: dotted module path ("" is the model itself), or None.
        parameter: dotted parameter name, or None.
        value: the measured number, or None.
        threshold: the limit it was compared with, or None.
        source: ``file:line`` of the code the finding points at (e.g. a ``.detach()``), or None.
        parameters: every parameter the finding covers, when it covers several (one finding per
            module rather than one per parameter).
    """

    check: str
    severity: str
    message: str
    module: str | None = None
    parameter: str | None = None
    value: float | None = None
    threshold: float | None = None
    source: str | None = None
    parameters: tuple[str, ...] = ()


# ModuleRecord and ParameterRecord are made by the hundred per step (one per module, one per
# parameter): their own ``__init__`` stores all fields in one step, where a frozen dataclass's
# generated one sets each field through ``object.__setattr__`` (twice the cost of the whole
# record). Same signature, fields and results (tests/monitor/test_records.py).
_set_attribute = object.__setattr__


@dataclass(frozen=True, init=False)
class ModuleRecord:
    """Gradient flow through one module (summed over its calls in one backward pass).

    Attributes:
        name: dotted module path in forward order ("" is the model itself).
        type: the module's class name.
        calls: how many times forward called it.
        grad_output_norm: 2-norm of the gradients arriving at its outputs (None if none arrived).
        grad_input_norm: 2-norm of the gradients it sends to its inputs (None if none left).
        nonfinite: number of NaN/Inf entries in those gradients.
    """

    name: str
    type: str
    calls: int
    grad_output_norm: float | None
    grad_input_norm: float | None
    nonfinite: int

    def __init__(self, name: str, type: str, calls: int, grad_output_norm: float | None,  # noqa: A002
                 grad_input_norm: float | None, nonfinite: int) -> None:
        _set_attribute(self, "__dict__", {"name": name, "type": type, "calls": calls,
                                          "grad_output_norm": grad_output_norm, "grad_input_norm": grad_input_norm,
                                          "nonfinite": nonfinite})


@dataclass(frozen=True, init=False)
class ParameterRecord:
    """Gradient statistics of one parameter after a backward pass.

    All ``grad_*`` numbers and ``grad_to_param`` are None when the parameter got no gradient.
    """

    name: str
    module: str
    module_type: str
    shape: tuple[int, ...]
    has_grad: bool
    grad_norm: float | None
    grad_mean: float | None
    grad_std: float | None
    grad_abs_max: float | None
    nonfinite: int
    zero_fraction: float | None
    dead_unit_fraction: float | None
    param_norm: float
    grad_to_param: float | None

    def __init__(self, name: str, module: str, module_type: str, shape: tuple[int, ...], has_grad: bool,
                 grad_norm: float | None, grad_mean: float | None, grad_std: float | None,
                 grad_abs_max: float | None, nonfinite: int, zero_fraction: float | None,
                 dead_unit_fraction: float | None, param_norm: float, grad_to_param: float | None) -> None:
        _set_attribute(self, "__dict__", {
            "name": name, "module": module, "module_type": module_type, "shape": shape, "has_grad": has_grad,
            "grad_norm": grad_norm, "grad_mean": grad_mean, "grad_std": grad_std, "grad_abs_max": grad_abs_max,
            "nonfinite": nonfinite, "zero_fraction": zero_fraction, "dead_unit_fraction": dead_unit_fraction,
            "param_norm": param_norm, "grad_to_param": grad_to_param})


@dataclass(frozen=True)
class InspectReport:
    """What ``inspect`` measured on one forward and backward pass (``first_nonfinite``: where a
    NaN/Inf of the pass started, when there was one)."""

    model: str
    step: int
    loss: float
    total_grad_norm: float
    modules: tuple[ModuleRecord, ...]
    parameters: tuple[ParameterRecord, ...]
    findings: tuple[Finding, ...]
    first_nonfinite: "NonFiniteOrigin | None" = None


@dataclass(frozen=True)
class StepRecord:
    """One training step of ``watch``.

    Attributes:
        step: the step index (``batch(step)`` was used).
        loss: the loss before the update.
        total_grad_norm: 2-norm over all parameter gradients.
        layer_norms: ``(module path, 2-norm of its own parameters' gradients)`` in model order.
        nonfinite: what was not finite in this step ("loss", "gradient", "parameter"), or None.
        parameter_norms: ``(parameter name, 2-norm of its gradient or None)`` (``run`` only).
        clipped_total_grad_norm: total norm after ``--clip`` (``run`` only; None without it).
        clipped_parameter_norms: per-parameter norms after ``--clip`` (``run`` only).
        skipped: the backward pass was not followed by an optimizer step (``run`` only: e.g. a
            gradient scaler skipped it). ``run`` records ``loss`` None when ``backward()`` was
            called on a tensor with more than one element.
        ranks: per-rank figures of a distributed ``run`` (empty in one process).
        skip: why ``run`` left the parameters unchanged at this step: ``"nonfinite"`` (``--on-nonfinite
            skip`` skipped a step whose loss or gradients were not finite), ``"overflow"`` (a gradient
            scaler found its scaled gradients overflowing and skipped the step itself), ``"spike"``
            (``--on-spike skip``), or None.
        origin: for a ``"nonfinite"`` skip, where its non-finite value started.
        scale: the gradient scaler's scale of this step (``run`` only; None without a scaler).
    """

    step: int
    loss: float
    total_grad_norm: float
    layer_norms: tuple[tuple[str, float], ...]
    nonfinite: str | None = None
    parameter_norms: tuple[tuple[str, float | None], ...] = ()
    clipped_total_grad_norm: float | None = None
    clipped_parameter_norms: tuple[tuple[str, float | None], ...] = ()
    skipped: bool = False
    ranks: tuple["RankFigures", ...] = ()
    skip: str | None = None
    origin: "NonFiniteOrigin | None" = None
    scale: float | None = None


@dataclass(frozen=True)
class RankFigures:
    """One rank's own figures of a distributed ``run`` step, beside the global ones.

    Attributes:
        rank: the rank.
        loss: the loss that rank computed (None when its backward was not called on a scalar).
        total_grad_norm: 2-norm of the gradients the rank holds (its shards under FSDP; under
            DDP the averaged gradients, equal to the global norm).
    """

    rank: int
    loss: float | None
    total_grad_norm: float


@dataclass(frozen=True)
class NonFiniteOrigin:
    """Where the first non-finite value came from.

    Attributes:
        step: the training step.
        phase: ``"forward"``, ``"backward"`` or ``"update"`` (the optimizer step).
        module: dotted path of the module that produced it ("" is the model itself; None when the
            value came from outside every module, e.g. the loss function's own arithmetic).
        node: the autograd node (``"LogBackward0"``) or the forward operation that produced it.
        source: ``file:line`` in the model file, or None.
        kind: ``"nan"`` or ``"inf"``.
        propagated: modules that only passed the value on, in the order it reached them.
        detail: one sentence that explains the finding.
        rank: the rank where it started (distributed ``run``; None in one process).
    """

    step: int
    phase: str
    module: str | None
    node: str | None
    source: str | None
    kind: str
    propagated: tuple[str, ...] = ()
    detail: str = ""
    rank: int | None = None


@dataclass(frozen=True)
class Divergence:
    """The loss jumped by orders of magnitude from one step to the next.

    Attributes:
        step: the step whose loss jumped (the update of ``step - 1`` caused it).
        loss_before: the loss of ``step - 1``.
        loss_after: the loss of ``step``.
        update_ratios: ``(parameter, |Δp| / |p|)`` of the update in between, in model order.
        zeroed_layers: layers whose gradient norm was positive before and is exactly zero now.
    """

    step: int
    loss_before: float
    loss_after: float
    update_ratios: tuple[tuple[str, float], ...]
    zeroed_layers: tuple[str, ...] = ()


@dataclass(frozen=True)
class WatchReport:
    """The outcome of ``watch`` (or of a replay).

    ``status`` is ``"ok"``, ``"nonfinite"`` or ``"interrupted"``.
    """

    model: str
    steps_run: int
    status: str
    first_nonfinite: NonFiniteOrigin | None
    history: tuple[StepRecord, ...]
    bundle: str | None = None
    findings: tuple[Finding, ...] = ()
    divergence: Divergence | None = None


@dataclass(frozen=True)
class RunReport:
    """The outcome of ``gradscope run SCRIPT``.

    Attributes:
        script: the script as given on the command line.
        steps_run: number of step records.
        status: ``"ok"``, ``"nonfinite"``, ``"interrupted"`` or ``"error"`` (the script raised).
        first_nonfinite: where the first non-finite value started (with ``--nan``/``--inf``).
        history: one record per step.
        notes: facts about the run a person should know (modules not observed, skipped steps).
        stopped: why ``run`` stopped the script early (``"nonfinite"``: ``--on-nonfinite stop``;
            ``"skips"``: too many consecutive skipped steps; ``"spike"``: ``--on-spike stop``), or None.
        spikes: loss and gradient-norm spikes found over the run.
        findings: ``check``'s gradient rules over the run (:mod:`gradscope.monitor.run_health`).
        waived: findings that ``--ignore`` accepted.
        series: the per-layer and per-parameter gradient norms over every step
            (:class:`~gradscope.monitor.run_series.RunSeries`); the records of ``history`` keep
            them for the first and last steps only. None: make it from ``history``.
    """

    script: str
    steps_run: int
    status: str
    first_nonfinite: NonFiniteOrigin | None
    history: tuple[StepRecord, ...]
    notes: tuple[str, ...] = ()
    stopped: str | None = None
    spikes: tuple["Spike", ...] = ()
    findings: tuple[Finding, ...] = ()
    waived: tuple[Finding, ...] = ()
    series: RunSeries | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Spike:
    """A loss or gradient-norm spike of a ``run`` (see :mod:`gradscope.monitor.spikes`).

    Attributes:
        step: the step whose value spiked.
        quantity: ``"loss"``, ``"grad_norm"`` or ``"layer_grad_norm"`` (one layer's gradient norm spiked
            while neither total did; ``layer`` names it).
        value: the value at that step.
        baseline: the median of the window of recent values it was compared with.
        score: the robust z-score of its log against the window's logs.
        cause: ``"layers"`` (some layers' gradients rose first and most) or ``"everywhere"`` (every
            layer's gradient rose by about the same factor at that step: the batch or the loss).
        layers: ``(layer, gradient norm / its window median, first step it rose)`` of the layers
            that rose most, largest first.
        action: what ``run`` did: ``"warn"``, ``"skip"`` or ``"stop"``.
    """

    step: int
    quantity: str
    value: float
    baseline: float
    score: float
    cause: str
    layers: tuple[tuple[str, float, int], ...]
    action: str = "warn"
    layer: str | None = None


@dataclass(frozen=True)
class ClipParameterRecord:
    """One parameter's gradient norm before and after clipping."""

    name: str
    norm_before: float | None
    norm_after: float | None


@dataclass(frozen=True)
class ClipReport:
    """What ``clip`` did on its last step."""

    model: str
    mode: str
    scope: str
    max: float
    steps: int
    total_norm_before: float
    total_norm_after: float
    parameters: tuple[ClipParameterRecord, ...]


@dataclass(frozen=True)
class CheckResult:
    """One named check of ``check``: ``status`` is ``"pass"``, ``"fail"`` or ``"skip"``."""

    name: str
    status: str
    message: str


@dataclass(frozen=True)
class CheckReport:
    """All checks and the findings behind the failing ones (``waived``: how many findings the
    user's waivers left out; ``first_nonfinite``: where the first NaN/Inf started, when one appeared)."""

    model: str
    passed: bool
    checks: tuple[CheckResult, ...]
    findings: tuple[Finding, ...]
    waived: int = 0
    first_nonfinite: "NonFiniteOrigin | None" = None
