"""gradscope dtypes: thin named wrappers around numpy dtypes, printed like PyTorch's."""
from __future__ import annotations

from typing import Any

import numpy as np


class dtype:
    """A tensor element type (``gs.float32``, ``gs.int64``, ...)."""

    __slots__ = ("name", "np", "is_floating_point", "itemsize")

    def __init__(self, name: str, np_dtype: Any) -> None:
        self.name = name
        self.np = np.dtype(np_dtype)
        self.is_floating_point = self.np.kind == "f"
        self.itemsize = self.np.itemsize

    @property
    def is_complex(self) -> bool:
        return False

    @property
    def is_signed(self) -> bool:
        return self.np.kind in "fi"

    def __repr__(self) -> str:
        return f"gradscope.{self.name}"

    def __reduce__(self) -> str:
        return self.name


class UnsupportedDtype(dtype):
    """A dtype model code names that numpy cannot compute in (``bfloat16``): it can be named, compared
    and kept in a dict, and any tensor made with it raises a TypeError saying so."""

    __slots__ = ()

    def __init__(self, name: str, itemsize: int) -> None:
        self.name = name
        self.np = None
        self.is_floating_point = True
        self.itemsize = itemsize


float16 = dtype("float16", np.float16)
bfloat16 = UnsupportedDtype("bfloat16", 2)
float32 = dtype("float32", np.float32)
float64 = dtype("float64", np.float64)
int8 = dtype("int8", np.int8)
int16 = dtype("int16", np.int16)
int32 = dtype("int32", np.int32)
int64 = dtype("int64", np.int64)
uint8 = dtype("uint8", np.uint8)
bool_ = dtype("bool", np.bool_)
half, float, double = float16, float32, float64
short, int, long = int16, int32, int64

class memory_format:
    """A memory layout name (``gs.channels_last``, ...). Arrays are numpy's, so every layout computes
    the same numbers; the names are accepted wherever PyTorch takes a ``memory_format``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"gradscope.{self.name}"


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")

class layout:
    """A tensor layout name; every gradscope tensor is ``strided`` (a dense numpy array)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"gradscope.{self.name}"


strided = layout("strided")

# The dtype of new floating point tensors (``set_default_dtype``), in a list so it can change.
DEFAULT_FLOAT = [np.dtype(np.float32)]

_BY_NP = {d.np: d for d in (float16, float32, float64, int8, int16, int32, int64, uint8, bool_)}


def from_numpy_dtype(np_dtype: Any) -> dtype:
    """Return the gradscope dtype for a numpy dtype (raises TypeError for unsupported ones)."""
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except KeyError:
        raise TypeError(f"can't convert numpy array of type {np.dtype(np_dtype)}: gradscope supports "
                        "float16/32/64, int8/16/32/64, uint8 and bool") from None


def to_numpy_dtype(d: Any) -> np.dtype:
    """Accept a gradscope dtype, numpy dtype, python type or string and return a numpy dtype."""
    if isinstance(d, UnsupportedDtype):
        raise TypeError(f"gradscope computes with numpy, which has no {d.name}: use gradscope.float32 or "
                        "float64 (on the CPU, mixed precision changes nothing that gradscope shows)")
    if isinstance(d, dtype):
        return d.np
    if d is builtins_float:
        return np.dtype(np.float32)
    if d is builtins_int:
        return np.dtype(np.int64)
    if d is builtins_bool:
        return np.dtype(np.bool_)
    return np.dtype(d)


import builtins as _builtins  # noqa: E402

builtins_float, builtins_int, builtins_bool = _builtins.float, _builtins.int, _builtins.bool


class finfo:
    """Machine limits of a floating point dtype (``eps``, ``max``, ``min``, ``tiny``, ``bits``)."""

    def __init__(self, type: Any = None) -> None:  # noqa: A002
        np_dtype = DEFAULT_FLOAT[0] if type is None else to_numpy_dtype(type)
        if np_dtype.kind != "f":
            raise TypeError(f"finfo(): expected a floating point dtype, got {from_numpy_dtype(np_dtype)}")
        info = np.finfo(np_dtype)
        self.dtype = from_numpy_dtype(np_dtype).name
        self.bits = info.bits
        # numpy scalars to python floats (``float`` is a gradscope dtype in this module)
        self.eps = info.eps.item()
        self.max = info.max.item()
        self.min = info.min.item()
        self.tiny = self.smallest_normal = info.tiny.item()
        self.resolution = info.resolution.item()

    def __repr__(self) -> str:
        return (f"finfo(resolution={self.resolution}, min={self.min:g}, max={self.max:g}, eps={self.eps:g}, "
                f"smallest_normal={self.tiny:g}, tiny={self.tiny:g}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype (``min``, ``max``, ``bits``)."""

    def __init__(self, type: Any) -> None:  # noqa: A002
        np_dtype = to_numpy_dtype(type)
        if np_dtype.kind not in "iub":
            raise TypeError(f"iinfo(): expected an integer dtype, got {from_numpy_dtype(np_dtype)}")
        info = np.iinfo(np.uint8 if np_dtype.kind == "b" else np_dtype)
        self.dtype = from_numpy_dtype(np_dtype).name
        self.bits, self.min, self.max = info.bits, info.min, info.max

    def __repr__(self) -> str:
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
