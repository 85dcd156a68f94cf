"""``gradscope.cuda``: what model code asks about CUDA. gradscope computes on the CPU, so no
device is available; seeding calls are accepted and do nothing (there is no CUDA generator)."""
from __future__ import annotations

from typing import Any


def is_available() -> bool:
    """False: gradscope runs on the CPU only."""
    return False


def device_count() -> int:
    return 0


def is_initialized() -> bool:
    return False


def manual_seed(seed: int) -> None:
    """Accepted for compatibility; the CPU generator is seeded by ``gradscope.manual_seed``."""


def manual_seed_all(seed: int) -> None:
    """Accepted for compatibility; the CPU generator is seeded by ``gradscope.manual_seed``."""


def seed() -> None:
    """Accepted for compatibility (no CUDA generator exists)."""


def seed_all() -> None:
    """Accepted for compatibility (no CUDA generator exists)."""


def empty_cache() -> None:
    """Nothing is cached: there is no CUDA memory."""


def synchronize(device: Any = None) -> None:
    """Nothing to wait for: every computation is synchronous on the CPU."""


def _no_device(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("gradscope runs on the CPU only: no CUDA device is available "
                       "(gradscope.cuda.is_available() is False)")


current_device = get_device_name = get_device_properties = set_device = _no_device
memory_allocated = max_memory_allocated = _no_device


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: there is no CUDA device."""
    return False


class _CudaTensorType(type):
    """``torch.cuda.FloatTensor`` and friends: no tensor is an instance, and making one raises."""

    def __instancecheck__(cls, instance: Any) -> bool:
        return False

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"type {cls.__name__} not available. Torch not compiled with CUDA enabled "
                        "(gradscope runs on the CPU only)")


def _cuda_type(name: str) -> type:
    return _CudaTensorType(name, (), {"__module__": "gradscope.cuda", "__qualname__": f"cuda.{name}"})


FloatTensor, DoubleTensor, HalfTensor, BFloat16Tensor = (_cuda_type(n) for n in
                                                         ("FloatTensor", "DoubleTensor", "HalfTensor",
                                                          "BFloat16Tensor"))
LongTensor, IntTensor, ShortTensor, CharTensor, ByteTensor, BoolTensor = (
    _cuda_type(n) for n in ("LongTensor", "IntTensor", "ShortTensor", "CharTensor", "ByteTensor", "BoolTensor"))

from gradscope.cuda import amp  # noqa: E402
