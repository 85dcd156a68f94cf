"""Loss modules. Each holds its options (and class weights as buffers) and calls ``nn.functional``."""
from __future__ import annotations

from gradscope.autograd.tensor import Tensor
from gradscope.nn import functional as F
from gradscope.nn.modules.module import Module

__all__ = ["L1Loss", "MSELoss", "SmoothL1Loss", "HuberLoss", "NLLLoss", "CrossEntropyLoss", "BCELoss",
           "BCEWithLogitsLoss", "KLDivLoss"]


class _Loss(Module):
    def __init__(self, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean") -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            reduction = F._legacy_reduction(size_average, reduce, "mean")
        self.reduction = reduction


class _WeightedLoss(_Loss):
    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.weight: Tensor | None


class L1Loss(_Loss):
    """Mean (or summed) absolute error."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.l1_loss(input, target, reduction=self.reduction)


class MSELoss(_Loss):
    """Mean (or summed) squared error."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)


class SmoothL1Loss(_Loss):
    """Quadratic for errors below ``beta``, linear above."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
                 beta: float = 1.0) -> None:
        super().__init__(size_average, reduce, reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class HuberLoss(_Loss):
    """Quadratic for errors below ``delta``, linear with slope ``delta`` above."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction=reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class NLLLoss(_WeightedLoss):
    """Negative log-likelihood of class indices given log-probabilities."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean") -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class CrossEntropyLoss(_WeightedLoss):
    """Cross-entropy of logits against class indices or class probabilities."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None, ignore_index: int = -100,
                 reduce: bool | None = None, reduction: str = "mean", label_smoothing: float = 0.0) -> None:
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class BCELoss(_WeightedLoss):
    """Binary cross-entropy of probabilities."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy(input, target, weight=self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits (the sigmoid is fused in); ``pos_weight`` weighs positives."""

    def __init__(self, weight: Tensor | None = None, size_average: bool | None = None, reduce: bool | None = None,
                 reduction: str = "mean", pos_weight: Tensor | None = None) -> None:
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)
        self.weight: Tensor | None
        self.pos_weight: Tensor | None

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.binary_cross_entropy_with_logits(input, target, self.weight, pos_weight=self.pos_weight,
                                                  reduction=self.reduction)


class KLDivLoss(_Loss):
    """KL divergence with log-probability inputs (``reduction="batchmean"`` is the true KL)."""

    def __init__(self, size_average: bool | None = None, reduce: bool | None = None, reduction: str = "mean",
                 log_target: bool = False) -> None:
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
