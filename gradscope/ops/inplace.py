"""In-place ops. Each bumps the tensor's version counter; with grad involved the tensor's
history is rebased onto the out-of-place op's node, as PyTorch does."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.autograd import grad_mode
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, pointwise
from gradscope.ops._util import operand

_LEAF_MESSAGE = "a leaf Variable that requires grad is being used in an in-place operation."


def check_inplace(target: Tensor, other: Tensor | None = None) -> bool:
    """Validate an in-place write into ``target``; True when it must be recorded in the graph."""
    if target._inplace_error is not None:
        raise RuntimeError(target._inplace_error)
    if not grad_mode._enabled[0]:
        return False
    involved = target.requires_grad or (other is not None and other.requires_grad)
    if not involved:
        return False
    if target.requires_grad and target.grad_fn is None:
        raise RuntimeError(_LEAF_MESSAGE)
    if target._view_of_grad:
        raise RuntimeError("gradscope does not support in-place modification of a view of a tensor that "
                           "requires grad (PyTorch rewrites the base's history here); use an out-of-place "
                           "op such as torch.where, cat or clone() first")
    if target.data.dtype.kind != "f":
        raise RuntimeError("only floating point tensors can be modified in place with autograd")
    return True


def _apply(target: Tensor, other: Any, compute: Callable[[], Tensor], fast: Callable[[], None]) -> Tensor:
    other_t = other if isinstance(other, Tensor) else None
    if not check_inplace(target, other_t):
        fast()
        target._bump_version()
        return target
    out = compute()
    target.data[...] = out.data
    target._bump_version()
    target.grad_fn = out.grad_fn
    target.requires_grad = out.requires_grad
    target._output_nr = out._output_nr
    return target


def add_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    b = operand(other)
    return _apply(self, other, lambda: arith.add(self, other, alpha=alpha),
                  lambda: np.add(self.data, b if alpha == 1 else b * alpha, out=self.data, casting="unsafe"))


def sub_(self: Tensor, other: Any, *, alpha: Any = 1) -> Tensor:
    b = operand(other)
    return _apply(self, other, lambda: arith.sub(self, other, alpha=alpha),
                  lambda: np.subtract(self.data, b if alpha == 1 else b * alpha, out=self.data, casting="unsafe"))


def mul_(self: Tensor, other: Any) -> Tensor:
    b = operand(other)
    return _apply(self, other, lambda: arith.mul(self, other),
                  lambda: np.multiply(self.data, b, out=self.data, casting="unsafe"))


def div_(self: Tensor, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    b = operand(other)
    return _apply(self, other, lambda: arith.div(self, other, rounding_mode=rounding_mode),
                  lambda: np.copyto(self.data, arith.div(self, other, rounding_mode=rounding_mode).data,
                                    casting="unsafe"))


def pow_(self: Tensor, exponent: Any) -> Tensor:
    return _apply(self, exponent, lambda: arith.pow(self, exponent),
                  lambda: np.copyto(self.data, np.power(self.data, operand(exponent)), casting="unsafe"))


def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    return _apply(self, None, lambda: pointwise.clamp(self, min, max),
                  lambda: np.copyto(self.data, pointwise.clamp(self, min, max).data, casting="unsafe"))


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    from gradscope.ops.shape import expand

    src_t = src if isinstance(src, Tensor) else Tensor._make(np.asarray(src))

    def compute() -> Tensor:
        from gradscope.ops.shape import clone

        value = src_t if src_t.data.shape == self.data.shape else expand(src_t, self.data.shape)
        return clone(value) if value.requires_grad else Tensor._make(value.data.copy())

    return _apply(self, src_t, compute, lambda: np.copyto(self.data, np.broadcast_to(src_t.data, self.data.shape),
                                                          casting="unsafe"))


def fill_(self: Tensor, value: Any) -> Tensor:
    v = value.item() if isinstance(value, Tensor) else value
    return _apply(self, None, lambda: Tensor._make(np.full(self.data.shape, v, dtype=self.data.dtype)),
                  lambda: self.data.fill(v))


def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)


def relu_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda: pointwise.relu(self), lambda: np.maximum(self.data, 0, out=self.data))


def tanh_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda: pointwise.tanh(self), lambda: np.tanh(self.data, out=self.data))


def sigmoid_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda: pointwise.sigmoid(self),
                  lambda: np.copyto(self.data, pointwise.sigmoid(self).data))


def exp_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda: pointwise.exp(self), lambda: np.exp(self.data, out=self.data))


def neg_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda: arith.neg(self), lambda: np.negative(self.data, out=self.data))


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    from gradscope.ops.indexing import masked_fill

    return _apply(self, value if isinstance(value, Tensor) else None, lambda: masked_fill(self, mask, value),
                  lambda: np.copyto(self.data, masked_fill(self, mask, value).data))


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Tensor:
    from gradscope.ops.creation import _rng

    values = _rng(generator).uniform(a, b, self.data.shape)
    return _fill_random(self, values)


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Tensor:
    from gradscope.ops.creation import _rng

    values = _rng(generator).normal(mean, std, self.data.shape)
    return _fill_random(self, values)


def bernoulli_(self: Tensor, p: float = 0.5, *, generator: Any = None) -> Tensor:
    from gradscope.ops.creation import _rng

    return _fill_random(self, _rng(generator).random(self.data.shape) < p)


def _fill_random(self: Tensor, values: np.ndarray) -> Tensor:
    return _apply(self, None, lambda: Tensor._make(values.astype(self.data.dtype)),
                  lambda: np.copyto(self.data, values, casting="unsafe"))
