"""Loss modules and functions against torch: every option and reduction, values and the gradients of
input and (where differentiable) target; float64 gradient checks; reprs, buffers and errors."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

W3 = np.array([0.5, 2.0, 1.0], dtype=np.float32)
W4 = np.array([1.0, 0.2, 3.0, 0.7], dtype=np.float32)


def logits(*shape: int) -> Callable:
    return lambda rng: rng.standard_normal(shape) * 2


def classes(n: int, *shape: int, ignore: int | None = None) -> Callable:
    def sample(rng: np.random.Generator) -> np.ndarray:
        t = rng.integers(0, n, shape)
        if ignore is not None:
            t.reshape(-1)[::3] = ignore
        return t
    return sample


def probabilities(*shape: int, axis: int = 1) -> Callable:
    def sample(rng: np.random.Generator) -> np.ndarray:
        e = np.exp(rng.standard_normal(shape))
        return e / e.sum(axis=axis, keepdims=True)
    return sample


def unit(*shape: int) -> Callable:
    return lambda rng: rng.uniform(0.05, 0.95, shape)


@dataclass
class LossCase:
    id: str
    make: Callable                # make(T) -> loss module
    input: Callable               # rng -> array (float, requires grad)
    target: Callable              # rng -> array (float or int)
    target_grad: bool = False


CASES = [
    LossCase("ce", lambda T: T.nn.CrossEntropyLoss(), logits(5, 4), classes(4, 5)),
    LossCase("ce_sum", lambda T: T.nn.CrossEntropyLoss(reduction="sum"), logits(5, 4), classes(4, 5)),
    LossCase("ce_none", lambda T: T.nn.CrossEntropyLoss(reduction="none"), logits(5, 4), classes(4, 5)),
    LossCase("ce_weight", lambda T: T.nn.CrossEntropyLoss(weight=T.tensor(W4)), logits(6, 4), classes(4, 6)),
    LossCase("ce_ignore", lambda T: T.nn.CrossEntropyLoss(ignore_index=-1), logits(6, 4), classes(4, 6, ignore=-1)),
    LossCase("ce_weight_ignore_sum", lambda T: T.nn.CrossEntropyLoss(T.tensor(W4), ignore_index=2, reduction="sum"),
             logits(6, 4), classes(4, 6)),
    LossCase("ce_smoothing", lambda T: T.nn.CrossEntropyLoss(label_smoothing=0.2), logits(5, 4), classes(4, 5)),
    LossCase("ce_smoothing_weight_ignore", lambda T: T.nn.CrossEntropyLoss(T.tensor(W4), ignore_index=0,
                                                                           label_smoothing=0.3),
             logits(7, 4), classes(4, 7)),
    LossCase("ce_smoothing_none", lambda T: T.nn.CrossEntropyLoss(reduction="none", label_smoothing=0.1,
                                                                  ignore_index=1), logits(5, 3), classes(3, 5)),
    LossCase("ce_smoothing_sum", lambda T: T.nn.CrossEntropyLoss(reduction="sum", label_smoothing=0.1),
             logits(5, 3), classes(3, 5)),
    LossCase("ce_4d", lambda T: T.nn.CrossEntropyLoss(), logits(2, 3, 2, 4), classes(3, 2, 2, 4)),
    LossCase("ce_3d_weight_none", lambda T: T.nn.CrossEntropyLoss(T.tensor(W3), reduction="none"), logits(2, 3, 4),
             classes(3, 2, 4)),
    LossCase("ce_unbatched", lambda T: T.nn.CrossEntropyLoss(), logits(4), lambda rng: np.array(2)),
    LossCase("ce_probabilities", lambda T: T.nn.CrossEntropyLoss(), logits(5, 4), probabilities(5, 4), True),
    LossCase("ce_probabilities_weight_smoothing", lambda T: T.nn.CrossEntropyLoss(T.tensor(W4), label_smoothing=0.2),
             logits(5, 4), probabilities(5, 4), True),
    LossCase("ce_probabilities_4d_none", lambda T: T.nn.CrossEntropyLoss(reduction="none"), logits(2, 3, 2, 2),
             probabilities(2, 3, 2, 2), True),
    LossCase("ce_probabilities_sum", lambda T: T.nn.CrossEntropyLoss(reduction="sum"), logits(3, 4),
             probabilities(3, 4), True),
    LossCase("nll", lambda T: T.nn.NLLLoss(), logits(5, 4), classes(4, 5)),
    LossCase("nll_weight_ignore", lambda T: T.nn.NLLLoss(T.tensor(W3), ignore_index=-5), logits(6, 3),
             classes(3, 6, ignore=-5)),
    LossCase("nll_4d_none", lambda T: T.nn.NLLLoss(reduction="none"), logits(2, 3, 2, 2), classes(3, 2, 2, 2)),
    LossCase("mse", lambda T: T.nn.MSELoss(), logits(3, 4), logits(3, 4), True),
    LossCase("mse_sum", lambda T: T.nn.MSELoss(reduction="sum"), logits(2, 3, 2), logits(2, 3, 2), True),
    LossCase("mse_none", lambda T: T.nn.MSELoss(reduction="none"), logits(3, 4), logits(3, 4), True),
    LossCase("l1", lambda T: T.nn.L1Loss(), logits(3, 4), logits(3, 4), True),
    LossCase("l1_sum", lambda T: T.nn.L1Loss(reduction="sum"), logits(3, 4), logits(3, 4), True),
    LossCase("smooth_l1", lambda T: T.nn.SmoothL1Loss(), logits(4, 4), logits(4, 4), True),
    LossCase("smooth_l1_beta_none", lambda T: T.nn.SmoothL1Loss(reduction="none", beta=2.0), logits(4, 4),
             logits(4, 4), True),
    LossCase("smooth_l1_beta0", lambda T: T.nn.SmoothL1Loss(beta=0.0), logits(4, 4), logits(4, 4), True),
    LossCase("huber", lambda T: T.nn.HuberLoss(), logits(4, 4), logits(4, 4), True),
    LossCase("huber_delta_sum", lambda T: T.nn.HuberLoss(reduction="sum", delta=2.5), logits(4, 4), logits(4, 4), True),
    LossCase("bce", lambda T: T.nn.BCELoss(), unit(3, 4), unit(3, 4), True),
    LossCase("bce_weight_none", lambda T: T.nn.BCELoss(weight=T.tensor(W4), reduction="none"), unit(3, 4),
             unit(3, 4), True),
    LossCase("bce_hard_targets_sum", lambda T: T.nn.BCELoss(reduction="sum"), unit(3, 4),
             lambda rng: rng.integers(0, 2, (3, 4)).astype(np.float64)),
    LossCase("bce_logits", lambda T: T.nn.BCEWithLogitsLoss(), logits(3, 4), unit(3, 4), True),
    LossCase("bce_logits_pos_weight", lambda T: T.nn.BCEWithLogitsLoss(pos_weight=T.tensor(W4)), logits(3, 4),
             unit(3, 4), True),
    LossCase("bce_logits_both_weights_none", lambda T: T.nn.BCEWithLogitsLoss(
        weight=T.tensor(W4[:, None][:3]), pos_weight=T.tensor(W4), reduction="none"), logits(3, 4), unit(3, 4), True),
    LossCase("bce_logits_sum", lambda T: T.nn.BCEWithLogitsLoss(reduction="sum"), logits(5), unit(5), True),
    LossCase("kl_batchmean", lambda T: T.nn.KLDivLoss(reduction="batchmean"), logits(3, 4), probabilities(3, 4), True),
    LossCase("kl_sum", lambda T: T.nn.KLDivLoss(reduction="sum"), logits(3, 4), probabilities(3, 4), True),
    LossCase("kl_none", lambda T: T.nn.KLDivLoss(reduction="none"), logits(3, 4), probabilities(3, 4), True),
    LossCase("kl_mean", lambda T: T.nn.KLDivLoss(), logits(3, 4), probabilities(3, 4), True),
    LossCase("kl_log_target", lambda T: T.nn.KLDivLoss(reduction="batchmean", log_target=True), logits(3, 4),
             logits(3, 4), True),
]


def arrays(case: LossCase, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(sum(map(ord, case.id)))
    x = case.input(rng).astype(dtype)
    t = case.target(rng)
    return x, (t.astype(dtype) if t.dtype.kind == "f" else t.astype(np.int64))


def run(T: Any, case: LossCase, x: np.ndarray, t: np.ndarray) -> tuple[Any, Any, Any]:
    loss_fn = case.make(T)
    if x.dtype == np.float64:
        loss_fn = loss_fn.double()
    xt = T.tensor(x, requires_grad=True)
    tt = T.tensor(t, requires_grad=case.target_grad)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return loss_fn(xt, tt), xt, tt


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_loss_matches_torch(case: LossCase, dtype: Any) -> None:
    torch = pytest.importorskip("torch")
    x, t = arrays(case, dtype)
    ours, ox, ot = run(gs, case, x, t)
    theirs, tx, tt = run(torch, case, x, t)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-12}
    assert ours.shape == tuple(theirs.shape)
    assert ours.dtype.name == str(theirs.dtype).replace("torch.", "")
    np.testing.assert_allclose(ours._data, theirs.detach().numpy(), **tol)
    upstream = np.random.default_rng(0).standard_normal(ours.shape).astype(dtype)
    ours.backward(gs.tensor(upstream))
    theirs.backward(torch.tensor(upstream))
    np.testing.assert_allclose(ox.grad._data, tx.grad.numpy(), **tol)
    if case.target_grad:
        np.testing.assert_allclose(ot.grad._data, tt.grad.numpy(), **tol)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_loss_gradcheck_float64(case: LossCase) -> None:
    x, t = arrays(case, np.float64)
    loss_fn = case.make(gs).double()
    inputs = (gs.tensor(x, requires_grad=True), gs.tensor(t, requires_grad=case.target_grad))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert gs.autograd.gradcheck(loss_fn, inputs)


def test_functional_forms_match_modules() -> None:
    F = gs.nn.functional
    rng = np.random.default_rng(0)
    x = gs.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    t = gs.tensor(rng.integers(0, 3, 4))
    y = gs.tensor(rng.uniform(0.1, 0.9, (4, 3)).astype(np.float32))
    pairs = [
        (F.cross_entropy(x, t, label_smoothing=0.1), gs.nn.CrossEntropyLoss(label_smoothing=0.1)(x, t)),
        (F.nll_loss(x, t, reduction="sum"), gs.nn.NLLLoss(reduction="sum")(x, t)),
        (F.mse_loss(x, y), gs.nn.MSELoss()(x, y)),
        (F.binary_cross_entropy_with_logits(x, y), gs.nn.BCEWithLogitsLoss()(x, y)),
        (F.huber_loss(x, y, delta=0.5), gs.nn.HuberLoss(delta=0.5)(x, y)),
    ]
    for a, b in pairs:
        np.testing.assert_array_equal(a._data, b._data)


def test_node_names_match_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t = rng.integers(0, 3, 4)
    p = rng.uniform(0.1, 0.9, (4, 3)).astype(np.float32)
    calls = [
        lambda T, x, t, p: T.nn.functional.cross_entropy(x, t),
        lambda T, x, t, p: T.nn.functional.cross_entropy(x, t, label_smoothing=0.1),
        lambda T, x, t, p: T.nn.functional.mse_loss(x, p),
        lambda T, x, t, p: T.nn.functional.l1_loss(x, p),
        lambda T, x, t, p: T.nn.functional.smooth_l1_loss(x, p),
        lambda T, x, t, p: T.nn.functional.huber_loss(x, p),
        lambda T, x, t, p: T.nn.functional.binary_cross_entropy(T.sigmoid(x), p),
        lambda T, x, t, p: T.nn.functional.binary_cross_entropy_with_logits(x, p),
        lambda T, x, t, p: T.nn.functional.kl_div(x, p, reduction="batchmean"),
    ]
    for call in calls:
        names = []
        for T in (gs, torch):
            out = call(T, T.tensor(x, requires_grad=True), T.tensor(t), T.tensor(p, requires_grad=True))
            names.append(out.grad_fn.name())
        assert names[0] == names[1]
    ce = gs.nn.functional.cross_entropy(gs.tensor(x, requires_grad=True), gs.tensor(t))
    assert ce.grad_fn.next_functions[0][0].name() == "LogSoftmaxBackward0"


def test_reprs_and_buffers_match_torch() -> None:
    torch = pytest.importorskip("torch")
    makers = [lambda T: T.nn.CrossEntropyLoss(T.tensor(W3), label_smoothing=0.1), lambda T: T.nn.MSELoss(),
              lambda T: T.nn.BCEWithLogitsLoss(pos_weight=T.tensor(W3)), lambda T: T.nn.NLLLoss(),
              lambda T: T.nn.KLDivLoss(reduction="batchmean"), lambda T: T.nn.HuberLoss(delta=2.0)]
    for make in makers:
        ours, theirs = make(gs), make(torch)
        assert repr(ours) == repr(theirs)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
        assert ours.reduction == theirs.reduction


def test_legacy_size_average_and_reduce_map_to_reduction() -> None:
    torch = pytest.importorskip("torch")
    for kwargs in ({"size_average": False}, {"reduce": False}, {"size_average": True, "reduce": True}):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert gs.nn.MSELoss(**kwargs).reduction == torch.nn.MSELoss(**kwargs).reduction
            x = gs.tensor([[1.0, -2.0]])
            ours = gs.nn.functional.l1_loss(x, gs.zeros(1, 2), **kwargs)
            theirs = torch.nn.functional.l1_loss(torch.tensor([[1.0, -2.0]]), torch.zeros(1, 2), **kwargs)
        np.testing.assert_allclose(ours._data, theirs.numpy())


def test_cross_entropy_all_ignored_mean_is_nan_like_torch() -> None:
    x = gs.randn(3, 4, requires_grad=True)
    loss = gs.nn.functional.cross_entropy(x, gs.tensor([-100, -100, -100]))
    assert np.isnan(loss.item())


def test_mse_broadcast_warns_like_torch() -> None:
    with pytest.warns(UserWarning, match="different to the input size"):
        gs.nn.functional.mse_loss(gs.zeros(3, 1), gs.zeros(3))


@pytest.mark.parametrize("call, error, phrase", [
    (lambda F: F.cross_entropy(gs.zeros(3, 4), gs.tensor([0, 1])), ValueError, "Expected input batch_size (3)"),
    (lambda F: F.cross_entropy(gs.zeros(2, 4), gs.tensor([0, 4])), IndexError, "out of bounds"),
    (lambda F: F.cross_entropy(gs.zeros(2, 4), gs.tensor([0, 1]), label_smoothing=1.5), RuntimeError,
     "label_smoothing must be between 0.0 and 1.0"),
    (lambda F: F.binary_cross_entropy_with_logits(gs.zeros(2, 3), gs.zeros(2)), ValueError,
     "must be the same as input size"),
    (lambda F: F.kl_div(gs.zeros(2), gs.zeros(2), reduction="avg"), ValueError, "not a valid value for reduction"),
])
def test_errors(call: Callable, error: type, phrase: str) -> None:
    with pytest.raises(error) as info:
        call(gs.nn.functional)
    assert phrase in str(info.value)
