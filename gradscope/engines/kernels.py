"""The numpy array kernels that both engines' statistics use (host arrays in, Python numbers out):
the one home of counting non-finite entries, squared norms and total norms of arrays."""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np


def nonfinite_count(array: np.ndarray) -> int:
    """Number of NaN and Inf entries of a numpy array (0 unless it is floating point or complex)."""
    if array.dtype.kind not in "fc":
        return 0
    return int(array.size - np.count_nonzero(np.isfinite(array)))


def nonfinite_kind_of_array(array: np.ndarray) -> str | None:
    """``"nan"`` if a numpy array holds a NaN, else ``"inf"`` if it holds an Inf, else None
    (always None for an array that is not floating point)."""
    if array.dtype.kind != "f":
        return None
    if np.isnan(array).any():
        return "nan"
    if np.isinf(array).any():
        return "inf"
    return None


#: ``np.vdot`` without numpy's ``__array_function__`` dispatch (a Python call per use; the
#: arrays here are always plain ndarrays), where numpy exposes it.
_vdot = getattr(np.vdot, "_implementation", np.vdot)

#: A float32 sum of n squares is kept when above n times this, else computed again in float64: a
#: square below float32's smallest normal number (1.2e-38) is rounded to a multiple of 1.4e-45 and
#: loses at most 0.7e-45, so n of them lose under 1e-7 of such a sum, less than float32's own
#: rounding of it.
_FLOAT32_LOSS_PER_SQUARE = 1e-38
#: Sums above this stand whatever their size (up to 1e8 elements): the first test of a batch,
#: which needs no sizes; only the sums below it are checked against theirs.
_FLOAT32_SQUARES_MIN = 1e-30
_FLOAT32 = np.dtype(np.float32)
_FLOAT64 = np.dtype(np.float64)


def squared_norm(array: np.ndarray) -> float:
    """Sum of squares of a numpy array, in float64 when float32 would overflow or underflow;
    NaN/Inf when the array holds them."""
    dtype = array.dtype
    if dtype is _FLOAT32:  # (the usual case: one dot product, whose result is in float32's safe range)
        value = float(_vdot(array, array))
        if array.size * _FLOAT32_LOSS_PER_SQUARE < value < math.inf:
            return value
    elif dtype is _FLOAT64:
        return float(_vdot(array, array))
    if array.dtype.kind != "f" or array.dtype.itemsize < 4:  # (float16 would overflow and round)
        array = array.astype(np.float64)
    value = float(_vdot(array, array))  # (0.0 when empty)
    if array.dtype.itemsize == 4 and not array.size * _FLOAT32_LOSS_PER_SQUARE < value < math.inf:
        # A small finite sum may have underflowed (the array is finite, or the sum would not be);
        # an infinite one may have overflowed, unless the array holds an infinity; NaN stays NaN.
        if value < math.inf or (value == math.inf and np.isfinite(array).all()):
            flat64 = array.astype(np.float64)
            value = float(_vdot(flat64, flat64))
    return value


#: Float arrays up to this many elements are reduced together by the parameter statistics
#: (``gradscope.monitor.stats``), where each array would otherwise take several calls.
BATCH_LIMIT = 1 << 15


def segment_starts(sizes: Sequence[int]) -> np.ndarray:
    """Where each of arrays of ``sizes`` elements starts once they are concatenated."""
    starts = np.zeros(len(sizes), dtype=np.intp)
    np.cumsum(sizes[:-1], out=starts[1:])
    return starts


def exact_squares(arrays: Sequence[np.ndarray]) -> list[float]:
    """Sums of squares of non-empty float32/float16 arrays, each square taken in float64 (where it
    can neither overflow nor underflow), all arrays in one buffer: for many small arrays."""
    flat = np.concatenate(arrays, axis=None, dtype=np.float64)
    np.multiply(flat, flat, out=flat)
    return np.add.reduceat(flat, segment_starts([array.size for array in arrays])).tolist()


#: How many elements :func:`fine_squared_norm` converts to float64 at a time.
FINE_PIECE = 1 << 20


def fine_squared_norm(array: np.ndarray) -> float:
    """Sum of squares of ``array`` in float64 (complex: of its real and imaginary parts), read in
    pieces of :data:`FINE_PIECE` elements so that no float64 copy of a large array is made."""
    flat = array.reshape(-1)
    if flat.dtype.kind == "c":
        flat = flat.view(flat.real.dtype)
    total = 0.0
    for start in range(0, flat.size, FINE_PIECE):
        piece = flat[start:start + FINE_PIECE].astype(np.float64)
        total += float(np.dot(piece, piece))
    return total


def squared_norms_of_arrays(arrays: Sequence[np.ndarray | None]) -> list[float | None]:
    """:func:`squared_norm` of each array (None for None). Float32 and float64 arrays take one dot
    product each, called from C (``map``: no Python call per array, and no copy, which on a busy
    machine is cheaper than summing them together in one buffer); a result that float32 may have
    overflowed or underflowed is recomputed as :func:`squared_norm` does."""
    if len(arrays) < 3:  # (a monitor's hook: one or two gradients; less set-up one by one)
        return [None if array is None else squared_norm(array) for array in arrays]
    where = [index for index, array in enumerate(arrays)
             if array is not None and (array.dtype is _FLOAT32 or array.dtype is _FLOAT64)]
    plain = [arrays[index] for index in where] if len(where) < len(arrays) else arrays
    values = np.fromiter(map(_vdot, plain, plain), dtype=np.float64, count=len(plain))
    suspect = ~((values > _FLOAT32_SQUARES_MIN) & (values < math.inf))
    squares = values.tolist()
    if suspect.any():
        # float32 sums that may have underflowed or overflowed, again in float64: the small ones
        # together (vanishing gradients make many), the others one by one; float64 ones stand
        batch = []
        for position in np.flatnonzero(suspect).tolist():
            array = plain[position]
            if array.dtype is _FLOAT32 and 0 < array.size * _FLOAT32_LOSS_PER_SQUARE < squares[position] < math.inf:
                continue  # (small, but too large for what underflow could have lost to matter)
            if array.dtype is _FLOAT32 and 0 < array.size <= BATCH_LIMIT:
                batch.append(position)
            elif array.dtype is not _FLOAT64:
                squares[position] = squared_norm(array)
        if batch:
            for position, square in zip(batch, exact_squares([plain[position] for position in batch])):
                squares[position] = square
    if len(where) == len(arrays):  # (the usual case: every array a native float32/float64 one)
        return squares
    result: list[float | None] = [None] * len(arrays)
    for index, square in zip(where, squares):
        result[index] = square
    for index, array in enumerate(arrays):
        if array is not None and result[index] is None:  # (other dtypes, one by one)
            result[index] = squared_norm(array)
    return result


def total_norm(arrays: Iterable[np.ndarray | None]) -> float:
    """The 2-norm of several arrays taken together (None entries are skipped; 0.0 when there are
    none): squares summed in float64, so that float32 values neither overflow nor underflow; NaN
    when an entry is NaN, else Inf when one is infinite."""
    total = 0.0
    for array in arrays:
        if array is not None and array.size:
            wide = array.astype(np.float64, copy=False)
            with np.errstate(over="ignore", invalid="ignore"):
                total += float(np.sum(wide * wide))
    return math.sqrt(total)
