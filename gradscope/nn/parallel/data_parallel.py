"""``DataParallel`` on one device: PyTorch without GPUs also just calls the wrapped module."""
from __future__ import annotations

from typing import Any, Sequence

from gradscope.nn.modules.module import Module

__all__ = ["DataParallel", "data_parallel"]


class DataParallel(Module):
    """Wrap ``module`` (as ``.module``, so state-dict keys gain the ``module.`` prefix) and call it.

    Args:
        module: the module to wrap.
        device_ids: accepted for compatibility; gradscope has a single CPU device.
        output_device: accepted for compatibility.
        dim: the batch dimension PyTorch would scatter along (unused on one device).
    """

    def __init__(self, module: Module, device_ids: Sequence[Any] | None = None, output_device: Any = None,
                 dim: int = 0) -> None:
        super().__init__()
        self.module = module
        self.device_ids: list = []
        self.output_device = output_device
        self.dim = dim

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        return self.module(*inputs, **kwargs)


def data_parallel(module: Module, inputs: Any, device_ids: Sequence[Any] | None = None, output_device: Any = None,
                  dim: int = 0, module_kwargs: dict | None = None) -> Any:
    """Call ``module`` on ``inputs`` (a tensor or a tuple of positional arguments)."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    return module(*inputs, **(module_kwargs or {}))
