"""What the diagnoses need from a forward pass, beyond gradient norms.

* :class:`NormalizationInputs` (cheap, attached during a normal pass): which layers feed their
  output straight into a normalisation layer, so that their bias is zero by construction.
* :class:`GraphCuts` (a forward-only re-run, only when a parameter got no gradient): which modules
  ran, and where a module's output was cut from the graph (the ``.detach()`` line, or the call made
  under ``no_grad``).
* :func:`loss_warnings`: the warnings a loss function emits (e.g. broadcasting input and target).
* :func:`preserved`: buffers and random state put back after a diagnostic re-run.
* :class:`DivergenceTracker`: the first loss jump by orders of magnitude, and the update before it.

Everything goes through the engine adapter (global module hooks, tensors to numpy), so the same
diagnoses run on gradscope's engine and on torch.
"""
from __future__ import annotations

import contextlib
import math
import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import Any, Iterator

import numpy as np

from gradscope.engines import Engine
from gradscope.monitor.analysis import diverged
from gradscope.monitor.monitors import _HookOwner
from gradscope.monitor.records import Divergence, StepRecord
from gradscope.monitor.tracing import LineTracer, lines_of, relative_source

# The start of the warning PyTorch's (and gradscope's) losses give when input and target broadcast.
BROADCAST_WARNING = "Using a target size"

# Layers that subtract a mean over every axis a preceding layer's per-channel bias is constant on.
NORMALIZATION_TYPES = ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "InstanceNorm1d",
                       "InstanceNorm2d", "InstanceNorm3d")


class NormalizationInputs(_HookOwner):
    """Record which modules with a bias feed their output straight into a normalisation layer.

    A global forward hook ``hook(module, args, output) -> None`` remembers the output buffer of
    every module that has its own ``bias``; when a normalisation layer (a BatchNorm in training
    mode, a LayerNorm or an InstanceNorm) receives that buffer (the tensor itself, or the alias that
    module backward hooks pass on), the pair is recorded.

    Attributes:
        followed_by: module path -> (path, type name) of the normalisation layer after it.
    """

    def __init__(self, model: Any, engine: Engine) -> None:
        super().__init__(model, engine)
        self._producers: dict[tuple[int, int, tuple], tuple[Any, str]] = {}
        self.followed_by: dict[str, tuple[str, str]] = {}

    def _attach(self) -> None:
        self._handles.append(self.engine.register_module_forward_hook(self._on_forward))

    def _on_forward(self, module: Any, args: tuple, output: Any) -> None:
        name = self._names.get(id(module))
        if name is None:
            return
        kind = type(module).__name__
        if kind in NORMALIZATION_TYPES and args and (not kind.startswith("BatchNorm") or module.training):
            producer = self._producers.get(self.engine.storage_key(args[0])) \
                if self.engine.is_tensor(args[0]) else None
            if producer is not None:
                self.followed_by.setdefault(producer[1], (name, kind))
        if getattr(module, "bias", None) is not None and self.engine.is_tensor(output):
            self._producers[self.engine.storage_key(output)] = (output, name)

    def close(self) -> None:
        self._producers.clear()
        super().close()


class GraphCuts(_HookOwner):
    """During one forward pass, find which modules ran and where an output left the autograd graph.

    A global forward hook counts calls and remembers the buffer of every module output that
    requires grad; an output that does not, from a module whose parameters do, means the call ran
    under ``no_grad``: its call site in the model file is recorded. Line tracing of the model file
    (``sys.settrace``, only during this re-run) finds the line where a tensor that shares a
    recorded output's buffer but no longer requires grad first appears: the ``.detach()``.

    Attributes:
        called: module paths that forward called.
        cuts: module path -> ``file:line`` where its output was cut from the graph.
    """

    def __init__(self, model: Any, source_file: Path | None, engine: Engine) -> None:
        super().__init__(model, engine)
        self._source_file = str(source_file) if source_file is not None else None
        self._outputs: dict[tuple[int, int, tuple], tuple[Any, str]] = {}
        self._lines = LineTracer(lines_of(source_file), self._look_for_cut) if source_file is not None else None
        self.called: list[str] = []
        self.cuts: dict[str, str] = {}

    def _attach(self) -> None:
        self._handles.append(self.engine.register_module_forward_hook(self._on_forward))
        if self._lines is not None:
            self._lines.__enter__()

    def close(self) -> None:
        if self._lines is not None:
            self._lines.close()
        self._outputs.clear()
        super().close()

    def _on_forward(self, module: Any, args: tuple, output: Any) -> None:
        name = self._names.get(id(module))
        if name is None:
            return
        if name not in self.called:
            self.called.append(name)
        trainable = any(p.requires_grad for p in module.parameters())
        for tensor in self.engine.tensors_in(output):
            if tensor.requires_grad:
                self._outputs[self.engine.storage_key(tensor)] = (tensor, name)
            elif trainable and getattr(tensor, "is_floating_point", lambda: False)():
                site = self._call_site()
                if site is not None:
                    self.cuts.setdefault(name, site)

    def _call_site(self) -> str | None:
        frame: FrameType | None = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename != self._source_file:
            frame = frame.f_back
        return None if frame is None else relative_source(frame.f_code.co_filename, frame.f_lineno)

    def _look_for_cut(self, value: Any, filename: str, line: int) -> None:
        for tensor in self.engine.tensors_in(value):
            if getattr(tensor, "requires_grad", True):
                continue
            known = self._outputs.get(self.engine.storage_key(tensor))
            if known is not None and known[1] not in self.cuts:
                self.cuts[known[1]] = relative_source(filename, line)


@contextlib.contextmanager
def loss_warnings() -> Iterator[list[str]]:
    """Collect the messages of the broadcasting warnings ("Using a target size ...") raised inside
    the block, which become findings; every other warning is issued again after the block."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield messages
        finally:
            others = [item for item in caught if BROADCAST_WARNING not in str(item.message)]
            messages.extend(str(item.message) for item in caught if BROADCAST_WARNING in str(item.message))
    for item in others:
        warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)


@contextlib.contextmanager
def preserved(model: Any, engine: Engine) -> Iterator[None]:
    """Put the model's buffers (e.g. BatchNorm running statistics) and the random generator
    back as they were when the block exits, so a diagnostic re-run leaves no trace."""
    buffers = {name: engine.clone(buffer) for name, buffer in model.named_buffers()}
    rng_state = engine.get_rng_state()
    try:
        yield
    finally:
        for name, buffer in model.named_buffers():
            if name in buffers:
                engine.copy_into(buffer, buffers[name])
        engine.set_rng_state(rng_state)


class DivergenceTracker:
    """Notice the first step whose loss is orders of magnitude above the previous step's (and
    above every earlier loss), and measure the update in between: ``|p_k - p_(k-1)| / |p_(k-1)|``
    per parameter, from copies of
    the parameters taken at the start of each step (on the parameters' device; a replay snapshot's
    copies when there is one). Only when the loss jumps are the copies read on the host.

    Call :meth:`start` before each training step and :meth:`finish` with its record.

    Attributes:
        divergence: the first divergence, or None.
    """

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.divergence: Divergence | None = None
        self._previous: tuple[StepRecord, dict[str, Any]] | None = None
        self._current: dict[str, Any] = {}
        self._highest = 0.0

    def start(self, parameters: list[tuple[str, Any]], copies: dict[str, Any] | None = None) -> None:
        """Remember the parameters as the step starts (``copies``: already taken ones)."""
        if self.divergence is None:
            self._current = copies if copies is not None else {name: self._engine.clone(p)
                                                               for name, p in parameters}

    def finish(self, record: StepRecord) -> None:
        """Compare the step's loss with the previous step's."""
        if self.divergence is not None:
            return
        if self._previous is not None and diverged(self._previous[0].loss, record.loss, highest=self._highest):
            previous, before = self._previous
            ratios = []
            for name, now in self._current.items():
                if name in before:
                    old, new = self._host(before[name]), self._host(now)
                    scale = float(np.linalg.norm(old.reshape(-1)))
                    change = float(np.linalg.norm((new - old).reshape(-1)))
                    ratios.append((name, change / scale if scale > 0 else math.inf if change else 0.0))
            earlier = dict(previous.layer_norms)
            zeroed = tuple(name for name, norm in record.layer_norms if norm == 0 and earlier.get(name))
            self.divergence = Divergence(step=record.step, loss_before=previous.loss, loss_after=record.loss,
                                         update_ratios=tuple(ratios), zeroed_layers=zeroed)
        self._previous = (record, self._current)
        if math.isfinite(record.loss):
            self._highest = max(self._highest, abs(record.loss))

    def _host(self, value: Any) -> np.ndarray:
        array = value if isinstance(value, np.ndarray) else self._engine.to_numpy(value)
        return np.asarray(array, dtype=np.float64)
