"""Localising: where did the first NaN/Inf of a step start?

The cheap per-step numbers (one squared norm per gradient, the loss) only say *that* a value is
not finite. Localising answers *where* it started by running the step's model again under full
instrumentation: in forward, every module's inputs and outputs are checked (and the user's lines
traced); in backward, a post-hook on every autograd node finds the first node whose incoming
gradients are finite but whose results are not. One concept, with one function per place the
step to re-run comes from, and one that decides where to run it:

* :func:`gradscope.monitor.watch.localize_from_snapshot` (``watch``, ``replay``, ``inspect``):
  the workload's whole step runs again from a snapshot taken before it (model, optimizer state,
  batch), so the optimizer's update can run again too.
* :func:`gradscope.monitor.run_localize.localize_from_kept_calls` (``run``): a script's step
  cannot run again, but the model calls of its backward pass were kept (inputs, random state,
  the gradients that reached their outputs), and those run again.
* ``origin_across_ranks`` of the reducers in :mod:`gradscope.monitor.distributed` (``run``)
  re-runs nothing itself: it decides which processes localise their own calls (in one process,
  this one; under torch.distributed, the ranks whose model can run alone) and picks the origin
  among their findings.

Both re-runs describe what they find with the functions below, so that a finding reads the same
whichever command found it.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from gradscope.monitor.records import NonFiniteOrigin
from gradscope.monitor.stats import module_of
from gradscope.monitor.tracing import module_words

__all__ = ["backward_node_origin", "forward_module_origin", "update_origin"]

_PASSED_ON = "; the modules listed after it only passed it on"


def forward_module_origin(step: int, module: str | None, kind: str, node: str | None, source: str | None,
                          propagated: Sequence[str] = (), note: str = "") -> NonFiniteOrigin:
    """A forward origin: ``module`` turned finite inputs into ``kind``.

    Args:
        note: said right after that (" (one of its own parameters ...)"), before the modules
            that only passed the value on (``propagated``).
    """
    detail = f"{module_words(module)} turned finite inputs into {kind}{note}"
    if propagated:
        detail += _PASSED_ON
    return NonFiniteOrigin(step=step, phase="forward", module=module, node=node, source=source, kind=kind,
                           propagated=tuple(propagated), detail=detail)


def backward_node_origin(step: int, module: str | None, node: str | None, kind: str, source: str | None,
                         propagated: Sequence[str] = ()) -> NonFiniteOrigin:
    """A backward origin: the backward pass of ``module`` produced the first ``kind`` (in ``node``)."""
    detail = f"the backward pass of {module_words(module)} produced the first {kind}"
    if node is not None:
        detail += f" in {node}"
    if propagated:
        detail += _PASSED_ON
    return NonFiniteOrigin(step=step, phase="backward", module=module, node=node, source=source, kind=kind,
                           propagated=tuple(propagated), detail=detail)


def update_origin(step: int, parameter: str, kind: str, optimizer: Any,
                  gradient_norm: float | None = None) -> NonFiniteOrigin:
    """An update origin: the optimizer step made ``parameter`` ``kind``.

    Args:
        gradient_norm: the parameter's gradient norm at that step, when known: a non-finite one
            means the update only carried a gradient that was already non-finite.
    """
    node = f"{type(optimizer).__name__}.step" if optimizer is not None else None
    if gradient_norm is not None and not math.isfinite(gradient_norm):
        detail = (f"the optimizer step made {parameter} {kind}; its gradient was already "
                  f"{'nan' if math.isnan(gradient_norm) else 'inf'} (norm {gradient_norm}), and the step was "
                  "not stopped before the update")
    else:
        detail = (f"the optimizer step made {parameter} {kind} although its gradient was finite (the update "
                  "overflowed: lower the learning rate or clip the gradients)")
    return NonFiniteOrigin(step=step, phase="update", module=module_of(parameter), node=node, source=None,
                           kind=kind, detail=detail)
