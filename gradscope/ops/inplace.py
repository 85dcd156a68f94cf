"""In-place ops. Each bumps the tensor's version counter; with grad involved the tensor's
history is rebased onto the out-of-place op's node, as PyTorch does."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from gradscope.autograd import grad_mode
from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, pointwise
from gradscope.ops._util import operand, unbroadcast

_LEAF_MESSAGE = "a leaf Variable that requires grad is being used in an in-place operation."


_OVERLAP_MESSAGE = ("unsupported operation: more than one element of the written-to tensor refers to a single "
                    "memory location. Please clone() the tensor before performing the operation.")


def check_no_internal_overlap(written: np.ndarray) -> None:
    """PyTorch refuses a write into an array of which several elements share one memory
    location (a dimension of size > 1 with stride 0, as ``expand`` makes): the result would
    depend on the order of the writes."""
    if 0 in written.strides and any(stride == 0 and size > 1 for stride, size in zip(written.strides, written.shape)):
        raise RuntimeError(_OVERLAP_MESSAGE)


def check_inplace(target: Tensor, other: Tensor | None = None, written: np.ndarray | None = None,
                  overlap: bool = True) -> bool:
    """Validate an in-place write into ``target`` (into its part ``written``, when only a part
    is written; ``overlap=False``: no overlap check); True when it must be recorded in the graph."""
    if target._inplace_error is not None:
        raise RuntimeError(target._inplace_error)
    if overlap:
        check_no_internal_overlap(target._data if written is None else written)
    if not grad_mode._state.enabled:
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
    if target._data.dtype.kind != "f":
        raise RuntimeError("only floating point tensors can be modified in place with autograd")
    return True


def _apply(target: Tensor, other: Any, compute: Callable[[Tensor], Tensor], fast: Callable[[], None],
           overlap: bool = True) -> Tensor:
    """Run an in-place op: ``fast()`` mutates the array when no graph is needed; otherwise
    ``compute(original)`` builds the out-of-place result from a snapshot of the old value
    (so the new node's saved tensors are not overwritten) and ``target`` takes its history."""
    other_t = other if isinstance(other, Tensor) else None
    if not check_inplace(target, other_t, overlap=overlap):
        try:
            fast()
        except ValueError as error:  # numpy could not broadcast into the target: PyTorch's words
            raise RuntimeError(_broadcast_message(target, other, error)) from error
        target._bump_version()
        return target
    original = Tensor._make(target._data.copy())
    original.requires_grad = target.requires_grad
    original.grad_fn = target.grad_fn
    original._output_nr = target._output_nr
    original._vc = [target._version]
    out = compute(original)
    target._data[...] = out._data
    target._bump_version()
    target.grad_fn = out.grad_fn
    target.requires_grad = out.requires_grad
    target._output_nr = out._output_nr
    target._move_retain_grad(original.grad_fn, original._output_nr)
    if out.grad_fn is not None and out.grad_fn._save_output:
        # the node saved its output, which is now ``target``: later in-place writes must be caught
        out.grad_fn._vcs = ((target._version_counter(), target._version, None),)
    return target


def _broadcast_message(target: Tensor, other: Any, error: ValueError) -> str:
    try:
        shape = np.broadcast_shapes(target._data.shape, np.shape(operand(other)))
    except ValueError:
        return str(error)
    return f"output with shape {list(target._data.shape)} doesn't match the broadcast shape {list(shape)}"


class FillBackward0(Node):
    """An overwrite (fill_, or copy_ of a constant): the old value gets a zero gradient."""

    __slots__ = ()

    def backward(self, g):
        return np.zeros_like(g)


class CopyBackwards(Node):
    __slots__ = ("src_shape",)
    _single_input = False

    def backward(self, g):
        (_, _), (node_src, _) = self._next
        return np.zeros_like(g), (unbroadcast(g, self.src_shape) if node_src is not None else None)


def _overwrite(original: Tensor, values: np.ndarray, src: Tensor | None = None) -> Tensor:
    if src is not None and src.requires_grad:
        node = new_node(CopyBackwards, (original, src))
        if node is not None:
            node.src_shape = src._data.shape
    else:
        node = new_node(FillBackward0, (original,))
    return result(values.astype(original._data.dtype, copy=True), node)


def _legacy_alpha(name: str, other: Any, args: tuple, alpha: Any) -> tuple:
    """Resolve the deprecated ``op(alpha, other)`` overload (``p.data.add_(-lr, p.grad)``)."""
    if not args:
        return other, alpha
    if len(args) == 1 and isinstance(args[0], Tensor) and not isinstance(other, Tensor):
        warnings.warn(f"This overload of {name} is deprecated:\n\t{name}(Number alpha, Tensor other)\n"
                      f"Consider using one of the following signatures instead:\n"
                      f"\t{name}(Tensor other, *, Number alpha = 1)", UserWarning, stacklevel=3)
        return args[0], other
    raise TypeError(f"{name}() takes one tensor or number and an optional alpha keyword")


def _check_float_into_integer(target: Tensor, *values: Any) -> None:
    """PyTorch refuses to write a floating point result into an integer or bool tensor."""
    if target._data.dtype.kind in "biu":
        for value in values:
            if isinstance(value, float) or getattr(value, "dtype", None) is not None and value.dtype.kind == "f":
                raise RuntimeError(f"result type Float can't be cast to the desired output type "
                                   f"{_type_word(target._data.dtype)}")


def add_(self: Tensor, other: Any, *args: Any, alpha: Any = 1) -> Tensor:
    other, alpha = _legacy_alpha("add_", other, args, alpha)
    b = operand(other)
    _check_float_into_integer(self, b, alpha)
    return _apply(self, other, lambda o: arith.add(o, other, alpha=alpha),
                  lambda: np.add(self._data, b if alpha == 1 else b * alpha, out=self._data, casting="unsafe"))


def sub_(self: Tensor, other: Any, *args: Any, alpha: Any = 1) -> Tensor:
    other, alpha = _legacy_alpha("sub_", other, args, alpha)
    b = operand(other)
    _check_float_into_integer(self, b, alpha)
    return _apply(self, other, lambda o: arith.sub(o, other, alpha=alpha),
                  lambda: np.subtract(self._data, b if alpha == 1 else b * alpha, out=self._data, casting="unsafe"))


def mul_(self: Tensor, other: Any) -> Tensor:
    b = operand(other)
    _check_float_into_integer(self, b)
    return _apply(self, other, lambda o: arith.mul(o, other),
                  lambda: np.multiply(self._data, b, out=self._data, casting="unsafe"))


def div_(self: Tensor, other: Any, *, rounding_mode: str | None = None) -> Tensor:
    b = operand(other)
    if rounding_mode is None:
        _check_float_into_integer(self, 0.5)
    return _apply(self, other, lambda o: arith.div(o, other, rounding_mode=rounding_mode),
                  lambda: np.copyto(self._data, arith.div(self, other, rounding_mode=rounding_mode)._data,
                                    casting="unsafe"))


def pow_(self: Tensor, exponent: Any) -> Tensor:
    return _apply(self, exponent, lambda o: arith.pow(o, exponent),
                  lambda: np.copyto(self._data, np.power(self._data, operand(exponent)), casting="unsafe"))


def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    return _apply(self, None, lambda o: pointwise.clamp(o, min, max),
                  lambda: np.copyto(self._data, pointwise.clamp(self, min, max)._data, casting="unsafe"))


def copy_(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    src_t = src if isinstance(src, Tensor) else Tensor._make(np.asarray(src))

    def compute(original: Tensor) -> Tensor:
        return _overwrite(original, np.broadcast_to(src_t._data, self._data.shape), src_t)

    return _apply(self, src_t, compute, lambda: np.copyto(self._data, np.broadcast_to(src_t._data, self._data.shape),
                                                          casting="unsafe"))


def resize_(self: Tensor, *sizes: Any, memory_format: Any = None) -> Tensor:
    """Give the tensor a new shape; elements past the old count are uninitialised (as in PyTorch).

    The data is re-allocated when the count changes, so tensors that shared it (views) stop doing so.
    """
    if self.requires_grad:
        raise RuntimeError("cannot resize variables that require grad")
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    shape_ = tuple(int(n) for n in sizes)
    if any(n < 0 for n in shape_):
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(shape_)}: {list(shape_)}")
    count = int(np.prod(shape_))
    if count == self._data.size:
        self._data = self._data.reshape(shape_)
    else:
        data = np.empty(count, dtype=self._data.dtype)
        kept = min(count, self._data.size)
        data[:kept] = self._data.reshape(-1)[:kept]
        self._data = data.reshape(shape_)
    self._bump_version()
    return self


def resize_as_(self: Tensor, the_template: Tensor, memory_format: Any = None) -> Tensor:
    return resize_(self, tuple(the_template._data.shape))


def fill_(self: Tensor, value: Any) -> Tensor:
    v = value.item() if isinstance(value, Tensor) else value
    # (one value everywhere: PyTorch fills an expanded tensor too, whatever the order of the writes)
    return _apply(self, None, lambda o: _overwrite(o, np.full(self._data.shape, v)),
                  lambda: self._data.fill(v), overlap=False)


def zero_(self: Tensor) -> Tensor:
    return fill_(self, 0)


def relu_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda o: pointwise.relu(o), lambda: np.maximum(self._data, 0, out=self._data))


def tanh_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda o: pointwise.tanh(o), lambda: np.tanh(self._data, out=self._data))


def sigmoid_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda o: pointwise.sigmoid(o),
                  lambda: np.copyto(self._data, pointwise.sigmoid(self)._data))


def exp_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda o: pointwise.exp(o), lambda: np.exp(self._data, out=self._data))


def neg_(self: Tensor) -> Tensor:
    return _apply(self, None, lambda o: arith.neg(o), lambda: np.negative(self._data, out=self._data))


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    from gradscope.ops.indexing import masked_fill

    return _apply(self, value if isinstance(value, Tensor) else None, lambda o: masked_fill(o, mask, value),
                  lambda: np.copyto(self._data, masked_fill(self, mask, value)._data))


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Any = None) -> Tensor:
    from gradscope.ops.creation import _rng

    values = _rng(generator).uniform(a, b, self._data.shape)
    return _fill_random(self, values)


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Any = None) -> Tensor:
    from gradscope.ops.creation import _rng

    values = _rng(generator).normal(mean, std, self._data.shape)
    return _fill_random(self, values)


def bernoulli_(self: Tensor, p: float = 0.5, *, generator: Any = None) -> Tensor:
    from gradscope.ops.creation import _rng

    return _fill_random(self, _rng(generator).random(self._data.shape) < p)


def _fill_random(self: Tensor, values: np.ndarray) -> Tensor:
    return _apply(self, None, lambda o: _overwrite(o, values),
                  lambda: np.copyto(self._data, values, casting="unsafe"))


# ---------------------------------------------------------------- in-place forms of out-of-place ops
def _check_result(target: Tensor, values: np.ndarray) -> None:
    """PyTorch's checks before an op's result may be written into ``target``."""
    if values.shape != target._data.shape:
        raise RuntimeError(f"output with shape {list(target._data.shape)} doesn't match the broadcast shape "
                           f"{list(values.shape)}")
    if not np.can_cast(values.dtype, target._data.dtype, casting="same_kind"):
        raise RuntimeError(f"result type {_type_word(values.dtype)} can't be cast to the desired output type "
                           f"{_type_word(target._data.dtype)}")


def _type_word(np_dtype: np.dtype) -> str:
    return {"f": "Float", "i": "Long", "u": "Byte", "b": "Bool"}.get(np_dtype.kind, str(np_dtype))


def inplace_of(fn: Callable[..., Tensor], name: str) -> Callable[..., Tensor]:
    """The in-place method ``name`` of the out-of-place op ``fn(self, *args, **kwargs)``: it
    writes the result into ``self``, bumps its version and, under autograd, takes its history."""

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        others = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        other = next((t for t in others if t.requires_grad), None)

        def fast() -> None:
            with grad_mode.no_grad():
                values = fn(self, *args, **kwargs)._data
            _check_result(self, values)
            np.copyto(self._data, values, casting="unsafe")

        def compute(original: Tensor) -> Tensor:
            out = fn(original, *args, **kwargs)
            _check_result(self, out._data)
            return out

        return _apply(self, other, compute, fast)

    method.__name__ = name
    method.__doc__ = f"In-place version of ``{fn.__name__}``."
    return method


def _random_fill(sample: Callable[..., np.ndarray], name: str) -> Callable[..., Tensor]:
    """An in-place random fill whose values come from ``sample(rng, shape, *args)``."""

    def method(self: Tensor, *args: Any, generator: Any = None) -> Tensor:
        from gradscope.ops.creation import _rng

        return _fill_random(self, sample(_rng(generator), self._data.shape, *args))

    method.__name__ = name
    return method


exponential_ = _random_fill(lambda rng, shape, lambd=1.0: rng.exponential(1.0 / lambd, shape), "exponential_")
log_normal_ = _random_fill(lambda rng, shape, mean=1.0, std=2.0: rng.lognormal(mean, std, shape), "log_normal_")
geometric_ = _random_fill(lambda rng, shape, p: rng.geometric(p, shape), "geometric_")
cauchy_ = _random_fill(lambda rng, shape, median=0.0, sigma=1.0: median + sigma * rng.standard_cauchy(shape),
                       "cauchy_")


def random_(self: Tensor, from_: int = 0, to: int | None = None, *, generator: Any = None) -> Tensor:
    """Integers uniform in ``[from, to)`` (``random_(to)`` means ``[0, to)``)."""
    from gradscope.ops.creation import _rng

    if to is None:
        from_, to = (0, from_) if from_ else (0, 2 ** min(53, 8 * self._data.itemsize - 1))
    return _fill_random(self, _rng(generator).integers(from_, to, self._data.shape))


def fill_diagonal_(self: Tensor, fill_value: Any, wrap: bool = False) -> Tensor:
    """Set the main diagonal (all indices equal) to ``fill_value``."""
    mask = np.zeros(self._data.shape, dtype=bool)
    np.fill_diagonal(mask, True, wrap=wrap)
    return masked_fill_(self, Tensor._make(mask), fill_value)


def reshaping_inplace(fn: Callable[..., Tensor], name: str) -> Callable[..., Tensor]:
    """The in-place method ``name`` of a shape op (``t_``, ``unsqueeze_``, ...): ``self`` takes the
    op's new shape and, under autograd, its history (a leaf that requires grad refuses, as in PyTorch)."""

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if not check_inplace(self):
            with grad_mode.no_grad():
                self._data = fn(self, *args, **kwargs)._data
            self._bump_version()
            return self
        original = Tensor._make(self._data)
        original.requires_grad = self.requires_grad
        original.grad_fn = self.grad_fn
        original._output_nr = self._output_nr
        original._vc = [self._version]
        out = fn(original, *args, **kwargs)
        self._data = out._data
        self._bump_version()
        self.grad_fn = out.grad_fn
        self.requires_grad = out.requires_grad
        self._output_nr = out._output_nr
        self._move_retain_grad(original.grad_fn, original._output_nr)
        return self

    method.__name__ = name
    method.__doc__ = f"In-place version of ``{fn.__name__}`` (the tensor's shape changes)."
    return method
