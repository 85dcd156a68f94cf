"""What a ``gradscope run`` step is made of: the model calls kept for the localising re-run, the
host numbers of each backward pass, and what those numbers say about the step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gradscope.engines import Engine


@dataclass
class RootCall:
    """One call of a model (root) module in the current step, kept for localisation.

    Attributes:
        engine: the module's engine.
        module: the root module.
        name: its name prefix ("" for a single model).
        args, kwargs: what it was called with.
        rng: the engine's random generator state just before the call.
        outputs: the tensors it returned.
        grad_outputs: the gradients that reached ``outputs`` (filled during backward).
        forward: the ``forward`` the module's instance held when it was called (a wrapper that
            redirects the call, such as Lightning's DDP forward redirection to ``training_step``),
            None when it used its class's own: the re-run calls the same.
        call_site: ``(file, line)`` of the user's code that called the model, or None.
    """

    engine: Engine
    module: Any
    name: str
    args: tuple
    kwargs: dict
    rng: Any
    outputs: list
    grad_outputs: list = field(default_factory=list)
    forward: Any = None
    call_site: tuple[str, int] | None = None
    handles: list = field(default_factory=list)  # the hooks that fill grad_outputs

    def release(self) -> None:
        """Forget the call: its gradient hooks are removed and nothing it kept stays alive."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        self.grad_outputs.clear()
        self.outputs.clear()


@dataclass
class _BackwardStats:
    """Host numbers of one backward pass (``scaled``: a gradient scaler scaled its loss, so its
    gradients may overflow by design and only the loss and outputs count)."""

    loss: float | None
    squares: list[float | None]
    output_squares: list[float | None]
    scaled: bool = False
    ranks: tuple[tuple[float | None, float], ...] = ()  # distributed: (loss, gradient square) per rank
    scale: float | None = None
    parameter_squares: list[float | None] = field(default_factory=list)  # this rank's, before the update


def _step_loss(pending: list[_BackwardStats]) -> float | None:
    """The loss of a step: the sum over its backward passes (None when none had a scalar loss)."""
    losses = [stats.loss for stats in pending if stats.loss is not None]
    return None if not losses else math.fsum(losses) if all(math.isfinite(v) for v in losses) else sum(losses)


def _total(squares: list[float | None]) -> float:
    return sum(value for value in squares if value is not None)



def _value_kind(value: float | None) -> str | None:
    if value is None or math.isfinite(value):
        return None
    return "nan" if math.isnan(value) else "inf"


def _verdict_values(stats: _BackwardStats) -> list[float | None]:
    """The numbers whose non-finiteness is a finding."""
    return [stats.loss, *stats.output_squares, *(() if stats.scaled else stats.squares)]


def _all_finite(stats: _BackwardStats) -> bool:
    return all(value is None or math.isfinite(value) for value in _verdict_values(stats))


def _where(stats: _BackwardStats) -> str | None:
    if stats.loss is not None and not math.isfinite(stats.loss):
        return "loss"
    if any(value is not None and not math.isfinite(value) for value in stats.output_squares):
        return "activation"
    if any(value is not None and not math.isfinite(value) for value in stats.squares):
        return "gradient"
    return None
