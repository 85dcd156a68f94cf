"""The multivariate normal distribution, parametrised by a covariance, a precision or a lower
Cholesky factor (``scale_tril``); all three are kept as ``L`` with ``covariance = L L^T``."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradscope.autograd.tensor import Tensor
from gradscope.distributions.distribution import Constraint, Distribution, real
from gradscope.ops import arith, creation, linalg, pointwise, reduce, shape

real_vector = Constraint("IndependentConstraint(Real(), 1)", lambda x: np.isfinite(x).all(axis=-1))


def _positive_definite(x: np.ndarray) -> np.ndarray:
    symmetric = np.isclose(x, np.swapaxes(x, -1, -2), atol=1e-6).all(axis=(-1, -2))
    return symmetric & (np.linalg.eigvalsh(np.where(symmetric[..., None, None], x, np.eye(x.shape[-1]))) > 0).all(-1)


def _lower_cholesky(x: np.ndarray) -> np.ndarray:
    lower = (np.triu(x, 1) == 0).all(axis=(-1, -2))
    return lower & (np.diagonal(x, axis1=-2, axis2=-1) > 0).all(-1)


positive_definite = Constraint("PositiveDefinite()", _positive_definite)
lower_cholesky = Constraint("LowerCholesky()", _lower_cholesky)


def _diagonal(matrix: Tensor) -> Tensor:
    return shape.diagonal(matrix, 0, -2, -1)


class MultivariateNormal(Distribution):
    """``MultivariateNormal(loc, covariance_matrix=None, precision_matrix=None, scale_tril=None)``.

    Exactly one of the three matrix arguments is given; ``loc`` is (..., k) and the matrix
    (..., k, k), broadcast against each other. ``rsample`` is ``loc + L eps``.
    """

    arg_constraints = {"loc": real_vector, "covariance_matrix": positive_definite,
                       "precision_matrix": positive_definite, "scale_tril": lower_cholesky}
    support = real_vector
    has_rsample = True

    def __init__(self, loc: Tensor, covariance_matrix: Tensor | None = None, precision_matrix: Tensor | None = None,
                 scale_tril: Tensor | None = None, validate_args: bool | None = None) -> None:
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        if (covariance_matrix is not None) + (scale_tril is not None) + (precision_matrix is not None) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or scale_tril may be specified.")
        matrix = next(m for m in (scale_tril, covariance_matrix, precision_matrix) if m is not None)
        if matrix.dim() < 2:
            raise ValueError("scale_tril, covariance_matrix or precision_matrix must be at least two-dimensional, "
                             "with optional leading batch dimensions")
        batch_shape = tuple(np.broadcast_shapes(tuple(matrix.shape[:-2]), tuple(loc.shape[:-1])))
        event_shape = tuple(loc.shape[-1:])
        if scale_tril is not None:
            self.scale_tril = shape.expand(scale_tril, *(batch_shape + (-1, -1)))
        elif covariance_matrix is not None:
            self.covariance_matrix = shape.expand(covariance_matrix, *(batch_shape + (-1, -1)))
        else:
            self.precision_matrix = shape.expand(precision_matrix, *(batch_shape + (-1, -1)))
        self.loc = shape.expand(loc, *(batch_shape + (-1,)))
        super().__init__(batch_shape, event_shape, validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = linalg.cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = linalg.cholesky(linalg.inv(precision_matrix))

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def _covariance(self) -> Tensor:
        lower = self._unbroadcasted_scale_tril
        return arith.matmul(lower, shape.transpose(lower, -1, -2))

    @property
    def variance(self) -> Tensor:
        squares = reduce.sum(arith.pow(self._unbroadcasted_scale_tril, 2), -1)
        return shape.expand(squares, *(tuple(self._batch_shape) + tuple(self._event_shape)))

    def __getattr__(self, name: str) -> Any:
        if name == "covariance_matrix":
            return shape.expand(self._covariance, *(tuple(self._batch_shape) + (-1, -1)))
        if name == "scale_tril":
            return shape.expand(self._unbroadcasted_scale_tril, *(tuple(self._batch_shape) + (-1, -1)))
        if name == "precision_matrix":
            return shape.expand(linalg.inv(self._covariance), *(tuple(self._batch_shape) + (-1, -1)))
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def rsample(self, sample_shape: Any = ()) -> Tensor:
        eps = creation.randn(*self._extended_shape(sample_shape), dtype=self.loc.dtype)
        moved = shape.squeeze(arith.matmul(self._unbroadcasted_scale_tril, shape.unsqueeze(eps, -1)), -1)
        return arith.add(self.loc, moved)

    def _half_log_det(self) -> Tensor:
        return reduce.sum(pointwise.log(_diagonal(self._unbroadcasted_scale_tril)), -1)

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        diff = arith.sub(value, self.loc)
        solved = linalg.solve_triangular(self._unbroadcasted_scale_tril, shape.unsqueeze(diff, -1), upper=False)
        mahalanobis = reduce.sum(arith.pow(shape.squeeze(solved, -1), 2), -1)
        k = self._event_shape[0]
        return arith.sub(arith.mul(arith.add(mahalanobis, k * math.log(2 * math.pi)), -0.5), self._half_log_det())

    def entropy(self) -> Tensor:
        k = self._event_shape[0]
        value = arith.add(self._half_log_det(), 0.5 * k * (1.0 + math.log(2 * math.pi)))
        return shape.expand(value, *self._batch_shape) if len(self._batch_shape) else value
