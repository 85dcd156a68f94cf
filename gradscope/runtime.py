"""Process-wide switches model code sets (threads, determinism, matmul precision, compile).

gradscope computes with numpy on the CPU, deterministically and in full precision, so these are
recorded and reported back rather than acted on; ``compile`` returns what it is given."""
from __future__ import annotations

from typing import Any


_settings = {"num_threads": 1, "deterministic": False, "matmul_precision": "highest"}


def set_num_threads(n: int) -> None:
    """Recorded for ``get_num_threads``; numpy's own thread pool is left as it is."""
    _settings["num_threads"] = int(n)


def get_num_threads() -> int:
    return _settings["num_threads"]


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """gradscope's ops are deterministic already; the flag is recorded."""
    _settings["deterministic"] = bool(mode)


def are_deterministic_algorithms_enabled() -> bool:
    return _settings["deterministic"]


def set_float32_matmul_precision(precision: str) -> None:
    """gradscope multiplies float32 in full precision; the setting is recorded."""
    if precision not in ("highest", "high", "medium"):
        raise RuntimeError(f"Invalid precision: {precision}")
    _settings["matmul_precision"] = precision


def get_float32_matmul_precision() -> str:
    return _settings["matmul_precision"]


def compile(model: Any = None, **kwargs: Any) -> Any:  # noqa: A001
    """No compiler in gradscope: the model or function is returned unchanged (also as a decorator)."""
    if model is None:
        return lambda fn: fn
    return model
