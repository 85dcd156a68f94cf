"""The normal (Gaussian) distribution."""
from __future__ import annotations

import math
from typing import Any

from gradscope.autograd.tensor import Tensor
from gradscope.distributions.distribution import Distribution, broadcast_all, positive, real
from gradscope.ops import arith, creation, pointwise


class Normal(Distribution):
    """``Normal(loc, scale)``: batches of Gaussians; ``rsample`` is ``loc + scale * eps``."""

    arg_constraints = {"loc": real, "scale": positive}
    support = real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(tuple(self.loc.shape), (), validate_args)

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def stddev(self) -> Tensor:
        return self.scale

    @property
    def variance(self) -> Tensor:
        return arith.pow(self.scale, 2)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        eps = creation.randn(*shape, dtype=self.loc.dtype)
        return arith.add(self.loc, arith.mul(eps, self.scale))

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        variance = arith.pow(self.scale, 2)
        squared = arith.pow(arith.sub(value, self.loc), 2)
        return arith.sub(arith.sub(arith.neg(arith.div(squared, arith.mul(variance, 2))), pointwise.log(self.scale)),
                         math.log(math.sqrt(2 * math.pi)))

    def entropy(self) -> Tensor:
        return arith.add(pointwise.log(self.scale), 0.5 + 0.5 * math.log(2 * math.pi))

    def cdf(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        z = arith.div(arith.sub(value, self.loc), arith.mul(self.scale, math.sqrt(2)))
        return arith.mul(arith.add(pointwise.erf(z), 1), 0.5)
