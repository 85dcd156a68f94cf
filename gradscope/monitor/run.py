"""``gradscope run``: monitor an unmodified training script through global hooks, on either engine.

:class:`RunMonitor` attaches to an engine through its adapter (global module forward hooks,
global optimizer step hooks, and wrappers around the engine's backward entry points, a gradient
scaler's ``scale`` and ``step``, and the functions that start processes or tear down a process
group) and turns what the script does into one :class:`StepRecord` per ``optimizer.step()`` (per
``backward()`` call when the script has no optimizer). What a step is made of, and the state of
the one being built, is :mod:`gradscope.monitor.run_step`'s.

Cheap by default: per backward pass, one batched computation of the squared norms of every
parameter gradient and of every parameter (plus, with ``--nan``/``--inf``, of the model's outputs
and of every other module output that takes part in the backward pass) and the loss, read with a
single host synchronisation. Those numbers are a vector (one entry per parameter gradient, model
output, module output and parameter, in a fixed order) whose non-finite entries are the flags.
Only when ``--nan``/``--inf`` watches one that is non-finite does
:mod:`gradscope.monitor.run_localize` re-run the model's forward (and backward) on the saved
inputs, with the random generators restored, under full instrumentation.

The model is the outermost module(s) with trainable parameters that the script calls; module and
parameter names are paths in it.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable

from gradscope._tool.frames import passes_call_through as _passes_through
from gradscope.engines import ACCUMULATE_NODE, Engine
from gradscope.errors import ControlFlow
from gradscope.monitor.distributed import StepReducer, rank_figures
from gradscope.monitor.protect import DEFAULT_MAX_SKIPS, SKIP_NONFINITE, SKIP_OVERFLOW, InfAllowance, StepGuard, \
    clear_gradients, \
    SKIP_SPIKE, preserved_buffers, skip_notes
from gradscope.monitor.analysis import Thresholds
from gradscope.monitor.records import NonFiniteOrigin, RunReport, StepRecord
from gradscope.monitor.run_health import ParameterChanges, run_findings
from gradscope.monitor.run_series import RunSeries
from gradscope.monitor.run_spawn import FollowedRank, SpawnedRanks
from gradscope.monitor.run_step import BackwardPass, BackwardStats, RootCall, StepState, all_finite, \
    nonfinite_place, square_sum, step_loss, value_kind, verdict_values
from gradscope.monitor.spikes import SpikeTracker, spike_notes
from gradscope.monitor.stats import module_of, norm_from_square
from gradscope._tool.frames import is_user_file
from gradscope.monitor.tracing import join_path

__all__ = ["FailingStep", "LOSS_GRAPH_NODES", "RunMonitor", "RunOptions", "StopRun"]

#: With --nan/--inf, how many nodes of the loss computation (between the loss and the model's
#: outputs) get a node hook per backward pass.
LOSS_GRAPH_NODES = 64


#: The monitors attached in this process (a process forked from one holds its parent's: the
#: monitor of a followed rank closes them first).
ATTACHED: list["RunMonitor"] = []


class StopRun(ControlFlow):
    """Raised from gradscope's hooks to stop the script when a watched non-finite value appeared.

    A ``BaseException`` (gradscope's :class:`~gradscope.errors.ControlFlow`) so that the script's
    ``except Exception`` blocks do not swallow it and the user-code boundary lets it pass.
    """


@dataclass(frozen=True)
class RunOptions:
    """What ``run`` watches and does.

    Attributes:
        nan: stop at the first NaN (loss, activation, gradient or parameter) and localise it.
        inf: the same for Inf.
        clip: clip the gradients to this value before each optimizer step (None: no clipping).
        clip_mode: ``"norm"`` (total 2-norm) or ``"value"`` (each element).
        on_nonfinite: ``"stop"`` (stop the script at the first watched non-finite value) or ``"skip"``
            (skip that optimizer step and go on; see :mod:`gradscope.monitor.protect`).
        max_skips: with ``"skip"``, how many consecutive skipped steps stop the run.
        allow_inf: module path patterns whose outputs may hold ``-inf`` by design (``--allow-inf``).
        thresholds, waivers: ``check``'s limits and accepted findings, for its rules over the run.
        health: ``"warn"`` (report those findings) or ``"fail"`` (they also fail the run).
        on_spike: what a loss or gradient-norm spike does (:mod:`gradscope.monitor.spikes`): ``"warn"``
            (report it), ``"skip"`` (skip that optimizer step too) or ``"stop"``.
    """

    nan: bool = False
    inf: bool = False
    clip: float | None = None
    clip_mode: str = "norm"
    on_nonfinite: str = "stop"
    max_skips: int = DEFAULT_MAX_SKIPS
    on_spike: str = "warn"
    allow_inf: tuple[str, ...] = ()
    thresholds: Thresholds = Thresholds()
    waivers: tuple = ()
    health: str = "warn"

    @property
    def stops(self) -> bool:
        """True when ``--nan`` or ``--inf`` was given."""
        return self.nan or self.inf


@dataclass(frozen=True)
class FailingStep:
    """The model call of the step a run stopped at, ready to run again (``run --debug-on-failure``).

    Attributes:
        engine: its engine.
        model: the module that was called (inside a DDP wrapper).
        step: the step number.
        compute_loss: runs the call again on its kept inputs with the random state it had, and
            returns a scalar whose backward pass sends the kept gradients into the call's outputs
            (``sum(output * kept_gradient)``): the same backward pass through the model.
    """

    engine: Engine
    model: Any
    step: int
    compute_loss: Callable[[], Any]


def _rerun_surrogate(engine: Engine, call: RootCall) -> Any:
    from gradscope.monitor.run_localize import _call_again

    outputs = engine.tensors_in(_call_again(engine, call))  # (the same call: a forward redirection too)
    terms = [(output * grad.detach()).sum() for output, grad in zip(outputs, call.grad_outputs)
             if grad is not None and output.requires_grad]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


class _Attachment:
    """What attaches a monitor, from :meth:`RunMonitor.attach` to :meth:`RunMonitor.close`: the
    engines, the hook handles, and the attributes replaced by its wrappers (an engine's backward
    entry points, a gradient scaler's ``scale`` and ``step``, the process start and group teardown
    functions) with their originals. Each wrapper belongs to the attachment it was installed
    under and passes its calls straight on once that one is :attr:`closed`."""

    def __init__(self) -> None:
        self.engines: list[Engine] = []
        self.handles: list[Any] = []
        self.originals: dict[str, Callable] = {}  # the first backward entry point of each engine
        self.closed = False
        self._replaced: list[tuple[Any, str, Any, Any]] = []  # (owner, attribute, original, wrapper)

    def replace(self, owner: Any, attribute: str, original: Any, wrapper: Any) -> None:
        """Set ``owner.attribute`` to ``wrapper`` (``original`` is what it held)."""
        self._replaced.append((owner, attribute, original, wrapper))
        setattr(owner, attribute, wrapper)

    def detach(self) -> None:
        """Remove the hooks; put each original back where the attribute still holds our wrapper
        (where someone replaced it after us, theirs stays); then :attr:`closed`."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        for owner, attribute, original, wrapper in reversed(self._replaced):
            if vars(owner).get(attribute) is wrapper:
                setattr(owner, attribute, original)
        self._replaced.clear()
        self.engines.clear()
        self.closed = True


@dataclass
class _Root:
    engine: Engine
    module: Any
    prefix: str


class _Models:
    """The model(s) the script trains, found from its calls, and the names inside them.

    A model is the outermost module with trainable parameters that the script calls; module and
    parameter names are paths in it (with several models, each path starts with the script's
    variable for its model, else with its class name).

    Args:
        main_globals: the script's globals, used to name several models by their variables.
    """

    def __init__(self, main_globals: Callable[[], dict] | None) -> None:
        self.main_globals = main_globals
        self.roots: list[_Root] = []
        self._root_ids: dict[int, _Root] = {}  # id(root.module) -> root
        self.names: dict[int, str] = {}  # id(module) -> its path, for every module of every model
        self.ignored: set[int] = set()  # modules called outside every model that have no trainable parameter
        self.parameters: list[tuple[str, Any]] = []  # (path, parameter) of every trainable parameter
        self.parameter_modules: list[str] = []  # the module path of each of those parameters
        self._slots: list[tuple[Any, str]] = []  # (owning module, attribute) of each of those parameters

    def root_of(self, module: Any) -> _Root | None:
        """The model that ``module`` is, or None (an inner module, or one outside every model)."""
        root = self._root_ids.get(id(module))
        return root if root is not None and root.module is module else None

    def adopt(self, engine: Engine, module: Any) -> bool | None:
        """A module outside every known model was called: it becomes a model if it has trainable
        parameters; known models inside it are absorbed into it. Returns False when it does not
        become one, True when it does and the names of the models known before changed (models
        were absorbed, or their prefixes changed), None when it does and they did not."""
        if not any(p.requires_grad for p in module.parameters()):
            self.ignored.add(id(module))
            return False
        inside = {id(m) for m in module.modules()}
        kept = [root for root in self.roots if id(root.module) not in inside]
        absorbed = len(kept) < len(self.roots)
        self.roots = [*kept, _Root(engine, module, "")]
        self._root_ids = {id(root.module): root for root in self.roots}
        prefixes = _root_prefixes([root.module for root in self.roots], self.main_globals)
        if not absorbed and all(root.prefix == prefix for root, prefix in zip(kept, prefixes)):
            # (the first pass of a model calls its inner modules before its own forward returns:
            # each adopted in turn, then absorbed; naming them all again each time was quadratic)
            self._name(self.roots[-1], prefixes[-1])
            return None
        self.names.clear()
        self.parameters.clear()
        self._slots.clear()
        self.parameter_modules = []
        for root, prefix in zip(self.roots, prefixes):
            self._name(root, prefix)
        return True

    def _name(self, root: _Root, prefix: str) -> None:
        """Name the modules and trainable parameters of ``root`` (after those of the roots before it)."""
        root.prefix = prefix
        self.names[id(root.module)] = prefix
        inner = root.engine.uncompiled(root.module)
        modules = dict(inner.named_modules())
        for name, module in modules.items():
            self.names.setdefault(id(module), join_path(prefix, name))
        for name, p in inner.named_parameters():
            if p.requires_grad:
                owner, _, attribute = name.rpartition(".")
                path = join_path(prefix, name)
                self.parameters.append((path, p))
                self._slots.append((modules[owner], attribute))
                self.parameter_modules.append(module_of(path))

    def refresh_parameters(self) -> None:
        """Take the parameter objects the modules hold now. FSDP2 swaps a module's parameters
        between the sharded ones (between steps) and gathered ones (during forward, and for the
        root until backward ends): a model adopted inside a forward pass would otherwise keep the
        gathered ones, whose storage FSDP frees."""
        for index, (owner, attribute) in enumerate(self._slots):
            current = getattr(owner, attribute, None)
            if current is not None and current is not self.parameters[index][1]:
                self.parameters[index] = (self.parameters[index][0], current)


class RunMonitor:
    """Attach to whatever a script does; read :attr:`history` and :meth:`report` afterwards.

    Args:
        options: what to watch.
        on_step: ``on_step(record)`` for each finished step (e.g. write a log line).
        main_globals: the script's globals, used to name several models by their variables.
        reducer: combines each step over the ranks of a distributed job (default: one process).
        on_failure: ``on_failure(step)`` with the :class:`FailingStep` when the run stops at a
            non-finite value (``run --debug-on-failure`` opens the debugger on it).

    A context manager, like the monitors of :mod:`gradscope.monitor.monitors`: leaving the
    ``with`` block calls :meth:`close`. It attaches to each engine through :meth:`attach`, which
    may come later than the ``with`` (``gradscope run`` attaches to torch when the script imports
    it). The history and the report stay readable after the block.

    Example::

        with RunMonitor(RunOptions(nan=True)) as monitor:
            monitor.attach(get_engine("gradscope"))
            try:
                run_script("train.py")
            except StopRun:
                pass
        report = monitor.report("train.py")
    """

    def __init__(self, options: RunOptions, on_step: Callable[[StepRecord], None] | None = None,
                 main_globals: Callable[[], dict] | None = None, reducer: StepReducer | None = None,
                 on_failure: Callable[["FailingStep"], None] | None = None) -> None:
        self.options = options
        self.on_failure = on_failure
        self.reducer = reducer or StepReducer()
        self.on_step = on_step
        self.history: list[StepRecord] = []  # (per-layer and per-parameter norms: of the first and last steps)
        self.series = RunSeries()  # (those norms over every step)
        self.origin: NonFiniteOrigin | None = None
        self.saw_nonfinite = False
        self.notes: list[str] = []
        self._attachment = _Attachment()
        self._models = _Models(main_globals)
        # per module, a stack of (random state, instance-level forward) before each call still running
        self._before_call: dict[int, list[tuple[Any, Any]]] = {}
        self._loss_ops: Any = None
        # the step being built and, within it, the backward pass being prepared (fresh ones in
        # _record_step and _end_backward_pass, the only places that reset them)
        self.step = StepState()
        self.backward_pass = BackwardPass()
        # the numbers of the last backward pass, kept across steps: an optimizer step that follows no
        # backward pass of its own (a second optimizer on the same gradients) is recorded with them
        self._last_pass: BackwardStats | None = None
        self._optimizer_steps = 0
        self._last_optimizer: Any = None
        self._in_backward = False
        self.localizing = False
        self._compiled_noted: set[int] = set()
        self._parameters_checked: set[str] = set()
        self.guard = StepGuard(options.on_nonfinite == "skip", options.max_skips)
        self.stopped: str | None = None
        self.spike_tracker = SpikeTracker(options.on_spike)
        self.inf_allowance = InfAllowance(options.allow_inf)
        self.parameter_changes = ParameterChanges()
        self._optimizers: dict[int, Any] = {}
        self._spawned = SpawnedRanks(options)

    # ------------------------------------------------------------------ attaching
    def attach(self, engine: Engine) -> None:
        """Register the global hooks of ``engine`` and wrap its backward entry points (once per
        engine until :meth:`close`)."""
        attachment = self._attachment
        if engine in attachment.engines:
            return
        if self not in ATTACHED:
            ATTACHED.append(self)
        attachment.engines.append(engine)
        if self.options.stops:
            attachment.handles.append(engine.register_module_forward_pre_hook(
                functools.partial(self._on_forward_pre, engine)))
        attachment.handles.append(engine.register_module_forward_hook(
            functools.partial(self._on_forward, engine), with_kwargs=True))
        attachment.handles.append(engine.register_optimizer_step_pre_hook(
            functools.partial(self._on_step_pre, engine)))
        attachment.handles.append(engine.register_optimizer_step_post_hook(
            functools.partial(self._on_step_post, engine)))
        for owner, attribute in engine.backward_entry_points():
            original = getattr(owner, attribute)
            attachment.originals.setdefault(engine.name, original)
            attachment.replace(owner, attribute, original, self._wrap_backward(engine, original))
        for owner, attribute in engine.group_teardown_entry_points():
            original = getattr(owner, attribute)
            attachment.replace(owner, attribute, original, self._wrap_teardown(engine, original))
        for owner, attribute in engine.process_start_entry_points():
            original = getattr(owner, attribute)
            attachment.replace(owner, attribute, original, self._wrap_process_start(original))
        scaler = engine.gradient_scaler_class()
        if scaler is not None:
            for attribute, wrap in (("scale", self._wrap_scale), ("step", self._wrap_scaler_step)):
                original = scaler.__dict__[attribute]
                attachment.replace(scaler, attribute, original, wrap(original))

    def close(self) -> None:
        """Remove every hook and put back the wrapped entry points (idempotent).

        An entry point is put back only where it still holds this monitor's wrapper: one that the
        script or another library replaced after the monitor attached keeps their replacement,
        and the monitor's wrapper, still reachable through it, passes every call straight on (also
        after the monitor is attached again: the next :meth:`attach` installs new wrappers).
        """
        if self in ATTACHED:
            ATTACHED.remove(self)
        if self._loss_ops is not None:
            self._loss_ops.stop()
            self._loss_ops = None
        self._attachment.detach()
        self._attachment = _Attachment()

    def __enter__(self) -> "RunMonitor":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @property
    def engines(self) -> list[Engine]:
        """The engines the monitor is attached to (none once closed)."""
        return self._attachment.engines

    def original_backward(self, engine: Engine) -> Callable:
        """The engine's unwrapped ``autograd.backward``."""
        return self._attachment.originals[engine.name]

    # ------------------------------------------------------------------ the model
    def _adopt(self, engine: Engine, module: Any) -> None:
        """A module outside every known model was called: it becomes a model if it has trainable
        parameters (see :meth:`_Models.adopt`)."""
        models = self._models
        if not models.adopt(engine, module):  # (None: adopted, the names known before unchanged)
            return
        # Calls of the models absorbed now (modules called before their parent's forward ended,
        # in the first pass) are dropped, and their gradient hooks with them: left in place, they
        # would keep every inner module's output gradient until the graph is freed.
        kept = []
        for call in self.backward_pass.calls:
            if models.root_of(call.module) is not None:
                kept.append(call)
            else:
                call.release()
        self.backward_pass.calls = kept
        for call in self.backward_pass.calls:
            call.name = models.root_of(call.module).prefix

    def module_name(self, module: Any) -> str | None:
        """The module's path in the model, or None for modules outside it."""
        return self._models.names.get(id(module))

    @property
    def optimizer_steps(self) -> int:
        """How many optimizer steps have run."""
        return self._optimizer_steps

    @property
    def last_optimizer(self) -> Any:
        """The optimizer of the last step (None before the first)."""
        return self._last_optimizer

    @property
    def models(self) -> list[Any]:
        """The model (root) modules, in the order the script first called them."""
        return [root.module for root in self._models.roots]

    @property
    def parameters(self) -> list[tuple[str, Any]]:
        """``(name, parameter)`` of every trainable parameter of the model, in model order."""
        return self._models.parameters

    # ------------------------------------------------------------------ hooks
    def _skip(self, engine: Engine) -> bool:
        return self.localizing or engine.is_compiling() or engine.in_backward()

    def _on_forward_pre(self, engine: Engine, module: Any, args: tuple) -> None:
        if self._skip(engine):
            return
        key, models = id(module), self._models
        if key in models.ignored or (key in models.names and models.root_of(module) is None):
            return
        if key not in models.names and not any(p.requires_grad for p in module.parameters()):
            return  # a parameter-free module (a loss module): never a model, part of the loss computation
        self._pause_loss_ops()
        # what the call will run: an instance-level forward set just for this call (a redirection)
        forward = getattr(engine.local_module(module), "__dict__", {}).get("forward")
        self._before_call.setdefault(key, []).append((engine.get_rng_state(), forward))

    def _on_forward(self, engine: Engine, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        if self._skip(engine):
            return
        key, models = id(module), self._models
        before = self._before_call.get(key)
        rng, forward = before.pop() if before else (None, None)
        if key not in models.names:
            if key in models.ignored:
                return
            self._adopt(engine, module)
            if key not in models.names:
                if self.options.stops:  # the first pass: a model adopted later in it may hold this module
                    self._keep_activations(engine, key, output, root=False)
                return
        if engine.is_compiled_module(module) and key not in self._compiled_noted:
            self._compiled_noted.add(key)
            self.notes.append(f"module {_label(models.names[key])} is compiled (torch.compile): the modules "
                              "inside it are not observed")
        if not self.options.stops:
            return
        root = models.root_of(module)
        outputs = self._keep_activations(engine, key, output, root=root is not None)
        if root is None or not outputs:
            return
        call = RootCall(engine, module, root.prefix, args, kwargs, rng, outputs, [None] * len(outputs),
                        forward=forward, call_site=_user_call_site())
        for index, tensor in enumerate(outputs):
            call.handles.append(tensor.register_hook(functools.partial(_keep_grad, call.grad_outputs, index)))
        self.backward_pass.calls.append(call)
        if not engine.is_compiled_module(module):
            self._record_loss_ops(engine)

    def _record_loss_ops(self, engine: Engine) -> None:
        """The model returned: the loss computation starts, outside every module of the model. Its
        operations (the last ``4 * LOSS_GRAPH_NODES``) are remembered with the user's line until
        backward, so that a NaN/Inf it makes can be named like one a module makes."""
        if self._loss_ops is None or self._loss_ops.engine is not engine:
            if self._loss_ops is not None:
                self._loss_ops.stop()
            self._loss_ops = engine.record_graph_ops(is_user_file, LOSS_GRAPH_NODES * 4)
            if self._loss_ops is None:
                return
        self._loss_ops.start()

    def _pause_loss_ops(self) -> None:
        if self._loss_ops is not None:
            self._loss_ops.stop()

    def _keep_activations(self, engine: Engine, key: int, output: Any, root: bool) -> list:
        """The module's outputs that are part of the graph. Of an inner module's, a summary is
        kept (read with the gradients after backward, to see a non-finite activation); a root
        call keeps its outputs themselves (their norms and gradients serve the localising re-run)."""
        outputs = [t for t in engine.tensors_in(output) if t.requires_grad]
        if not root:
            allowance = self.inf_allowance
            for tensor in outputs:
                summary, masked = engine.activation_summary(tensor), None
                if allowance:  # --allow-inf: the -inf of matching modules' outputs count as finite
                    name = self._models.names.get(key)
                    if name is None:  # (the first pass: named once its model is known)
                        masked = engine.activation_summary(InfAllowance.without_negative_infinity(tensor))
                    elif allowance.allows(name):
                        summary = engine.activation_summary(InfAllowance.without_negative_infinity(tensor))
                self.backward_pass.activations.append((key, summary, masked))
        return outputs

    def _wrap_backward(self, engine: Engine, original: Callable) -> Callable:
        attachment = self._attachment

        @_passes_through
        @functools.wraps(original)
        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if self.localizing or self._in_backward or attachment.closed or engine.is_compiling():
                return original(tensors, *args, **kwargs)
            self._pause_loss_ops()
            self._before_backward()
            loss = _scalar_of(engine, tensors)
            handles = self._hook_loss_graph(loss) if self.options.stops and loss is not None else []
            self._in_backward = True
            try:
                result = original(tensors, *args, **kwargs)
            finally:
                self._in_backward = False
                for handle in handles:
                    handle.remove()
            self._after_backward(engine, loss)
            return result

        return backward

    def _wrap_scale(self, original: Callable) -> Callable:
        """A pass counts as scaled only when the scaler did scale: a disabled scaler (``enabled=False``,
        or one that disabled itself without CUDA) returns the loss unchanged, and its gradients are
        checked like any other."""
        attachment = self._attachment

        @_passes_through
        @functools.wraps(original)
        def scale(scaler: Any, outputs: Any) -> Any:
            result = original(scaler, outputs)
            if result is not outputs and scaler.is_enabled() and not attachment.closed:
                self.backward_pass.scaled = (result, scaler)
            return result

        return scale

    def _wrap_scaler_step(self, original: Callable) -> Callable:
        """A gradient scaler that found Inf/NaN gradients skips ``optimizer.step()``: that backward
        pass becomes a skipped step (scaled gradients overflow by design; not a finding)."""
        attachment = self._attachment

        @_passes_through
        @functools.wraps(original)
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            before = self._optimizer_steps
            result = original(scaler, optimizer, *args, **kwargs)
            if self._optimizer_steps == before and self.step.passes and not self.localizing and \
                    not attachment.closed:
                if self.guard.pending:
                    clear_gradients(optimizer)
                else:
                    self.guard.mark(SKIP_OVERFLOW)
                self._record_step(skipped=True)
            return result

        return step

    def _wrap_process_start(self, original: Callable) -> Callable:
        """The script starts processes that run one of its functions (``torch.multiprocessing.spawn``):
        each runs the function under a monitor of its own (:mod:`gradscope.monitor.run_spawn`), and
        the report of their rank 0 becomes this run's."""
        attachment = self._attachment

        @_passes_through
        @functools.wraps(original)
        def start_processes(fn: Any, *args: Any, **kwargs: Any) -> Any:
            if self.localizing or attachment.closed or isinstance(fn, FollowedRank):
                return original(fn, *args, **kwargs)
            count = args[1] if len(args) > 1 else kwargs.get("nprocs", 1)
            return original(self._spawned.follow(fn, count), *args, **kwargs)

        return start_processes

    def _wrap_teardown(self, engine: Engine, original: Callable) -> Callable:
        """The script tears down its process group: every rank is here with the group still up,
        so the end-of-run parameter check runs now, collectively (tearing down another group than
        the default one changes nothing)."""
        attachment = self._attachment

        @_passes_through
        @functools.wraps(original)
        def teardown(*args: Any, **kwargs: Any) -> Any:
            group = args[0] if args else kwargs.get("group")
            if group is None and not attachment.closed and engine.process_group() is not None:
                self._check_parameters(engine)
            return original(*args, **kwargs)

        return teardown

    def _hook_loss_graph(self, loss: Any) -> list:
        """Node post-hooks on the loss computation between the loss and the model's outputs (at
        most :data:`LOSS_GRAPH_NODES` nodes) that keep what they see, so that a gradient the loss
        computation makes non-finite can be named."""
        boundary = {id(t.grad_fn) for call in self.backward_pass.calls for t in call.outputs}
        handles: list[Any] = []
        seen = self.backward_pass.loss_nodes
        stack = [loss.grad_fn] if loss.grad_fn is not None else []
        while stack and len(seen) < LOSS_GRAPH_NODES:
            node = stack.pop()
            if id(node) in seen or id(node) in boundary or not hasattr(node, "next_functions"):
                continue
            seen.add(id(node))
            if node.name() == ACCUMULATE_NODE:
                continue
            handles.append(node.register_hook(functools.partial(_keep_event, self.backward_pass.loss_events, node)))
            stack.extend(fn for fn, _ in node.next_functions if fn is not None)
        return handles

    def _before_backward(self) -> None:
        """Pending backward passes whose gradients were reset without an optimizer step are
        steps of their own (no optimizer) or skipped steps (an optimizer exists)."""
        if self.step.passes and not self.step.in_optimizer_step and self._models.parameters and \
                all(p.grad is None for _, p in self._models.parameters):
            self._record_without_step()

    def _after_backward(self, engine: Engine, loss: Any) -> None:
        self._models.refresh_parameters()
        grads = [p.grad for _, p in self._models.parameters]
        current = self.backward_pass
        outputs = [t for call in current.calls for t in call.outputs] if self.options.stops else []
        inner = [masked if masked is not None and self.inf_allowance.allows(self._models.names.get(module)) else summary
                 for module, summary, masked in current.activations if module in self._models.names]
        parameters = [p for _, p in self._models.parameters]
        if self.inf_allowance:
            outputs = self._allowing_inf(outputs, {id(t): id(call.module) for call in current.calls
                                                   for t in call.outputs})
        tensors = grads + outputs + inner + parameters
        if loss is not None:
            loss_value, squares = engine.loss_and_squared_norms(loss, tensors)
        else:
            loss_value, squares = None, engine.squared_norms(tensors)
        scaled = current.scaled
        scale = None
        if scaled is not None and loss is not None and scaled[0] is loss:
            scale = float(scaled[1].get_scale())
            loss_value = loss_value / scale
            squares[:len(grads)] = [None if value is None else value / (scale * scale)
                                    for value in squares[:len(grads)]]
        # The model's outputs come first among the output squares, then every other module output
        # of the pass (a non-finite value that no loss or gradient shows, e.g. one masked out).
        parameter_squares = squares[len(squares) - len(parameters):]
        squares = squares[:len(squares) - len(parameters)]
        self.parameter_changes.observe(parameter_squares, engine, parameters)
        current.activation_nonfinite = any(value_kind(value) for value in squares[len(grads) + len(outputs):])
        stats = BackwardStats(loss_value, squares[:len(grads)], squares[len(grads):],
                               scaled=scaled is not None and scaled[0] is loss, scale=scale,
                               parameter_squares=parameter_squares)
        stats = self.reducer.combine(engine, self._models.parameters, stats)
        step = self.step
        if not (step.in_optimizer_step and step.closure and step.passes):
            step.passes.append(stats)
        else:
            step.passes[-1] = BackwardStats(step.passes[0].loss, stats.squares, stats.output_squares,
                                            stats.scaled, stats.ranks, stats.scale, stats.parameter_squares)
        self._last_pass = stats
        if not all_finite(stats):
            self.saw_nonfinite = True
            if self.options.stops:
                self._check_stop(engine, loss, stats)
        self._end_backward_pass()

    def _end_backward_pass(self) -> None:
        """The pass's numbers are read: what was kept for it goes (the next pass starts afresh)."""
        self.backward_pass = BackwardPass()
        if self._loss_ops is not None:
            self._loss_ops.clear()

    def loss_operations(self) -> list[tuple[Any, Any, tuple[str, int] | None, str]]:
        """``(output, node, (file, line), operation name)`` of the operations of this step's loss
        computation, in the order they ran: those of the loss's graph (when it can tell them apart)
        and those without a node whose output one of them took in (a target transformed on its
        way into the loss). Empty when the engine cannot record them."""
        if self._loss_ops is None:
            return []
        records = [(output, node, frame, getattr(operation, "__name__", None) or str(operation), inputs)
                   for output, node, frame, operation, inputs in self._loss_ops.records]
        if not self.backward_pass.loss_nodes:
            return [record[:4] for record in records]
        kept, consumed, nodes = [], set(), self.backward_pass.loss_nodes
        for output, node, frame, operation, (args, kwargs) in reversed(records):
            if (node is not None and id(node) in nodes) or (node is None and id(output) in consumed):
                kept.append((output, node, frame, operation))
                consumed |= {id(value) for value in (*args, *(kwargs or {}).values())}
        return kept[::-1]

    def _allowing_inf(self, tensors: list, owners: dict[int, int]) -> list:
        """``tensors`` with the ``-inf`` of the outputs of ``--allow-inf`` modules counted as finite."""
        return [InfAllowance.without_negative_infinity(t)
                if self.inf_allowance.allows(self._models.names.get(owners.get(id(t), -1))) else t for t in tensors]

    def _check_stop(self, engine: Engine, loss: Any, stats: BackwardStats) -> None:
        # The adapter confirms a float32 overflow exactly, so a non-finite square is a non-finite
        # tensor: NaN if it holds a NaN, Inf if it holds only infinities.
        kinds = {value_kind(value) for value in verdict_values(stats)}
        if not ((self.options.nan and "nan" in kinds) or (self.options.inf and "inf" in kinds)):
            return
        if self.guard.skip_nonfinite and not (self.step.in_optimizer_step and self.step.closure):
            if self.guard.reason != SKIP_NONFINITE:  # the step's first poisoned backward pass
                with preserved_buffers(engine, [root.module for root in self._models.roots if root.engine is engine]):
                    origin = self.reducer.origin_across_ranks(self, engine, loss, stats, step=len(self.history))
                self.guard.mark(SKIP_NONFINITE, origin, replace=True)
            return
        if self.guard.skip_nonfinite:
            self.notes.append("a step that runs backward() inside optimizer.step(closure) cannot be skipped: "
                              "the run was stopped instead")
        self.origin = self.reducer.origin_across_ranks(self, engine, loss, stats, step=len(self.history))
        self.stopped = "nonfinite"
        if self.on_failure is not None and self.origin.rank in (None, self.reducer.rank):
            self._debug_failure(engine)
        self._record_step(nonfinite=nonfinite_place(stats))
        raise StopRun()

    def _debug_failure(self, engine: Engine) -> None:
        """Hand the failing step's model call to :attr:`on_failure`, to be run again under the debugger."""
        if self.reducer.shards_parameters(engine, self._models.parameters):
            # (its re-run would gather the shards on this rank alone while the others wait)
            note = ("the model is sharded over the ranks (FSDP2): --debug-on-failure cannot re-run its call on "
                    "one rank, so the debugger was not opened")
            self.notes.append(note)
            print(f"gradscope: {note}", file=sys.stderr, flush=True)  # (this rank's report may not be the one shown)
            return
        calls = [call for call in self.backward_pass.calls if call.engine is engine and any(
            grad is not None for grad in call.grad_outputs)]
        if not calls:
            self.notes.append("the failing step has no model call whose backward pass can be re-run: the debugger "
                              "was not opened")
            return
        module = self.origin.module or ""
        call = next((call for call in calls if call.name and (module == call.name or module.startswith(
            call.name + "."))), calls[0])
        rng = engine.get_rng_state()
        self.localizing = True
        try:
            self.on_failure(FailingStep(engine, engine.local_module(call.module), len(self.history),
                                        functools.partial(_rerun_surrogate, engine, call)))
        finally:
            self.localizing = False
            engine.set_rng_state(rng)

    def _on_step_pre(self, engine: Engine, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self.localizing or engine.is_compiling():
            return
        step = self.step
        step.in_optimizer_step = True
        self._optimizers.setdefault(id(optimizer), optimizer)
        if args and args[0] is optimizer:  # torch's step hooks get the optimizer itself in args
            args = args[1:]
        step.closure = bool(args and args[0] is not None) or kwargs.get("closure") is not None
        step.clipped = None
        if not self.guard.pending and step.passes:
            self._judge_spikes()
            if self.stopped == "spike":
                self._record_step()  # before the spiking step's update; raises StopRun
        if self.guard.pending:
            clear_gradients(optimizer)  # the optimizer leaves parameters without a gradient unchanged
            return
        if self.options.clip is not None and not step.closure:
            self._clip(engine, optimizer)

    def _clip(self, engine: Engine, optimizer: Any) -> None:
        self._models.refresh_parameters()
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if self.options.clip_mode == "value":
            engine.clip_grad_value_(params, self.options.clip)
        else:
            engine.clip_grad_norm_(params, self.options.clip)
        squares = self.reducer.combine_squares(engine, self._models.parameters,
                                               engine.squared_norms([p.grad for _, p in self._models.parameters]))
        self.step.clipped = (norm_from_square(square_sum(squares)), squares)

    def _on_step_post(self, engine: Engine, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if self.localizing or engine.is_compiling():
            return
        self.step.in_optimizer_step = False
        self._optimizer_steps += 1
        self._last_optimizer = optimizer
        if not self.step.passes and self._last_pass is not None:
            self.step.passes.append(self._last_pass)  # (another optimizer stepping on the same gradients)
        if self.step.passes:
            self._record_step()

    # ------------------------------------------------------------------ records
    def _judge_spikes(self) -> None:
        """Judge the pending step's loss and gradient norm against the run's history (once per step,
        before its optimizer update, so that ``--on-spike skip`` can still skip it)."""
        if self.step.spikes_judged:
            return
        self.step.spikes_judged = True
        last = self.step.passes[-1]
        layer_squares: dict[str, float] = {}
        parameter_squares: dict[str, float] = {}
        for module, square, parameter in zip(self._models.parameter_modules, last.squares, last.parameter_squares):
            if square is not None:
                layer_squares[module] = layer_squares.get(module, 0.0) + square
            if parameter is not None:
                parameter_squares[module] = parameter_squares.get(module, 0.0) + parameter
        found = self.spike_tracker.observe(
            len(self.history), step_loss(self.step.passes), norm_from_square(square_sum(last.squares)),
            {module: norm_from_square(square) for module, square in layer_squares.items()},
            {module: norm_from_square(square) for module, square in parameter_squares.items()})
        if found and self.options.on_spike == "skip":
            self.guard.mark(SKIP_SPIKE)
        elif found and self.options.on_spike == "stop" and self.stopped is None:
            self.stopped = "spike"

    def _record_step(self, skipped: bool = False, nonfinite: str | None = None) -> None:
        """Record the step being built (a :class:`StepRecord` to :attr:`history` and ``on_step``) and
        start the next one; raises :class:`StopRun` when the run stops after it (spike, too many
        skips)."""
        if not self.guard.pending and self.step.passes:
            self._judge_spikes()
        step, self.step = self.step, StepState()
        pending = step.passes
        skip, origin = self.guard.reason, self.guard.origin
        last = pending[-1]
        loss = step_loss(pending)
        names = [name for name, _ in self._models.parameters]
        layer_squares: dict[str, float] = {}
        for module, square in zip(self._models.parameter_modules, last.squares):
            if square is not None:
                layer_squares[module] = layer_squares.get(module, 0.0) + square
        clipped_total, clipped = None, ()
        if step.clipped is not None:
            clipped_total = step.clipped[0]
            clipped = tuple((name, norm_from_square(square)) for name, square in zip(names, step.clipped[1]))
        record = StepRecord(
            step=len(self.history), loss=loss, total_grad_norm=norm_from_square(square_sum(last.squares)),
            layer_norms=tuple((name, norm_from_square(square)) for name, square in layer_squares.items()),
            nonfinite=nonfinite or nonfinite_place(last),
            parameter_norms=tuple((name, norm_from_square(square)) for name, square in zip(names, last.squares)),
            clipped_total_grad_norm=clipped_total, clipped_parameter_norms=clipped, skipped=skipped or skip is not None,
            ranks=rank_figures(pending), skip=skip, origin=origin, scale=last.scale)
        self.history.append(record)
        self.series.observe(record)
        if self.on_step is not None:
            self.on_step(record)
        _slim_middle(self.history)
        if self.guard.settle(skip) and self.stopped is None:
            self.stopped = "skips"
        if self.stopped in ("skips", "spike"):
            raise StopRun()

    def _record_without_step(self) -> None:
        """Record the pending backward passes that no optimizer step followed: a step of its own in a
        script without optimizer, else a step the script skipped. A script that updates its
        parameters itself cannot have a poisoned step skipped: the run stops there instead."""
        if self._optimizer_steps == 0 and self.guard.reason == SKIP_NONFINITE:
            self.origin, self.stopped = self.guard.origin, "nonfinite"
            self.guard.forget()
            self.notes.append("the script updates its parameters without an optimizer, so a poisoned step cannot "
                              "be skipped: the run was stopped instead")
            self._record_step(nonfinite=nonfinite_place(self.step.passes[-1]))
            raise StopRun()
        self._record_step(skipped=self._optimizer_steps > 0)

    def finish(self) -> None:
        """The script ended: record what is still pending and check the parameters once more
        (with ``--nan``/``--inf``), so that a last update that made one non-finite is reported."""
        if self.step.passes:
            self._record_without_step()
        for engine in list(self._attachment.engines):
            self._check_parameters(engine)

    def _check_parameters(self, engine: Engine) -> None:
        """With ``--nan``/``--inf``, once per engine and run: is a parameter of ``engine`` non-finite
        after the last update? Under torch.distributed the ranks combine their answers (every rank
        calls this at the same point: the script's group teardown, else the end of the script)."""
        if not self.options.stops or self.origin is not None or not self._models.parameters or \
                engine.name in self._parameters_checked:
            return
        self._parameters_checked.add(engine.name)
        self._models.refresh_parameters()
        params = [(name, p) for name, p in self._models.parameters if engine.is_tensor(p)]
        if not params:
            return
        norms = dict(self.history[-1].parameter_norms) if self.history else None
        origin = self.reducer.parameter_origin(engine, params, self._last_optimizer,
                                               max(len(self.history) - 1, 0), self.options, norms)
        if origin is not None:
            self.origin = origin
            self.saw_nonfinite = True

    def report(self, script: str, interrupted: bool = False, error: bool = False) -> RunReport:
        """The report of the steps recorded so far (of the processes the script spawned, when it
        trained there and not in its own process)."""
        if interrupted:
            status = "interrupted"
        elif self.saw_nonfinite:
            status = "nonfinite"
        elif error:
            status = "error"
        else:
            status = "ok"
        notes = list(self.notes)
        history, origin, series = tuple(self.history), self.origin, self.series
        for name, count, report in self._spawned.reports():
            processes = f"{count} process{'es' if count != 1 else ''}"
            if report is None:
                notes.append(f"the script started {processes} running {name}() with torch.multiprocessing; "
                             "gradscope followed them, but their rank 0 left no report: they were not watched")
                continue
            notes.append(f"the script started {processes} running {name}() with torch.multiprocessing; "
                         "gradscope followed them and combined every step over their ranks")
            notes.extend(report.notes)
            if not history and origin is None:  # the training ran there
                history, origin = report.history, report.first_nonfinite
                series = report.series if report.series is not None else RunSeries.of(history)
                if report.status == "nonfinite" and status in ("ok", "error"):
                    status = "nonfinite"
        notes.extend(skip_notes(history))
        notes.extend(spike_notes(self.spike_tracker.spikes))
        if self.stopped == "spike":
            notes.append("stopped at a spike (--on-spike stop)")
        if self.stopped == "skips":
            notes.append(f"stopped after {self.guard.max_skips} consecutive skipped steps (--max-skips)")
        skipped = sum(1 for record in history if record.skipped and record.skip is None)
        if skipped:
            notes.append(f"{skipped} backward pass{'es were' if skipped != 1 else ' was'} not followed by an "
                         "optimizer step (skipped steps)")
        held = {id(p) for optimizer in self._optimizers.values() for group in optimizer.param_groups
                for p in group["params"]}
        optimized = [name for name, p in self._models.parameters if id(p) in held]
        self.parameter_changes.settle()
        findings, waived = run_findings(series, self.options.thresholds, self.options.waivers,
                                        self.parameter_changes, optimized)
        first = origin or next((record.origin for record in history if record.origin is not None), None)
        return RunReport(script=script, steps_run=len(history), status=status, first_nonfinite=first,
                         history=history, notes=tuple(notes), stopped=self.stopped,
                         spikes=tuple(self.spike_tracker.spikes), findings=findings, waived=waived, series=series)


def _user_call_site() -> tuple[str, int] | None:
    """``(file, line)`` of the innermost frame of the user's own code on the stack."""
    frame = sys._getframe(1)
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return None


#: How many step records at each end of a run keep their per-layer and per-parameter norms (the
#: ones between keep their loss, total norm and what happened; :class:`RunSeries` holds the norms).
KEPT_RECORDS = 64


def _slim_middle(history: list[StepRecord]) -> None:
    """Drop the per-layer and per-parameter norms of the record that just left the last
    :data:`KEPT_RECORDS` (unless it is one of the first): a long run's history stays small."""
    index = len(history) - 1 - KEPT_RECORDS
    if index >= KEPT_RECORDS:
        record = history[index]
        if record.layer_norms or record.parameter_norms or record.clipped_parameter_norms:
            history[index] = replace(record, layer_norms=(), parameter_norms=(), clipped_parameter_norms=())


def _keep_grad(store: list, index: int, grad: Any) -> None:
    store[index] = grad


def _keep_event(store: list, node: Any, grad_inputs: tuple, grad_outputs: tuple) -> None:
    store.append((node, grad_inputs, grad_outputs))


def _scalar_of(engine: Engine, tensors: Any) -> Any:
    """The loss: the one-element tensor backward was called on, or None."""
    if isinstance(tensors, (tuple, list)) and len(tensors) == 1:
        tensors = tensors[0]
    if engine.is_tensor(tensors) and tensors.numel() == 1:
        return tensors
    return None


def _root_prefixes(modules: list, main_globals: Callable[[], dict] | None) -> list[str]:
    """"" for a single model; for several, the script's variable names (else class names)."""
    if len(modules) == 1:
        return [""]
    names = {}
    if main_globals is not None:
        for variable, value in main_globals().items():
            if not variable.startswith("_"):
                names.setdefault(id(value), variable)
    prefixes = []
    for index, module in enumerate(modules):
        prefix = names.get(id(module)) or f"{type(module).__name__.lower()}{index}"
        prefixes.append(prefix)
    return prefixes


def _label(name: str) -> str:
    return repr(name) if name else "(model)"
