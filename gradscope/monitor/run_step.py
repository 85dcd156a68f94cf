"""What a ``gradscope run`` step is, as :class:`~gradscope.monitor.run.RunMonitor` builds it.

A step is one ``optimizer.step()`` (one ``backward()`` in a script without optimizer). It is made
of one or more backward passes (several under gradient accumulation or an optimizer's closure).

* :class:`BackwardPass`: what the monitor keeps while one backward pass is prepared, from the
  model calls of its forward pass until its numbers are read after ``backward()``: the model
  calls (:class:`RootCall`, for the localising re-run), the summaries of other module outputs,
  the loss computation's nodes and what they saw, and whether a gradient scaler scaled the loss.
  The monitor starts a fresh one after each pass.
* :class:`BackwardStats`: the host numbers read after one backward pass.
* :class:`StepState`: the step being built: its passes' numbers, whether the optimizer's step is
  running (and with a closure), the norms after ``--clip``, and whether its spikes were judged.
  The monitor starts a fresh one each time it records a step. (Whether the step is to be skipped
  is its :class:`~gradscope.monitor.protect.StepGuard`'s, which also counts skips across steps.)

The functions below read what the numbers say: the step's loss, where a non-finite value is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gradscope.engines import Engine

__all__ = ["BackwardPass", "BackwardStats", "RootCall", "StepState", "all_finite", "nonfinite_place", "step_loss",
           "square_sum", "value_kind", "verdict_values"]


@dataclass
class RootCall:
    """One call of a model (root) module in the backward pass being prepared, kept for localisation.

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
class BackwardPass:
    """What is kept of the backward pass being prepared (see the module docstring).

    Attributes:
        calls: the model (root) calls of its forward pass whose outputs are in the graph.
        activations: ``(module key, engine.activation_summary(output), masked)`` of each other module
            output; ``masked`` is the summary with ``-inf`` counted as finite when ``--allow-inf`` may
            apply to a module not named yet, else None.
        activation_nonfinite: after the pass was read, True when one of those outputs was not finite.
        loss_nodes: ids of the loss computation's nodes (between the loss and the model's outputs)
            that were hooked for this pass.
        loss_events: ``(node, grad_inputs, grad_outputs)`` that those nodes' hooks saw.
        scaled: ``(scaled loss, scaler)`` when a gradient scaler scaled the loss of this pass.
    """

    calls: list[RootCall] = field(default_factory=list)
    activations: list[tuple[int, Any, Any]] = field(default_factory=list)
    activation_nonfinite: bool = False
    loss_nodes: set[int] = field(default_factory=set)
    loss_events: list[tuple[Any, tuple, tuple]] = field(default_factory=list)
    scaled: tuple[Any, Any] | None = None


@dataclass
class BackwardStats:
    """Host numbers of one backward pass (``scaled``: a gradient scaler scaled its loss, so its
    gradients may overflow by design and only the loss and outputs count)."""

    loss: float | None
    squares: list[float | None]
    output_squares: list[float | None]
    scaled: bool = False
    ranks: tuple[tuple[float | None, float], ...] = ()  # distributed: (loss, gradient square) per rank
    scale: float | None = None
    parameter_squares: list[float | None] = field(default_factory=list)  # this rank's, before the update


@dataclass
class StepState:
    """The optimizer step being built (see the module docstring).

    Attributes:
        passes: the numbers of its backward passes, in order (under an optimizer's closure, one
            entry: the first pass's loss with the last pass's gradients).
        in_optimizer_step: ``optimizer.step()`` is running (between its pre- and post-hooks).
        closure: that step was given a closure (it runs ``backward()`` itself, as LBFGS does).
        clipped: ``(total norm, squared norm per parameter)`` after ``--clip``, or None.
        spikes_judged: its loss and gradient norm were already judged for spikes.
    """

    passes: list[BackwardStats] = field(default_factory=list)
    in_optimizer_step: bool = False
    closure: bool = False
    clipped: tuple[float, list[float | None]] | None = None
    spikes_judged: bool = False


def step_loss(pending: list[BackwardStats]) -> float | None:
    """The loss of a step: the sum over its backward passes (None when none had a scalar loss)."""
    losses = [stats.loss for stats in pending if stats.loss is not None]
    return None if not losses else math.fsum(losses) if all(math.isfinite(v) for v in losses) else sum(losses)


def square_sum(squares: list[float | None]) -> float:
    """The sum of the squares that are not None."""
    return sum(value for value in squares if value is not None)


def value_kind(value: float | None) -> str | None:
    """``"nan"``, ``"inf"`` or None (finite, or no value)."""
    if value is None or math.isfinite(value):
        return None
    return "nan" if math.isnan(value) else "inf"


def verdict_values(stats: BackwardStats) -> list[float | None]:
    """The numbers whose non-finiteness is a finding."""
    return [stats.loss, *stats.output_squares, *(() if stats.scaled else stats.squares)]


def all_finite(stats: BackwardStats) -> bool:
    """True when none of the pass's :func:`verdict_values` is non-finite."""
    return all(value is None or math.isfinite(value) for value in verdict_values(stats))


def nonfinite_place(stats: BackwardStats) -> str | None:
    """Where the pass's first non-finite number is, as a step record says it: ``"loss"``,
    ``"activation"``, ``"gradient"``, or None."""
    if stats.loss is not None and not math.isfinite(stats.loss):
        return "loss"
    if any(value is not None and not math.isfinite(value) for value in stats.output_squares):
        return "activation"
    if any(value is not None and not math.isfinite(value) for value in stats.squares):
        return "gradient"
    return None
