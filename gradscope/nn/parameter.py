"""``nn.Parameter``: a leaf tensor that modules register as a parameter."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd.tensor import Tensor, format_tensor


class Parameter(Tensor):
    """A Tensor registered by a Module when assigned as an attribute. Shares ``data``'s memory."""

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:
        self._vc = None
        if data is None:
            array = np.zeros((0,), dtype=np.float32)
        elif isinstance(data, Tensor):
            array = data._data
            self._vc = data._vc
        else:
            array = np.asarray(data)
            if array.dtype == np.float64 and not isinstance(data, np.ndarray):
                array = array.astype(np.float32)
        self._data = array
        self.grad_fn = None
        self._output_nr = 0
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + format_tensor(self)

    def __deepcopy__(self, memo: dict) -> "Parameter":
        new = Parameter(self._data.copy(), self.requires_grad)
        if self._grad is not None:
            new._grad = Tensor._make(self._grad._data.copy())
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, protocol: int) -> Any:
        return (Parameter, (self._data.copy(), self.requires_grad))


class Buffer(Tensor):
    """Marker type: assigning ``Buffer(t)`` to a module attribute registers a buffer."""

    def __init__(self, data: Any, *, persistent: bool = True) -> None:
        self._data = data._data if isinstance(data, Tensor) else np.asarray(data)
        self._vc = None
        self.grad_fn = None
        self._output_nr = 0
        self.requires_grad = False
        self.persistent = persistent



class UninitializedTensorMixin:
    """A parameter or buffer whose shape is not known yet (lazy modules): ``materialize`` gives it one."""

    cls_to_become: type = Tensor

    def materialize(self, shape: Any, device: Any = None, dtype: Any = None) -> None:
        """Allocate (uninitialised) storage of ``shape`` and become a plain ``cls_to_become``."""
        from gradscope.autograd import dtypes

        np_dtype = self._data.dtype if dtype is None else dtypes.to_numpy_dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self._data = np.empty(shape, dtype=np_dtype)
        self.__class__ = self.cls_to_become
        self._bump_version()

    @property
    def shape(self) -> Any:
        raise RuntimeError("Can't access the shape of an uninitialized parameter or buffer. This error usually "
                           "happens in `load_state_dict` when trying to load an uninitialized parameter into an "
                           "initialized one. Call `forward` to initialize the parameters before accessing their "
                           "attributes.")

    def __repr__(self) -> str:
        return f"<class 'gradscope.nn.parameter.{type(self).__name__}'>"


def _uninitialized_array(dtype: Any) -> np.ndarray:
    from gradscope.autograd import dtypes
    from gradscope.ops.creation import get_default_dtype

    return np.zeros((0,), dtype=dtypes.to_numpy_dtype(get_default_dtype() if dtype is None else dtype))


class UninitializedParameter(UninitializedTensorMixin, Parameter):
    """A parameter of a lazy module before its first forward call (``materialize`` makes it a Parameter)."""

    cls_to_become = Parameter

    def __init__(self, requires_grad: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__(Tensor._make(_uninitialized_array(dtype)), requires_grad)

    def __deepcopy__(self, memo: dict) -> "UninitializedParameter":
        new = UninitializedParameter(self.requires_grad, dtype=None)
        new._data = self._data.copy()
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, protocol: int) -> Any:
        return (UninitializedParameter, (self.requires_grad,))


class UninitializedBuffer(UninitializedTensorMixin, Tensor):
    """A buffer of a lazy module before its first forward call (``materialize`` makes it a Tensor)."""

    def __init__(self, requires_grad: bool = False, device: Any = None, dtype: Any = None,
                 persistent: bool = True) -> None:
        self._data = _uninitialized_array(dtype)
        self._vc = None
        self.grad_fn = None
        self._output_nr = 0
        self.requires_grad = requires_grad
        self.persistent = persistent


def is_lazy(param: Any) -> bool:
    """True for a parameter or buffer that a lazy module has not materialised yet."""
    return isinstance(param, UninitializedTensorMixin)
