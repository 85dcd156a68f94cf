"""What ``run`` keeps of its steps' per-layer and per-parameter gradient norms over the whole run.

The closing summary (first, last, smallest and largest norm of each layer) and the health rules
(the median gradient norm of each parameter, whether a gradient ever reached it, whether it was
ever non-zero) need every step, but not every step's records: :class:`RunSeries` folds each
record in as it is made, in memory that does not grow with the number of steps. The run's history
then keeps the per-layer and per-parameter norms of its first and last steps only (a run of
600,000 steps of a model of 150 parameters would otherwise hold 14 GB of them).

The medians are exact while a parameter has at most :data:`SAMPLE_LIMIT` finite norms; beyond,
they are the medians of an evenly spread sample of them (every second, then every fourth... norm).
"""
from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from typing import Iterable

__all__ = ["LayerSpan", "RunSeries", "SAMPLE_LIMIT"]

#: How many finite norms of one parameter are kept for its median (32 KiB of them at most).
SAMPLE_LIMIT = 4096


@dataclass
class LayerSpan:
    """One layer's gradient norm over the run: its first and last norm (non-finite ones included)
    and the smallest and largest finite one (None when none was finite)."""

    first: float
    last: float
    low: float | None = None
    high: float | None = None


@dataclass
class _ParameterSeries:
    reached: bool = False  # a gradient came, finite or not
    highest: float | None = None  # the largest finite norm
    seen: int = 0  # finite norms observed
    stride: int = 1  # one in ``stride`` of them is sampled
    sample: array = field(default_factory=lambda: array("d"))  # (8 bytes a norm)


class RunSeries:
    """The per-layer and per-parameter gradient norms of a run, folded in step by step.

    Example::

        series = RunSeries()
        for record in history:
            series.observe(record)
        series.layers["encoder"].high, series.median("encoder.weight")
    """

    def __init__(self) -> None:
        self.layers: dict[str, LayerSpan] = {}
        self.names: list[str] = []  # the parameters of the last step with parameter norms, in model order
        self.steps = 0  # steps (not skipped) with parameter norms
        self._parameters: dict[str, _ParameterSeries] = {}

    @classmethod
    def of(cls, history: Iterable) -> "RunSeries":
        """The series of records already made."""
        series = cls()
        for record in history:
            series.observe(record)
        return series

    def observe(self, record) -> None:
        """Fold in one step record (a :class:`~gradscope.monitor.records.StepRecord`)."""
        for name, norm in record.layer_norms:
            if norm is None:
                continue
            span = self.layers.get(name)
            if span is None:
                span = self.layers[name] = LayerSpan(norm, norm)
            span.last = norm
            if math.isfinite(norm):
                span.low = norm if span.low is None else min(span.low, norm)
                span.high = norm if span.high is None else max(span.high, norm)
        if record.skipped or not record.parameter_norms:
            return
        self.steps += 1
        self.names = [name for name, _ in record.parameter_norms]
        for name, norm in record.parameter_norms:
            if norm is None:
                continue
            series = self._parameters.get(name)
            if series is None:
                series = self._parameters[name] = _ParameterSeries()
            series.reached = True
            if not math.isfinite(norm):
                continue
            series.highest = norm if series.highest is None else max(series.highest, norm)
            if series.seen % series.stride == 0:
                series.sample.append(norm)
                if len(series.sample) > SAMPLE_LIMIT:
                    del series.sample[1::2]
                    series.stride *= 2
            series.seen += 1

    def reached(self, name: str) -> bool:
        """Whether a gradient (finite or not) reached the parameter at some step."""
        series = self._parameters.get(name)
        return series is not None and series.reached

    def median(self, name: str) -> float | None:
        """The median of the parameter's finite gradient norms (None without any)."""
        series = self._parameters.get(name)
        if series is None or not series.sample:
            return None
        values = sorted(series.sample)
        middle = len(values) // 2
        return values[middle] if len(values) % 2 else 0.5 * (values[middle - 1] + values[middle])

    def highest(self, name: str) -> float | None:
        """The largest finite gradient norm of the parameter (None without any)."""
        series = self._parameters.get(name)
        return None if series is None else series.highest
