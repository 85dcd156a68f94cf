"""``gradscope.linalg``: the linear-algebra functions model code calls through ``torch.linalg``
(differentiable, batched over leading dims)."""
from __future__ import annotations

from typing import Any

from gradscope.autograd.tensor import Tensor
from gradscope.ops import reduce
from gradscope.ops.arith import matmul
from gradscope.ops.linalg import cholesky, det, inv, slogdet, solve, solve_triangular

__all__ = ["cholesky", "det", "inv", "matmul", "norm", "slogdet", "solve", "solve_triangular", "vector_norm"]


def vector_norm(x: Tensor, ord: float = 2, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                dtype: Any = None) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (all elements when None), as one vector."""
    return reduce.norm(x, ord, dim, keepdim)


def norm(x: Tensor, ord: Any = None, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """Vector 2-norm by default; Frobenius for matrices when ``ord`` is None or ``'fro'``."""
    if ord in (None, "fro"):
        return reduce.norm(x, 2, dim, keepdim)
    return reduce.norm(x, ord, dim, keepdim)
