"""``gradscope.sparse``: the sparse calls small graph models make, on dense tensors.

gradscope has no sparse layout. ``sparse.mm`` multiplies dense matrices, and the legacy
``sparse.FloatTensor(indices, values, size)`` builds the dense equivalent, so code written for
sparse adjacency matrices runs unchanged (with dense memory use)."""
from __future__ import annotations

from typing import Any, Sequence

from gradscope.autograd import dtypes
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, linalg, reduce


def mm(mat1: Tensor, mat2: Tensor) -> Tensor:
    """``mat1 @ mat2`` (both dense in gradscope)."""
    return arith.mm(mat1, mat2)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return linalg.addmm(input, mat1, mat2, beta=beta, alpha=alpha)


def sum(input: Tensor, dim: Any = None, dtype: Any = None) -> Tensor:  # noqa: A001
    return reduce.sum(input, dim, dtype=dtype)


def _legacy_constructor(dtype: dtypes.dtype) -> Any:
    def build(indices: Tensor, values: Tensor, size: Sequence[int] | None = None) -> Tensor:
        return linalg.sparse_coo_tensor(indices, values, size, dtype=dtype)

    return build


FloatTensor = _legacy_constructor(dtypes.float32)
DoubleTensor = _legacy_constructor(dtypes.float64)
LongTensor = _legacy_constructor(dtypes.int64)
