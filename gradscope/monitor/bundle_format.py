"""Reading replay bundles defensively: every malformed file is one :class:`BundleError` line.

A bundle comes from a file someone hands you, so nothing in it is trusted. Before any array is
read, the zip directory is checked (member names, count, declared sizes against
:data:`MAX_TOTAL_BYTES`) and every member's ``.npy`` header is parsed and checked (a plain
numeric dtype, a shape whose size agrees with the declared size). Arrays are then read without
pickle, with the zip CRC verified. The JSON metadata is parsed with a size and nesting limit,
and its structure checked against the arrays: the step, the learning rate, clipping, the batch
(``(inputs, targets)``), the optimizer state and the random generator state.
"""
from __future__ import annotations

import json
import math
import zipfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from gradscope.monitor.snapshot import BUNDLE_FORMAT, BundleError

__all__ = ["read_bundle", "MAX_TOTAL_BYTES", "MAX_MEMBERS", "MAX_META_BYTES", "MAX_DEPTH"]

MAX_TOTAL_BYTES = 8 * 2 ** 30   # sum of the declared uncompressed sizes
MAX_MEMBERS = 100_000
MAX_META_BYTES = 64 * 2 ** 20
MAX_RNG_BYTES = 2 ** 20
MAX_DEPTH = 64                  # nesting of the metadata's batch and optimizer descriptions
_NUMERIC_KINDS = "biuf"         # bool, signed and unsigned integers, floating point
_PREFIXES = ("param/", "buffer/", "optim/", "batch/")
_SPEC_KINDS = ("tensor", "array", "tuple", "list", "dict", "value")
_TENSOR_FIELDS = ("requires_grad", "dtype", "device")   # beside "tensor": how to rebuild it


def read_bundle(path: str | Path, label: str | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays (``meta`` removed) and the checked metadata of the bundle at ``path``.

    Args:
        path: the bundle file.
        label: how messages name the file (default: ``path``).

    Raises:
        BundleError: the file is missing or malformed; the one-line message says how.
    """
    name = label if label is not None else str(path)
    file = Path(path)
    if not file.exists():
        raise BundleError(f"{name}: replay bundle not found")
    if file.is_dir():
        raise BundleError(f"{name}: is a directory, not a replay bundle")
    if not file.is_file():
        raise BundleError(f"{name}: not a regular file (a device or a pipe), not a replay bundle")
    try:
        arrays = _read_arrays(file, name)
    except BundleError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, OSError, NotImplementedError,
            RuntimeError) as exc:
        raise BundleError(f"{name}: not a readable gradscope replay bundle ({_reason(exc)})") from exc
    meta = _read_meta(arrays.pop("meta", None), name)
    _check_meta(meta, arrays, name)
    return arrays, meta


# ------------------------------------------------------------------------------------ the zip file
def _read_arrays(file: Path, name: str) -> dict[str, np.ndarray]:
    if not zipfile.is_zipfile(file):
        with open(file, "rb") as handle:
            start = handle.read(6)
        what = "an empty file" if not start else "a single .npy array" if start == b"\x93NUMPY" else "not a zip archive"
        raise BundleError(f"{name}: not a gradscope replay bundle ({what}; expected the .npz written by watch)")
    with zipfile.ZipFile(file) as archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise BundleError(f"{name}: {len(members)} members; a replay bundle has at most {MAX_MEMBERS}")
        total = 0
        for member in members:
            if not member.filename.endswith(".npy") or member.is_dir():
                raise BundleError(f"{name}: unexpected member {member.filename!r} (a bundle holds only .npy arrays)")
            total += member.file_size
        if total > MAX_TOTAL_BYTES:
            raise BundleError(f"{name}: its members declare {total} bytes uncompressed, more than the limit of "
                              f"{MAX_TOTAL_BYTES} bytes")
        arrays: dict[str, np.ndarray] = {}
        for member in members:
            key = member.filename[:-4]
            if key in arrays:
                raise BundleError(f"{name}: member {key!r} appears twice")
            with archive.open(member) as stream:
                arrays[key] = _read_member(stream, member, key, name)
    return arrays


def _read_member(stream: BinaryIO, member: zipfile.ZipInfo, key: str, name: str) -> np.ndarray:
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
    else:
        raise BundleError(f"{name}: member {key!r} has an unsupported .npy version {version}")
    if dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None or dtype.hasobject or dtype.subdtype is not None:
        raise BundleError(f"{name}: member {key!r} holds {dtype} values; a bundle holds only numbers")
    count = math.prod(shape)
    size = count * dtype.itemsize
    header = stream.tell() if stream.seekable() else None
    if size > MAX_TOTAL_BYTES or (header is not None and header + size != member.file_size):
        raise BundleError(f"{name}: member {key!r} declares shape {tuple(shape)} ({size} bytes) but the archive "
                          f"says it holds {member.file_size} bytes")
    data = stream.read(size)
    if len(data) != size or stream.read(1):
        raise BundleError(f"{name}: member {key!r} is truncated or has trailing data")
    array = np.frombuffer(data, dtype=dtype, count=count)
    return array.reshape(shape, order="F" if fortran else "C").copy()


# ------------------------------------------------------------------------------------ the metadata
def _read_meta(raw: np.ndarray | None, name: str) -> dict[str, Any]:
    if raw is None:
        raise BundleError(f"{name}: not a gradscope replay bundle (no metadata)")
    if raw.dtype != np.uint8 or raw.ndim != 1 or raw.size > MAX_META_BYTES:
        raise BundleError(f"{name}: the metadata is not a UTF-8 JSON document of at most {MAX_META_BYTES} bytes")
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except RecursionError:
        raise BundleError(f"{name}: the metadata is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise BundleError(f"{name}: the metadata is not valid UTF-8 JSON ({_reason(exc)})") from None
    if not isinstance(meta, dict):
        raise BundleError(f"{name}: the metadata is a JSON {type(meta).__name__}; expected an object")
    if meta.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{name}: unsupported bundle format {meta.get('format')!r}; expected {BUNDLE_FORMAT}")
    return meta


def _check_meta(meta: dict[str, Any], arrays: dict[str, np.ndarray], name: str) -> None:
    step = meta.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise BundleError(f"{name}: meta step is {_show(step)}; expected a whole number >= 0")
    if not isinstance(meta.get("model", ""), str):
        raise BundleError(f"{name}: meta model is {_show(meta.get('model'))}; expected a string")
    for key, optional in (("lr", False), ("clip", True)):
        value = meta.get(key)
        if key not in meta or (value is None and optional):
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise BundleError(f"{name}: meta {key} is {_show(value)}; expected a finite number >= 0")
    for key in ("optimizer_state", "batch"):
        if key not in meta:
            raise BundleError(f"{name}: meta has no {key}")
        _check_spec(meta[key], arrays, name, key, 0)
    batch = meta["batch"]
    items = batch.get("tuple", batch.get("list"))
    if items is None or len(items) != 2:
        count = f"{len(items)} values" if items is not None else f"a {next(iter(batch))}"
        raise BundleError(f"{name}: meta batch holds {count}; expected (inputs, targets)")
    if not isinstance(meta["optimizer_state"].get("dict"), list):
        raise BundleError(f"{name}: meta optimizer_state is not a dict (an optimizer's state_dict())")
    for key in arrays:
        if key != "rng" and not key.startswith(_PREFIXES + ("rng/",)):
            raise BundleError(f"{name}: unexpected member {key!r}")
    _check_rng(arrays.get("rng"), meta, name)


def _check_spec(spec: Any, arrays: dict[str, np.ndarray], name: str, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise BundleError(f"{name}: meta {where} is nested more than {MAX_DEPTH} levels deep")
    kinds = [kind for kind in _SPEC_KINDS if isinstance(spec, dict) and kind in spec]
    extra = set(spec) - {*kinds, *_TENSOR_FIELDS} if isinstance(spec, dict) else set()
    if len(kinds) != 1 or extra:
        raise BundleError(f"{name}: meta {where} holds {_show(spec, 60)}; expected one of "
                          f"{{{', '.join(_SPEC_KINDS)}}}")
    kind, value = kinds[0], spec[kinds[0]]
    if kind in ("tensor", "array"):
        if not isinstance(value, str) or value not in arrays or not value.startswith(("batch/", "optim/")):
            raise BundleError(f"{name}: meta {where} refers to {_show(value)}, which is not a member of the bundle")
        if kind == "tensor":
            requires_grad = spec.get("requires_grad")
            if not isinstance(requires_grad, bool):
                raise BundleError(f"{name}: meta {where} has requires_grad {_show(requires_grad)}; expected true/false")
            for field in ("dtype", "device"):
                if field in spec and not isinstance(spec[field], str):
                    raise BundleError(f"{name}: meta {where} has {field} {_show(spec[field])}; expected a string")
            if requires_grad and arrays[value].dtype.kind != "f":
                raise BundleError(f"{name}: meta {where}: {value} holds {arrays[value].dtype} values and cannot "
                                  "require grad")
    elif kind in ("tuple", "list"):
        if not isinstance(value, list):
            raise BundleError(f"{name}: meta {where} {kind} is {_show(value)}; expected a list")
        for index, item in enumerate(value):
            _check_spec(item, arrays, name, f"{where}[{index}]", depth + 1)
    elif kind == "dict":
        if not isinstance(value, list):
            raise BundleError(f"{name}: meta {where} dict is {_show(value)}; expected a list of pairs")
        for index, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != 2:
                raise BundleError(f"{name}: meta {where} dict entry {index} is {_show(pair, 60)}; expected a pair")
            key = pair[0]
            if not isinstance(key, dict) or "value" not in key or isinstance(key.get("value"), (list, dict)):
                raise BundleError(f"{name}: meta {where} dict key {index} is {_show(key, 60)}; expected a plain value")
            _check_spec(key, arrays, name, f"{where} key {index}", depth + 1)
            _check_spec(pair[1], arrays, name, f"{where}[{_show(key['value'])}]", depth + 1)
    elif value is not None and not isinstance(value, (bool, int, float, str)):
        raise BundleError(f"{name}: meta {where} value is {_show(value, 60)}; expected a number, string or null")


def _check_rng(rng: np.ndarray | None, meta: dict[str, Any], name: str) -> None:
    if rng is None:
        raise BundleError(f"{name}: the random generator state (member 'rng') is missing")
    if rng.dtype != np.uint8 or rng.ndim != 1 or not 0 < rng.size <= MAX_RNG_BYTES:
        raise BundleError(f"{name}: member 'rng' is not a random generator state "
                          f"(a 1-D uint8 array of at most {MAX_RNG_BYTES} bytes)")
    if meta.get("engine", "gradscope") != "gradscope":
        return
    try:
        state = json.loads(rng.tobytes().decode("utf-8"))
        np.random.PCG64().state = state
    except (RecursionError, UnicodeDecodeError, ValueError, TypeError, KeyError) as exc:
        raise BundleError(f"{name}: member 'rng' is not a gradscope random generator state ({_reason(exc)})") from None


def _show(value: Any, limit: int = 40) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
