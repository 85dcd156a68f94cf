"""``F.ctc_loss``/``nn.CTCLoss``, ``F.multi_margin_loss``/``nn.MultiMarginLoss`` and
``F.max_unpool{1,2,3}d``/``nn.MaxUnpool{1,2,3}d`` against torch: values and gradients, float32 and float64."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(5)


def _compare(fn: Callable, arrays: list, dtype: str, tol32: tuple = (2e-4, 2e-5)) -> None:
    runs = []
    for T in (gs, torch):
        tensors = [T.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
        out = fn(T, *tensors)
        weights = np.linspace(0.5, 1.5, max(out.numel(), 1)).reshape(tuple(out.shape)).astype(dtype)
        (out * T.tensor(weights)).sum().backward()
        runs.append((out.detach().numpy(), [t.grad.numpy() for t in tensors]))
    rtol, atol = tol32 if dtype == "float32" else (1e-9, 1e-11)
    assert runs[0][0].shape == runs[1][0].shape and runs[0][0].dtype == runs[1][0].dtype
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=rtol, atol=atol)
    for mine, reference in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(mine, reference, rtol=rtol, atol=atol)


TARGETS = np.array([[1, 2, 2, 3], [4, 4, 0, 0], [1, 3, 0, 0]])
CTC = {
    "mean": lambda T, x: T.nn.functional.ctc_loss(x.log_softmax(2), T.tensor(TARGETS[:, :]), [12, 10, 7],
                                                  [4, 2, 2]),
    "sum_raw_log_probs": lambda T, x: T.nn.functional.ctc_loss(x, T.tensor(TARGETS), (12, 12, 12), (4, 2, 2),
                                                               reduction="sum"),
    "none_blank_last": lambda T, x: T.nn.CTCLoss(blank=5, reduction="none")(
        x.log_softmax(-1), T.tensor(TARGETS - 0 * TARGETS + np.array([[0], [0], [1]])), T.tensor([12, 9, 12]),
        T.tensor([4, 2, 3])),
    "concatenated_targets": lambda T, x: T.nn.CTCLoss()(x.log_softmax(-1), T.tensor([1, 2, 2, 3, 4, 1, 3]),
                                                        T.tensor([12, 11, 12]), T.tensor([4, 1, 2])),
    "empty_target": lambda T, x: T.nn.functional.ctc_loss(x.log_softmax(-1), T.tensor(TARGETS), [12, 12, 12],
                                                          [0, 2, 1], reduction="none"),
    "unbatched": lambda T, x: T.nn.functional.ctc_loss(x[:, 0].log_softmax(-1), T.tensor([1, 2, 1]), [10], [3]),
    "impossible_zero_infinity": lambda T, x: T.nn.functional.ctc_loss(
        x.log_softmax(-1), T.tensor(TARGETS), [3, 12, 12], [4, 2, 2], reduction="none", zero_infinity=True),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CTC))
def test_ctc_loss_matches_torch(case: str, dtype: str) -> None:
    _compare(CTC[case], [RNG.normal(size=(12, 3, 6))], dtype, (1e-4, 1e-5))


def test_ctc_loss_impossible_alignment_is_infinite_like_torch() -> None:
    x = RNG.normal(size=(3, 1, 5))
    ours = gs.nn.functional.ctc_loss(gs.tensor(x).log_softmax(-1), gs.tensor([[1, 1, 1]]), [3], [3])
    theirs = torch.nn.functional.ctc_loss(torch.tensor(x).log_softmax(-1), torch.tensor([[1, 1, 1]]), [3], [3])
    assert np.isinf(ours.item()) and np.isinf(theirs.item())


MARGIN = {
    "p1": lambda T, x: T.nn.functional.multi_margin_loss(x, T.tensor([0, 3, 2, 1, 3])),
    "p2_margin_sum": lambda T, x: T.nn.MultiMarginLoss(p=2, margin=0.7, reduction="sum")(x, T.tensor([0, 3, 2, 1, 3])),
    "weighted_none": lambda T, x: T.nn.MultiMarginLoss(weight=T.tensor([1.0, 2.0, 0.5, 3.0], dtype=x.dtype),
                                                       reduction="none")(x, T.tensor([0, 3, 2, 1, 3])),
    "unbatched": lambda T, x: T.nn.functional.multi_margin_loss(x[0], T.tensor(2)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(MARGIN))
def test_multi_margin_loss_matches_torch(case: str, dtype: str) -> None:
    _compare(MARGIN[case], [RNG.normal(size=(5, 4))], dtype)


def _unpool2d(T: Any, x: Any) -> Any:
    pooled, indices = T.nn.functional.max_pool2d(x, 2, stride=2, return_indices=True)
    return T.nn.MaxUnpool2d(2, stride=2)(pooled * 2, indices)


UNPOOL = {
    "2d": (_unpool2d, (2, 3, 6, 8)),
    "2d_output_size": (lambda T, x: T.nn.functional.max_unpool2d(
        *T.nn.functional.max_pool2d(x, 3, stride=2, padding=1, return_indices=True), 3, 2, 1,
        output_size=x.shape), (1, 2, 7, 5)),
    "1d": (lambda T, x: T.nn.MaxUnpool1d(3)(*T.nn.MaxPool1d(3, return_indices=True)(x)), (2, 3, 9)),
    "3d": (lambda T, x: T.nn.MaxUnpool3d(2)(*T.nn.MaxPool3d(2, return_indices=True)(x)), (1, 2, 4, 4, 6)),
    "unbatched_2d": (lambda T, x: T.nn.functional.max_unpool2d(
        *T.nn.functional.max_pool2d(x, 2, return_indices=True), 2), (3, 4, 4)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(UNPOOL))
def test_max_unpool_matches_torch(case: str, dtype: str) -> None:
    fn, size = UNPOOL[case]
    _compare(fn, [RNG.permutation(int(np.prod(size))).reshape(size) * 0.1], dtype)


def test_module_reprs_match_torch() -> None:
    for make in (lambda nn: nn.MaxUnpool2d(2), lambda nn: nn.MaxUnpool3d((1, 2, 2), padding=1), lambda nn: nn.CTCLoss(),
                 lambda nn: nn.MultiMarginLoss(p=2)):
        assert repr(make(gs.nn)) == repr(make(torch.nn))


def test_max_unpool_rejects_a_bad_output_size() -> None:
    pooled, indices = gs.nn.functional.max_pool2d(gs.randn(1, 1, 4, 4), 2, return_indices=True)
    with pytest.raises(ValueError, match="invalid output_size"):
        gs.nn.functional.max_unpool2d(pooled, indices, 2, output_size=(9, 9))


LP_MARGIN_PDIST = {
    "lp_pool1d": (lambda T, x: T.nn.LPPool1d(2, 3, stride=2)(x), (2, 3, 9)),
    "lp_pool2d_p1_5_ceil": (lambda T, x: T.nn.functional.lp_pool2d(x.abs() + 0.1, 1.5, (2, 3), ceil_mode=True),
                            (2, 2, 5, 7)),
    "lp_pool3d": (lambda T, x: T.nn.LPPool3d(3, 2)(x), (1, 2, 4, 4, 4)),
    "lp_pool2d_inf": (lambda T, x: T.nn.functional.lp_pool2d(x, float("inf"), 2), (1, 2, 4, 4)),
    "pdist": (lambda T, x: T.pdist(x), (5, 3)),
    "pdist_p1": (lambda T, x: T.nn.functional.pdist(x, p=1), (4, 6)),
    "multilabel_margin": (lambda T, x: T.nn.MultiLabelMarginLoss()(
        x, T.tensor([[3, 0, -1, 1], [1, 2, 3, -1], [0, 0, 2, -1]])), (3, 4)),
    "multilabel_margin_none": (lambda T, x: T.nn.functional.multilabel_margin_loss(
        x, T.tensor([[2, -1, 0, 0], [-1, 1, 1, 1], [1, 3, 0, 2]]), reduction="none"), (3, 4)),
    "multilabel_margin_unbatched": (lambda T, x: T.nn.functional.multilabel_margin_loss(
        x[0], T.tensor([1, 2, -1, 0])), (3, 4)),
    "sync_batchnorm": (lambda T, x: T.nn.SyncBatchNorm(3).to(x.dtype)(x), (4, 3, 5)),
    "multi_margin_at_the_hinge": (lambda T, x: T.nn.functional.multi_margin_loss(x * 0 + T.tensor(
        [[0.0, 1.0, 0.5], [2.0, 1.0, 0.0]], dtype=x.dtype), T.tensor([1, 0])), (2, 3)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(LP_MARGIN_PDIST))
def test_lp_pool_pdist_multilabel_margin_sync_batchnorm_match_torch(case: str, dtype: str) -> None:
    fn, size = LP_MARGIN_PDIST[case]
    _compare(fn, [RNG.permutation(int(np.prod(size))).reshape(size) * 0.1 - 0.3], dtype, (1e-4, 1e-5))


def test_convert_sync_batchnorm_shares_parameters_and_buffers_like_torch() -> None:
    for T in (gs, torch):
        net = T.nn.Sequential(T.nn.Conv2d(1, 3, 1), T.nn.BatchNorm2d(3), T.nn.Sequential(T.nn.BatchNorm1d(2)))
        bn = net[1]
        converted = T.nn.SyncBatchNorm.convert_sync_batchnorm(net)
        assert type(converted[1]).__name__ == type(converted[2][0]).__name__ == "SyncBatchNorm"
        assert converted[1].weight is bn.weight and converted[1].running_mean is bn.running_mean
    assert repr(gs.nn.SyncBatchNorm(3)) == repr(torch.nn.SyncBatchNorm(3))
    assert repr(gs.nn.LPPool2d(2, 3)) == repr(torch.nn.LPPool2d(2, 3))
