"""``gradscope run --on-nonfinite skip``: keep a poisoned step away from the weights.

:class:`StepGuard` holds what :class:`~gradscope.monitor.run.RunMonitor` needs to skip an optimizer
step and to count the skips. The decision is taken from the numbers the monitor already has after
each backward pass (under ``--nproc`` the numbers combined over the ranks, so every rank decides
the same way at the same step, with no collective of its own).

How a step is skipped: at ``optimizer.step()``'s pre-hook (on either engine), every gradient the
optimizer holds is cleared (``p.grad = None``). An optimizer leaves a parameter without a gradient
exactly as it was, and keeps its state too: no Adam step count, no moment, no momentum buffer, no
weight decay. Under gradient accumulation the decision covers every backward pass since the last
step, so the whole accumulated step is skipped. ``--clip`` does not clip a skipped step's gradients
(clipping by value would turn an infinity into a finite number).

A gradient scaler that finds its scaled gradients overflowing skips ``optimizer.step()`` itself and
lowers its scale: that is an ``overflow`` skip, recorded with the scale, not counted towards
:attr:`StepGuard.max_skips` while the scaler recovers; a run whose last
:data:`SCALE_FALLING_STEPS` steps all overflowed is reported as such.
"""
from __future__ import annotations

import contextlib
import fnmatch
import math
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from gradscope.monitor.records import NonFiniteOrigin, StepRecord

__all__ = ["DEFAULT_MAX_SKIPS", "SCALE_FALLING_STEPS", "SKIP_NONFINITE", "SKIP_OVERFLOW", "SKIP_SPIKE",
           "InfAllowance", "StepGuard", "clear_gradients", "preserved_buffers", "skip_notes"]

SKIP_NONFINITE, SKIP_OVERFLOW, SKIP_SPIKE = "nonfinite", "overflow", "spike"

#: How many consecutive skipped steps (non-finite or spike) stop the run (``--max-skips``).
DEFAULT_MAX_SKIPS = 10

#: A run whose last this-many steps were all gradient-scaler overflow skips is reported as one
#: whose scale keeps falling.
SCALE_FALLING_STEPS = 5


def clear_gradients(optimizer: Any) -> None:
    """Set the gradient of every parameter of ``optimizer`` to None (its step then changes nothing)."""
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            parameter.grad = None


class InfAllowance:
    """``--allow-inf GLOB``: modules whose outputs may hold ``-inf`` by design (an attention mask).

    Their outputs are checked with every ``-inf`` counted as finite, so a NaN or a ``+inf`` in
    them is still found; other modules are checked as before.

    Args:
        patterns: ``fnmatch`` patterns matched against module paths (``"*.mask"``, ``"blocks.*.attn"``).
    """

    def __init__(self, patterns: tuple[str, ...] = ()) -> None:
        self.patterns = patterns
        self._memo: dict[str | None, bool] = {}

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def allows(self, name: str | None) -> bool:
        """True when the module with this path may output ``-inf``."""
        if name is None or not self.patterns:
            return False
        if name not in self._memo:
            self._memo[name] = any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns)
        return self._memo[name]

    @staticmethod
    def without_negative_infinity(tensor: Any) -> Any:
        """A copy of ``tensor`` with ``-inf`` as 0 (NaN and ``+inf`` kept)."""
        return tensor.detach().nan_to_num(nan=math.nan, posinf=math.inf, neginf=0.0)


@contextlib.contextmanager
def preserved_buffers(engine: Any, models: Sequence[Any]) -> Iterator[None]:
    """Restore the models' buffers (BatchNorm running statistics, ...) on exit: the localising
    re-run of a step that is then skipped must not update them a second time."""
    buffers = [buffer for model in models for buffer in model.buffers() if engine.is_tensor(buffer)]
    saved = engine.clone_all(buffers)
    try:
        yield
    finally:
        for buffer, value in zip(buffers, saved):
            engine.copy_into(buffer, value)


@dataclass
class StepGuard:
    """Skip decisions and counts of one run.

    Attributes:
        skip_nonfinite: ``--on-nonfinite skip`` (else a watched non-finite value stops the run).
        max_skips: consecutive skipped steps that stop the run.
        reason: why the pending step is to be skipped (a ``SKIP_*`` word), or None.
        origin: for a ``"nonfinite"`` reason, where its value started.
        consecutive: skipped steps in a row so far (overflow skips are not counted and do not reset it).
    """

    skip_nonfinite: bool = False
    max_skips: int = DEFAULT_MAX_SKIPS
    reason: str | None = None
    origin: NonFiniteOrigin | None = None
    consecutive: int = 0

    @property
    def pending(self) -> bool:
        """True when the pending optimizer step is to be skipped."""
        return self.reason is not None

    def mark(self, reason: str, origin: NonFiniteOrigin | None = None, replace: bool = False) -> None:
        """Skip the pending step (the first reason of a step is kept unless ``replace``)."""
        if self.reason is None or replace:
            self.reason, self.origin = reason, origin

    def forget(self) -> None:
        """The pending step will not be skipped after all (the run stops instead)."""
        self.reason, self.origin = None, None

    def settle(self, reason: str | None) -> bool:
        """A step was recorded with this skip reason (None: it updated the weights). Returns True
        when that makes :attr:`max_skips` consecutive skipped steps."""
        self.reason, self.origin = None, None
        if reason == SKIP_OVERFLOW:
            return False
        self.consecutive = self.consecutive + 1 if reason is not None else 0
        return self.consecutive >= self.max_skips


def skip_notes(history: tuple[StepRecord, ...] | list[StepRecord]) -> list[str]:
    """The summary's sentences about skipped steps (empty when none was skipped)."""
    notes = []
    counts: dict[str, list[int]] = {}
    for record in history:
        if record.skip is not None:
            counts.setdefault(record.skip, []).append(record.step)
    if SKIP_NONFINITE in counts:
        steps = counts[SKIP_NONFINITE]
        notes.append(f"{_steps(steps)} skipped because a loss or gradient was not finite (the weights and the "
                     f"optimizer state were left unchanged): {_list(steps)}")
    if SKIP_SPIKE in counts:
        steps = counts[SKIP_SPIKE]
        notes.append(f"{_steps(steps)} skipped at a spike: {_list(steps)}")
    if SKIP_OVERFLOW in counts:
        steps = counts[SKIP_OVERFLOW]
        scales = [record.scale for record in history if record.scale is not None]
        scale = f"; scale {scales[0]:g} -> {scales[-1]:g}" if scales else ""
        notes.append(f"{_steps(steps)} skipped by the gradient scaler (fp16 overflow, not divergence){scale}")
        tail = history[-SCALE_FALLING_STEPS:]
        if len(tail) == SCALE_FALLING_STEPS and all(record.skip == SKIP_OVERFLOW for record in tail):
            notes.append(f"the gradient scale kept falling: the last {SCALE_FALLING_STEPS} steps all overflowed "
                         "(the gradients overflow at every scale tried: look for a real divergence)")
    return notes


def _steps(steps: list[int]) -> str:
    return f"{len(steps)} step{'s were' if len(steps) != 1 else ' was'}"


def _list(steps: list[int], shown: int = 10) -> str:
    text = ", ".join(str(step) for step in steps[:shown])
    return text + (f", ... ({len(steps) - shown} more)" if len(steps) > shown else "")
