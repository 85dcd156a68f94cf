"""pytest-friendly gradient assertions.

Example::

    from gradscope.testing import assert_gradients_healthy

    def test_model_gradients():
        model = MyModel()
        assert_gradients_healthy(model, (inputs, targets), nn.CrossEntropyLoss(), max_norm=100)
"""
from __future__ import annotations

from typing import Any, Callable

from gradscope.loading import Workload
from gradscope.monitor.analysis import Thresholds
from gradscope.monitor.inspect import inspect_model
from gradscope.monitor.records import InspectReport

__all__ = ["assert_gradients_healthy"]


def assert_gradients_healthy(model: Any, batch: tuple[Any, Any], loss_fn: Callable[[Any, Any], Any], *,
                             max_norm: float | None = None, min_norm: float | None = None,
                             min_ratio: float | None = None, dead_units: float | None = None,
                             allow: tuple[str, ...] = ()) -> InspectReport:
    """Run one forward and backward pass and fail if the gradients look wrong.

    Checks that the loss and every gradient are finite, every parameter that requires grad gets a
    gradient, none is identically zero, and none is vanishing or exploding (see
    :class:`gradscope.monitor.analysis.Thresholds` for the defaults).

    Args:
        model: the ``nn.Module``.
        batch: ``(inputs, targets)``; ``inputs`` is a tensor or a tuple of positional args.
        loss_fn: ``loss_fn(output, targets) -> scalar tensor``.
        max_norm: exploding limit for a parameter's gradient norm.
        min_norm: vanishing limit (default: ``min_ratio`` x the largest gradient norm).
        min_ratio: relative vanishing limit.
        dead_units: fraction of a layer's output units without gradient that is reported.
        allow: finding kinds to ignore, e.g. ``("vanishing",)``.

    Returns:
        The inspect report, for further assertions.

    Raises:
        AssertionError: listing every error finding.
    """
    defaults = Thresholds()
    thresholds = Thresholds(max_norm=defaults.max_norm if max_norm is None else max_norm, min_norm=min_norm,
                            min_ratio=defaults.min_ratio if min_ratio is None else min_ratio,
                            dead_units=defaults.dead_units if dead_units is None else dead_units)
    workload = Workload(model=model, batch_fn=lambda step: batch, loss_fn=loss_fn)
    report = inspect_model(workload, thresholds=thresholds)
    errors = [f for f in report.findings if f.severity == "error" and f.check not in allow]
    if errors:
        lines = "\n".join(f"  {f.check}: {f.message}" for f in errors)
        raise AssertionError(f"unhealthy gradients in {type(model).__name__} "
                             f"({len(errors)} finding{'s' if len(errors) != 1 else ''}):\n{lines}")
    return report
