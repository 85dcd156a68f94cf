"""Snapshots of one training step and replay bundles (``.npz`` without pickle).

A snapshot holds everything needed to run a step again exactly: parameter and buffer values,
the optimizer state, the batch and the random generator state (taken after ``batch(step)`` ran,
right before the forward pass, so dropout masks repeat), for either engine.

A bundle is one ``.npz`` file: arrays under ``param/<name>``, ``buffer/<name>``, ``optim/<n>``,
``batch/<n>``, ``rng`` (the CPU generator) and ``rng/<device>`` (other devices' generators),
plus ``meta``, a JSON document stored as a uint8 array, that describes the structure of the
batch and the optimizer state and names the engine. It loads with ``allow_pickle=False``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gradscope._tool.files import atomic_write
from gradscope.engines import Engine, engine_of, get_engine
from gradscope.errors import GradscopeError

BUNDLE_FORMAT = "gradscope.bundle/1"


class BundleError(GradscopeError):
    """A replay bundle cannot be written, read, or does not fit the model."""


@dataclass
class Snapshot:
    """The state before one training step (see the module docstring).

    A captured snapshot holds copies of the engine's tensors, on their devices (capturing copies
    nothing to the host); a loaded one holds numpy arrays, which :meth:`restore` copies into the
    model's tensors. ``optimizer_state`` and ``batch`` are the live structures (tensors copied)
    after :meth:`capture`, and ``(spec, arrays)`` pairs after :meth:`load`.
    """

    step: int
    parameters: dict[str, Any]
    buffers: dict[str, Any]
    optimizer_state: Any
    batch: Any
    rng_state: dict[str, np.ndarray]
    model: str = ""
    engine: str = "gradscope"
    encoded: bool = False
    named: Any = field(default=None, repr=False, compare=False)  # (the ``named`` it was captured with)

    @classmethod
    def capture(cls, step: int, model: Any, optimizer: Any, batch_raw: Any, model_label: str = "",
                engine: Engine | None = None, *, named: tuple[list, list] | None = None,
                reuse: "Snapshot | None" = None) -> "Snapshot":
        """Copy the current state of ``model``, ``optimizer``, the batch and the generators.

        Args:
            named: ``(list(model.named_parameters()), list(model.named_buffers()))``, when the
                caller keeps them, unchanged (a training loop captures every step): a ``reuse``
                captured with the same object is known to fit without comparing names.
            reuse: an older snapshot of the same model, no longer needed: its parameter and
                buffer copies are overwritten instead of allocating new ones.
        """
        engine = engine or engine_of(model)
        parameters, buffers = named or (list(model.named_parameters()), list(model.named_buffers()))
        fits = reuse is not None and not reuse.encoded and reuse.engine == engine.name and (
            (named is not None and reuse.named is named)  # (the same lists of names: a training loop's)
            or (list(reuse.parameters) == [name for name, _ in parameters]
                and list(reuse.buffers) == [name for name, _ in buffers]))
        with engine.no_grad():
            return cls(
                step=step,
                parameters=_copies(engine, parameters, reuse.parameters if fits else None),
                buffers=_copies(engine, buffers, reuse.buffers if fits else None),
                optimizer_state=_clone(engine, optimizer.state_dict()),
                batch=_clone(engine, batch_raw),
                rng_state=engine.get_rng_state(),
                model=model_label,
                engine=engine.name,
                named=named,
            )

    def restore(self, model: Any, optimizer: Any | None) -> Any:
        """Put the parameters, buffers, optimizer state and generators back; return the batch.

        Parameter gradients are reset to None.

        Raises:
            BundleError: the snapshot's parameter names or shapes do not match ``model``, or it
                was taken with another engine.
        """
        engine = engine_of(model)
        if engine is None or engine.name != self.engine:
            raise BundleError(f"the bundle was written by a {self.engine} model; this model runs on "
                              f"{engine.name if engine is not None else 'no known engine'}")
        _copy_into(engine, "parameter", dict(model.named_parameters()), self.parameters)
        _copy_into(engine, "buffer", dict(model.named_buffers()), self.buffers)
        model.zero_grad(set_to_none=True)
        if optimizer is not None:
            try:
                optimizer.load_state_dict(self._value(engine, self.optimizer_state))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise BundleError(f"the bundle's optimizer state does not fit the model's optimizer "
                                  f"({type(optimizer).__name__}): {exc}") from exc
        engine.set_rng_state(self.rng_state)
        return self._value(engine, self.batch)

    def _value(self, engine: Engine, stored: Any) -> Any:
        if self.encoded:
            spec, arrays = stored
            return _decode(engine, spec, arrays)
        return _clone(engine, stored)

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        """Write the snapshot as a replay bundle (``extra`` goes into the JSON metadata)."""
        engine = get_engine(self.engine)
        arrays: dict[str, np.ndarray] = {}
        arrays.update({f"param/{name}": _array(engine, value) for name, value in self.parameters.items()})
        arrays.update({f"buffer/{name}": _array(engine, value) for name, value in self.buffers.items()})
        if self.encoded:
            (optimizer_spec, optimizer_arrays), (batch_spec, batch_arrays) = self.optimizer_state, self.batch
            arrays.update(optimizer_arrays)
            arrays.update(batch_arrays)
        else:
            optimizer_spec = _encode(engine, self.optimizer_state, "optim", arrays)
            batch_spec = _encode(engine, self.batch, "batch", arrays)
        arrays["rng"] = self.rng_state["cpu"]
        arrays.update({f"rng/{device}": value for device, value in self.rng_state.items() if device != "cpu"})
        meta = {"format": BUNDLE_FORMAT, "step": self.step, "model": self.model, "engine": self.engine,
                "optimizer_state": optimizer_spec, "batch": batch_spec, **(extra or {})}
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
        try:
            atomic_write(path, lambda file: np.savez_compressed(file, **arrays))
        except OSError as exc:
            raise BundleError(f"cannot write the replay bundle {path}: {exc.strerror or exc}") from exc

    @classmethod
    def load(cls, path: str | Path) -> tuple["Snapshot", dict[str, Any]]:
        """Read a bundle written by :meth:`save`; returns the snapshot and the metadata.

        Raises:
            BundleError: the file is missing or malformed (checked by :mod:`.bundle_format`).
        """
        from gradscope.monitor.bundle_format import read_bundle

        arrays, meta = read_bundle(path)
        rng_state = {"cpu": arrays["rng"]}
        rng_state.update({key[4:]: value for key, value in arrays.items() if key.startswith("rng/")})
        snapshot = cls(
            step=int(meta["step"]),
            parameters={key[6:]: value for key, value in arrays.items() if key.startswith("param/")},
            buffers={key[7:]: value for key, value in arrays.items() if key.startswith("buffer/")},
            optimizer_state=(meta["optimizer_state"],
                             {key: value for key, value in arrays.items() if key.startswith("optim/")}),
            batch=(meta["batch"], {key: value for key, value in arrays.items() if key.startswith("batch/")}),
            rng_state=rng_state,
            model=meta.get("model", ""),
            engine=meta.get("engine", "gradscope"),
            encoded=True,
        )
        return snapshot, meta


def _copy_into(engine: Engine, kind: str, targets: dict[str, Any], values: dict[str, Any]) -> None:
    if set(targets) != set(values):
        missing = sorted(set(values) - set(targets))
        unexpected = sorted(set(targets) - set(values))
        raise BundleError(f"the bundle does not match the model: {kind}s only in the bundle: "
                          f"{missing or 'none'}; only in the model: {unexpected or 'none'}")
    for name, tensor in targets.items():
        value = values[name]
        if tuple(tensor.shape) != tuple(value.shape):
            raise BundleError(f"the bundle does not match the model: {kind} {name} has shape "
                              f"{tuple(value.shape)} in the bundle and {tuple(tensor.shape)} in the model")
        engine.copy_into(tensor, value)


def _array(engine: Engine, value: Any) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else np.array(engine.to_numpy(value))


_SCALARS = (int, float, bool, str, type(None))
_SCALAR_TYPES = frozenset(_SCALARS)


def _copies(engine: Engine, named: list[tuple[str, Any]], into: dict[str, Any] | None) -> dict[str, Any]:
    """``name -> copy`` of the tensors ``named``; written into the copies of ``into`` (an older
    snapshot's, of the same names) when given, which is then the dict returned."""
    tensors = [tensor for _, tensor in named]
    if into is not None:
        engine.clone_all(tensors, list(into.values()))
        return into  # (the same names and the same copy objects, rewritten)
    return dict(zip((name for name, _ in named), engine.clone_all(tensors)))


def _clone(engine: Engine, value: Any) -> Any:
    """``value`` with every tensor replaced by a detached copy (``requires_grad`` kept)."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, list) and _SCALAR_TYPES.issuperset(map(type, value)):  # (e.g. a group's parameter indices)
        return list(value)
    if engine.is_tensor(value):
        copy = engine.clone(value)
        return copy.requires_grad_() if value.requires_grad else copy
    if isinstance(value, tuple):
        return tuple(_clone(engine, item) for item in value)
    if isinstance(value, list):
        return [_clone(engine, item) for item in value]
    if isinstance(value, dict):
        return {key: _clone(engine, item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return np.array(value)
    return value


def _encode(engine: Engine, value: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """A JSON description of ``value``; tensors and arrays go into ``arrays`` (copied)."""
    if engine.is_tensor(value):
        key = _next_key(prefix, arrays)
        arrays[key] = np.array(engine.to_numpy(value))
        spec = {"tensor": key, "requires_grad": bool(value.requires_grad), "dtype": engine.dtype_name(value)}
        device = engine.describe_device(value)
        if device is not None:
            spec["device"] = device
        return spec
    if isinstance(value, np.ndarray):
        key = _next_key(prefix, arrays)
        arrays[key] = np.array(value)
        return {"array": key}
    if isinstance(value, (tuple, list)):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(engine, item, prefix, arrays)
                                                                   for item in value]}
    if isinstance(value, dict):
        return {"dict": [[_encode(engine, key, prefix, arrays), _encode(engine, item, prefix, arrays)]
                         for key, item in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise BundleError(f"cannot store a {type(value).__name__} in a replay bundle "
                      "(only tensors, arrays, numbers, strings, tuples, lists and dicts)")


def _next_key(prefix: str, arrays: dict[str, np.ndarray]) -> str:
    """The next free member name under ``prefix`` (``batch/0``, ``batch/1``, ...)."""
    return f"{prefix}/{sum(1 for key in arrays if key.startswith(prefix + '/'))}"


def _decode(engine: Engine, spec: Any, arrays: dict[str, np.ndarray]) -> Any:
    if "tensor" in spec:
        tensor = engine.from_numpy(arrays[spec["tensor"]], device=spec.get("device"), dtype=spec.get("dtype"))
        return tensor.requires_grad_() if spec["requires_grad"] else tensor
    if "array" in spec:
        return np.array(arrays[spec["array"]])
    if "tuple" in spec:
        return tuple(_decode(engine, item, arrays) for item in spec["tuple"])
    if "list" in spec:
        return [_decode(engine, item, arrays) for item in spec["list"]]
    if "dict" in spec:
        return {_decode(engine, key, arrays): _decode(engine, item, arrays) for key, item in spec["dict"]}
    return spec["value"]
