"""Per-parameter gradient statistics (:class:`~gradscope.monitor.records.ParameterRecord` records).

Tensors reach numpy through the engine adapter (``engine.to_numpy``); the array kernels (squared
norms, non-finite counts, total norms) are :mod:`gradscope.engines`' and the same for every engine.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from gradscope.engines import (BATCH_LIMIT, Engine, nonfinite_count, segment_starts, squared_norm,
                               squared_norms_of_arrays, total_norm)
from gradscope.monitor.records import ParameterRecord

__all__ = ["array_statistics", "module_of", "norm_from_square", "parameter_record", "parameter_records",
           "parameter_records_of", "total_grad_norm"]

_UNIT_MODULES = ("Linear", "Conv1d", "Conv2d", "Bilinear")


def norm_from_square(square: float | None) -> float | None:
    """The norm whose square is ``square`` (None stays None; NaN and Inf stay as they are)."""
    return None if square is None else math.sqrt(square)


def module_of(parameter_name: str) -> str:
    """``"body.0.weight"`` -> ``"body.0"``; a parameter of the model itself -> ``""``."""
    return parameter_name.rpartition(".")[0]


#: Small float arrays are reduced together, in batches of at most this many elements.
_BATCH_ELEMENTS = 1 << 20
_FLOAT32 = np.dtype(np.float32)


def array_statistics(arrays: Sequence[np.ndarray]) -> list[tuple[float, float, float, int]]:
    """``(sum, sum of squares, largest absolute value, non-zero count)`` of each non-empty array
    (sums in float64).

    Float32 and float16 arrays of up to ``BATCH_LIMIT`` elements are copied into one flat buffer
    (a batch holds at most a million elements) and reduced segment by segment: one set of
    reductions per batch instead of one per array. Other arrays are reduced on their own, in single
    passes over their data (no float64 copy).
    """
    sizes = [array.size for array in arrays]
    if sizes and max(sizes) <= BATCH_LIMIT and sum(sizes) <= _BATCH_ELEMENTS \
            and all(array.dtype is _FLOAT32 for array in arrays):  # (the usual case: one batch of them all)
        return list(_batch_statistics(arrays, sizes))
    result: list = [None] * len(arrays)
    batch: list[np.ndarray] = []
    where: list[int] = []
    elements = 0
    for index, array in enumerate(arrays):
        if array.size > BATCH_LIMIT or array.dtype.kind != "f" or array.dtype.itemsize > 4:
            result[index] = (float(array.sum(dtype=np.float64)), squared_norm(array),
                             max(float(array.max()), -float(array.min())), int(np.count_nonzero(array)))
            continue
        if elements + array.size > _BATCH_ELEMENTS:
            for position, statistics in zip(where, _batch_statistics(batch, [array.size for array in batch])):
                result[position] = statistics
            batch, where, elements = [], [], 0
        batch.append(array)
        where.append(index)
        elements += array.size
    if batch:
        for position, statistics in zip(where, _batch_statistics(batch, [array.size for array in batch])):
            result[position] = statistics
    return result


def _batch_statistics(arrays: list[np.ndarray], sizes: list[int]) -> Iterator[tuple[float, float, float, int]]:
    """:func:`array_statistics` of small non-empty float arrays (of ``sizes`` elements), reduced together."""
    offsets = segment_starts(sizes)
    flat = np.concatenate(arrays, axis=None, dtype=np.float64)
    nonzero_mask = flat != 0
    # (counting per segment converts every flag to an integer: skipped when no entry is zero)
    nonzero = sizes if nonzero_mask.all() else np.add.reduceat(nonzero_mask, offsets, dtype=np.intp).tolist()
    with np.errstate(invalid="ignore"):  # (inf - inf: the NaN is the answer)
        sums = np.add.reduceat(flat, offsets).tolist()
    np.multiply(flat, flat, out=flat)  # exact: a float32 value's square fits a float64
    squares = np.add.reduceat(flat, offsets).tolist()
    largest = np.sqrt(np.maximum.reduceat(flat, offsets)).tolist()  # |x| from the largest exact square
    return zip(sums, squares, largest, nonzero)


def parameter_record(name: str, module_type: str, values: np.ndarray, array: np.ndarray | None) -> ParameterRecord:
    """Gradient statistics of one parameter from its values and its gradient (None: no gradient)."""
    return parameter_records_of([(name, module_type, values, array)])[0]


def parameter_records_of(entries: list[tuple[str, str, np.ndarray, np.ndarray | None]]
                         ) -> tuple[ParameterRecord, ...]:
    """Gradient statistics of parameters given as ``(name, module type, values, grad or None)``."""
    param_norms = np.sqrt(squared_norms_of_arrays([values for _, _, values, _ in entries])).tolist()
    graded = [array for _, _, _, array in entries if array is not None and array.size]
    statistics = iter(_gradient_statistics(graded))
    records = []
    append = records.append
    # (records are built positionally, in ParameterRecord's field order: a third cheaper than keywords)
    for (name, module_type, values, array), param_norm in zip(entries, param_norms):
        module = name.rpartition(".")[0]  # (module_of)
        shape = values.shape  # (numpy's shape: a tuple of Python ints)
        if array is None:
            append(ParameterRecord(name, module, module_type, shape, False, None, None, None, None, 0, None, None,
                                   param_norm, None))
            continue
        dead = None
        if not array.size:
            grad_norm = grad_mean = grad_std = grad_abs_max = zero_fraction = 0.0
        else:
            grad_norm, grad_mean, grad_std, grad_abs_max, zero_fraction = next(statistics)
            if module_type in _UNIT_MODULES and array.ndim >= 2 and array.shape[0] > 1:
                dead = 0.0
                if zero_fraction:
                    per_unit = np.count_nonzero(array.reshape(array.shape[0], -1), axis=1)
                    dead = float(np.mean(per_unit == 0))
        append(ParameterRecord(name, module, module_type, shape, True, grad_norm, grad_mean, grad_std, grad_abs_max,
                               0 if grad_norm < math.inf else nonfinite_count(array), zero_fraction, dead,
                               param_norm, grad_norm / param_norm if param_norm > 0 else None))
    return tuple(records)


def _gradient_statistics(arrays: list[np.ndarray]) -> Iterator[tuple[float, float, float, float, float]]:
    """``(norm, mean, standard deviation, largest absolute value, fraction of zeros)`` of each
    non-empty array, computed for all of them together from :func:`array_statistics`."""
    if not arrays:
        return iter(())
    sums, squares, largest, nonzero = (np.array(column, dtype=np.float64)
                                       for column in zip(*array_statistics(arrays)))
    sizes = np.array([array.size for array in arrays], dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        means = sums / sizes
        # (a NaN or Inf sum of squares gives a NaN deviation; a variance rounded below zero is zero)
        deviations = np.where(np.isfinite(squares), np.sqrt(np.maximum(squares / sizes - means * means, 0.0)),
                              math.nan)
    return zip(np.sqrt(squares).tolist(), means.tolist(), deviations.tolist(), largest.tolist(),
               ((sizes - nonzero) / sizes).tolist())


def parameter_records(model: Any, engine: Engine) -> tuple[ParameterRecord, ...]:
    """Statistics of every parameter of ``model`` that requires grad, in ``named_parameters`` order."""
    to_numpy = engine.to_numpy
    entries = [(name, module_type, to_numpy(parameter), None if parameter.grad is None else to_numpy(parameter.grad))
               for name, module_type, parameter in _parameters_with_types(model) if parameter.requires_grad]
    return parameter_records_of(entries)


def _parameters_with_types(model: Any) -> Iterator[tuple[str, str, Any]]:
    """``(name, type of its module, parameter)`` in ``model.named_parameters()`` order.

    When the model's class keeps the engine's own ``named_parameters`` (which walks
    ``named_modules()`` and each module's ``_parameters``, skipping repeats), that walk is done
    here once, module types included; a class that defines its own is asked for its names.
    """
    if sum("named_parameters" in vars(cls) for cls in type(model).__mro__) != 1:
        types = {name: type(module).__name__ for name, module in model.named_modules()}
        for name, parameter in model.named_parameters():
            yield name, types.get(name.rpartition(".")[0], ""), parameter
        return
    seen: set[int] = set()
    for prefix, module in model.named_modules():
        owned = module._parameters
        if not owned:
            continue
        module_type = type(module).__name__
        dot = prefix + "." if prefix else ""
        for name, parameter in owned.items():
            if parameter is not None and id(parameter) not in seen:
                seen.add(id(parameter))
                yield dot + name, module_type, parameter


def total_grad_norm(records: Iterable[ParameterRecord]) -> float:
    """2-norm over all parameter gradients of the records: the norm of their gradient norms
    (parameters without a gradient are left out)."""
    return total_norm([np.array([record.grad_norm for record in records if record.grad_norm is not None],
                                dtype=np.float64)])
