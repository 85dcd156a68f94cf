"""Tensor creation and gradscope's own random generator."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gradscope.autograd import dtypes
from gradscope.autograd.device import check_device
from gradscope.autograd.tensor import _DEFAULT_FLOAT, TYPE_NAMES, Size, Tensor, as_array


def get_default_dtype() -> dtypes.dtype:
    """The dtype factories give floating point values when none is named (float32 unless set)."""
    return dtypes.from_numpy_dtype(_DEFAULT_FLOAT[0])


def set_default_dtype(d: Any) -> None:
    """Make ``d`` (float16/32/64) the dtype of new floating point tensors."""
    np_dtype = dtypes.to_numpy_dtype(d)
    if np_dtype.kind != "f":
        raise TypeError("only floating-point types are supported as the default type")
    _DEFAULT_FLOAT[0] = np_dtype


def _finish(arr: np.ndarray, requires_grad: bool, device: Any = None) -> Tensor:
    check_device(device)
    t = Tensor._make(arr)
    if requires_grad:
        t.requires_grad_(True)
    return t


def tensor(data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False,
           pin_memory: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data`` (list, scalar, numpy array or Tensor)."""
    return _finish(as_array(data, dtype), requires_grad, device)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Like ``tensor`` but shares memory with a numpy array or returns a Tensor as is."""
    check_device(device)
    if isinstance(data, Tensor) and (dtype is None or data.dtype is dtypes.from_numpy_dtype(dtypes.to_numpy_dtype(dtype))):
        return data
    return Tensor._make(as_array(data, dtype, copy=False))


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``array``."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    dtypes.from_numpy_dtype(array.dtype)
    return Tensor._make(array)


def _shape(sizes: Sequence, size: Any = None) -> tuple:
    """The shape from positional ``*sizes`` or the ``size=`` keyword (one of the two)."""
    if size is not None:
        if sizes:
            raise TypeError("the shape was given both positionally and as size=")
        sizes = (size,)
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    return tuple(int(s) for s in sizes)


def _float_dtype(dtype: Any) -> np.dtype:
    return _DEFAULT_FLOAT[0] if dtype is None else dtypes.to_numpy_dtype(dtype)


def _like_dtype(t: Tensor, dtype: Any) -> np.dtype:
    return t._data.dtype if dtype is None else dtypes.to_numpy_dtype(dtype)


def zeros(*sizes: Any, size: Any = None, out: Any = None, dtype: Any = None, layout: Any = None,
          device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.zeros(_shape(sizes, size), dtype=_float_dtype(dtype)), requires_grad, device)


def ones(*sizes: Any, size: Any = None, out: Any = None, dtype: Any = None, layout: Any = None,
         device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.ones(_shape(sizes, size), dtype=_float_dtype(dtype)), requires_grad, device)


def empty(*sizes: Any, size: Any = None, out: Any = None, dtype: Any = None, layout: Any = None,
          device: Any = None, requires_grad: bool = False, pin_memory: bool = False,
          memory_format: Any = None) -> Tensor:
    """Uninitialised in PyTorch; gradscope fills it with zeros."""
    return _finish(np.zeros(_shape(sizes, size), dtype=_float_dtype(dtype)), requires_grad, device)


def _fill_dtype(fill_value: Any, dtype: Any) -> np.dtype:
    if dtype is not None:
        return dtypes.to_numpy_dtype(dtype)
    return as_array(fill_value.item() if isinstance(fill_value, Tensor) else fill_value, None).dtype


def full(size: Sequence, fill_value: Any, *, out: Any = None, dtype: Any = None, layout: Any = None,
         device: Any = None, requires_grad: bool = False) -> Tensor:
    value = fill_value.item() if isinstance(fill_value, Tensor) else fill_value
    return _finish(np.full(_shape((size,)), value, dtype=_fill_dtype(fill_value, dtype)), requires_grad, device)


def zeros_like(input: Tensor, *, dtype: Any = None, layout: Any = None, device: Any = None,
               requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    return _finish(np.zeros(input._data.shape, dtype=_like_dtype(input, dtype)), requires_grad, device)


def ones_like(input: Tensor, *, dtype: Any = None, layout: Any = None, device: Any = None,
              requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    return _finish(np.ones(input._data.shape, dtype=_like_dtype(input, dtype)), requires_grad, device)


def empty_like(input: Tensor, *, dtype: Any = None, layout: Any = None, device: Any = None,
               requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    return zeros_like(input, dtype=dtype, device=device, requires_grad=requires_grad)


def full_like(input: Tensor, fill_value: Any, *, dtype: Any = None, layout: Any = None, device: Any = None,
              requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    value = fill_value.item() if isinstance(fill_value, Tensor) else fill_value
    return _finish(np.full(input._data.shape, value, dtype=_like_dtype(input, dtype)), requires_grad, device)


def arange(start: Any = 0, end: Any = None, step: Any = 1, *, out: Any = None, dtype: Any = None,
           layout: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    if end is None:
        start, end = 0, start
    values = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if dtype is None:
        integral = all(isinstance(v, (int, np.integer)) for v in values)
        np_dtype = np.dtype(np.int64) if integral else _DEFAULT_FLOAT[0]
    else:
        np_dtype = dtypes.to_numpy_dtype(dtype)
    return _finish(np.arange(*values).astype(np_dtype), requires_grad, device)


def linspace(start: float, end: float, steps: int, *, out: Any = None, dtype: Any = None, layout: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    out_dtype = _float_dtype(dtype)
    return _finish(_linspace_values(start, end, int(steps), out_dtype), requires_grad, device)


def _linspace_values(start: float, end: float, steps: int, dtype: np.dtype) -> np.ndarray:
    """PyTorch's linspace, bit for bit: the step in ``dtype``, the first half counted up from ``start``
    and the second half down from ``end``, each value one fused multiply-add (emulated in long double)."""
    if steps < 0:
        raise RuntimeError("linspace(): number of steps must be non-negative")
    if dtype.kind != "f":
        return np.linspace(start, end, steps).astype(dtype)
    if steps == 1:
        return np.array([start], dtype=dtype)
    kind = dtype.type
    step = (kind(end) - kind(start)) / kind(max(steps - 1, 1))
    wide = np.longdouble
    index = np.arange(steps)
    up = wide(kind(start)) + wide(step) * index.astype(wide)
    down = wide(kind(end)) - wide(step) * (steps - 1 - index).astype(wide)
    return np.where(index < steps // 2, up, down).astype(dtype)


def logspace(start: float, end: float, steps: int, base: float = 10.0, *, dtype: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.logspace(start, end, int(steps), base=base).astype(_float_dtype(dtype)), requires_grad,
                   device)


def eye(n: int, m: int | None = None, *, out: Any = None, dtype: Any = None, layout: Any = None,
        device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(np.eye(n, m, dtype=_float_dtype(dtype)), requires_grad, device)


# ---------------------------------------------------------------- Tensor.new_* methods
def _new_dtype(self: Tensor, dtype: Any) -> np.dtype:
    return self._data.dtype if dtype is None else dtypes.to_numpy_dtype(dtype)


def new_zeros(self: Tensor, *sizes: Any, size: Any = None, dtype: Any = None, device: Any = None,
              requires_grad: bool = False, layout: Any = None, pin_memory: bool = False) -> Tensor:
    """Zeros of the given shape with this tensor's dtype (unless ``dtype`` is given)."""
    return _finish(np.zeros(_shape(sizes, size), dtype=_new_dtype(self, dtype)), requires_grad, device)


def new_ones(self: Tensor, *sizes: Any, size: Any = None, dtype: Any = None, device: Any = None,
             requires_grad: bool = False, layout: Any = None, pin_memory: bool = False) -> Tensor:
    """Ones of the given shape with this tensor's dtype (unless ``dtype`` is given)."""
    return _finish(np.ones(_shape(sizes, size), dtype=_new_dtype(self, dtype)), requires_grad, device)


def new_empty(self: Tensor, *sizes: Any, size: Any = None, dtype: Any = None, device: Any = None,
              requires_grad: bool = False, layout: Any = None, pin_memory: bool = False) -> Tensor:
    """Like ``new_zeros`` (PyTorch leaves the values uninitialised)."""
    return new_zeros(self, *sizes, size=size, dtype=dtype, device=device, requires_grad=requires_grad)


def new_full(self: Tensor, size: Sequence, fill_value: Any, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False, layout: Any = None, pin_memory: bool = False) -> Tensor:
    """``fill_value`` everywhere, with this tensor's dtype (unless ``dtype`` is given)."""
    value = fill_value.item() if isinstance(fill_value, Tensor) else fill_value
    return _finish(np.full(_shape((size,)), value, dtype=_new_dtype(self, dtype)), requires_grad, device)


def new_tensor(self: Tensor, data: Any, *, dtype: Any = None, device: Any = None,
               requires_grad: bool = False, layout: Any = None, pin_memory: bool = False) -> Tensor:
    """A copy of ``data`` as a new leaf with this tensor's dtype (unless ``dtype`` is given)."""
    return _finish(as_array(data, _new_dtype(self, dtype)), requires_grad, device)


# ---------------------------------------------------------------- random numbers
class Generator:
    """gradscope's random generator (numpy PCG64 underneath), seeded by ``manual_seed``."""

    def __init__(self, device: Any = "cpu", seed: int = 0) -> None:
        check_device(device)
        self.device = device
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
        return Tensor._make(self.state_bytes().copy())

    def state_bytes(self) -> np.ndarray:
        """The generator state as a read-only uint8 array (what :meth:`get_state` holds). The
        encoding of the last state asked for is kept: a training loop that takes the state every
        step while its model draws no random numbers encodes it once."""
        import json

        state = self.rng.bit_generator.state
        kept = getattr(self, "_encoded", None)
        if kept is None or kept[0] != state:
            encoded = np.frombuffer(json.dumps(state).encode(), dtype=np.uint8)  # (read-only: bytes)
            kept = self._encoded = (state, encoded)
        return kept[1]

    def set_state(self, state: Any) -> None:
        import json

        data = state._data if isinstance(state, Tensor) else np.asarray(state, dtype=np.uint8)
        self.rng.bit_generator.state = json.loads(bytes(data.astype(np.uint8)).decode())


default_generator = Generator()


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


def rand(*sizes: Any, size: Any = None, generator: Generator | None = None, out: Any = None, dtype: Any = None,
         layout: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(_rng(generator).random(_shape(sizes, size)).astype(_float_dtype(dtype)), requires_grad, device)


def randn(*sizes: Any, size: Any = None, generator: Generator | None = None, out: Any = None, dtype: Any = None,
          layout: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _finish(_rng(generator).standard_normal(_shape(sizes, size)).astype(_float_dtype(dtype)), requires_grad,
                   device)


def randint(low: int, high: int | None = None, size: Sequence = (), *, generator: Generator | None = None,
            out: Any = None, dtype: Any = None, layout: Any = None, device: Any = None,
            requires_grad: bool = False) -> Tensor:
    if isinstance(high, (tuple, list)) and not size:
        low, high, size = 0, low, high  # randint(high, size)
    if high is None:
        low, high = 0, low
    np_dtype = np.dtype(np.int64) if dtype is None else dtypes.to_numpy_dtype(dtype)
    return _finish(_rng(generator).integers(low, high, size=tuple(size)).astype(np_dtype), requires_grad, device)


def randperm(n: int, *, generator: Generator | None = None, out: Any = None, dtype: Any = None,
             layout: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    np_dtype = np.dtype(np.int64) if dtype is None else dtypes.to_numpy_dtype(dtype)
    return _finish(_rng(generator).permutation(int(n)).astype(np_dtype), requires_grad, device)


def rand_like(input: Tensor, *, dtype: Any = None, layout: Any = None, device: Any = None,
              requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    return rand(*input._data.shape, dtype=dtype or input.dtype, device=device, requires_grad=requires_grad)


def randn_like(input: Tensor, *, dtype: Any = None, layout: Any = None, device: Any = None,
               requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    return randn(*input._data.shape, dtype=dtype or input.dtype, device=device, requires_grad=requires_grad)


def randint_like(input: Tensor, low: int, high: int | None = None, *, dtype: Any = None, layout: Any = None,
                 device: Any = None, requires_grad: bool = False, memory_format: Any = None) -> Tensor:
    return randint(low, high, input._data.shape, dtype=dtype or input.dtype, device=device)


def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Generator | None = None,
           out: Any = None, dtype: Any = None, layout: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    """Samples of N(mean, std): tensors broadcast, or two floats with ``size``."""
    check_device(device)
    tensors = [v for v in (mean, std) if isinstance(v, Tensor)]
    mu = mean._data if isinstance(mean, Tensor) else mean
    sigma = std._data if isinstance(std, Tensor) else std
    if tensors:
        shape = np.broadcast_shapes(*(np.shape(v) for v in (mu, sigma)))
        np_dtype = np.result_type(*(t._data.dtype for t in tensors))
    else:
        if size is None:
            raise TypeError("normal() with float mean and std needs a size")
        shape, np_dtype = _shape((size,)), _float_dtype(dtype)
    values = _rng(generator).normal(mu, sigma, shape).astype(np_dtype)
    return _finish(values, requires_grad)


def bernoulli(input: Tensor, p: Any = None, *, generator: Generator | None = None, out: Any = None) -> Tensor:
    """0/1 samples with the probabilities in ``input`` (or the scalar ``p``), input's dtype."""
    probs = input._data if p is None else p
    return Tensor._make((_rng(generator).random(input._data.shape) < probs).astype(input._data.dtype))


def multinomial(probs: Tensor, num_samples: int, replacement: bool = False, *,
                generator: Generator | None = None) -> Tensor:
    p = probs._data.astype(np.float64)
    rows = p.reshape(-1, p.shape[-1])
    out = np.stack([_rng(generator).choice(r.size, size=num_samples, replace=replacement, p=r / r.sum())
                    for r in rows])
    return Tensor._make(out.reshape(p.shape[:-1] + (num_samples,)).astype(np.int64))


# ---------------------------------------------------------------- legacy typed constructors
class LegacyTensorType:
    """``gs.FloatTensor``, ``gs.LongTensor``, ...: call it like the legacy constructor
    (``FloatTensor(2, 3)``, ``LongTensor([1, 2])``), pass it to ``Tensor.type``, or use it in
    ``isinstance`` (true for tensors of its dtype)."""

    def __init__(self, name: str, dtype: dtypes.dtype) -> None:
        self.__name__ = name
        self.dtype = dtype

    def __call__(self, *args: Any) -> Tensor:
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)) and not isinstance(args[0], Size):
            return Tensor._make(as_array(args[0], self.dtype))
        return Tensor._make(Tensor(*args)._data.astype(self.dtype.np))

    def __instancecheck__(self, obj: Any) -> bool:
        return isinstance(obj, Tensor) and obj._data.dtype == self.dtype.np

    def __repr__(self) -> str:
        return f"<class 'gradscope.{self.__name__}'>"


LEGACY_TYPES = {name: LegacyTensorType(name, dtypes.from_numpy_dtype(np_name))
                for np_name, name in TYPE_NAMES.items()}
