"""Padding layers: constant (and zero), reflection, replication and circular, for 1, 2 and 3 dims."""
from __future__ import annotations

from typing import Any

from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.nn.modules.module import Module

__all__ = ["ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
           "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
           "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d"]


def _padding_tuple(padding: Any, dims: int) -> tuple:
    """An int is repeated on both sides of every padded dim; a sequence must give all 2 * dims sides."""
    if isinstance(padding, (list, tuple)):
        padding = tuple(int(p) for p in padding)
        if len(padding) != 2 * dims:
            raise ValueError(f"expected padding of {2 * dims} values, got {len(padding)}")
        return padding
    return (int(padding),) * (2 * dims)


class _PadNd(Module):
    mode = "constant"
    dims = 1

    def __init__(self, padding: Any) -> None:
        super().__init__()
        self.padding = _padding_tuple(padding, self.dims)

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding: Any, value: float) -> None:
        super().__init__(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    """Pad the last dim with ``value``: ``padding`` is an int or (left, right)."""

    dims = 1


class ConstantPad2d(_ConstantPadNd):
    """Pad the last two dims with ``value``: an int or (left, right, top, bottom)."""

    dims = 2


class ConstantPad3d(_ConstantPadNd):
    """Pad the last three dims with ``value``: an int or (left, right, top, bottom, front, back)."""

    dims = 3


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding: Any) -> None:
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    """Zero-pad the last dim."""

    dims = 1


class ZeroPad2d(_ZeroPadNd):
    """Zero-pad the last two dims."""

    dims = 2


class ZeroPad3d(_ZeroPadNd):
    """Zero-pad the last three dims."""

    dims = 3


class ReflectionPad1d(_PadNd):
    """Pad the last dim with its reflection (the edge not repeated)."""

    mode, dims = "reflect", 1


class ReflectionPad2d(_PadNd):
    """Pad the last two dims with their reflection."""

    mode, dims = "reflect", 2


class ReflectionPad3d(_PadNd):
    """Pad the last three dims with their reflection."""

    mode, dims = "reflect", 3


class ReplicationPad1d(_PadNd):
    """Pad the last dim by repeating its edge value."""

    mode, dims = "replicate", 1


class ReplicationPad2d(_PadNd):
    """Pad the last two dims by repeating their edge values."""

    mode, dims = "replicate", 2


class ReplicationPad3d(_PadNd):
    """Pad the last three dims by repeating their edge values."""

    mode, dims = "replicate", 3


class CircularPad1d(_PadNd):
    """Pad the last dim by wrapping around."""

    mode, dims = "circular", 1


class CircularPad2d(_PadNd):
    """Pad the last two dims by wrapping around."""

    mode, dims = "circular", 2


class CircularPad3d(_PadNd):
    """Pad the last three dims by wrapping around."""

    mode, dims = "circular", 3
