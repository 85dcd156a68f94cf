"""``gs.save`` / ``gs.load``: state dicts (and other plain trees of tensors) as ``.npz`` files.

A file is an ordinary numpy ``.npz`` archive written without pickle:

* every tensor or array is one ``.npy`` member, named after its dotted key path when that
  name is free (``np.load(path)["fc.weight"]`` works), else ``__array_<n>__``;
* the member ``__gradscope__`` holds the tree structure as UTF-8 JSON in a uint8 array:
  dict keys and their order, tuples vs lists, ints, floats, bools, strings, None, and
  which arrays are tensors or parameters.

``load`` reads with ``allow_pickle=False`` and only ever builds dicts, lists, tuples,
scalars, strings, numpy arrays and tensors, so a file from elsewhere can never execute code.
An ``.npz`` without ``__gradscope__`` (for example one written by
``np.savez(path, **{k: v.numpy() for k, v in torch_model.state_dict().items()})``) loads
as an ordered dict of tensors keyed by member name.
"""
from __future__ import annotations

import io
import json
import math
import os
import zipfile
from collections import OrderedDict
from typing import Any, BinaryIO

import numpy as np

from gradscope.autograd import dtypes
from gradscope.autograd.tensor import Tensor
from gradscope.errors import GradscopeError
from gradscope.nn.parameter import Parameter

__all__ = ["save", "load", "UnsupportedValueError", "NotAGradscopeFileError"]

_META = "__gradscope__"
_FORMAT = "gradscope"
_VERSION = 1
_ZIP_MAGIC = b"PK\x03\x04"
_EMPTY_ZIP_MAGIC = b"PK\x05\x06"

PathOrFile = str | os.PathLike | BinaryIO


class UnsupportedValueError(GradscopeError, TypeError):
    """``save`` was given a value it cannot store without pickle."""


class NotAGradscopeFileError(GradscopeError, ValueError):
    """``load`` was given something that is not a readable gradscope/numpy ``.npz`` file."""


# ---------------------------------------------------------------- saving
class _Encoder:
    """Turns a tree into JSON-ready data, collecting its arrays under unique member names."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def _name(self, path: tuple) -> str:
        name = ".".join(str(part) for part in path)
        if not name or name.startswith("__") or name in self.arrays or "/" in name or "\\" in name:
            name = f"__array_{len(self.arrays)}__"
        return name

    def _store(self, array: np.ndarray, path: tuple) -> str:
        if array.dtype.kind not in "biuf":
            raise UnsupportedValueError(f"gs.save cannot store an array of dtype {array.dtype} at {_where(path)}")
        name = self._name(path)
        self.arrays[name] = array
        return name

    def encode(self, value: Any, path: tuple) -> Any:
        if isinstance(value, np.generic):
            return {"numpy_scalar": self._store(np.asarray(value), path)}
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return value if math.isfinite(value) else {"float": repr(value)}
        if isinstance(value, Tensor):
            entry: dict[str, Any] = {"tensor": self._store(value._data, path)}
            if isinstance(value, Parameter):
                entry["parameter"] = True
            if value.requires_grad:
                entry["requires_grad"] = True
            return entry
        if isinstance(value, np.ndarray):
            return {"ndarray": self._store(value, path)}
        if isinstance(value, dict):
            items = [[self.encode_key(key, path), self.encode(item, path + (key,))] for key, item in value.items()]
            return {"dict": items, "ordered": isinstance(value, OrderedDict)}
        if isinstance(value, tuple):
            return {"tuple": [self.encode(item, path + (i,)) for i, item in enumerate(value)]}
        if isinstance(value, list):
            return {"list": [self.encode(item, path + (i,)) for i, item in enumerate(value)]}
        raise UnsupportedValueError(f"gs.save cannot store a value of type {type(value).__module__}."
                                    f"{type(value).__qualname__} at {_where(path)}: supported are tensors, numpy "
                                    "arrays, dicts, lists, tuples, str, int, float, bool and None")

    def encode_key(self, key: Any, path: tuple) -> Any:
        if isinstance(key, (str, int, float, bool)) or key is None:
            return self.encode(key, path)
        if isinstance(key, tuple):
            return {"tuple": [self.encode_key(k, path) for k in key]}
        raise UnsupportedValueError(f"gs.save cannot store a dict key of type {type(key).__qualname__} "
                                    f"at {_where(path)}")


def _where(path: tuple) -> str:
    return "the top level" if not path else "key path " + "".join(f"[{part!r}]" for part in path)


def save(obj: Any, f: PathOrFile, **_torch_options: Any) -> None:
    """Save ``obj`` (a state dict, an optimizer state dict, or any tree of tensors, numpy
    arrays, dicts, lists, tuples, str, int, float, bool and None) to a ``.npz`` file.

    Args:
        obj: the object to save.
        f: a path (written exactly there, whatever its suffix) or a binary file object.

    Raises:
        UnsupportedValueError: ``obj`` holds a value that cannot be stored without pickle
            (the message names its key path).
    """
    encoder = _Encoder()
    root = encoder.encode(obj, ())
    meta = json.dumps({"format": _FORMAT, "version": _VERSION, "root": root}, allow_nan=False)
    members = dict(encoder.arrays)
    members[_META] = np.frombuffer(meta.encode("utf-8"), dtype=np.uint8)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as handle:
            np.savez(handle, **members)
    else:
        np.savez(f, **members)


# ---------------------------------------------------------------- loading
def _describe(f: PathOrFile) -> str:
    return repr(os.fspath(f)) if isinstance(f, (str, os.PathLike)) else "the given file object"


def _read_bytes(f: PathOrFile) -> bytes:
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as handle:
            return handle.read()
    data = f.read()
    if not isinstance(data, bytes):
        raise NotAGradscopeFileError("gs.load needs a binary file object (open the file with 'rb')")
    return data


def _check_members(names: list[str], where: str) -> None:
    if any(name.endswith("data.pkl") for name in names):
        raise NotAGradscopeFileError(
            f"{where} looks like a PyTorch checkpoint (torch.save); gradscope never unpickles. Convert it once with "
            "torch: np.savez(path, **{k: v.numpy() for k, v in torch.load(...).items()})")
    odd = [name for name in names if not name.endswith(".npy")]
    if odd:
        raise NotAGradscopeFileError(f"{where} is a zip archive but not a .npz file (unexpected member {odd[0]!r})")


def load(f: PathOrFile, map_location: Any = None, *, weights_only: bool | None = None, **_torch_options: Any) -> Any:
    """Load an object saved by ``save`` (or a plain ``.npz`` of arrays) without executing code.

    Args:
        f: a path or a binary file object.
        map_location: accepted for PyTorch compatibility; ignored (everything is on the CPU).
        weights_only: accepted for PyTorch compatibility; loading is always weights-only.

    Returns:
        The saved object; a plain ``.npz`` gives an ``OrderedDict`` of tensors.

    Raises:
        NotAGradscopeFileError: the file is not a gradscope/numpy ``.npz`` file, holds pickled
            (object) arrays, or its structure is malformed.
    """
    where = _describe(f)
    data = _read_bytes(f)
    if not data.startswith((_ZIP_MAGIC, _EMPTY_ZIP_MAGIC)):
        raise NotAGradscopeFileError(f"{where} is not a gradscope file: expected a .npz archive written by "
                                     "gs.save or numpy.savez")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            _check_members(archive.namelist(), where)
        npz = np.load(io.BytesIO(data), allow_pickle=False)
        arrays = {name: npz[name] for name in npz.files}
    except NotAGradscopeFileError:
        raise
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise NotAGradscopeFileError(f"{where} could not be read as a .npz file without pickle: {exc}") from exc
    if _META not in arrays:
        return OrderedDict((name, _tensor(array, name, where)) for name, array in arrays.items())
    meta = arrays.pop(_META)
    try:
        header = json.loads(bytes(meta.astype(np.uint8)).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise NotAGradscopeFileError(f"{where}: its {_META} entry is not valid JSON") from exc
    if not isinstance(header, dict) or header.get("format") != _FORMAT or "root" not in header:
        raise NotAGradscopeFileError(f"{where}: its {_META} entry is not a gradscope header")
    if header.get("version") != _VERSION:
        raise NotAGradscopeFileError(f"{where} was written by format version {header.get('version')!r}; this "
                                     f"gradscope reads version {_VERSION}")
    try:
        return _Decoder(arrays, where).decode(header["root"])
    except RecursionError as exc:
        raise NotAGradscopeFileError(f"{where}: the saved structure is nested too deeply") from exc


def _tensor(array: np.ndarray, name: str, where: str) -> Tensor:
    try:
        dtypes.from_numpy_dtype(array.dtype)
    except (TypeError, ValueError, KeyError) as exc:
        raise NotAGradscopeFileError(f"{where}: array {name!r} has dtype {array.dtype}, which gradscope "
                                     "tensors do not support") from exc
    return Tensor._make(array)


class _Decoder:
    """Rebuilds the tree from the JSON header, accepting only the node kinds ``save`` writes."""

    def __init__(self, arrays: dict[str, np.ndarray], where: str) -> None:
        self.arrays = arrays
        self.where = where

    def _fail(self, message: str) -> NotAGradscopeFileError:
        return NotAGradscopeFileError(f"{self.where}: malformed gradscope file ({message})")

    def _array(self, name: Any) -> np.ndarray:
        if not isinstance(name, str) or name not in self.arrays:
            raise self._fail(f"missing array {name!r}")
        return self.arrays[name]

    def decode(self, node: Any) -> Any:
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            raise self._fail("bare JSON list")
        if not isinstance(node, dict) or len(node) == 0:
            raise self._fail(f"unexpected node {node!r}")
        if "tensor" in node:
            tensor = _tensor(self._array(node["tensor"]), node["tensor"], self.where)
            requires_grad = bool(node.get("requires_grad", False))
            if node.get("parameter"):
                return Parameter(tensor, requires_grad=requires_grad)
            if requires_grad:
                tensor.requires_grad_(True)
            return tensor
        if "ndarray" in node:
            return self._array(node["ndarray"])
        if "numpy_scalar" in node:
            return self._array(node["numpy_scalar"])[()]
        if "float" in node:
            if node["float"] not in ("nan", "inf", "-inf"):
                raise self._fail(f"bad float {node['float']!r}")
            return float(node["float"])
        if "tuple" in node:
            return tuple(self.decode(item) for item in self._items(node["tuple"]))
        if "list" in node:
            return [self.decode(item) for item in self._items(node["list"])]
        if "dict" in node:
            result: dict = OrderedDict() if node.get("ordered") else {}
            for pair in self._items(node["dict"]):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise self._fail("dict entry is not a [key, value] pair")
                key, value = self.decode(pair[0]), self.decode(pair[1])
                try:
                    result[key] = value
                except TypeError as exc:
                    raise self._fail(f"unhashable dict key {key!r}") from exc
            return result
        raise self._fail(f"unknown node kind {sorted(node)!r}")

    def _items(self, items: Any) -> list:
        if not isinstance(items, list):
            raise self._fail("container entries are not a list")
        return items
