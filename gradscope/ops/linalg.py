"""Products beyond matmul: einsum, outer, the ``add*mm`` family, tensordot, cdist, dense stand-ins
for the sparse products small graph models call (``spmm``, ``sparse.mm``), determinants and
solvers; and the products of torch's top level composed from other ops (``cross``, ``kron``,
``inner``, ``block_diag``, ``matrix_power``, ``multi_dot``)."""
from __future__ import annotations

import itertools
import string
import warnings
from typing import Any, Sequence

import numpy as np

from gradscope.autograd.function import new_node, result
from gradscope.autograd.node import Node
from gradscope.autograd.tensor import Tensor
from gradscope.ops import arith, reduce, shape
from gradscope.ops._util import _const, float_input


# ---------------------------------------------------------------- einsum
def _parse_einsum(equation: str, ndims: Sequence[int]) -> tuple[list[str], str]:
    """Explicit subscripts (no ellipsis, with an output) for ``equation`` on operands of ``ndims``."""
    equation = equation.replace(" ", "")
    inputs_part, arrow, output = equation.partition("->")
    specs = inputs_part.split(",")
    if len(specs) != len(ndims):
        raise RuntimeError(f"einsum(): more operands were provided than specified in the equation"
                           if len(ndims) > len(specs) else
                           "einsum(): fewer operands were provided than specified in the equation")
    used = set(equation) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    ellipsis_dims = max((n - len(s.replace("...", "")) for s, n in zip(specs, ndims) if "..." in s), default=0)
    ellipsis = "".join(spare[:ellipsis_dims])
    explicit = []
    for spec, n in zip(specs, ndims):
        if "..." in spec:
            count = n - len(spec.replace("...", ""))
            spec = spec.replace("...", ellipsis[ellipsis_dims - count:] if count else "")
        if len(spec) != n:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(spec)}) does not match "
                               f"the number of dimensions ({n}) for operand {len(explicit)}")
        explicit.append(spec)
    if arrow:
        output = output.replace("...", ellipsis)
    else:
        letters = "".join(explicit)
        output = ellipsis + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ellipsis))
    return explicit, output


class EinsumBackward0(Node):
    __slots__ = ("specs", "output")
    _single_input = False

    def backward(self, g):
        arrays = self.saved()
        sizes: dict = {}
        for spec, a in zip(self.specs, arrays):
            for letter, n in zip(spec, a.shape):
                sizes[letter] = max(sizes.get(letter, 1), n)
        grads = []
        for k, ((node, _), spec, a) in enumerate(zip(self._next, self.specs, arrays)):
            grads.append(None if node is None else self._grad_for(k, spec, a, g, arrays, sizes))
        return tuple(grads)

    def _grad_for(self, k: int, spec: str, a: np.ndarray, g: np.ndarray, arrays: tuple, sizes: dict) -> np.ndarray:
        others = [(s, x) for j, (s, x) in enumerate(zip(self.specs, arrays)) if j != k]
        operands = [(self.output, g)] + others
        unique = "".join(dict.fromkeys(spec))
        present = set("".join(s for s, _ in operands))
        for letter in unique:
            if letter not in present:  # summed over this operand alone: its gradient is broadcast
                operands.append((letter, np.ones(sizes[letter], dtype=g.dtype)))
        grad = np.einsum(",".join(s for s, _ in operands) + "->" + unique, *(x for _, x in operands))
        if len(unique) != len(spec):  # repeated subscripts read a diagonal: write it back with deltas
            spare = iter(c for c in string.ascii_letters if c not in sizes)
            full, deltas = [], []
            seen = set()
            for letter in spec:
                if letter in seen:
                    fresh = next(spare)
                    full.append(fresh)
                    deltas.append((letter + fresh, np.eye(sizes[letter], dtype=g.dtype)))
                else:
                    seen.add(letter)
                    full.append(letter)
            grad = np.einsum(",".join([unique] + [s for s, _ in deltas]) + "->" + "".join(full),
                             grad, *(d for _, d in deltas))
        axes = tuple(i for i, (n, m) in enumerate(zip(a.shape, grad.shape)) if n == 1 and m != 1)
        if axes:
            grad = grad.sum(axis=axes, keepdims=True)
        return grad.astype(g.dtype, copy=False)


def einsum(equation: str, *operands: Any) -> Tensor:
    """Einstein summation over ``operands`` (ellipsis, implicit output and repeated subscripts)."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    specs, output = _parse_einsum(equation, [t._data.ndim for t in operands])
    explicit = ",".join(specs) + "->" + output
    out = np.einsum(explicit, *(t._data for t in operands), optimize=len(operands) > 2)
    node = new_node(EinsumBackward0, operands)
    if node is not None:
        node.specs, node.output = specs, output
        node.save(*operands)
    return result(np.asarray(out), node)


def tensordot(a: Tensor, b: Tensor, dims: Any = 2) -> Tensor:
    """Contract the last ``dims`` dims of ``a`` with the first of ``b`` (or the listed pairs)."""
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, (int, np.integer)):
        dims_a = list(range(a._data.ndim - int(dims), a._data.ndim))
        dims_b = list(range(int(dims)))
    else:
        dims_a, dims_b = ([d] if isinstance(d, int) else list(d) for d in dims)
    letters = iter(string.ascii_letters)
    spec_a = [next(letters) for _ in range(a._data.ndim)]
    spec_b = [next(letters) for _ in range(b._data.ndim)]
    for da, db in zip(dims_a, dims_b):
        spec_b[db % b._data.ndim] = spec_a[da % a._data.ndim]
    contracted = {spec_a[d % a._data.ndim] for d in dims_a}
    output = [c for c in spec_a if c not in contracted] + [c for c in spec_b if c not in contracted]
    return einsum("".join(spec_a) + "," + "".join(spec_b) + "->" + "".join(output), a, b)


# ---------------------------------------------------------------- outer and add*mm
def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """``input[i] * vec2[j]`` for 1-D tensors."""
    if input._data.ndim != 1 or vec2._data.ndim != 1:
        raise RuntimeError("outer: expected 1-D tensors")
    return arith.mul(shape.unsqueeze(input, 1), shape.unsqueeze(vec2, 0))


ger = outer


def _scaled_sum(input: Tensor, product: Tensor, beta: Any, alpha: Any) -> Tensor:
    """``beta * input + alpha * product``; with ``beta == 0`` the input is ignored (NaN too)."""
    if alpha != 1:
        product = arith.mul(product, alpha)
    if beta == 0:
        return product
    return arith.add(input if beta == 1 else arith.mul(input, beta), product)


def addmm(input: Tensor, mat1: Tensor, mat2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(input, arith.mm(mat1, mat2), beta, alpha)


def addmv(input: Tensor, mat: Tensor, vec: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(input, arith.mv(mat, vec), beta, alpha)


def addr(input: Tensor, vec1: Tensor, vec2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(input, outer(vec1, vec2), beta, alpha)


def baddbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(input, arith.bmm(batch1, batch2), beta, alpha)


def addbmm(input: Tensor, batch1: Tensor, batch2: Tensor, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return _scaled_sum(input, reduce.sum(arith.bmm(batch1, batch2), 0), beta, alpha)


# ---------------------------------------------------------------- distances
def cdist(x1: Tensor, x2: Tensor, p: float = 2.0, compute_mode: str = "use_mm_for_euclid_dist_if_necessary") -> Tensor:
    """p-norm distances between the rows of ``x1`` (..., P, M) and ``x2`` (..., R, M)."""
    if x1._data.ndim < 2 or x2._data.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1._data.ndim}D")
    if x1._data.shape[-1] != x2._data.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1._data.shape[-1]} "
                           f"X2: {x2._data.shape[-1]}")
    difference = arith.sub(shape.unsqueeze(x1, -2), shape.unsqueeze(x2, -3))
    return reduce.norm(difference, p=p, dim=-1)


def dist(input: Tensor, other: Tensor, p: float = 2.0) -> Tensor:
    return reduce.norm(arith.sub(input, other), p=p)


# ---------------------------------------------------------------- sparse products on dense tensors
def spmm(input: Tensor, mat2: Tensor) -> Tensor:
    """``input @ mat2``; gradscope keeps "sparse" matrices dense, so this is ``mm``."""
    return arith.mm(input, mat2)


def sparse_coo_tensor(indices: Any, values: Any, size: Sequence[int] | None = None, *, dtype: Any = None,
                      device: Any = None, requires_grad: bool = False, check_invariants: Any = None,
                      is_coalesced: Any = None) -> Tensor:
    """A dense tensor holding ``values`` at ``indices`` (a (ndim, nnz) tensor); repeated indices
    add up, as when a sparse tensor is coalesced. gradscope has no sparse layout."""
    from gradscope.autograd.device import check_device
    from gradscope.ops.creation import tensor, zeros
    from gradscope.ops.indexing import index_add

    check_device(device)
    index = indices if isinstance(indices, Tensor) else tensor(indices)
    value = values if isinstance(values, Tensor) else tensor(values, dtype=dtype)
    if dtype is not None:
        value = shape.to(value, dtype)
    if size is None:
        size = tuple(int(m) + 1 for m in index._data.max(axis=1)) + tuple(value._data.shape[1:])
    size = tuple(int(s) for s in size)
    sparse_dims = index._data.shape[0]
    flat_index = np.ravel_multi_index(tuple(index._data.astype(np.int64)), size[:sparse_dims])
    dense = zeros(int(np.prod(size[:sparse_dims])), *size[sparse_dims:], dtype=value.dtype)
    out = shape.reshape(index_add(dense, 0, Tensor._make(flat_index.astype(np.int64)), value), size)
    if requires_grad:
        out = out.detach().requires_grad_(True)
    return out


def to_dense(input: Tensor, dtype: Any = None, *, masked_grad: Any = None) -> Tensor:
    """Tensors are always dense in gradscope: the tensor itself (converted to ``dtype``)."""
    return input if dtype is None else shape.to(input, dtype)


def to_sparse(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """``to_sparse()`` / ``to_sparse_coo()``: gradscope has no sparse layout, so the dense tensor itself."""
    return input


def coalesce(input: Tensor) -> Tensor:
    """A dense tensor is already "coalesced": the tensor itself."""
    return input


def sparse_indices(input: Tensor) -> Tensor:
    """``indices()`` of the equivalent sparse COO tensor: the (ndim, nnz) positions of the non-zeros."""
    return Tensor._make(np.stack(np.nonzero(input._data)).astype(np.int64))


def sparse_values(input: Tensor) -> Tensor:
    """``values()`` of the equivalent sparse COO tensor: the non-zeros in row-major order (with gradient)."""
    positions = tuple(Tensor._make(axis.astype(np.int64)) for axis in np.nonzero(input._data))
    return shape.getitem(input, positions)


# ---------------------------------------------------------------- factorisations and solves
def _mT(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


def _unbroadcast_batch(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Sum a batched matrix gradient over the batch dims its input was broadcast along."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    axes = tuple(i for i, n in enumerate(shape[:-2]) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


class LinalgCholeskyExBackward0(Node):
    """``A = L L^T``: ``dA = sym(L^-T Phi(L^T dL) L^-1)``, Phi = lower triangle with a halved diagonal."""

    __slots__ = ("upper",)

    def backward(self, g):
        (lower,) = self.saved()
        if self.upper:
            g = _mT(g)
        phi = np.tril(_mT(lower) @ g)
        phi[..., np.arange(phi.shape[-1]), np.arange(phi.shape[-1])] *= 0.5
        inverse = np.linalg.inv(lower)
        s = _mT(inverse) @ phi @ inverse
        return (0.5 * (s + _mT(s))).astype(g.dtype, copy=False)


def cholesky(input: Tensor, upper: bool = False) -> Tensor:
    """The triangular factor of a symmetric positive-definite (batch of) matrix: ``A = L L^T``."""
    a = input._data
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.cholesky: A must be batches of square matrices, but they are "
                           f"{a.shape[-2] if a.ndim > 1 else 1} by {a.shape[-1]} matrices")
    try:
        lower = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        raise RuntimeError("linalg.cholesky: The factorization could not be completed because the input is not "
                           "positive-definite.") from None
    node = new_node(LinalgCholeskyExBackward0, (input,))
    if node is not None:
        node.upper = upper
        node.save(Tensor._make(lower))
    return result(_mT(lower).copy() if upper else lower, node)


class LinalgSolveTriangularBackward0(Node):
    """``X = A^-1 B``: ``dB = A^-T dX``, ``dA = -tri(dB X^T)``."""

    __slots__ = ("upper", "unitriangular", "a_shape", "b_shape")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, x = self.saved()
        grad_b = np.linalg.solve(_mT(a), g)
        grad_a = None
        if node_a is not None:
            grad_a = -(grad_b @ _mT(x))
            grad_a = np.triu(grad_a, 1 if self.unitriangular else 0) if self.upper else \
                np.tril(grad_a, -1 if self.unitriangular else 0)
            grad_a = _unbroadcast_batch(grad_a, self.a_shape)
        return grad_a, (_unbroadcast_batch(grad_b, self.b_shape) if node_b is not None else None)


def solve_triangular(A: Tensor, B: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False) -> Tensor:
    """``X`` with ``A X = B`` for a triangular ``A`` (only its ``upper`` or lower triangle is read)."""
    if not left:
        return _mT_tensor(solve_triangular(_mT_tensor(A), _mT_tensor(B), upper=not upper,
                                           unitriangular=unitriangular))
    a = np.triu(A._data) if upper else np.tril(A._data)
    if unitriangular:
        eye = np.eye(a.shape[-1], dtype=bool)
        a = np.where(eye, 1, a).astype(A._data.dtype)
    batch = np.broadcast_shapes(a.shape[:-2], B._data.shape[:-2])
    a_full = np.broadcast_to(a, batch + a.shape[-2:])
    x = np.linalg.solve(a_full, np.broadcast_to(B._data, batch + B._data.shape[-2:]))
    node = new_node(LinalgSolveTriangularBackward0, (A, B))
    if node is not None:
        node.upper, node.unitriangular = upper, unitriangular
        node.a_shape, node.b_shape = A._data.shape, B._data.shape
        node.save(Tensor._make(np.ascontiguousarray(a_full)), Tensor._make(x))
    return result(x, node)


def _mT_tensor(t: Tensor) -> Tensor:
    return shape.transpose(t, -1, -2)


class LinalgInvExBackward0(Node):
    """``X = A^-1``: ``dA = -X^T dX X^T``."""

    __slots__ = ()

    def backward(self, g):
        (inverse,) = self.saved()
        return -(_mT(inverse) @ g @ _mT(inverse))


def inv(input: Tensor) -> Tensor:
    """The inverse of a (batch of) square matrix."""
    try:
        out = np.linalg.inv(input._data)
    except np.linalg.LinAlgError:
        raise RuntimeError("linalg.inv: The diagonal element 1 is zero, the inversion could not be completed "
                           "because the input matrix is singular.") from None
    node = new_node(LinalgInvExBackward0, (input,))
    if node is not None:
        node.save(Tensor._make(out))
    return result(out, node)


inverse = inv


class LinalgSolveExBackward0(Node):
    """``X = A^-1 B``: ``dB = A^-T dX``, ``dA = -dB X^T``."""

    __slots__ = ("a_shape", "b_shape", "vector")
    _single_input = False

    def backward(self, g):
        (node_a, _), (node_b, _) = self._next
        a, x = self.saved()
        if self.vector:
            g = g[..., None]
        grad_b = np.linalg.solve(_mT(a), g)
        grad_a = _unbroadcast_batch(-(grad_b @ _mT(x)), self.a_shape) if node_a is not None else None
        if node_b is None:
            return grad_a, None
        if self.vector:
            grad_b = grad_b[..., 0]
            while grad_b.ndim > len(self.b_shape):
                grad_b = grad_b.sum(axis=0)
        else:
            grad_b = _unbroadcast_batch(grad_b, self.b_shape)
        return grad_a, grad_b


def solve(A: Tensor, B: Tensor, *, left: bool = True) -> Tensor:
    """``X`` with ``A X = B`` (``X A = B`` when ``left=False``); ``B`` may be a (batch of) vector."""
    if not left:
        return _mT_tensor(solve(_mT_tensor(A), _mT_tensor(B)))
    a, b = A._data, B._data
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    rhs = b[..., None] if vector else b
    batch = np.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    a_full = np.broadcast_to(a, batch + a.shape[-2:])
    try:
        x = np.linalg.solve(a_full, np.broadcast_to(rhs, batch + rhs.shape[-2:]))
    except np.linalg.LinAlgError:
        raise RuntimeError("linalg.solve: The solver failed because the input matrix is singular.") from None
    node = new_node(LinalgSolveExBackward0, (A, B))
    if node is not None:
        node.a_shape, node.b_shape, node.vector = a.shape, b.shape, vector
        node.save(Tensor._make(np.ascontiguousarray(a_full)), Tensor._make(x))
    return result(x[..., 0] if vector else x, node)


class LinalgDetBackward0(Node):
    """``d det(A) = det(A) A^-T``."""

    __slots__ = ()

    def backward(self, g):
        a, det = self.saved()
        return (g * det)[..., None, None] * _mT(np.linalg.inv(a))


def det(input: Tensor) -> Tensor:
    """The determinant of a (batch of) square matrix."""
    value = np.asarray(np.linalg.det(input._data))
    node = new_node(LinalgDetBackward0, (input,))
    if node is not None:
        node.save(input, Tensor._make(value))
    return result(value, node)


class LinalgSlogdetBackward0(Node):
    """``d log|det A| = A^-T``; the sign has no gradient."""

    __slots__ = ()

    def backward(self, g_sign, g_logabsdet):
        (a,) = self.saved()
        if g_logabsdet is None:
            return None
        return g_logabsdet[..., None, None] * _mT(np.linalg.inv(a))


def slogdet(input: Tensor) -> tuple:
    """``(sign, logabsdet)`` of a (batch of) square matrix."""
    from gradscope.autograd.function import results

    sign, logabsdet = np.linalg.slogdet(input._data)
    node = new_node(LinalgSlogdetBackward0, (input,))
    if node is not None:
        node.save(input)
    sign_t, log_t = results([np.asarray(sign), np.asarray(logabsdet)], node)
    sign_t = Tensor._make(sign_t._data)
    return sign_t, log_t


def logdet(input: Tensor) -> Tensor:
    """``log det A`` (nan for a negative determinant, -inf for a singular matrix)."""
    sign, logabsdet = slogdet(input)
    return arith.add(logabsdet, Tensor._make(np.where(sign._data < 0, np.nan, 0.0).astype(logabsdet._data.dtype)))


class LinalgSvdvalsBackward0(Node):
    """Singular values of a (batch of) matrix: ``dA = U diag(g) Vh`` (reduced SVD)."""

    __slots__ = ("u", "vh")

    def backward(self, g):
        return np.matmul(self.u * g[..., None, :], self.vh).astype(g.dtype, copy=False)


def svdvals(input: Tensor) -> Tensor:
    """The singular values of each matrix of ``input`` (descending), differentiable."""
    a = float_input(input)
    if a.ndim < 2:
        raise RuntimeError("linalg.svd: The input tensor A must have at least 2 dimensions.")
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    node = new_node(LinalgSvdvalsBackward0, (input,))
    if node is not None:
        node.u, node.vh = u, vh
    return result(s.astype(a.dtype, copy=False), node)


# ============================== cross, kron, inner, block_diag, matrix_power, multi_dot
def _cross_last(a: Tensor, b: Tensor, dim: int) -> Tensor:
    a, b = shape.broadcast_tensors(a, b)
    if a.shape[dim] != 3:
        raise RuntimeError(f"cross: inputs dimension {dim} must have length 3. Got {a.shape[dim]} and "
                           f"{b.shape[dim]}")
    a1, a2, a3 = shape.unbind(a, dim)
    b1, b2, b3 = shape.unbind(b, dim)
    parts = [arith.sub(arith.mul(a2, b3), arith.mul(a3, b2)), arith.sub(arith.mul(a3, b1), arith.mul(a1, b3)),
             arith.sub(arith.mul(a1, b2), arith.mul(a2, b1))]
    return shape.stack(parts, dim)


def linalg_cross(input: Tensor, other: Tensor, *, dim: int = -1) -> Tensor:
    """Cross product of 3-vectors along ``dim`` (inputs broadcast), like ``torch.cross``."""
    return _cross_last(input, other, dim)


def cross(input: Tensor, other: Tensor, dim: int | None = None) -> Tensor:
    """``torch.cross``: along ``dim``, or (deprecated, warns) along the first dim of length 3."""
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the "
                      "dim explicitly or simply use torch.cross.\nThe default value of dim will change "
                      "to agree with that of cross in a future release.", UserWarning, stacklevel=3)
        sizes = np.broadcast_shapes(tuple(input.shape), tuple(other.shape))
        dim = next((i for i, s in enumerate(sizes) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    return _cross_last(input, other, dim)


def kron(input: Tensor, other: Tensor) -> Tensor:
    """Kronecker product: block ``(i, j, ...)`` of the result is ``input[i, j, ...] * other``."""
    nd = max(input.ndim, other.ndim)
    a = shape.reshape(input, (1,) * (nd - input.ndim) + tuple(input.shape))
    b = shape.reshape(other, (1,) * (nd - other.ndim) + tuple(other.shape))
    a_sizes, b_sizes = tuple(a.shape), tuple(b.shape)
    a = shape.reshape(a, tuple(itertools.chain.from_iterable((s, 1) for s in a_sizes)))
    b = shape.reshape(b, tuple(itertools.chain.from_iterable((1, s) for s in b_sizes)))
    return shape.reshape(arith.mul(a, b), tuple(x * y for x, y in zip(a_sizes, b_sizes)))


def inner(input: Tensor, other: Tensor) -> Tensor:
    """Sum of products over the last dims: shape ``input.shape[:-1] + other.shape[:-1]``."""
    if input.ndim == 0 or other.ndim == 0:
        return arith.mul(input, other)
    n = input.shape[-1]
    if other.shape[-1] != n:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    flat = arith.matmul(shape.reshape(input, (-1, n)), shape.t(shape.reshape(other, (-1, n))))
    return shape.reshape(flat, tuple(input.shape[:-1]) + tuple(other.shape[:-1]))


def block_diag(*tensors: Tensor) -> Tensor:
    """A block-diagonal matrix of the given 0-, 1- or 2-D tensors (a 1-D one is a row)."""
    blocks = []
    for t in tensors:
        if t.ndim > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer dimensions. Input "
                               f"{len(blocks)} has {t.ndim} dimensions")
        blocks.append(shape.reshape(t, (1, 1) if t.ndim == 0 else (1, -1) if t.ndim == 1 else tuple(t.shape)))
    if not blocks:
        return Tensor._make(np.zeros((0, 0), dtype=np.float32))
    floats = [b._data.dtype for b in blocks if b._data.dtype.kind == "f"]
    dtype = np.result_type(*floats) if floats else np.result_type(*[b._data.dtype for b in blocks])
    blocks = [shape.to_dtype(b, dtype.name) if b._data.dtype != dtype else b for b in blocks]
    total = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        r, c = b.shape
        parts = [_const(np.zeros((r, left), dtype)), b, _const(np.zeros((r, total - left - c), dtype))]
        rows.append(shape.cat(parts, 1))
        left += c
    return shape.cat(rows, 0)


def matrix_power(input: Tensor, n: int) -> Tensor:
    """``input`` (a batch of square matrices) multiplied by itself ``n`` times (the inverse's for n < 0)."""
    if input.ndim < 2 or input.shape[-1] != input.shape[-2]:
        raise RuntimeError("matrix_power: A must be batches of square matrices, but they are "
                           f"{input.shape[-2] if input.ndim >= 2 else 1} by {input.shape[-1]} matrices")
    if n == 0:
        eye = np.broadcast_to(np.eye(input.shape[-1], dtype=input._data.dtype), input.shape)
        return _const(eye.copy())
    from gradscope.ops.linalg import inv

    base = inv(input) if n < 0 else input
    n = abs(n)
    out = None
    while n:
        if n & 1:
            out = base if out is None else arith.matmul(out, base)
        n >>= 1
        if n:
            base = arith.matmul(base, base)
    return out


def multi_dot(tensors: Sequence[Tensor]) -> Tensor:
    """The product of a chain of matrices; a 1-D first (last) operand is a row (column) vector."""
    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first_vector, last_vector = tensors[0].ndim == 1, tensors[-1].ndim == 1
    if first_vector:
        tensors[0] = shape.unsqueeze(tensors[0], 0)
    if last_vector:
        tensors[-1] = shape.unsqueeze(tensors[-1], 1)
    for i, t in enumerate(tensors):
        if t.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.ndim}D")
    out = tensors[0]
    for t in tensors[1:]:
        out = arith.matmul(out, t)
    if first_vector:
        out = shape.squeeze(out, 0)
    if last_vector:
        out = shape.squeeze(out, -1)
    return out


def chain_matmul(*matrices: Tensor) -> Tensor:
    """Deprecated ``torch.chain_matmul`` (warns like torch): the product of 2-D matrices."""
    warnings.warn("torch.chain_matmul is deprecated and will be removed in a future PyTorch release. Use "
                  "torch.multi_dot instead, which accepts a list of two or more tensors rather than "
                  "multiple parameters.", UserWarning, stacklevel=2)
    if len(matrices) == 1:
        return shape.clone(matrices[0])
    return multi_dot(matrices)
