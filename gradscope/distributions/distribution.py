"""The base class of gradscope's probability distributions, with PyTorch's surface and checks."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from gradscope.autograd.tensor import Size, Tensor
from gradscope.ops import creation, shape

_DEFAULT_VALIDATE = [__debug__]


def set_default_validate_args(value: bool) -> None:
    """Whether new distributions check their parameters and ``log_prob`` values (default on)."""
    _DEFAULT_VALIDATE[0] = bool(value)


class Constraint:
    """A named test of values, used for PyTorch's parameter and support validation messages."""

    def __init__(self, name: str, check: Callable[[np.ndarray], np.ndarray]) -> None:
        self.name = name
        self._check = check

    def check(self, value: Tensor) -> np.ndarray:
        """An elementwise (or per-event) boolean array: where ``value`` satisfies the constraint."""
        return np.asarray(self._check(value._data))

    def __repr__(self) -> str:
        return self.name


def _on_simplex(x: np.ndarray) -> np.ndarray:
    return np.all(x >= 0, axis=-1) & (np.abs(x.sum(-1) - 1) < 1e-6)


real = Constraint("Real()", lambda x: x == x)
real_vector = Constraint("IndependentConstraint(Real(), 1)", lambda x: np.all(x == x, axis=-1))
positive = Constraint("GreaterThan(lower_bound=0.0)", lambda x: x > 0)
unit_interval = Constraint("Interval(lower_bound=0.0, upper_bound=1.0)", lambda x: (x >= 0) & (x <= 1))
boolean = Constraint("Boolean()", lambda x: (x == 0) | (x == 1))
simplex = Constraint("Simplex()", _on_simplex)


def broadcast_all(*values: Any) -> tuple:
    """Tensors of one broadcast shape; python numbers become tensors of the default dtype."""
    dtype = next((v.dtype for v in values if isinstance(v, Tensor)), None)
    tensors = [v if isinstance(v, Tensor) else creation.tensor(float(v), dtype=dtype) for v in values]
    if len({tuple(t.shape) for t in tensors}) == 1:
        return tuple(tensors)
    return shape.broadcast_tensors(*tensors)


class Distribution:
    """A batch of distributions of one family.

    Subclasses set ``arg_constraints`` (parameter name -> Constraint), ``support`` and
    ``has_rsample``, and implement ``log_prob`` and the sampling methods they support.
    """

    arg_constraints: dict = {}
    support: Constraint | None = None
    has_rsample = False
    has_enumerate_support = False

    def __init__(self, batch_shape: tuple = (), event_shape: tuple = (), validate_args: bool | None = None) -> None:
        self._batch_shape = Size(batch_shape)
        self._event_shape = Size(event_shape)
        self._validate_args = _DEFAULT_VALIDATE[0] if validate_args is None else bool(validate_args)
        if self._validate_args:
            for name, constraint in self.arg_constraints.items():
                if name not in self.__dict__:
                    continue  # a parameter derived lazily from the one given
                value = self.__dict__[name]
                if not constraint.check(value).all():
                    raise ValueError(f"Expected parameter {name} (Tensor of shape {tuple(value.shape)}) of "
                                     f"distribution {self!r} to satisfy the constraint {constraint}, but found "
                                     f"invalid values:\n{value}")

    @property
    def batch_shape(self) -> Size:
        return self._batch_shape

    @property
    def event_shape(self) -> Size:
        return self._event_shape

    def _extended_shape(self, sample_shape: Any = ()) -> tuple:
        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        return tuple(sample_shape) + tuple(self._batch_shape) + tuple(self._event_shape)

    def _validate_sample(self, value: Tensor) -> None:
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        if self.support is not None and not self.support.check(value).all():
            raise ValueError(f"Expected value argument (Tensor of shape {tuple(value.shape)}) to be within the "
                             f"support ({self.support}) of the distribution {self!r}, but found invalid "
                             f"values:\n{value}")

    def sample(self, sample_shape: Any = ()) -> Tensor:
        """Samples without gradient; ``rsample`` for reparameterised samples where supported."""
        from gradscope.autograd.grad_mode import no_grad

        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not support rsample (has_rsample is False)")

    def sample_n(self, n: int) -> Tensor:
        return self.sample((n,))

    def log_prob(self, value: Tensor) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement log_prob")

    def entropy(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement entropy")

    @property
    def mean(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement mean")

    @property
    def variance(self) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not implement variance")

    @property
    def stddev(self) -> Tensor:
        from gradscope.ops.pointwise import sqrt

        return sqrt(self.variance)

    def perplexity(self) -> Tensor:
        from gradscope.ops.pointwise import exp

        return exp(self.entropy())

    def __repr__(self) -> str:
        parts = []
        for name in self.arg_constraints:
            value = self.__dict__.get(name)
            if value is None:
                continue
            parts.append(f"{name}: {value.item() if value.numel() == 1 else value.shape}")
        return f"{type(self).__name__}({', '.join(parts)})"
