"""Summary statistics of one gradient (or activation) array, as a plain record."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gradscope.engines import nonfinite_count

HISTOGRAM_BINS = 16


@dataclass(frozen=True)
class TensorStats:
    """What the debugger shows about one tensor.

    ``norm``, ``mean`` and ``abs_max`` are over every element (so a NaN makes them NaN);
    the histogram counts only the finite elements, in ``HISTOGRAM_BINS`` equal-width bins
    from ``low`` to ``high``.
    """

    label: str
    shape: tuple[int, ...]
    dtype: str
    norm: float
    mean: float
    abs_max: float
    nonfinite: int
    histogram: tuple[int, ...]
    low: float
    high: float
    edited: bool = False


@dataclass(frozen=True)
class MissingTensor:
    """A slot with no tensor: ``None`` in a gradient tuple, or not computed yet."""

    label: str
    reason: str


def l2_norm(array: np.ndarray) -> float:
    """Euclidean norm computed in float64 (so large float32 values do not overflow)."""
    if array.size == 0:
        return 0.0
    wide = array.astype(np.float64, copy=False)
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.sqrt(np.sum(wide * wide)))


def tensor_stats(label: str, array: np.ndarray, edited: bool = False) -> TensorStats:
    """Statistics of ``array`` under the name ``label``."""
    wide = array.astype(np.float64, copy=False)
    finite = wide[np.isfinite(wide)] if wide.dtype.kind == "f" else wide.ravel()
    with np.errstate(over="ignore", invalid="ignore"):
        mean = float(np.mean(wide)) if wide.size else 0.0
        abs_max = float(np.max(np.abs(wide))) if wide.size else 0.0
    if finite.size:
        low, high = float(finite.min()), float(finite.max())
        if low == high:
            counts = [0] * HISTOGRAM_BINS
            counts[HISTOGRAM_BINS // 2] = int(finite.size)
        else:
            counts = np.histogram(finite, bins=HISTOGRAM_BINS, range=(low, high))[0].tolist()
    else:
        low = high = 0.0
        counts = [0] * HISTOGRAM_BINS
    return TensorStats(label=label, shape=tuple(int(s) for s in array.shape), dtype=str(array.dtype),
                       norm=l2_norm(array), mean=mean, abs_max=abs_max, nonfinite=nonfinite_count(array),
                       histogram=tuple(int(c) for c in counts), low=low, high=high, edited=edited)
