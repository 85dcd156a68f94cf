"""``watch`` and ``replay``: train step by step, detect non-finite values cheaply, localise them.

Each step computes what training needs anyway plus one squared norm per parameter gradient; a
NaN or Inf anywhere makes that norm non-finite. Only then is the step run again from its
snapshot with full instrumentation (:func:`localize_from_snapshot`), first the forward pass, then
the backward pass with every autograd node checked.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from gradscope.engines import Engine
from gradscope.loading import Batch, Workload
from gradscope.monitor.analysis import Waiver, apply_waivers, divergence_finding
from gradscope.monitor.diagnose import DivergenceTracker
from gradscope.monitor.localize import backward_node_origin, forward_module_origin, update_origin
from gradscope.monitor.monitors import BackwardNonFiniteTracer, ForwardNonFiniteTracer
from gradscope.monitor.records import Finding, NonFiniteOrigin, StepRecord, WatchReport
from gradscope.monitor.snapshot import Snapshot
from gradscope.monitor.stats import module_of, norm_from_square
from gradscope._tool.frames import is_user_file
from gradscope.monitor.tracing import relative_source


@dataclass(frozen=True)
class WatchOptions:
    """How ``watch`` trains and what stops it.

    Attributes:
        steps: number of training steps.
        lr: learning rate of the default SGD optimizer (ignored with ``make_optimizer``).
        nan: stop at the first NaN (loss, activation, gradient or parameter) and localise it.
        inf: the same for Inf.
        clip: clip the total gradient norm to this value before each update (None: no clipping).
        bundle: where to write the replay bundle of the failing step (None: no bundle).
        waivers: findings the user accepts (``--ignore``).
    """

    steps: int = 10
    lr: float = 0.01
    nan: bool = False
    inf: bool = False
    clip: float | None = None
    bundle: str | None = None
    waivers: tuple[Waiver, ...] = ()


# ``progress(stage, done, total)``: called while a long silent operation (the re-run that
# localises a non-finite value) advances.
Progress = Callable[[str, int, int], None]


class Watcher:
    """Train a workload step by step; iterate :meth:`steps` and then read :meth:`report`.

    Each step transfers one small vector to the host: the loss and the squared norm of every
    parameter gradient (and, with ``--nan``/``--inf``, of every parameter, which shows a value
    that the previous update made non-finite).

    Example::

        watcher = Watcher(workload, WatchOptions(steps=20, nan=True))
        for record in watcher.steps():
            print(record.step, record.loss)
        report = watcher.report()
    """

    def __init__(self, workload: Workload, options: WatchOptions, progress: Progress | None = None) -> None:
        self.workload = workload
        self.options = options
        self.progress = progress
        self.divergence = DivergenceTracker(workload.engine)
        self.history: list[StepRecord] = []
        self.origin: NonFiniteOrigin | None = None
        self.bundle: str | None = None
        self.saw_nonfinite = False
        self.optimizer: Any = None
        self.update_made_nonfinite = False
        self.failing_snapshot: Snapshot | None = None
        self._layer_names: tuple[list, list[str]] | None = None
        self._copy_lists: list[tuple[dict, list, list, Any]] = []

    @property
    def stops_on_nonfinite(self) -> bool:
        """True when ``--nan`` or ``--inf`` was given."""
        return self.options.nan or self.options.inf

    def steps(self) -> Iterator[StepRecord]:
        """Run the training steps, yielding one record per finished step.

        Stops early after the step where a watched non-finite value appeared (that step's record
        is the last one yielded, and :attr:`origin` tells where it started). A parameter that an
        update made non-finite is seen before the next step's forward pass; the origin is then
        the step whose update did it.
        """
        model = self.workload.model
        engine = self.workload.engine
        self.optimizer = self.workload.make_optimizer(self.options.lr)
        parameters = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        named = (list(model.named_parameters()), list(model.named_buffers()))
        previous = spare = None
        for step in range(self.options.steps):
            batch = self.workload.batch(step)
            snapshot = None
            if self.stops_on_nonfinite:
                snapshot = Snapshot.capture(step, model, self.optimizer, batch.raw, self.workload.label, engine,
                                            named=named, reuse=spare)
            self.divergence.start(parameters, snapshot.parameters if snapshot is not None else None)
            last = step == self.options.steps - 1
            record, stop = self._train_step(step, batch, parameters, check_update=last, snapshot=snapshot)
            self.divergence.finish(record)
            self.history.append(record)
            if record.nonfinite is not None:
                self.saw_nonfinite = True
            if stop and snapshot is not None:
                before_forward = record.nonfinite == "parameter" and not self.update_made_nonfinite
                failing = previous if before_forward and previous is not None else snapshot
                self.failing_snapshot = failing
                self.origin = localize_from_snapshot(self.workload, failing, self.optimizer, clip=self.options.clip,
                                                     progress=self.progress)
                if self.options.bundle is not None:
                    failing.save(self.options.bundle, extra={"lr": self.options.lr, "clip": self.options.clip})
                    self.bundle = self.options.bundle
                yield record
                return
            spare, previous = previous, snapshot
            yield record

    def report(self, interrupted: bool = False) -> WatchReport:
        """The report for the steps run so far."""
        if interrupted:
            status = "interrupted"
        elif self.saw_nonfinite:
            status = "nonfinite"
        else:
            status = "ok"
        divergence = self.divergence.divergence
        findings: list[Finding] = []
        if divergence is not None:
            findings.append(divergence_finding(divergence.step, divergence.loss_before, divergence.loss_after,
                                               divergence.update_ratios, divergence.zeroed_layers))
        kept, _ = apply_waivers(findings, self.options.waivers)
        return WatchReport(model=self.workload.label, steps_run=len(self.history), status=status,
                           first_nonfinite=self.origin, history=tuple(self.history), bundle=self.bundle,
                           findings=kept, divergence=divergence if kept else None)

    def _train_step(self, step: int, batch: Batch, parameters: list[tuple[str, Any]],
                    check_update: bool = False, snapshot: Snapshot | None = None) -> tuple[StepRecord, bool]:
        """One training step with cheap detection; returns the record and whether to stop.

        With ``check_update`` (the last step, or a replayed one) the parameters are checked once
        more after the update (a second transfer), since no next step will see them. When the
        engine keeps the copies of the step's ``snapshot`` in one buffer, the parameters are checked
        through them, in one piece, as the step starts.
        """
        engine = self.workload.engine
        checked: list = []  # the parameters checked for NaN/Inf
        joined_square = None  # their sum of squares, when the snapshot keeps its copies in one buffer
        if self.stops_on_nonfinite:
            checked = [p for _, p in parameters]
            if snapshot is not None:
                copies, joined = self._copies_of(snapshot, parameters)
                if joined is not None:  # (read now, while the copies just written are in the cache)
                    checked = copies
                    joined_square = engine.squared_norms([joined])[0]
        with self.workload.user_code():
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.workload.loss(batch)
            self.workload.backward(loss)
        watched = [p.grad for _, p in parameters]
        loss_value, squares = engine.loss_and_squared_norms(loss, watched if joined_square is not None
                                                            else watched + checked)
        grad_squares = squares[:len(parameters)]
        if joined_square is None:
            param_squares = squares[len(parameters):]
        else:  # one square for all of them: each one's only to name a non-finite one
            param_squares = [] if math.isfinite(joined_square) else engine.squared_norms(checked)
        total = 0.0
        layer_squares: dict[str, float] = {}
        for module, value in zip(self._layers(parameters), grad_squares):
            if value is not None:
                total += value
                layer_squares[module] = layer_squares.get(module, 0.0) + value
        kinds: list[str] = []
        where = None
        if not math.isfinite(sum(param_squares)):  # (squares: finite when every one is)
            for tensor, value in zip(checked, param_squares):
                if not math.isfinite(value):
                    kinds.append(engine.nonfinite_kind(tensor) or "inf")
                    where = "parameter"
                    break
        if not math.isfinite(loss_value):
            kinds.append("nan" if math.isnan(loss_value) else "inf")
            where = where or "loss"
        if not math.isfinite(total):
            for (_, p), value in zip(parameters, grad_squares):
                if value is not None and not math.isfinite(value):
                    kind = engine.nonfinite_kind(p.grad)
                    if kind is not None:
                        kinds.append(kind)
                        where = where or "gradient"
        if self.options.clip is not None:
            engine.clip_grad_norm_([p for _, p in parameters], self.options.clip)
        if not self._should_stop(kinds):
            self.optimizer.step()
            if check_update and self.stops_on_nonfinite and where is None:
                after = engine.squared_norms([p for _, p in parameters])
                for (_, p), value in zip(parameters, after):
                    if not math.isfinite(value):
                        kinds.append(engine.nonfinite_kind(p) or "inf")
                        where = "parameter"
                        self.update_made_nonfinite = True
                        break
        record = StepRecord(step=step, loss=loss_value, total_grad_norm=norm_from_square(total),
                            layer_norms=tuple(zip(layer_squares, map(math.sqrt, layer_squares.values()))),
                            nonfinite=where)
        return record, self._should_stop(kinds)

    def _copies_of(self, snapshot: Snapshot, parameters: list[tuple[str, Any]]) -> tuple[list, Any]:
        """The snapshot's copies of ``parameters`` in their order, and the engine's one tensor over
        them (None when it keeps none). A snapshot taken over an older one keeps its dict of copies
        and the copies themselves, rewritten: the list and the joined tensor are kept for it (two
        snapshots alternate)."""
        store = snapshot.parameters
        for kept_store, kept_parameters, copies, joined in self._copy_lists:
            if kept_store is store and kept_parameters is parameters:
                return copies, joined
        copies = [store[name] for name, _ in parameters]
        joined = self.workload.engine.joined(copies)
        self._copy_lists = [*self._copy_lists[-1:], (store, parameters, copies, joined)]
        return copies, joined

    def _layers(self, parameters: list[tuple[str, Any]]) -> list[str]:
        """The module of each parameter (kept while the list of parameters is the same)."""
        if self._layer_names is None or self._layer_names[0] is not parameters:
            self._layer_names = (parameters, [module_of(name) for name, _ in parameters])
        return self._layer_names[1]

    def _should_stop(self, kinds: list[str]) -> bool:
        return ("nan" in kinds and self.options.nan) or ("inf" in kinds and self.options.inf)


def localize_from_snapshot(workload: Workload, snapshot: Snapshot, optimizer: Any,
                           clip: float | None = None, progress: Progress | None = None) -> NonFiniteOrigin | None:
    """Re-run the snapshot's step with full instrumentation and say where the NaN/Inf started
    (:mod:`gradscope.monitor.localize` says how this relates to ``run``'s localising).

    1. Forward pass with global forward hooks (and line tracing of the model file and the user's
       files it imports): the first module whose inputs are finite but whose output is not, and
       the line that produced it.
    2. If the forward pass is finite: backward pass with a post-hook on every autograd node that
       checks NaN and Inf: the first node whose incoming gradients are finite but whose outgoing
       ones are not, the module call that created it, and the line (recorded in forward).
    3. If the gradients are finite too: the optimizer step made a parameter non-finite.

    The model and optimizer are left in the snapshot's state with gradients reset.
    """
    report = progress or (lambda stage, done, total: None)
    model = workload.model
    engine = workload.engine
    step = snapshot.step
    batch = Batch.from_raw(snapshot.restore(model, optimizer))

    data_kind = _first_nonfinite(engine, batch.inputs)
    if data_kind is not None:
        origin = NonFiniteOrigin(step=step, phase="forward", module=None, node="input data", source=None,
                                 kind=data_kind, detail=f"batch({step}) returned inputs containing {data_kind}")
        snapshot.restore(model, optimizer)
        return origin
    target_kind = _first_nonfinite(engine, (batch.targets,))
    if target_kind is not None:
        origin = NonFiniteOrigin(step=step, phase="forward", module=None, node="target data", source=None,
                                 kind=target_kind,
                                 detail=f"batch({step}) returned targets containing {target_kind}")
        snapshot.restore(model, optimizer)
        return origin

    report(f"locating the non-finite value of step {step}: forward pass", 0, 2)
    forward = ForwardNonFiniteTracer(model, engine=engine, follow=_user_lines(workload))
    with forward:
        loss = workload.loss(_tracking_inputs(batch))
    loss_value = float(loss.item())
    if forward.module_found or not math.isfinite(loss_value):
        origin = _forward_origin(workload, forward, step, loss_value)
        snapshot.restore(model, optimizer)
        return origin

    batch = Batch.from_raw(snapshot.restore(model, optimizer))
    report(f"locating the non-finite value of step {step}: backward pass", 1, 2)
    backward = BackwardNonFiniteTracer(model, engine)
    with backward:
        with engine.record_creation_traces():
            loss = workload.loss(batch)
        backward.watch(loss)
        workload.backward(loss)
    parameter = _first_nonfinite_gradient(workload)
    if backward.node is not None or backward.module_found or parameter is not None:
        kind = backward.kind or (engine.nonfinite_kind(dict(model.named_parameters())[parameter].grad)
                                 if parameter is not None else None) or "nan"
        module = backward.node_module if backward.node is not None else backward.module
        if module is None and backward.node is None and parameter is not None:
            module = module_of(parameter)
        source = _source_from_trace(workload, backward.node_trace)
        snapshot.restore(model, optimizer)
        return backward_node_origin(step, module, backward.node, kind, source, backward.propagated)

    batch = Batch.from_raw(snapshot.restore(model, optimizer))
    origin = _update_origin(workload, optimizer, batch, step, clip)
    snapshot.restore(model, optimizer)
    return origin


def replay(workload: Workload, bundle: str | Path) -> WatchReport:
    """Run the step stored in a replay bundle again and report where its non-finite value started.

    The step runs with cheap detection first (as in ``watch``), then :func:`localize_from_snapshot` if
    anything was non-finite. Status ``"ok"`` means the step did not reproduce a NaN/Inf.
    """
    snapshot, meta = Snapshot.load(bundle)
    optimizer = workload.make_optimizer(float(meta.get("lr", 0.01)))
    options = WatchOptions(steps=1, lr=float(meta.get("lr", 0.01)), nan=True, inf=True, clip=meta.get("clip"))
    watcher = Watcher(workload, options)
    watcher.optimizer = optimizer
    parameters = [(name, p) for name, p in workload.model.named_parameters() if p.requires_grad]
    batch = Batch.from_raw(snapshot.restore(workload.model, optimizer))
    record, _ = watcher._train_step(snapshot.step, batch, parameters, check_update=True)
    origin = None
    if record.nonfinite is not None:
        origin = localize_from_snapshot(workload, snapshot, optimizer, clip=options.clip)
    return WatchReport(model=workload.label, steps_run=1, status="nonfinite" if record.nonfinite else "ok",
                       first_nonfinite=origin, history=(record,), bundle=str(bundle))


def _forward_origin(workload: Workload, tracer: ForwardNonFiniteTracer, step: int,
                    loss_value: float) -> NonFiniteOrigin:
    op = tracer.op  # the operation that made the first non-finite value, when the one reported came from it
    source = _source_from_trace(workload, op.frames) if op is not None else None
    if source is None and tracer.source is not None:
        source = relative_source(*tracer.source)
    if tracer.module_found:
        note = " (one of its own parameters is already non-finite)" if tracer.parameter_nonfinite else ""
        return forward_module_origin(step, tracer.module, tracer.kind or "nan", tracer.node or tracer.source_node,
                                     source, tracer.propagated, note)
    kind = "nan" if math.isnan(loss_value) else "inf"
    return NonFiniteOrigin(step=step, phase="forward", module=None, node=tracer.source_node, source=source,
                           kind=tracer.source_kind or (op.kind if op is not None else None) or kind,
                           detail=f"the model's outputs are finite; the loss computation produced {kind}")


def _update_origin(workload: Workload, optimizer: Any, batch: Batch, step: int,
                   clip: float | None) -> NonFiniteOrigin | None:
    model = workload.model
    workload.backward(workload.loss(batch))
    if clip is not None:
        workload.engine.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], clip)
    optimizer.step()
    for name, p in model.named_parameters():
        kind = workload.engine.nonfinite_kind(p)
        if kind is not None:
            return update_origin(step, name, kind, optimizer)
    return None


def _tracking_inputs(batch: Batch) -> Batch:
    """The batch with floating-point input tensors made to require grad, so that every forward
    operation records a node whose name can be reported."""
    def track(value: Any) -> Any:
        if hasattr(value, "requires_grad_") and value.is_floating_point() and not value.requires_grad:
            return value.detach().requires_grad_()
        return value

    inputs = tuple(track(value) for value in batch.inputs)
    raw_inputs = batch.raw[0]
    raw = (inputs if isinstance(raw_inputs, (tuple, list)) else inputs[0], batch.raw[1])
    return Batch(inputs=inputs, targets=batch.targets, raw=raw)


def _first_nonfinite(engine: Engine, values: tuple) -> str | None:
    for tensor in engine.tensors_in(values):
        if tensor.is_floating_point():
            kind = engine.nonfinite_kind(tensor)
            if kind is not None:
                return kind
    return None


def _first_nonfinite_gradient(workload: Workload) -> str | None:
    """The first parameter whose gradient holds NaN/Inf, or None."""
    parameters = [(name, p) for name, p in workload.model.named_parameters() if p.grad is not None]
    squares = workload.engine.squared_norms([p.grad for _, p in parameters])
    for (name, _), square in zip(parameters, squares):
        if not math.isfinite(square):
            return name
    return None


def _user_lines(workload: Workload) -> Callable[[str, int], bool]:
    """The files whose lines the forward re-run traces: the model file and the user's files it
    imports (layers defined in another file are the usual layout)."""
    model_file = None if workload.path is None else str(workload.path)
    return lambda filename, line: filename == model_file or is_user_file(filename)


def _source_from_trace(workload: Workload, trace: list[tuple[str, int]]) -> str | None:
    """The innermost frame of the user's code in a stack (outside gradscope, the standard library
    and installed packages; the model file, or a module it imports), else None."""
    user = [frame for frame in trace if is_user_file(frame[0]) or
            (workload.path is not None and Path(frame[0]) == workload.path)]
    return relative_source(*user[-1]) if user else None
