"""Snapshots of one training step and replay bundles (``.npz`` without pickle).

A snapshot holds everything needed to run a step again exactly: parameter and buffer values,
the optimizer state, the batch and the random generator state (taken after ``batch(step)`` ran,
right before the forward pass, so dropout masks repeat).

A bundle is one ``.npz`` file: arrays under ``param/<name>``, ``buffer/<name>``, ``optim/<n>``,
``batch/<n>`` and ``rng``, plus ``meta``, a JSON document stored as a uint8 array, that describes
the structure of the batch and the optimizer state. It loads with ``allow_pickle=False``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gradscope.errors import GradscopeError
from gradscope.utils.files import atomic_write

BUNDLE_FORMAT = "gradscope.bundle/1"


class BundleError(GradscopeError):
    """A replay bundle cannot be written, read, or does not fit the model."""


@dataclass
class Snapshot:
    """The state before one training step (see the module docstring)."""

    step: int
    parameters: dict[str, np.ndarray]
    buffers: dict[str, np.ndarray]
    optimizer_state: Any
    optimizer_arrays: dict[str, np.ndarray]
    batch: Any
    batch_arrays: dict[str, np.ndarray]
    rng_state: np.ndarray
    model: str = ""

    @classmethod
    def capture(cls, step: int, model: Any, optimizer: Any, batch_raw: Any, model_label: str = "") -> "Snapshot":
        """Copy the current state of ``model``, ``optimizer``, the batch and the generator."""
        import gradscope as gs

        optimizer_arrays: dict[str, np.ndarray] = {}
        batch_arrays: dict[str, np.ndarray] = {}
        return cls(
            step=step,
            parameters={name: np.array(p.detach().numpy()) for name, p in model.named_parameters()},
            buffers={name: np.array(b.detach().numpy()) for name, b in model.named_buffers()},
            optimizer_state=_encode(optimizer.state_dict(), "optim", optimizer_arrays),
            optimizer_arrays=optimizer_arrays,
            batch=_encode(batch_raw, "batch", batch_arrays),
            batch_arrays=batch_arrays,
            rng_state=np.array(gs.get_rng_state().numpy()),
            model=model_label,
        )

    def restore(self, model: Any, optimizer: Any | None) -> Any:
        """Put the parameters, buffers, optimizer state and generator back; return the batch.

        Parameter gradients are reset to None.

        Raises:
            BundleError: the snapshot's parameter names or shapes do not match ``model``.
        """
        import gradscope as gs

        _copy_into("parameter", dict(model.named_parameters()), self.parameters)
        _copy_into("buffer", dict(model.named_buffers()), self.buffers)
        model.zero_grad(set_to_none=True)
        if optimizer is not None:
            try:
                optimizer.load_state_dict(_decode(self.optimizer_state, self.optimizer_arrays))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise BundleError(f"the bundle's optimizer state does not fit the model's optimizer "
                                  f"({type(optimizer).__name__}): {exc}") from exc
        gs.set_rng_state(gs.tensor(self.rng_state))
        return _decode(self.batch, self.batch_arrays)

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        """Write the snapshot as a replay bundle (``extra`` goes into the JSON metadata)."""
        arrays: dict[str, np.ndarray] = {}
        arrays.update({f"param/{name}": value for name, value in self.parameters.items()})
        arrays.update({f"buffer/{name}": value for name, value in self.buffers.items()})
        arrays.update(self.optimizer_arrays)
        arrays.update(self.batch_arrays)
        arrays["rng"] = self.rng_state
        meta = {"format": BUNDLE_FORMAT, "step": self.step, "model": self.model,
                "optimizer_state": self.optimizer_state, "batch": self.batch, **(extra or {})}
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
        snapshot = cls(
            step=int(meta["step"]),
            parameters={key[6:]: value for key, value in arrays.items() if key.startswith("param/")},
            buffers={key[7:]: value for key, value in arrays.items() if key.startswith("buffer/")},
            optimizer_state=meta["optimizer_state"],
            optimizer_arrays={key: value for key, value in arrays.items() if key.startswith("optim/")},
            batch=meta["batch"],
            batch_arrays={key: value for key, value in arrays.items() if key.startswith("batch/")},
            rng_state=arrays["rng"],
            model=meta.get("model", ""),
        )
        return snapshot, meta


def _copy_into(kind: str, targets: dict[str, Any], values: dict[str, np.ndarray]) -> None:
    import gradscope as gs

    if set(targets) != set(values):
        missing = sorted(set(values) - set(targets))
        unexpected = sorted(set(targets) - set(values))
        raise BundleError(f"the bundle does not match the model: {kind}s only in the bundle: "
                          f"{missing or 'none'}; only in the model: {unexpected or 'none'}")
    with gs.no_grad():
        for name, tensor in targets.items():
            value = values[name]
            if tuple(tensor.shape) != value.shape:
                raise BundleError(f"the bundle does not match the model: {kind} {name} has shape "
                                  f"{value.shape} in the bundle and {tuple(tensor.shape)} in the model")
            tensor.copy_(gs.tensor(value))


def _encode(value: Any, prefix: str, arrays: dict[str, np.ndarray]) -> Any:
    """A JSON description of ``value``; tensors and arrays go into ``arrays`` (copied)."""
    if hasattr(value, "detach") and hasattr(value, "shape"):
        key = f"{prefix}/{len(arrays)}"
        arrays[key] = np.array(value.detach().numpy())
        return {"tensor": key, "requires_grad": bool(value.requires_grad)}
    if isinstance(value, np.ndarray):
        key = f"{prefix}/{len(arrays)}"
        arrays[key] = np.array(value)
        return {"array": key}
    if isinstance(value, (tuple, list)):
        return {"tuple" if isinstance(value, tuple) else "list": [_encode(item, prefix, arrays) for item in value]}
    if isinstance(value, dict):
        return {"dict": [[_encode(key, prefix, arrays), _encode(item, prefix, arrays)]
                         for key, item in value.items()]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise BundleError(f"cannot store a {type(value).__name__} in a replay bundle "
                      "(only tensors, arrays, numbers, strings, tuples, lists and dicts)")


def _decode(spec: Any, arrays: dict[str, np.ndarray]) -> Any:
    import gradscope as gs

    if "tensor" in spec:
        tensor = gs.tensor(arrays[spec["tensor"]])
        return tensor.requires_grad_() if spec["requires_grad"] else tensor
    if "array" in spec:
        return np.array(arrays[spec["array"]])
    if "tuple" in spec:
        return tuple(_decode(item, arrays) for item in spec["tuple"])
    if "list" in spec:
        return [_decode(item, arrays) for item in spec["list"]]
    if "dict" in spec:
        return {_decode(key, arrays): _decode(item, arrays) for key, item in spec["dict"]}
    return spec["value"]
