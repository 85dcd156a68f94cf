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

