"""Anomaly detection: remember where each node was created; complain when backward makes NaN/Inf."""
from __future__ import annotations

import sys
import traceback
import warnings
from typing import Any

import numpy as np

from gradscope._tool.frames import is_gradscope_file


class _State:
    __slots__ = ("enabled", "check_nan", "check_inf")

    def __init__(self) -> None:
        self.enabled = False
        self.check_nan = True
        self.check_inf = False


state = _State()


def record_trace() -> list:
    """The stack at node creation without gradscope's own frames (a library's frames, such as an
    installed model's layers, stay); the whole stack when nothing else is left."""
    frames = traceback.extract_stack()[:-1]
    outside = [f for f in frames if not is_gradscope_file(f.filename)]
    return outside or frames


def forward_location(node: Any) -> str:
    """'file:line in function' of the user code that created ``node``, if recorded."""
    trace = getattr(node, "_trace", None)
    if not trace:
        return "unknown (enable detect_anomaly before the forward pass to record it)"
    frame = trace[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def check_node(node: Any, grads_in: Any) -> None:
    """Raise RuntimeError if ``node`` produced a NaN (or, with check_inf, an Inf) gradient."""
    for index, g in enumerate(grads_in):
        if g is None or g.dtype.kind != "f":
            continue
        bad = None
        if state.check_nan and np.isnan(g).any():
            bad = "nan"
        elif state.check_inf and np.isinf(g).any():
            bad = "inf"
        if bad is None:
            continue
        trace = getattr(node, "_trace", None)
        stack = "".join(traceback.format_list(trace)) if trace else ""
        raise AnomalyError(
            f"Function '{node.name()}' returned {bad} values in its {index}th output. "
            f"The forward call that created it: {forward_location(node)}\n{stack}".rstrip(),
            node_name=node.name(), location=forward_location(node), kind=bad, trace=trace)


def warn_error_in(node: Any) -> None:
    """Anomaly mode's note on an error raised while backward ran ``node`` (any error, not only
    NaN/Inf): a warning naming the node, with the forward call that created it (as PyTorch).
    When warnings are errors, the note goes to stderr instead, and the original error stays."""
    trace = getattr(node, "_trace", None)
    if trace:
        message = (f"Error detected in {node.name()}. Traceback of forward call that caused the error:\n"
                   + "".join(traceback.format_list(trace)))
    else:
        message = (f"Error detected in {node.name()}. No forward pass information available. Enable detect "
                   "anomaly during forward pass for more information.")
    try:
        warnings.warn(message, UserWarning, stacklevel=3)
    except Exception:
        sys.stderr.write(f"UserWarning: {message}\n")


class AnomalyError(RuntimeError):
    """Raised by anomaly mode; carries the node name, the forward location and the value kind."""

    def __init__(self, message: str, *, node_name: str, location: str, kind: str, trace: Any) -> None:
        super().__init__(message)
        self.node_name = node_name
        self.location = location
        self.kind = kind
        self.trace = trace


class detect_anomaly:
    """Context manager: record node creation sites and raise when backward produces NaN.

    Args:
        check_nan: raise on NaN gradients (default True).
        check_inf: also raise on infinite gradients (gradscope extension, default False).
    """

    def __init__(self, check_nan: bool = True, check_inf: bool = False) -> None:
        self.check_nan = check_nan
        self.check_inf = check_inf
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and should "
                      "only be enabled for debugging.", UserWarning, stacklevel=2)

    def __enter__(self) -> None:
        self._prev = (state.enabled, state.check_nan, state.check_inf)
        state.enabled = True
        state.check_nan = self.check_nan
        state.check_inf = self.check_inf

    def __exit__(self, *exc_info: Any) -> None:
        state.enabled, state.check_nan, state.check_inf = self._prev


class set_detect_anomaly:
    """Turn anomaly detection on or off: from now on when called, or until the end of the block
    when used as a context manager (the previous setting is then put back), as in PyTorch.

    Args:
        mode: on or off.
        check_nan: raise on NaN gradients (default True).
        check_inf: also raise on infinite gradients (gradscope extension, default False).
    """

    def __init__(self, mode: bool, check_nan: bool = True, check_inf: bool = False) -> None:
        self._prev = (state.enabled, state.check_nan, state.check_inf)
        state.enabled = bool(mode)
        state.check_nan = check_nan
        state.check_inf = check_inf

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: Any) -> None:
        state.enabled, state.check_nan, state.check_inf = self._prev


def set_anomaly_enabled(mode: bool, check_nan: bool = True, check_inf: bool = False) -> None:
    """Turn anomaly detection on or off (``torch.set_anomaly_enabled``)."""
    set_detect_anomaly(mode, check_nan, check_inf)


def is_anomaly_enabled() -> bool:
    return state.enabled
