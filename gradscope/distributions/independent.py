"""``Independent``: reinterpret batch dimensions of a distribution as event dimensions."""
from __future__ import annotations

from typing import Any

from gradscope.autograd.tensor import Tensor
from gradscope.distributions.distribution import Distribution
from gradscope.ops import reduce


def _sum_rightmost(value: Tensor, dims: int) -> Tensor:
    if dims == 0:
        return value
    return reduce.sum(value, tuple(range(-dims, 0)))


class Independent(Distribution):
    """``Independent(base, reinterpreted_batch_ndims)``: the rightmost batch dims become event
    dims, so ``log_prob`` and ``entropy`` sum over them (e.g. a diagonal Gaussian)."""

    arg_constraints: dict = {}

    def __init__(self, base_distribution: Distribution, reinterpreted_batch_ndims: int,
                 validate_args: bool | None = None) -> None:
        batch = tuple(base_distribution.batch_shape)
        if not 0 <= reinterpreted_batch_ndims <= len(batch):
            raise ValueError(f"Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), actual "
                             f"{reinterpreted_batch_ndims} vs {len(batch)}")
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims
        split = len(batch) - reinterpreted_batch_ndims
        super().__init__(batch[:split], batch[split:] + tuple(base_distribution.event_shape), validate_args)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @property
    def support(self) -> Any:  # type: ignore[override]
        return self.base_dist.support

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance

    @property
    def stddev(self) -> Tensor:
        return self.base_dist.stddev

    def sample(self, sample_shape: Any = ()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value: Tensor) -> Tensor:
        return _sum_rightmost(self.base_dist.log_prob(value), self.reinterpreted_batch_ndims)

    def entropy(self) -> Tensor:
        return _sum_rightmost(self.base_dist.entropy(), self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"
