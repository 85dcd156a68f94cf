"""Flatten parameters into one vector and back."""
from __future__ import annotations

from typing import Iterable

from gradscope.autograd.tensor import Tensor
from gradscope.ops.shape import cat

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def _check_tensor(value: object) -> None:
    if not isinstance(value, Tensor):
        raise TypeError(f"expected gradscope.Tensor, but got: {type(value).__name__}")


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """Concatenate the flattened parameters into one vector (differentiable, like PyTorch's)."""
    flat = []
    for param in parameters:
        _check_tensor(param)
        flat.append(param.reshape(-1))
    return cat(flat)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Point each parameter's data at its consecutive slice of ``vec`` (shares memory, as in PyTorch)."""
    _check_tensor(vec)
    pointer = 0
    for param in parameters:
        _check_tensor(param)
        count = param.numel()
        param._data = vec._data[pointer:pointer + count].reshape(param._data.shape)
        pointer += count
