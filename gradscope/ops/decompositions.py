"""Matrix decompositions with gradients: ``linalg.eigh``/``eigvalsh``, ``linalg.svd``, ``linalg.qr`` and
``linalg.pinv`` (numpy computes the forward; the backward formulas are the standard ones PyTorch
uses). All take batches of matrices in the last two dims; real dtypes only.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np

from gradscope.autograd.function import new_node, results
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, shape
from gradscope.ops._util import float_input
from gradscope.ops.pointwise import where

__all__ = ["eigh", "eigvalsh", "pinv", "pinverse", "qr", "qr_legacy", "svd", "svd_legacy"]

EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
SvdResult = namedtuple("SvdResult", ["U", "S", "Vh"])
QrResult = namedtuple("QrResult", ["Q", "R"])


def _mT(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def _square_input(a: np.ndarray, name: str) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.{name}: A must be batches of square matrices, but they are "
                           f"{a.shape[-2] if a.ndim >= 2 else 1} by {a.shape[-1]} matrices")


def _off_diagonal_differences(values: np.ndarray) -> np.ndarray:
    """``E[..., i, j] = values[j] - values[i]`` with ones on the diagonal (safe to divide by)."""
    diff = values[..., None, :] - values[..., :, None]
    index = np.arange(values.shape[-1])
    diff[..., index, index] = 1
    return diff


class LinalgEighBackward0(Node):
    """``dA = V (diag(gL) + skew(V^T gV) / E) V^T`` with ``E_ij = L_j - L_i``."""

    __slots__ = ()

    def backward(self, g_values, g_vectors):
        values, vectors = self.saved()
        inner = np.zeros(vectors.shape, dtype=vectors.dtype)
        if g_vectors is not None:
            vhgv = _mT(vectors) @ g_vectors
            inner = 0.5 * (vhgv - _mT(vhgv)) / _off_diagonal_differences(values)
        if g_values is not None:
            index = np.arange(values.shape[-1])
            inner[..., index, index] += g_values
        return (vectors @ inner @ _mT(vectors)).astype(vectors.dtype, copy=False)


def eigh(A: Tensor, UPLO: str = "L") -> EighResult:  # noqa: N803
    """Eigenvalues (ascending) and orthonormal eigenvectors of symmetric matrices (only the ``UPLO``
    triangle is read)."""
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    a = float_input(A)
    _square_input(a, "eigh")
    values, vectors = np.linalg.eigh(a, UPLO=UPLO)
    values, vectors = values.astype(a.dtype, copy=False), vectors.astype(a.dtype, copy=False)
    node = new_node(LinalgEighBackward0, (A,))
    if node is not None:
        node.save(Tensor._make(values), Tensor._make(vectors))
    return EighResult(*results([values, vectors], node))


def eigvalsh(A: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803
    """The eigenvalues (ascending) of symmetric matrices."""
    return eigh(A, UPLO).eigenvalues


class LinalgSvdBackward0(Node):
    """The reduced SVD's backward (real case), as in PyTorch's ``svd_backward``; with ``full_matrices``
    on a non-square input only the singular values can be differentiated (U or Vh are not unique)."""

    __slots__ = ("full",)

    def backward(self, gU, gS, gVh):  # noqa: N803
        U, S, Vh = self.saved()
        m, n, k = U.shape[-2], Vh.shape[-1], S.shape[-1]
        if self.full and m != n and (gU is not None or gVh is not None):
            raise RuntimeError("linalg.svd: The derivative of linalg.svd depends on the full U or Vh, which is "
                               "not unique. Use full_matrices=False (or linalg.svdvals for the singular values).")
        U, Vh = U[..., :, :k], Vh[..., :k, :]
        if gU is None and gVh is None:
            return (U @ (gS[..., :, None] * Vh)).astype(U.dtype, copy=False)
        V = _mT(Vh)
        gV = None if gVh is None else _mT(gVh)
        inner = 0
        if gU is not None:
            uhgu = _mT(U) @ gU
            inner = (uhgu - _mT(uhgu)) * S[..., None, :]
        if gV is not None:
            vhgv = _mT(V) @ gV
            inner = inner + S[..., :, None] * (vhgv - _mT(vhgv))
        inner = inner / _off_diagonal_differences(S * S)
        if gS is not None:
            index = np.arange(k)
            inner[..., index, index] += gS
        if m > n and gU is not None:
            scaled = gU / S[..., None, :]
            grad = (U @ inner + scaled - U @ (_mT(U) @ scaled)) @ Vh
        elif m < n and gV is not None:
            scaled = gV / S[..., None, :]
            grad = U @ (inner @ Vh + _mT(scaled) - (_mT(scaled) @ V) @ Vh)
        else:
            grad = U @ inner @ Vh
        return grad.astype(U.dtype, copy=False)


def svd(A: Tensor, full_matrices: bool = True, *, driver: Any = None) -> SvdResult:  # noqa: N803
    """``A = U diag(S) Vh`` with descending singular values. Differentiable; with ``full_matrices`` on a
    non-square input only through ``S`` (PyTorch's rule)."""
    a = float_input(A)
    if a.ndim < 2:
        raise RuntimeError("linalg.svd: The input tensor A must have at least 2 dimensions.")
    U, S, Vh = (x.astype(a.dtype, copy=False) for x in np.linalg.svd(a, full_matrices=full_matrices))
    node = new_node(LinalgSvdBackward0, (A,))
    if node is not None:
        node.full = full_matrices
        node.save(Tensor._make(U), Tensor._make(S), Tensor._make(Vh))
    return SvdResult(*results([U, S, Vh], node))


class LinalgQrBackward0(Node):
    """Reduced QR of a tall (m >= n) matrix: ``dA = (gQ + Q copyltu(M)) R^-T``, ``M = R gR^T - gQ^T Q``."""

    __slots__ = ()

    def backward(self, gQ, gR):  # noqa: N803
        Q, R = self.saved()
        M = np.zeros(R.shape[:-2] + (R.shape[-1], R.shape[-1]), dtype=R.dtype)
        if gR is not None:
            M = M + R @ _mT(gR)
        if gQ is not None:
            M = M - _mT(gQ) @ Q
        lower = np.tril(M, -1)
        copyltu = lower + _mT(lower) + np.eye(M.shape[-1], dtype=M.dtype) * np.diagonal(M, 0, -2, -1)[..., None, :]
        rhs = Q @ copyltu
        if gQ is not None:
            rhs = rhs + gQ
        # rhs @ R^-T  ==  solve(R, rhs^T)^T
        return _mT(np.linalg.solve(R, _mT(rhs))).astype(Q.dtype, copy=False)


def _qr_tall(A: Tensor) -> QrResult:  # noqa: N803
    a = float_input(A)
    Q, R = (x.astype(a.dtype, copy=False) for x in np.linalg.qr(a, mode="reduced"))
    node = new_node(LinalgQrBackward0, (A,))
    if node is not None:
        node.save(Tensor._make(Q), Tensor._make(R))
    return QrResult(*results([Q, R], node))


def qr(A: Tensor, mode: str = "reduced") -> QrResult:  # noqa: N803
    """``A = Q R`` (``mode`` ``'reduced'``, ``'complete'`` or ``'r'``); differentiable for ``'reduced'``
    (and ``'complete'`` when m <= n), as in PyTorch."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), "
                           "'r', or 'complete'")
    a = float_input(A)
    if a.ndim < 2:
        raise RuntimeError("linalg.qr: The input tensor A must have at least 2 dimensions.")
    m, n = a.shape[-2:]
    if mode == "r":
        R = np.linalg.qr(a, mode="r").astype(a.dtype, copy=False)
        return QrResult(Tensor._make(np.zeros((0,), dtype=a.dtype)), Tensor._make(R))
    if mode == "complete" and m > n:
        Q, R = (x.astype(a.dtype, copy=False) for x in np.linalg.qr(a, mode="complete"))
        if A.requires_grad:
            raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'"
                               " or not unique when mode='complete' and m > n. Please use mode='reduced'.")
        return QrResult(Tensor._make(Q), Tensor._make(R))
    if m >= n:
        return _qr_tall(A)
    # wide: A = [X | Y] with X square, Q R_x = X, R = [R_x | Q^T Y]
    left = shape.narrow(A, -1, 0, m)
    right = shape.narrow(A, -1, m, n - m)
    Q, Rx = _qr_tall(left)
    return QrResult(Q, shape.cat([Rx, arith.matmul(shape.transpose(Q, -1, -2), right)], -1))


def pinv(A: Tensor, *, atol: Any = None, rtol: Any = None, hermitian: bool = False) -> Tensor:  # noqa: N803
    """Moore-Penrose pseudo-inverse through the SVD: singular values at most
    ``max(atol, rtol * largest)`` count as zero (default ``rtol``: ``eps * max(m, n)``). ``hermitian``
    is accepted for PyTorch's signature; the SVD gives the same result for symmetric input."""
    a = float_input(A)
    U, S, Vh = svd(A, full_matrices=False)
    s = S._data
    largest = s.max(axis=-1, keepdims=True) if s.shape[-1] else np.zeros(s.shape[:-1] + (1,), s.dtype)
    if rtol is None:
        rtol = 0.0 if atol is not None and float(np.max(atol)) > 0 else np.finfo(a.dtype).eps * max(a.shape[-2:])
    cutoff = np.maximum(0.0 if atol is None else np.asarray(atol, dtype=s.dtype), rtol * largest)
    keep = Tensor._make(s > cutoff)
    inverse = where(keep, arith.rdiv(where(keep, S, 1.0), 1.0), 0.0)
    scaled = arith.mul(shape.transpose(Vh, -1, -2), shape.unsqueeze(inverse, -2))
    return arith.matmul(scaled, shape.transpose(U, -1, -2))


def svd_legacy(input: Tensor, some: bool = True, compute_uv: bool = True) -> SvdResult:
    """``torch.svd``: ``(U, S, V)`` with ``V`` (not ``Vh``); the reduced factors when ``some``."""
    U, S, Vh = svd(input, full_matrices=not some)
    if not compute_uv:
        return SvdResult(Tensor._make(np.zeros_like(U._data)), S, Tensor._make(np.zeros_like(Vh._data)))
    return SvdResult(U, S, shape.transpose(Vh, -1, -2))


def qr_legacy(input: Tensor, some: bool = True) -> QrResult:
    """``torch.qr``: the reduced factors when ``some``, else the complete ones."""
    return qr(input, "reduced" if some else "complete")


def pinverse(input: Tensor, rcond: float = 1e-15) -> Tensor:
    """``torch.pinverse``: :func:`pinv` with singular values below ``rcond * largest`` dropped."""
    return pinv(input, rtol=rcond)
