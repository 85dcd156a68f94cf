"""Fixtures for the autograd engine tests."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs


def loggable(value: Any) -> Any:
    """Turn a scenario log into plain, comparable python data.

    Tensors become nested lists rounded to 5 decimals (NaN/Inf as strings), dtypes their short
    name, tuples lists; everything else is kept as is.
    """
    if hasattr(value, "detach") and hasattr(value, "numpy") and hasattr(value, "shape"):
        array = np.asarray(value.detach().numpy())
        if array.dtype == np.bool_:
            return array.tolist()
        return loggable(np.round(array.astype(np.float64), 5).tolist())
    if isinstance(value, (gs.dtype,)) or type(value).__name__ == "dtype":
        return str(value).rsplit(".", 1)[-1]
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return round(value, 5)
    if isinstance(value, (tuple, list)):
        return [loggable(v) for v in value]
    if isinstance(value, dict):
        return {k: loggable(v) for k, v in value.items()}
    return value


def assert_logs_equal(got: Any, expected: Any, path: str = "log") -> None:
    """Logs must be equal, except numbers, which may differ by float32 summation order."""
    if isinstance(expected, float) and isinstance(got, float):
        assert math.isclose(got, expected, rel_tol=1e-5, abs_tol=1e-5), f"{path}: {got} != {expected}"
        return
    if isinstance(expected, list) and isinstance(got, list):
        assert len(got) == len(expected), f"{path}: {got} != {expected}"
        for index, (g, e) in enumerate(zip(got, expected)):
            assert_logs_equal(g, e, f"{path}[{index}]")
        return
    assert got == expected, f"{path}: {got!r} != {expected!r}"


@pytest.fixture
def same_as_torch() -> Callable[[Callable[[Any], Any]], Any]:
    """Return ``check(scenario)``: run ``scenario(gradscope)``, then ``scenario(torch)``; assert the
    two logs are equal and return gradscope's log.

    Without torch the test is skipped after gradscope's run (an error there still fails it): a
    comparison that cannot be made must not pass.
    """

    def check(scenario: Callable[[Any], Any]) -> Any:
        got = loggable(scenario(gs))
        torch = pytest.importorskip("torch")
        assert_logs_equal(got, loggable(scenario(torch)))
        return got

    return check
