"""Tensor creation and gradscope's own random generator."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gradscope.autograd import dtypes
from gradscope.autograd.tensor import _DEFAULT_FLOAT, Tensor, as_array


def get_default_dtype() -> dtypes.dtype:
    return dtypes.from_numpy_dtype(_DEFAULT_FLOAT[0])


def set_default_dtype(d: Any) -> None:
    _DEFAULT_FLOAT[0] = dtypes.to_numpy_dtype(d)


def _finish(arr: np.ndarray, requires_grad: bool) -> Tensor:
    t = Tensor._make(arr)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data`` (list, scalar, numpy array or Tensor)."""
    return _finish(as_array(data, dtype), requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Like ``tensor`` but shares memory with a numpy array or returns a Tensor as is."""
    if isinstance(data, Tensor) and (dtype is None or data.dtype is dtypes.from_numpy_dtype(dtypes.to_numpy_dtype(dtype))):
        return data
    return Tensor._make(as_array(data, dtype, copy=False))


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``array``."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    dtypes.from_numpy_dtype(array.dtype)
    return Tensor._make(array)


def _shape(size: Sequence) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def _float_dtype(dtype: Any) -> np.dtype:
    return _DEFAULT_FLOAT[0] if dtype is None else dtypes.to_numpy_dtype(dtype)


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.zeros(_shape(size), dtype=_float_dtype(dtype)), requires_grad)


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.ones(_shape(size), dtype=_float_dtype(dtype)), requires_grad)


def empty(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.zeros(_shape(size), dtype=_float_dtype(dtype)), requires_grad)


def full(size: Sequence, fill_value: Any, *, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    if dtype is None:
        dtype = as_array(fill_value, None).dtype
    return _finish(np.full(_shape((size,)), fill_value, dtype=dtypes.to_numpy_dtype(dtype)), requires_grad)


def zeros_like(t: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.zeros(t.data.shape, dtype=t.data.dtype if dtype is None else dtypes.to_numpy_dtype(dtype)),
                   requires_grad)


def ones_like(t: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.ones(t.data.shape, dtype=t.data.dtype if dtype is None else dtypes.to_numpy_dtype(dtype)),
                   requires_grad)


def empty_like(t: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return zeros_like(t, dtype=dtype, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value: Any, *, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    return _finish(np.full(t.data.shape, fill_value,
                           dtype=t.data.dtype if dtype is None else dtypes.to_numpy_dtype(dtype)), requires_grad)


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    if end is None:
        start, end = 0, start
    values = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if dtype is None:
        integral = all(isinstance(v, (int, np.integer)) for v in values)
        np_dtype = np.dtype(np.int64) if integral else _DEFAULT_FLOAT[0]
    else:
        np_dtype = dtypes.to_numpy_dtype(dtype)
    return _finish(np.arange(*values).astype(np_dtype), requires_grad)


def linspace(start: float, end: float, steps: int, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    return _finish(np.linspace(start, end, int(steps)).astype(_float_dtype(dtype)), requires_grad)


def eye(n: int, m: int | None = None, *, dtype: Any = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:
    return _finish(np.eye(n, m, dtype=_float_dtype(dtype)), requires_grad)


# ---------------------------------------------------------------- random numbers
class Generator:
    """gradscope's random generator (numpy PCG64 underneath), seeded by ``manual_seed``."""

    def __init__(self, seed: int = 0) -> None:
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> "Generator":
        """Seed the generator; as in torch, seeds run from -2**63 to 2**64 - 1 and a negative seed
        counts as ``2**64 + seed``."""
        seed = int(seed)
        if not -2 ** 63 <= seed < 2 ** 64:
            raise ValueError("Overflow when unpacking long long")
        self._seed = seed + 2 ** 64 if seed < 0 else seed
        self.rng = np.random.Generator(np.random.PCG64(self._seed))
        return self

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> Tensor:
        """The generator state as a uint8 tensor (restorable with ``set_state``)."""
        import json

        text = json.dumps(self.rng.bit_generator.state)
        return Tensor._make(np.frombuffer(text.encode(), dtype=np.uint8).copy())

    def set_state(self, state: Any) -> None:
        import json

        data = state.data if isinstance(state, Tensor) else np.asarray(state, dtype=np.uint8)
        self.rng.bit_generator.state = json.loads(bytes(data.astype(np.uint8)).decode())


default_generator = Generator(0)


def manual_seed(seed: int) -> Generator:
    """Seed gradscope's default generator (for reproducible ``rand``, ``randn``, init, dropout)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    value = int(np.random.SeedSequence().entropy % (2 ** 63))
    default_generator.manual_seed(value)
    return value


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state() -> Tensor:
    return default_generator.get_state()


def set_rng_state(state: Any) -> None:
    default_generator.set_state(state)


def _rng(generator: Generator | None) -> np.random.Generator:
    return (generator or default_generator).rng


def rand(*size: Any, generator: Generator | None = None, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    return _finish(_rng(generator).random(_shape(size)).astype(_float_dtype(dtype)), requires_grad)


def randn(*size: Any, generator: Generator | None = None, dtype: Any = None, device: Any = None,
          requires_grad: bool = False) -> Tensor:
    return _finish(_rng(generator).standard_normal(_shape(size)).astype(_float_dtype(dtype)), requires_grad)


def randint(low: int, high: int | None = None, size: Sequence = (), *, generator: Generator | None = None,
            dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    if isinstance(high, (tuple, list)) and not size:
        low, high, size = 0, low, high  # randint(high, size)
    if high is None:
        low, high = 0, low
    np_dtype = np.dtype(np.int64) if dtype is None else dtypes.to_numpy_dtype(dtype)
    return _finish(_rng(generator).integers(low, high, size=tuple(size)).astype(np_dtype), requires_grad)


def randperm(n: int, *, generator: Generator | None = None, dtype: Any = None, device: Any = None) -> Tensor:
    return Tensor._make(_rng(generator).permutation(int(n)).astype(np.int64))


def rand_like(t: Tensor, *, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return rand(*t.data.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def randn_like(t: Tensor, *, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return randn(*t.data.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def randint_like(t: Tensor, low: int, high: int | None = None, *, dtype: Any = None) -> Tensor:
    return randint(low, high, t.data.shape, dtype=dtype or t.dtype)


def multinomial(probs: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Generator | None = None) -> Tensor:
    p = probs.data.astype(np.float64)
    rows = p.reshape(-1, p.shape[-1])
    out = np.stack([_rng(generator).choice(r.size, size=num_samples, replace=replacement, p=r / r.sum())
                    for r in rows])
    return Tensor._make(out.reshape(p.shape[:-1] + (num_samples,)).astype(np.int64))
