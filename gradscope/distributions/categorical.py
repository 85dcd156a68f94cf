"""Distributions over categories and binary outcomes: Categorical, Bernoulli."""
from __future__ import annotations

from typing import Any

import numpy as np

from gradscope.autograd import dtypes
from gradscope.autograd.grad_mode import no_grad
from gradscope.autograd.tensor import Tensor
from gradscope.distributions.distribution import (Constraint, Distribution, boolean, broadcast_all, real,
                                                  real_vector, simplex, unit_interval)
from gradscope.ops import arith, creation, indexing, losses, pointwise, reduce, shape


def _exactly_one(probs: Any, logits: Any) -> None:
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")


def clamp_probs(probs: Tensor) -> Tensor:
    """Probabilities kept ``eps`` away from 0 and 1 (``eps`` of their dtype)."""
    eps = dtypes.finfo(probs.dtype).eps
    return pointwise.clamp(probs, eps, 1 - eps)


def probs_to_logits(probs: Tensor, is_binary: bool = False) -> Tensor:
    clamped = clamp_probs(probs)
    if is_binary:
        return arith.sub(pointwise.log(clamped), pointwise.log1p(arith.neg(clamped)))
    return pointwise.log(clamped)


def logits_to_probs(logits: Tensor, is_binary: bool = False) -> Tensor:
    if is_binary:
        return pointwise.sigmoid(logits)
    return reduce.softmax(logits, -1)


class _ProbsOrLogits(Distribution):
    """A distribution given by ``probs`` or by ``logits`` (``_param``, the one given); the other is
    derived on first use, as PyTorch's ``lazy_property`` does."""

    _binary = False  # Bernoulli's logits are log-odds; Categorical's are normalised log-probabilities

    def __getattr__(self, name: str) -> Any:
        if name == "logits":
            value = probs_to_logits(self.__dict__["probs"], is_binary=self._binary)
        elif name == "probs":
            value = logits_to_probs(self.__dict__["logits"], is_binary=self._binary)
        else:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        self.__dict__[name] = value
        return value

    @property
    def param_shape(self) -> tuple:
        return tuple(self._param.shape)


class Categorical(_ProbsOrLogits):
    """``Categorical(probs=...)`` or ``Categorical(logits=...)`` over the last dimension.

    ``probs`` are normalised to sum to one; ``logits`` are normalised so that ``logsumexp`` is 0.
    Samples are int64 category indices.
    """

    arg_constraints = {"probs": simplex, "logits": real_vector}
    has_enumerate_support = True

    def __init__(self, probs: Tensor | None = None, logits: Tensor | None = None,
                 validate_args: bool | None = None) -> None:
        _exactly_one(probs, logits)
        if probs is not None:
            if probs.dim() < 1:
                raise ValueError("`probs` parameter must be at least one-dimensional.")
            self.probs = arith.div(probs, reduce.sum(probs, -1, keepdim=True))
            self._param = self.probs
        else:
            if logits.dim() < 1:
                raise ValueError("`logits` parameter must be at least one-dimensional.")
            self.logits = arith.sub(logits, reduce.logsumexp(logits, -1, keepdim=True))
            self._param = self.logits
        self._num_events = self._param.shape[-1]
        super().__init__(tuple(self._param.shape[:-1]), (), validate_args)

    @property
    def support(self) -> Constraint:
        n = self._num_events
        return Constraint(f"IntegerInterval(lower_bound=0, upper_bound={n - 1})",
                          lambda x: (x >= 0) & (x <= n - 1) & (x == np.floor(x)))

    @property
    def mean(self) -> Tensor:
        return creation.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    @property
    def mode(self) -> Tensor:
        return reduce.argmax(self.probs, -1)

    @property
    def variance(self) -> Tensor:
        return creation.full(self._extended_shape(), float("nan"), dtype=self.probs.dtype)

    def sample(self, sample_shape: Any = ()) -> Tensor:
        if isinstance(sample_shape, int):
            sample_shape = (sample_shape,)
        count = int(np.prod(sample_shape)) if len(sample_shape) else 1
        with no_grad():
            rows = shape.reshape(self.probs, (-1, self._num_events))
            drawn = creation.multinomial(rows, count, True)
        samples = shape.reshape(shape.t(drawn), tuple(sample_shape) + tuple(self._batch_shape))
        return samples

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        index = shape.unsqueeze(shape.to(value, dtypes.int64), -1)
        index, log_pmf = shape.broadcast_tensors(index, self.logits)
        index = index[..., :1]
        return shape.squeeze(indexing.gather(log_pmf, -1, index), -1)

    def entropy(self) -> Tensor:
        min_real = dtypes.finfo(self.logits.dtype).min
        logits = pointwise.clamp(self.logits, min=min_real)
        return arith.neg(reduce.sum(arith.mul(logits, self.probs), -1))

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = creation.arange(self._num_events, dtype=dtypes.int64)
        values = shape.reshape(values, (-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = shape.expand(values, (-1,) + tuple(self._batch_shape))
        return values


class Bernoulli(_ProbsOrLogits):
    """``Bernoulli(probs=...)`` or ``Bernoulli(logits=...)``: samples are 0./1. floats."""

    arg_constraints = {"probs": unit_interval, "logits": real}
    support = boolean
    has_enumerate_support = True
    _binary = True

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None) -> None:
        _exactly_one(probs, logits)
        if probs is not None:
            (self.probs,) = broadcast_all(probs)
            self._param = self.probs
        else:
            (self.logits,) = broadcast_all(logits)
            self._param = self.logits
        super().__init__(tuple(self._param.shape), (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def mode(self) -> Tensor:
        mode = shape.to(arith.ge(self.probs, 0.5), self.probs.dtype)
        return indexing.masked_fill(mode, arith.eq(self.probs, 0.5), float("nan"))

    @property
    def variance(self) -> Tensor:
        return arith.mul(self.probs, arith.rsub(self.probs, 1))

    def sample(self, sample_shape: Any = ()) -> Tensor:
        size = self._extended_shape(sample_shape)
        with no_grad():
            probs = shape.expand(self.probs, size)
            return creation.bernoulli(probs)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return arith.neg(losses.binary_cross_entropy_with_logits(logits, value, reduction="none"))

    def entropy(self) -> Tensor:
        return losses.binary_cross_entropy_with_logits(self.logits, self.probs, reduction="none")

    def enumerate_support(self, expand: bool = True) -> Tensor:
        values = creation.arange(2, dtype=self._param.dtype)
        values = shape.reshape(values, (-1,) + (1,) * len(self._batch_shape))
        if expand:
            values = shape.expand(values, (-1,) + tuple(self._batch_shape))
        return values
