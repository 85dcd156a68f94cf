"""Differential tests of more of torch's top-level functions (products, rearrangements, lgamma and
friends, statistics, ``renorm``, ``trapezoid``, ``masked_scatter``, ...) and ``gradscope.linalg``'s
additions: values and the gradients of every float input against PyTorch, in float32 and float64.

Each case's ``fn(T, *tensors)`` is written once against the PyTorch API and run with ``T = gradscope``
and ``T = torch``; the backward pass seeds every output element with a different weight.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


def _rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-2, 2, size=shape)


def _pos(*shape: int) -> np.ndarray:
    return RNG.uniform(0.3, 3, size=shape)


def _distinct(*shape: int) -> np.ndarray:
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.37 - n * 0.15).reshape(shape)


def _square(n: int, batch: tuple = ()) -> np.ndarray:
    return RNG.uniform(-1, 1, size=batch + (n, n)) + 2 * np.eye(n)


CASES: dict[str, tuple[Callable, list]] = {
    "cross_dim": (lambda T, a, b: T.cross(a, b, dim=1), [_rand(4, 3, 2), _rand(4, 3, 2)]),
    "linalg_cross_broadcast": (lambda T, a, b: T.linalg.cross(a, b), [_rand(5, 3), _rand(1, 3)]),
    "tensor_cross": (lambda T, a, b: a.cross(b, dim=-1), [_rand(2, 3), _rand(2, 3)]),
    "kron_2d": (lambda T, a, b: T.kron(a, b), [_rand(2, 3), _rand(3, 2)]),
    "kron_mixed_rank": (lambda T, a, b: T.kron(a, b), [_rand(3), _rand(2, 2)]),
    "rot90_k1": (lambda T, a: T.rot90(a, 1, [0, 1]), [_rand(2, 3, 4)]),
    "rot90_k2": (lambda T, a: T.rot90(a, 2, [1, 2]), [_rand(2, 3, 4)]),
    "rot90_k3_method": (lambda T, a: a.rot90(-1, [2, 0]), [_rand(2, 3, 4)]),
    "hypot": (lambda T, a, b: T.hypot(a, b), [_rand(3, 4), _rand(4)]),
    "inner": (lambda T, a, b: T.inner(a, b), [_rand(2, 3, 4), _rand(5, 4)]),
    "inner_scalar": (lambda T, a, b: T.inner(a, b), [_rand(), _rand(3)]),
    "block_diag": (lambda T, a, b, c: T.block_diag(a, b, c), [_rand(2, 3), _rand(3), _rand()]),
    "cartesian_prod": (lambda T, a, b: T.cartesian_prod(a, b), [_rand(3), _rand(2)]),
    "combinations": (lambda T, a: T.combinations(a, 2), [_rand(4)]),
    "combinations_replace": (lambda T, a: T.combinations(a, 3, with_replacement=True), [_rand(3)]),
    "lgamma": (lambda T, a: T.lgamma(a), [np.concatenate([_pos(6), -_pos(4) - 0.05, [-2.5, 0.7, 12.0]])]),
    "logcumsumexp": (lambda T, a: T.logcumsumexp(a, 1), [_rand(3, 5) * 20]),
    "logcumsumexp_dim0": (lambda T, a: a.logcumsumexp(0), [_rand(4, 2)]),
    "renorm": (lambda T, a: T.renorm(a, 2, 0, 1.5), [_rand(4, 3)]),
    "renorm_p1_dim1": (lambda T, a: a.renorm(1, 1, 2.0), [_rand(3, 4, 2)]),
    "trapezoid": (lambda T, a: T.trapezoid(a), [_rand(3, 5)]),
    "trapezoid_dx": (lambda T, a: T.trapezoid(a, dx=0.5, dim=0), [_rand(3, 5)]),
    "trapezoid_x": (lambda T, a, x: T.trapezoid(a, x), [_rand(3, 5), np.sort(_rand(5))]),
    "trapz_x": (lambda T, a, x: T.trapz(a, x, dim=0), [_rand(4, 2), np.sort(_rand(4))]),
    "matrix_power_3": (lambda T, a: T.matrix_power(a, 3), [_square(3, (2,))]),
    "matrix_power_neg": (lambda T, a: T.linalg.matrix_power(a, -2), [_square(3)]),
    "matrix_power_method": (lambda T, a: a.matrix_power(5), [_square(2) / 2]),
    "masked_scatter": (lambda T, a, s: a.masked_scatter(T.tensor([[True, False, True], [False, True, True]]), s),
                       [_rand(2, 3), _rand(6)]),
    "masked_scatter_broadcast": (lambda T, a, s: T.masked_scatter(a, T.tensor([True, False, True]), s),
                                 [_rand(2, 3), _rand(2, 3)]),
    "cov": (lambda T, a: T.cov(a), [_rand(3, 6)]),
    "cov_vector": (lambda T, a: T.cov(a, correction=0), [_rand(6)]),
    "cov_weights": (lambda T, a, w: T.cov(a, fweights=T.tensor([1, 2, 1, 3, 1]), aweights=w),
                    [_rand(2, 5), _pos(5)]),
    "quantile": (lambda T, a: T.quantile(a, 0.3), [_distinct(3, 4)]),
    "quantile_dim": (lambda T, a: T.quantile(a, T.tensor([0.1, 0.5, 0.9], dtype=a.dtype), dim=1, keepdim=True),
                     [_distinct(3, 5)]),
    "quantile_modes": (lambda T, a: T.stack([a.quantile(0.35, 0, interpolation=m) for m in
                                             ("lower", "higher", "midpoint", "nearest")]), [_distinct(6, 2)]),
    "nanquantile": (lambda T, a: T.nanquantile(T.where(a > 1.5, float("nan"), a), 0.4, dim=0), [_distinct(5, 3)]),
    "mode": (lambda T, a: T.mode(T.round(a), 1).values, [_rand(4, 7)]),
    "multi_dot": (lambda T, a, b, c: T.linalg.multi_dot([a, b, c]), [_rand(3), _rand(3, 4), _rand(4, 2)]),
    "multi_dot_vectors": (lambda T, a, b: T.linalg.multi_dot([a, b]), [_rand(4), _rand(4)]),
    "matrix_norm_fro": (lambda T, a: T.linalg.matrix_norm(a), [_rand(2, 3, 4)]),
    "matrix_norm_nuc": (lambda T, a: T.linalg.matrix_norm(a, "nuc"), [_rand(2, 3, 4)]),
    "matrix_norm_2": (lambda T, a: T.linalg.matrix_norm(a, 2, keepdim=True), [_rand(3, 4)]),
    "matrix_norm_m2": (lambda T, a: T.linalg.matrix_norm(a, -2, dim=(0, 2)), [_rand(3, 2, 4)]),
    "matrix_norm_1": (lambda T, a: T.linalg.matrix_norm(a, 1), [_distinct(2, 3, 4)]),
    "matrix_norm_minf": (lambda T, a: T.linalg.matrix_norm(a, -float("inf"), dim=(2, 1), keepdim=True),
                         [_distinct(2, 3, 4)]),
    "svdvals": (lambda T, a: T.linalg.svdvals(a), [_rand(2, 4, 3)]),
    "cosine_similarity": (lambda T, a, b: T.cosine_similarity(a, b, dim=0), [_rand(3, 4), _rand(3, 4)]),
    "pairwise_distance": (lambda T, a, b: T.pairwise_distance(a, b), [_rand(3, 4), _rand(3, 4)]),
    "sgn": (lambda T, a: T.sgn(a) * a, [_rand(5)]),
}


def _run(T: Any, fn: Callable, arrays: list, dtype: str) -> tuple:
    tensors = [T.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(T, *tensors)
    weights = np.arange(1, out.numel() + 1, dtype=dtype).reshape(tuple(out.shape)) / out.numel()
    (out * T.tensor(weights)).sum().backward()
    grads = [None if t.grad is None else t.grad.numpy() for t in tensors]
    return out.detach().numpy(), grads


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name: str, dtype: str) -> None:
    fn, arrays = CASES[name]
    ours, our_grads = _run(gs, fn, arrays, dtype)
    theirs, their_grads = _run(torch, fn, arrays, dtype)
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == "float32" else dict(rtol=1e-9, atol=1e-11)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, **tol)
    for mine, reference in zip(our_grads, their_grads):
        assert (mine is None) == (reference is None)
        if reference is not None:
            np.testing.assert_allclose(mine, reference, **tol)


def test_lgamma_poles_and_digamma_far_out() -> None:
    x = np.array([0.0, -1.0, -3.0, np.inf, 1e-3, 50.5, -0.5])
    ours = gs.tensor(x, requires_grad=True)
    theirs = torch.tensor(x, requires_grad=True)
    np.testing.assert_allclose(gs.lgamma(ours).detach().numpy(), torch.lgamma(theirs).detach().numpy())
    gs.lgamma(ours).sum().backward()
    torch.lgamma(theirs).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12, equal_nan=True)


def test_logcumsumexp_gradient_stays_finite_with_a_wide_range() -> None:
    x = np.array([-300.0, 0.0, 400.0, -50.0])
    g = np.array([1.0, -2.0, 0.5, 3.0])
    ours, theirs = gs.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    (gs.logcumsumexp(ours, 0) * gs.tensor(g)).sum().backward()
    (torch.logcumsumexp(theirs, 0) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("fn", [
    lambda T, a: T.signbit(T.tensor([-0.0, 0.0, -1.5, 2.0, float("nan")])),
    lambda T, a: T.heaviside(a, T.tensor(0.5, dtype=a.dtype)),
    lambda T, a: T.unique_consecutive(T.tensor([1, 1, 2, 2, 3, 1, 1, 2]), return_inverse=True, return_counts=True),
    lambda T, a: T.unique_consecutive(T.tensor([[1, 1], [1, 1], [2, 0], [1, 1]]), return_counts=True, dim=0),
    lambda T, a: T.unique_consecutive(T.tensor([[1, 1, 2], [1, 1, 2]]), return_inverse=True, dim=1),
    lambda T, a: T.mode(T.tensor([[1.0, 2, 2, 3, 3], [5, 5, 1, 1, 0]])),
    lambda T, a: T.mode(T.tensor([[1.0, 2], [2, 3], [2, 1]]), 0, keepdim=True),
    lambda T, a: T.combinations(T.arange(2.0), r=3),
    lambda T, a: T.block_diag(T.ones(2, 2), T.tensor([[1, 2]])),
])
def test_nondifferentiable_results_match_torch(fn: Callable) -> None:
    a = np.array([-1.0, 0.0, 2.0])
    ours, theirs = fn(gs, gs.tensor(a)), fn(torch, torch.tensor(a))
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for mine, reference in zip(ours, theirs):
        assert str(mine.dtype).split(".")[-1] == str(reference.dtype).split(".")[-1]
        np.testing.assert_array_equal(mine.numpy(), reference.numpy())


def test_heaviside_has_no_derivative_like_torch() -> None:
    x = gs.tensor([-1.0, 0.0, 1.0], requires_grad=True)
    out = gs.heaviside(x, gs.tensor(0.5))
    with pytest.raises(RuntimeError, match="derivative for 'heaviside' is not implemented"):
        out.sum().backward()


def test_deprecated_forms_warn_like_torch() -> None:
    a = np.ones((3, 3))
    for fn in (lambda T: T.cross(T.tensor(a), T.tensor(a)), lambda T: T.chain_matmul(T.tensor(a), T.tensor(a))):
        with warnings.catch_warnings(record=True) as ours:
            warnings.simplefilter("always")
            fn(gs)
        assert len(ours) == 1 and ours[0].category is UserWarning and ours[0].filename == __file__
        with warnings.catch_warnings(record=True) as theirs:
            warnings.simplefilter("always")
            fn(torch)
        assert str(ours[0].message).split()[:4] == str(theirs[0].message).split()[:4]


@pytest.mark.parametrize("fn, message", [
    (lambda: gs.quantile(gs.ones(3), 1.5), "q values must be in the range"),
    (lambda: gs.quantile(gs.ones(3), 0.5, interpolation="cubic"), "interpolation must be one of"),
    (lambda: gs.linalg.cross(gs.ones(2, 4), gs.ones(2, 4)), "must have length 3"),
    (lambda: gs.matrix_power(gs.ones(2, 3), 2), "square matrices"),
    (lambda: gs.linalg.multi_dot([gs.ones(2, 2)]), "at least 2 tensors"),
    (lambda: gs.masked_scatter(gs.ones(3), gs.tensor([True, True, True]), gs.ones(2)), "at least as many"),
])
def test_errors(fn: Callable, message: str) -> None:
    with pytest.raises(RuntimeError, match=message):
        fn()


def _sym(n: int, batch: tuple = ()) -> np.ndarray:
    a = RNG.uniform(-1, 1, size=batch + (n, n))
    return a + np.swapaxes(a, -1, -2)


DECOMPOSITIONS: dict[str, tuple[Callable, list]] = {
    "eigh": (lambda T, a: T.linalg.eigh(a), [_sym(4, (2,))]),
    "eigh_upper_values": (lambda T, a: T.linalg.eigh(a, UPLO="U").eigenvalues, [_rand(3, 3)]),
    "eigh_vectors_only": (lambda T, a: T.linalg.eigh(a)[1], [_sym(3)]),
    "eigvalsh": (lambda T, a: T.linalg.eigvalsh(a), [_sym(5)]),
    "svd_tall": (lambda T, a: T.linalg.svd(a, full_matrices=False), [_rand(5, 3)]),
    "svd_wide": (lambda T, a: T.linalg.svd(a, full_matrices=False), [_rand(2, 3, 5)]),
    "svd_square_full": (lambda T, a: T.linalg.svd(a), [_rand(4, 4)]),
    "svd_values_full": (lambda T, a: T.linalg.svd(a)[1], [_rand(5, 3)]),
    "svd_u_only": (lambda T, a: T.linalg.svd(a, full_matrices=False).U, [_rand(5, 3)]),
    "qr_tall": (lambda T, a: T.linalg.qr(a), [_rand(5, 3)]),
    "qr_square_batch": (lambda T, a: T.linalg.qr(a), [_rand(2, 4, 4)]),
    "qr_wide": (lambda T, a: T.linalg.qr(a), [_rand(3, 5)]),
    "qr_r_only": (lambda T, a: T.linalg.qr(a).R, [_rand(4, 3)]),
    "pinv_tall": (lambda T, a: T.linalg.pinv(a), [_rand(5, 3)]),
    "pinv_wide_batch": (lambda T, a: T.linalg.pinv(a), [_rand(2, 2, 4)]),
}


def _run_many(T: Any, fn: Callable, arrays: list, dtype: str) -> tuple:
    tensors = [T.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    outs = fn(T, *tensors)
    outs = tuple(outs) if isinstance(outs, tuple) else (outs,)
    total = 0
    for k, out in enumerate(outs):
        # sign-invariant functions of eigen/singular vectors and Q (whose columns' signs are arbitrary)
        weights = T.tensor((np.arange(out.numel(), dtype=dtype).reshape(tuple(out.shape)) + k + 1) / out.numel())
        total = total + ((out * out) * weights).sum() if out.ndim >= 2 else total + (out * weights).sum()
    total.backward()
    return [(o * o).detach().numpy() if o.ndim >= 2 else o.detach().numpy() for o in outs], tensors[0].grad.numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(DECOMPOSITIONS))
def test_decompositions_match_torch(name: str, dtype: str) -> None:
    fn, arrays = DECOMPOSITIONS[name]
    ours, our_grad = _run_many(gs, fn, arrays, dtype)
    theirs, their_grad = _run_many(torch, fn, arrays, dtype)
    tol = dict(rtol=2e-3, atol=2e-4) if dtype == "float32" else dict(rtol=1e-8, atol=1e-10)
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, **tol)
    np.testing.assert_allclose(our_grad, their_grad, **tol)


def test_full_svd_of_a_non_square_matrix_differentiates_only_the_singular_values() -> None:
    a = gs.tensor(_rand(4, 2), requires_grad=True)
    U, S, Vh = gs.linalg.svd(a)
    assert tuple(U.shape) == (4, 4)
    S.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), torch.linalg.svd(torch.tensor(a.detach().numpy()))[0][:, :2].numpy()
                               @ torch.linalg.svd(torch.tensor(a.detach().numpy()))[2].numpy(), rtol=1e-10)
    with pytest.raises(RuntimeError, match="full_matrices=False"):
        gs.linalg.svd(a)[0].sum().backward()


def test_pinv_of_a_rank_deficient_matrix_matches_torch() -> None:
    a = np.outer(_rand(4), _rand(3))
    np.testing.assert_allclose(gs.linalg.pinv(gs.tensor(a)).numpy(), torch.linalg.pinv(torch.tensor(a)).numpy(),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("fn", [
    lambda T, a: tuple(x * x for x in T.svd(a)),
    lambda T, a: tuple(x * x for x in a.svd(some=True)),
    lambda T, a: tuple(x * x for x in T.qr(a)),
    lambda T, a: (a.pinverse(),),
    lambda T, a: (T.pinverse(a, rcond=1e-3),),
])
def test_legacy_decomposition_names_match_torch(fn: Callable) -> None:
    a = _rand(4, 3)
    results = []
    for T in (gs, torch):
        x = T.tensor(a, requires_grad=True)
        outs = fn(T, x)
        sum(o.sum() for o in outs).backward()
        results.append(([o.detach().numpy() for o in outs], x.grad.numpy()))
    for mine, reference in zip(results[0][0], results[1][0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-9, atol=1e-12)
