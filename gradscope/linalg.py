"""``gradscope.linalg``: the linear-algebra functions model code calls through ``torch.linalg``
(differentiable, batched over leading dims)."""
from __future__ import annotations

from typing import Any

from gradscope.autograd.tensor import Tensor
from gradscope.ops import pointwise, reduce, shape
from gradscope.ops.arith import matmul
from gradscope.ops.decompositions import eigh, eigvalsh, pinv, qr, svd
from gradscope.ops.linalg import cholesky, det, inv, matrix_power, multi_dot, slogdet, solve, solve_triangular, svdvals
from gradscope.ops.linalg import linalg_cross as cross

__all__ = ["cholesky", "cross", "det", "eigh", "eigvalsh", "inv", "pinv", "qr", "svd", "matmul", "matrix_norm", "matrix_power", "multi_dot", "norm", "slogdet",
           "solve", "solve_triangular", "svdvals", "vector_norm"]


def vector_norm(x: Tensor, ord: float = 2, dim: Any = None, keepdim: bool = False, *,  # noqa: A002
                dtype: Any = None) -> Tensor:
    """The ``ord``-norm of ``x`` over ``dim`` (all elements when None), as one vector."""
    return reduce.norm(x, ord, dim, keepdim)


def norm(x: Tensor, ord: Any = None, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """Vector 2-norm by default; Frobenius for matrices when ``ord`` is None or ``'fro'``."""
    if ord in (None, "fro"):
        return reduce.norm(x, 2, dim, keepdim)
    return reduce.norm(x, ord, dim, keepdim)


def matrix_norm(A: Tensor, ord: Any = "fro", dim: Any = (-2, -1), keepdim: bool = False, *,  # noqa: A002
                dtype: Any = None) -> Tensor:
    """Matrix norm over the two dims ``dim``: ``'fro'``, ``'nuc'``, ``inf``/``-inf`` (max/min absolute row
    sum), ``1``/``-1`` (columns) or ``2``/``-2`` (largest/smallest singular value)."""
    rows, cols = (d % A.ndim for d in dim)
    if ord == "fro":
        return reduce.norm(A, 2, (rows, cols), keepdim)
    if ord in ("nuc", 2, -2):
        moved = shape.movedim(A, (rows, cols), (-2, -1))
        values = svdvals(moved)
        if ord == "nuc":
            out = reduce.sum(values, -1)
        else:
            out = reduce.amax(values, -1) if ord == 2 else reduce.amin(values, -1)
        if keepdim:
            for d in sorted((rows, cols)):
                out = shape.unsqueeze(out, d)
        return out
    if ord in (1, -1, float("inf"), float("-inf")):
        summed, extreme_dim = (rows, cols) if ord in (1, -1) else (cols, rows)
        sums = reduce.sum(pointwise.abs(A), summed, True)
        extreme = reduce.amax if ord > 0 else reduce.amin
        out = extreme(sums, extreme_dim, True)
        return out if keepdim else shape.squeeze(shape.squeeze(out, max(rows, cols)), min(rows, cols))
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
