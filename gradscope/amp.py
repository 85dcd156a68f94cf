"""``gradscope.amp``: automatic mixed precision as model code spells it on a machine without CUDA.

On a CPU-only PyTorch, ``autocast("cuda")`` and ``GradScaler("cuda")`` warn that CUDA is not
available and disable themselves; a disabled scaler passes losses and optimizer steps through
unchanged. gradscope behaves the same way. Autocasting on the CPU (to bfloat16) would change every
number gradscope shows and numpy has no bfloat16, so an enabled CPU autocast raises when entered.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable

_DEVICE_TYPES = ("cuda", "cpu", "mps", "xpu", "xla", "hpu")


class autocast:
    """``with autocast(device_type, dtype=None, enabled=True, cache_enabled=None):`` or a decorator."""

    def __init__(self, device_type: str, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type not in _DEVICE_TYPES:
            raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        if self._enabled and device_type != "cpu":
            warnings.warn(f"User provided device_type of '{device_type}', but {device_type.upper()} is not "
                          "available. Disabling", stacklevel=2)
            self._enabled = False

    def __enter__(self) -> None:
        if self._enabled:
            raise NotImplementedError("autocast on the CPU computes in bfloat16, which gradscope (numpy) does "
                                      "not have: use autocast(..., enabled=False) or contextlib.nullcontext()")

    def __exit__(self, *exc: Any) -> None:
        return None

    def __call__(self, function: Callable) -> Callable:
        @functools.wraps(function)
        def decorated(*args: Any, **kwargs: Any) -> Any:
            with self:
                return function(*args, **kwargs)

        return decorated


def is_autocast_available(device_type: str) -> bool:
    return device_type == "cpu"


class GradScaler:
    """Loss scaling for float16 training on CUDA. Without CUDA it is disabled, as in PyTorch on a
    CPU-only machine: ``scale(x)`` returns ``x``, ``step(optimizer)`` calls ``optimizer.step()``."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        self._device = device
        self._enabled = bool(enabled)
        if self._enabled:
            warnings.warn(f"torch.{device}.amp.GradScaler is enabled, but {device.upper()} is not available.  "
                          "Disabling.", stacklevel=2)
            self._enabled = False

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs: Any) -> Any:
        return outputs

    def unscale_(self, optimizer: Any) -> None:
        return None

    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale: Any = None) -> None:
        return None

    def get_scale(self) -> float:
        return 1.0

    def get_growth_factor(self) -> float:
        return 2.0

    def get_backoff_factor(self) -> float:
        return 0.5

    def get_growth_interval(self) -> int:
        return 2000

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        return None
