"""The Tensor: a numpy array plus autograd state. Operators and op methods are installed by
``gradscope.ops``; this module holds the state, conversions and hook registration."""
from __future__ import annotations

import warnings
import weakref
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from gradscope.autograd import dtypes
from gradscope.autograd.device import CPU, device
from gradscope.autograd.node import _DETACHED_VERSION, AccumulateGrad
from gradscope.utils.hooks import RemovableHandle, add_hook

TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
               "int64": "LongTensor", "int32": "IntTensor", "int16": "ShortTensor",
               "int8": "CharTensor", "uint8": "ByteTensor", "bool": "BoolTensor"}


_DEFAULT_FLOAT = dtypes.DEFAULT_FLOAT
# The version a counter shows once its tensor was detached in place (see ``Tensor.detach_``).
DETACHED_VERSION = _DETACHED_VERSION


def _flatten_tensors(data: Any) -> Any:
    if isinstance(data, Tensor):
        return data._data
    if isinstance(data, (list, tuple)):
        return [_flatten_tensors(d) for d in data]
    return data


def as_array(data: Any, dtype: Any, copy: bool = True) -> np.ndarray:
    """Convert ``data`` to a numpy array following PyTorch's dtype inference."""
    np_dtype = None if dtype is None else dtypes.to_numpy_dtype(dtype)
    if isinstance(data, Tensor):
        data = data._data
    if isinstance(data, np.ndarray):
        if np_dtype is not None and data.dtype != np_dtype:
            return data.astype(np_dtype)
        if data.dtype == np.float64 or data.dtype.kind in "fiub":
            return data.copy() if copy else data
        dtypes.from_numpy_dtype(data.dtype)
    if isinstance(data, np.generic):
        arr = np.asarray(data)
        return arr.astype(np_dtype) if np_dtype is not None else arr.copy()
    arr = np.array(_flatten_tensors(data))
    if np_dtype is not None:
        return arr.astype(np_dtype)
    kind = arr.dtype.kind
    if kind == "f":
        return arr.astype(_DEFAULT_FLOAT[0])
    if kind in "iu":
        return arr.astype(np.int64)
    if kind == "b":
        return arr
    if arr.size == 0:
        return arr.astype(_DEFAULT_FLOAT[0])
    raise TypeError(f"Could not infer dtype of {type(data).__name__}")



def _legacy_array(args: tuple) -> np.ndarray:
    """The array of the legacy constructor: ``Tensor(*sizes)`` (uninitialised; gradscope zeroes
    it), ``Tensor(sequence_or_array_or_tensor)`` (copied, default float dtype) or ``Tensor()``."""
    if not args:
        return np.zeros((0,), dtype=_DEFAULT_FLOAT[0])
    if len(args) == 1 and isinstance(args[0], Size):
        return np.zeros(tuple(args[0]), dtype=_DEFAULT_FLOAT[0])
    if all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in args):
        return np.zeros(tuple(int(a) for a in args), dtype=_DEFAULT_FLOAT[0])
    if len(args) == 1 and isinstance(args[0], Tensor):
        return args[0]._data
    if len(args) == 1:
        return as_array(args[0], _DEFAULT_FLOAT[0])
    raise TypeError(f"Tensor(): expected sizes (ints) or one sequence of data, got "
                    f"{', '.join(type(a).__name__ for a in args)}")


class Tensor:
    """An n-dimensional array that can record the operations applied to it.

    ``_data`` is the underlying numpy array (``numpy()`` is its public face); ``data`` is, as in
    PyTorch, a tensor sharing that storage without autograd history. Only the hot attributes are
    slots; rarely used state (hooks, ``.grad``, version counter, ...) lives in ``__dict__`` with
    class defaults.
    """

    __slots__ = ("_data", "requires_grad", "grad_fn", "_output_nr", "_vc", "__dict__", "__weakref__")
    __array_ufunc__ = None  # make numpy defer to our reflected operators

    _grad: "Tensor | None" = None
    _acc_ref: Any = None
    _hooks: OrderedDict | None = None
    _post_acc_hooks: OrderedDict | None = None
    _retains_grad = False
    _inplace_error: str | None = None
    _view_of_grad = False

    def __init__(self, *args: Any, requires_grad: bool = False) -> None:
        self._data = _legacy_array(args)
        self.requires_grad = requires_grad
        self.grad_fn = None
        self._output_nr = 0
        self._vc = None

    @classmethod
    def _make(cls, data: np.ndarray) -> "Tensor":
        """Wrap an array without any graph (hot path: no validation)."""
        t = object.__new__(Tensor)
        t._data = data
        t.requires_grad = False
        t.grad_fn = None
        t._output_nr = 0
        t._vc = None
        return t

    # ---------------------------------------------------------------- storage
    @property
    def data(self) -> "Tensor":
        """A tensor sharing this one's storage, outside autograd: in-place writes to it change
        this tensor without being recorded or bumping the version autograd checks."""
        return Tensor._make(self._data)

    @data.setter
    def data(self, value: "Tensor") -> None:
        if not isinstance(value, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__} "
                            "(wrap numpy arrays with gradscope.from_numpy)")
        if self.requires_grad and value._data.dtype.kind != "f":
            raise RuntimeError("data set to a tensor that requires gradients must be floating point "
                               "or complex dtype")
        self._data = value._data

    # ---------------------------------------------------------------- metadata
    @property
    def shape(self) -> tuple:
        return Size(self._data.shape)

    @property
    def dtype(self) -> dtypes.dtype:
        return dtypes.from_numpy_dtype(self._data.dtype)

    @property
    def layout(self) -> dtypes.layout:
        """Always ``strided``: the data is a dense numpy array."""
        return dtypes.strided

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def device(self) -> device:
        return CPU

    def get_device(self) -> int:
        """-1: the CPU (PyTorch's convention)."""
        return -1

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    is_cuda = False
    is_cpu = True
    is_xpu = False
    is_mps = False
    is_meta = False
    is_sparse = False
    is_quantized = False

    def is_complex(self) -> bool:
        return False

    def ndimension(self) -> int:
        return self._data.ndim

    def stride(self, dim: int | None = None) -> Any:
        """Strides in elements (numpy's byte strides divided by the item size)."""
        strides = tuple(s // self._data.itemsize for s in self._data.strides)
        return strides if dim is None else strides[dim]

    def data_ptr(self) -> int:
        return int(self._data.__array_interface__["data"][0])

    def size(self, dim: int | None = None) -> Any:
        """The shape as a ``Size`` tuple, or the length of dimension ``dim``."""
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[dim]

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return int(self._data.size)

    nelement = numel

    def element_size(self) -> int:
        return self._data.itemsize

    def is_floating_point(self) -> bool:
        return self._data.dtype.kind == "f"

    def is_contiguous(self) -> bool:
        return bool(self._data.flags.c_contiguous)

    def _type_name(self) -> str:
        return "gradscope." + TYPE_NAMES.get(self._data.dtype.name, "Tensor")

    def type(self, dtype: Any = None, non_blocking: bool = False) -> Any:
        """The type name (``"gradscope.FloatTensor"``), or a copy converted to ``dtype`` (a dtype,
        a legacy type such as ``gs.LongTensor``, or its name ``"torch.LongTensor"``)."""
        if dtype is None:
            return self._type_name()
        if isinstance(dtype, str):
            wanted = dtype.rsplit(".", 1)[-1]
            matches = [np_name for np_name, name in TYPE_NAMES.items() if name == wanted]
            if not matches:
                raise ValueError(f"invalid type: '{dtype}'")
            dtype = dtypes.from_numpy_dtype(matches[0])
        return self.to(getattr(dtype, "dtype", dtype))

    @property
    def _version(self) -> int:
        return 0 if self._vc is None else self._vc[0]

    def _version_counter(self) -> list:
        vc = self._vc
        if vc is None:
            fn = self.grad_fn
            if fn is not None and fn._save_output and fn._saved is not None:
                # Created lazily: a node that saved this tensor as its output starts watching
                # its version only now, the first time anything can change or share it (or
                # shares the counter it made for ``grad_fn._saved_result``).
                vc = self._vc = fn._output_version_counter()
            else:
                vc = self._vc = [0]
        return vc

    def _bump_version(self) -> None:
        self._version_counter()[0] += 1

    # ---------------------------------------------------------------- conversion
    def numpy(self, *, force: bool = False) -> np.ndarray:
        """The underlying array (shares memory). Raises if the tensor requires grad."""
        if self.requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return self._data

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self._data if dtype is None else self._data.astype(dtype)

    def item(self) -> Any:
        if self._data.size != 1:
            raise RuntimeError(f"a Tensor with {self._data.size} elements cannot be converted to Scalar")
        return self._data.reshape(()).item()

    def tolist(self) -> Any:
        return self._data.tolist()

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __bool__(self) -> bool:
        if self._data.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._data.reshape(()).item())

    def __index__(self) -> int:
        if self._data.dtype.kind not in "iub" or self._data.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self) -> int:
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __hash__(self) -> int:
        return id(self)

    def __reduce_ex__(self, protocol: int) -> Any:
        return (_rebuild, (self._data, self.requires_grad))

    def __deepcopy__(self, memo: dict) -> "Tensor":
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support "
                               "the deepcopy protocol at the moment.")
        new = object.__new__(type(self))
        new._data = self._data.copy()
        new.requires_grad = self.requires_grad
        new.grad_fn = None
        new._output_nr = 0
        new._vc = None
        if self._grad is not None:
            new._grad = Tensor._make(self._grad._data.copy())
        for key, value in self.__dict__.items():
            if key not in ("_grad", "_vc", "_acc_ref", "_hooks", "_post_acc_hooks"):
                new.__dict__[key] = value
        memo[id(self)] = new
        return new

    # ---------------------------------------------------------------- autograd state
    @property
    def grad(self) -> "Tensor | None":
        if self.grad_fn is not None and not self._retains_grad and self._grad is None:
            warnings.warn(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its "
                ".grad attribute won't be populated during autograd.backward(). If you indeed want "
                "the .grad field to be populated for a non-leaf Tensor, use .retain_grad() on the "
                "non-leaf Tensor.", UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, value: "Tensor | None") -> None:
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                                f"{type(value).__name__}")
            if value._data.shape != self._data.shape:
                raise RuntimeError(f"assigned grad has data of a different size: expected "
                                   f"{list(self._data.shape)}, got {list(value._data.shape)}")
        self._grad = value

    @grad.deleter
    def grad(self) -> None:
        self._grad = None

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Set ``requires_grad`` in place (leaves only, or turning it on)."""
        if self.grad_fn is not None and not requires_grad:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want "
                               "to use a computed variable in a subgraph that doesn't require "
                               "differentiation use var_no_grad = var.detach().")
        if requires_grad and self._data.dtype.kind not in "fc":
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self.requires_grad = bool(requires_grad)
        return self

    def _accumulator(self) -> AccumulateGrad:
        ref = self._acc_ref
        acc = ref() if ref is not None else None
        if acc is None:
            acc = AccumulateGrad(self)
            self._acc_ref = weakref.ref(acc)
        return acc

    def _leaf_hooks(self) -> OrderedDict:
        hooks = self._hooks
        if hooks is None:
            hooks = self._hooks = OrderedDict()
        return hooks

    def retain_grad(self) -> None:
        """Populate ``.grad`` of this non-leaf during backward (no-op on leaves)."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is None or self._retains_grad:
            return
        extras = self.grad_fn._extra()
        if extras.retain is None:
            extras.retain = {}
        extras.retain[self._output_nr] = weakref.ref(self)
        self._retains_grad = True

    def _move_retain_grad(self, old_fn: Any, old_nr: int) -> None:
        """After an in-place op gave this tensor a new history: ``retain_grad`` follows it, so
        that ``.grad`` is the gradient of the current value (as PyTorch). Tensor hooks stay."""
        if not self._retains_grad or old_fn is None or old_fn is self.grad_fn:
            return
        extras = old_fn._extras
        if extras is not None and extras.retain:
            ref = extras.retain.get(old_nr)
            if ref is not None and ref() is self:
                del extras.retain[old_nr]
        if self.grad_fn is None:
            self._retains_grad = False
            return
        new = self.grad_fn._extra()
        if new.retain is None:
            new.retain = {}
        new.retain[self._output_nr] = weakref.ref(self)

    @property
    def output_nr(self) -> int:
        """Which output of ``grad_fn`` this tensor is (0 for leaves)."""
        return self._output_nr

    def register_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(grad) -> Tensor | None`` called with this tensor's gradient.

        On a non-leaf the (possibly replaced) gradient flows on; on a leaf it is what gets
        accumulated into ``.grad``.
        """
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        return add_hook(self._hook_dict(), hook)

    def _hook_dict(self) -> OrderedDict:
        """Where this tensor's gradient hooks live: on the tensor for leaves, else on grad_fn."""
        if self.grad_fn is None:
            return self._leaf_hooks()
        return self.grad_fn._hooks_for_slot(self._output_nr)

    def register_post_accumulate_grad_hook(self, hook: Callable) -> RemovableHandle:
        """Register ``hook(tensor) -> None`` called after ``.grad`` of this leaf was updated."""
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = OrderedDict()
        return add_hook(self._post_acc_hooks, hook)

    def backward(self, gradient: Any = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Any = None) -> None:
        """Compute the gradient of this tensor w.r.t. graph leaves (see ``autograd.backward``)."""
        from gradscope.autograd.engine import backward

        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def detach(self) -> "Tensor":
        """A new leaf sharing data (and version counter) with this tensor, without grad."""
        t = Tensor._make(self._data)
        t._vc = self._version_counter()
        return t

    def detach_(self) -> "Tensor":
        if self._inplace_error is not None:
            raise RuntimeError(self._inplace_error)
        vc = self._version_counter()  # a node that saved this tensor as its output keeps watching it
        if self.grad_fn is not None and (self.grad_fn._saved is None or not self.grad_fn._save_output):
            # A node that saved this tensor as an input may no longer use it (as PyTorch): the
            # counter it watches is marked detached; the tensor counts on with a fresh one.
            self._vc = [vc[0]]
            vc[0] = DETACHED_VERSION
        self.grad_fn = None
        self.requires_grad = False
        return self

    # ---------------------------------------------------------------- printing
    def __repr__(self) -> str:
        return format_tensor(self)

    __str__ = __repr__

    def share_memory_(self) -> "Tensor":
        """Move the data into an anonymous shared mapping, which processes forked later share
        (``multiprocessing``'s Hogwild pattern); a no-op for a tensor already shared."""
        if not self.is_shared():
            import mmap

            size = max(self._data.nbytes, 1)
            buffer = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_ANONYMOUS", 0x20))
            shared = np.frombuffer(buffer, dtype=self._data.dtype, count=self._data.size).reshape(self._data.shape)
            shared[...] = self._data
            self._data = shared
        return self

    def is_shared(self) -> bool:
        """True after ``share_memory_()``."""
        import mmap

        base = self._data
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        if isinstance(base, memoryview):
            base = base.obj
        return isinstance(base, mmap.mmap)

    def __format__(self, format_spec: str) -> str:
        """A one-element 0-d tensor formats like its number (``f"{loss:.3f}"``), as in PyTorch."""
        if self._data.ndim == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)


class Size(tuple):
    """A tensor shape; a tuple that prints like ``gradscope.Size([2, 3])``."""

    def __repr__(self) -> str:
        return f"gradscope.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n


def _rebuild(data: np.ndarray, requires_grad: bool) -> Tensor:
    t = Tensor._make(np.array(data))
    t.requires_grad = requires_grad
    return t


def _format_floats(values: np.ndarray) -> Callable[[Any], str]:
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return lambda v: _special(v)
    abs_max = float(np.abs(finite).max()) if finite.size else 0.0
    nonzero = np.abs(finite[finite != 0])
    abs_min = float(nonzero.min()) if nonzero.size else 0.0
    integral = bool(np.all(finite == np.round(finite)))
    if integral and abs_max < 1e8:
        return lambda v: _special(v) or f"{v:.0f}."
    if abs_max >= 1e8 or (abs_min and abs_min < 1e-4) or (abs_min and abs_max / abs_min > 1e3 and abs_max >= 1e3):
        return lambda v: _special(v) or f"{v:.4e}"
    return lambda v: _special(v) or f"{v:.4f}"


def _special(v: float) -> str:
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return ""


def format_tensor(t: Tensor, name: str = "tensor") -> str:
    """Render like PyTorch: ``tensor([1., 2.], requires_grad=True)``, entries padded to one width."""
    data = t._data
    kind = data.dtype.kind
    if kind == "f":
        fmt = _format_floats(data.astype(np.float64))
        one = lambda v: fmt(float(v))  # noqa: E731
    elif kind == "b":
        one = lambda v: "True" if v else "False"  # noqa: E731
    else:
        one = lambda v: str(int(v))  # noqa: E731
    indent = " " * (len(name) + 1)
    if data.size == 0:
        body = "[]"
    elif data.ndim == 0:
        body = one(data.item())
    else:
        shown = (data if data.size <= 1000 else _edges_of(data)).reshape(-1)
        if kind == "f" and np.isfinite(shown).any():
            shown = shown[np.isfinite(shown)]  # like PyTorch: nan/inf do not widen the columns
        width = max(len(one(v)) for v in shown)
        formatter = {"all": lambda v: one(v).rjust(width)}
        body = np.array2string(data, separator=", ", formatter=formatter, threshold=1000,
                               edgeitems=3, max_line_width=80, prefix=indent)
    extras = []
    default = {"float32", "int64", "bool"}
    if data.dtype.name not in default or (data.size == 0 and data.dtype.name != "float32"):
        extras.append(f"dtype=gradscope.{data.dtype.name}")
    if data.size == 0 and data.ndim > 1:
        extras.append(f"size={tuple(data.shape)}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return f"{name}({body}" + "".join(", " + e for e in extras) + ")"


def _edges_of(data: np.ndarray) -> np.ndarray:
    """The elements a summarised print shows (first and last three along every axis)."""
    for axis, n in enumerate(data.shape):
        if n > 6:
            data = np.concatenate([np.take(data, range(3), axis), np.take(data, range(n - 3, n), axis)], axis)
    return data
