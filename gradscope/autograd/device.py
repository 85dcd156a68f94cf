"""``gradscope.device``: where a tensor lives. gradscope computes on the CPU only, but model code
names devices (``torch.device("cuda" if ... else "cpu")``), so the object and its checks exist."""
from __future__ import annotations

from typing import Any

_KNOWN_TYPES = ("cpu", "cuda", "mps", "xpu", "meta", "hip", "xla")


class device:
    """A device description with PyTorch's surface: ``type``, ``index``, ``str()`` and equality
    with other devices (``str(d) == "cpu"`` compares with a string)."""

    __slots__ = ("type", "index")

    def __init__(self, type: Any, index: int | None = None) -> None:  # noqa: A002
        if isinstance(type, device):
            if index is not None:
                raise ValueError("device(): an index cannot be given together with a device object")
            self.type, self.index = type.type, type.index
            return
        if isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type
        if not isinstance(type, str):
            raise TypeError(f"device() received an invalid combination of arguments: {type!r}")
        name, _, number = type.partition(":")
        if name not in _KNOWN_TYPES:
            raise RuntimeError(f"Expected one of {', '.join(_KNOWN_TYPES)} device type at start of device "
                               f"string: {type}")
        if number:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index was passed "
                                   f"explicitly: {type}")
            if not number.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}'")
            index = int(number)
        self.type = name
        self.index = None if index is None else int(index)

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, device):  # as in PyTorch, a device never equals a string
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __reduce__(self) -> tuple:
        return (device, (self.type, self.index))


CPU = device("cpu")


def check_device(target: Any) -> None:
    """Accept ``None`` or any spelling of the CPU; raise PyTorch-searchable errors otherwise."""
    if target is None or target is CPU:
        return
    resolved = target if isinstance(target, device) else device(target)
    if resolved.type != "cpu":
        raise RuntimeError(f"gradscope runs on the CPU only; cannot place a tensor on '{resolved}' "
                           "(Torch not compiled with CUDA enabled). Use device='cpu', or pick the device "
                           "with torch.cuda.is_available(), which is False in gradscope.")


_DEFAULT_DEVICE = [CPU]


def set_default_device(target: Any) -> None:
    """``torch.set_default_device``: only the CPU (or ``None``) is accepted."""
    check_device(target)
    _DEFAULT_DEVICE[0] = CPU


def get_default_device() -> device:
    return _DEFAULT_DEVICE[0]
