"""Loss and gradient-norm spikes of a ``gradscope run``, and the layers that caused them.

The rule (host arithmetic on the numbers each step already brought to the host; no extra
synchronisation): for the loss and for the total gradient norm, the value ``v`` of a step is
compared with the last :data:`WINDOW` values of the same quantity (steps that updated the
weights, at least :data:`WARMUP` of them) on a log scale. With ``m`` the median of their logs and
``s = 1.4826 * MAD`` (the median absolute deviation, a robust standard deviation), the step is a
spike when

    log(v) - m >= log(MIN_RATIO)   and   (log(v) - m) / s >= THRESHOLD

that is, the value is at least :data:`MIN_RATIO` times the recent median and :data:`THRESHOLD`
robust standard deviations above it. Only values above zero are judged (a loss that can be
negative is not). Each layer's gradient norm is judged the same way against its own history: a
step where neither total spiked but a layer's gradient did is reported as a ``layer_grad_norm``
spike of the layer that rose most (always a warning: ``--on-spike`` acts on the totals).

Attribution: for each layer, its gradient norm and its update ratio (``|‖p‖ - ‖p_prev‖| / ‖p_prev‖``,
the relative change of its parameters' norm since the previous step, a lower bound of the
update/parameter ratio that costs no copy of the parameters) are compared with their own recent
medians in the same way. A layer *rose* at a step when one of the two was at least
:data:`MIN_RATIO` times its median. The report lists the layers that rose first (earliest step of
the last :data:`LOOKBACK` steps) and most (largest factor). When every layer's gradient rose at
the spike's own step and no update rose before it, the cause is ``everywhere``: the batch or the
loss of that step, not a layer.
"""
from __future__ import annotations

import dataclasses
import math
from collections import deque
from typing import Sequence

from gradscope.monitor.records import Spike

__all__ = ["LOOKBACK", "MIN_RATIO", "SpikeTracker", "THRESHOLD", "WARMUP", "WINDOW", "spike_notes"]

#: Values of the recent history a step is compared with.
WINDOW = 32
#: Values needed before a step is judged.
WARMUP = 8
#: Robust z-score (log scale) a spike reaches at least.
THRESHOLD = 6.0
#: Factor over the recent median a spike (and a layer's rise) reaches at least.
MIN_RATIO = 2.0
#: Steps before a spike searched for the layers that rose first.
LOOKBACK = 4
#: Layers named per spike.
SHOWN_LAYERS = 3

_MAD_SCALE = 1.4826
_TINY = 1e-12


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else 0.5 * (ordered[middle - 1] + ordered[middle])


def _log(value: float | None) -> float | None:
    return math.log(value) if value is not None and math.isfinite(value) and value > 0 else None


class _Series:
    """The recent logs of one quantity."""

    def __init__(self) -> None:
        self.values: deque[float] = deque(maxlen=WINDOW)

    def judge(self, log_value: float | None) -> tuple[float, float] | None:
        """``(log factor over the median, robust z-score)`` of a value, or None before the warmup."""
        if log_value is None or len(self.values) < WARMUP:
            return None
        median = _median(self.values)
        spread = _MAD_SCALE * _median([abs(v - median) for v in self.values])
        rise = log_value - median
        return rise, rise / max(spread, _TINY)

    def add(self, log_value: float | None) -> None:
        if log_value is not None:
            self.values.append(log_value)

    def rise(self, log_value: float | None) -> float | None:
        """The value over its recent median when it passes the spike rule, else None."""
        judged = self.judge(log_value)
        if judged is None or judged[0] < math.log(MIN_RATIO) or judged[1] < THRESHOLD:
            return None
        return math.exp(judged[0])


class SpikeTracker:
    """Watches the steps of one run (see the module docstring).

    Args:
        action: what a spike does: ``"warn"``, ``"skip"`` or ``"stop"`` (recorded on each spike).
    """

    def __init__(self, action: str = "warn") -> None:
        self.action = action
        self.spikes: list[Spike] = []
        self._loss = _Series()
        self._norm = _Series()
        self._layer_norms: dict[str, _Series] = {}
        self._layer_updates: dict[str, _Series] = {}
        self._previous_parameters: dict[str, float] = {}
        self._rises: deque[tuple[int, dict[str, float], dict[str, float]]] = deque(maxlen=LOOKBACK + 1)
        self._spiking: set[tuple[str, str | None, int]] = set()

    def observe(self, step: int, loss: float | None, grad_norm: float | None, layer_norms: dict[str, float],
                layer_parameter_norms: dict[str, float]) -> list[Spike]:
        """Judge one step (before its optimizer update) and add it to the history; returns its spikes."""
        updates = {}
        for layer, norm in layer_parameter_norms.items():
            before = self._previous_parameters.get(layer)
            if before is not None and before > 0 and math.isfinite(norm):
                updates[layer] = abs(norm - before) / before
        self._previous_parameters = dict(layer_parameter_norms)
        grad_rises = {layer: factor for layer, norm in layer_norms.items()
                      if (factor := self._series(self._layer_norms, layer).rise(_log(norm))) is not None}
        update_rises = {layer: factor for layer, ratio in updates.items()
                        if (factor := self._series(self._layer_updates, layer).rise(_log(ratio))) is not None}
        # an update seen now is the previous step's
        self._rises.append((step, grad_rises, update_rises))
        found = []
        for quantity, series, value in (("loss", self._loss, loss), ("grad_norm", self._norm, grad_norm)):
            judged = series.judge(_log(value))
            if judged is not None and judged[0] >= math.log(MIN_RATIO) and judged[1] >= THRESHOLD:
                found.append(self._spike(step, quantity, value, math.exp(_log(value) - judged[0]), judged[1],
                                         len(layer_norms)))
        for store, values in ((self._layer_norms, layer_norms), (self._layer_updates, updates)):
            for layer, value in values.items():
                if layer not in (grad_rises if store is self._layer_norms else update_rises):
                    self._series(store, layer).add(_log(value))
        if not found:  # spikes stay out of the history the next steps are judged against
            self._loss.add(_log(loss))
            self._norm.add(_log(grad_norm))
        reported = list(found)
        if not found and grad_rises:  # one layer's gradient spiked while the totals did not
            layer = max(grad_rises, key=grad_rises.get)
            norm = layer_norms[layer]
            judged = self._layer_norms[layer].judge(_log(norm))
            spike = self._spike(step, "layer_grad_norm", norm, norm / grad_rises[layer], judged[1], len(layer_norms))
            reported.append(dataclasses.replace(spike, layer=layer, action="warn"))
        # a spike that goes on over consecutive steps is reported once, at its first step
        self.spikes.extend(spike for spike in reported if (spike.quantity, spike.layer, step - 1) not in self._spiking)
        self._spiking = {(spike.quantity, spike.layer, step) for spike in reported}
        return found

    @staticmethod
    def _series(store: dict[str, _Series], layer: str) -> _Series:
        if layer not in store:
            store[layer] = _Series()
        return store[layer]

    def _spike(self, step: int, quantity: str, value: float, baseline: float, score: float, layers: int) -> Spike:
        first: dict[str, int] = {}
        most: dict[str, float] = {}
        for at, grad_rises, update_rises in self._rises:
            for when, rises in ((at, grad_rises), (at - 1, update_rises)):  # an update seen at ``at`` is at-1's
                for layer, factor in rises.items():
                    first[layer] = min(first.get(layer, when), when)
                    most[layer] = max(most.get(layer, 0.0), factor)
        _, now, _ = self._rises[-1]
        everywhere = layers > 0 and len(now) == layers and all(at == step for at in first.values())
        layers = sorted(first, key=lambda layer: (first[layer], -most[layer]))[:SHOWN_LAYERS]
        return Spike(step=step, quantity=quantity, value=value, baseline=baseline, score=score,
                     cause="everywhere" if everywhere else "layers",
                     layers=tuple((layer, most[layer], first[layer]) for layer in layers), action=self.action)


def spike_notes(spikes: Sequence[Spike]) -> list[str]:
    """One sentence per spike for the summary."""
    notes = []
    for spike in spikes:
        what = {"loss": "loss", "grad_norm": "gradient norm"}.get(spike.quantity, f"gradient norm of layer {spike.layer}")
        text = (f"{what} spike at step {spike.step}: {spike.value:.4g}, {spike.value / spike.baseline:.3g}x its "
                f"recent median {spike.baseline:.4g} (robust z {spike.score:.3g})")
        if spike.cause == "everywhere":
            text += "; the gradient rose everywhere at once: the batch or the loss of this step (the data), not a layer"
        elif spike.layers:
            text += "; rose first and most: " + ", ".join(
                f"{layer or '(model)'} x{factor:.3g} from step {at}" for layer, factor, at in spike.layers)
        if spike.action == "skip":
            text += " (step skipped)"
        notes.append(text)
    return notes
