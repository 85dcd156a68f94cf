"""3-D layers and functions (``conv3d``, ``conv_transpose3d``, 3-D pooling, ``BatchNorm3d``) against
torch: outputs, input gradients and parameter gradients, float32 and float64."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs
from gradscope.nn import functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(11)


def _both(fn: Callable, arrays: list, dtype: str) -> None:
    """Run ``fn(T, F, *tensors)`` on both engines; compare output(s) and every input's gradient."""
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == "float32" else dict(rtol=1e-9, atol=1e-10)
    runs = []
    for T, functional in ((gs, F), (torch, TF)):
        tensors = [T.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
        out = fn(T, functional, *tensors)
        outs = out if isinstance(out, tuple) else (out,)
        first = outs[0]
        weights = np.linspace(-1, 1, first.numel()).reshape(tuple(first.shape)).astype(dtype)
        (first * T.tensor(weights)).sum().backward()
        runs.append(([o.detach().numpy() for o in outs], [t.grad.numpy() for t in tensors]))
    (ours, our_grads), (theirs, their_grads) = runs
    for mine, reference in zip(ours, theirs):
        assert mine.shape == reference.shape and mine.dtype == reference.dtype
        np.testing.assert_allclose(mine, reference, **tol)
    for mine, reference in zip(our_grads, their_grads):
        np.testing.assert_allclose(mine, reference, **tol)


CONV = {
    "plain": (dict(), (2, 3, 5, 6, 4), (4, 3, 3, 2, 3)),
    "stride_pad_dil": (dict(stride=(2, 1, 2), padding=(1, 2, 0), dilation=(1, 2, 1)), (1, 2, 6, 7, 5),
                       (3, 2, 2, 3, 2)),
    "groups": (dict(groups=2, padding=1), (2, 4, 3, 4, 4), (6, 2, 3, 3, 3)),
    "same": (dict(padding="same"), (1, 2, 4, 5, 3), (2, 2, 2, 3, 3)),
    "unbatched": (dict(stride=2), (2, 5, 5, 5), (3, 2, 3, 3, 3)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.filterwarnings("ignore:Using padding=.same.")
@pytest.mark.parametrize("case", sorted(CONV))
def test_conv3d(case: str, dtype: str) -> None:
    kwargs, x_shape, w_shape = CONV[case]
    _both(lambda T, f, x, w, b: f.conv3d(x, w, b, **kwargs),
          [RNG.normal(size=x_shape), RNG.normal(size=w_shape), RNG.normal(size=w_shape[0])], dtype)


TRANSPOSED = {
    "plain": (dict(), (2, 3, 3, 4, 2), (3, 2, 2, 3, 2)),
    "stride_pad_outpad": (dict(stride=(2, 3, 1), padding=(1, 0, 1), output_padding=(1, 2, 0)), (1, 2, 3, 3, 4),
                          (2, 3, 3, 2, 3)),
    "groups_dilation": (dict(groups=2, dilation=2, stride=2, output_padding=1), (2, 4, 2, 3, 2), (4, 1, 2, 2, 2)),
    "unbatched": (dict(stride=2), (2, 3, 2, 3), (2, 3, 2, 2, 2)),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(TRANSPOSED))
def test_conv_transpose3d(case: str, dtype: str) -> None:
    kwargs, x_shape, w_shape = TRANSPOSED[case]
    out_c = w_shape[1] * kwargs.get("groups", 1)
    _both(lambda T, f, x, w, b: f.conv_transpose3d(x, w, b, **kwargs),
          [RNG.normal(size=x_shape), RNG.normal(size=w_shape), RNG.normal(size=out_c)], dtype)


POOL = {
    "max": lambda T, f, x: f.max_pool3d(x, 2),
    "max_stride_pad_dil": lambda T, f, x: f.max_pool3d(x, (3, 2, 2), (2, 1, 2), (1, 1, 0), (1, 2, 1)),
    "max_ceil_indices": lambda T, f, x: f.max_pool3d(x, 2, 2, ceil_mode=True, return_indices=True),
    "max_overlapping": lambda T, f, x: f.max_pool3d(x, 3, 1, 1),
    "avg": lambda T, f, x: f.avg_pool3d(x, 2),
    "avg_pad_exclude": lambda T, f, x: f.avg_pool3d(x, 3, 2, 1, count_include_pad=False),
    "avg_ceil": lambda T, f, x: f.avg_pool3d(x, (2, 3, 2), 2, (1, 1, 0), ceil_mode=True),
    "avg_divisor": lambda T, f, x: f.avg_pool3d(x, 2, 1, divisor_override=3),
    "adaptive_avg": lambda T, f, x: f.adaptive_avg_pool3d(x, (2, 3, 2)),
    "adaptive_avg_none": lambda T, f, x: f.adaptive_avg_pool3d(x, (None, 2, 4)),
    "adaptive_avg_global": lambda T, f, x: f.adaptive_avg_pool3d(x, 1),
    "adaptive_max": lambda T, f, x: f.adaptive_max_pool3d(x, (2, 3, 2), return_indices=True),
    "module_max": lambda T, f, x: T.nn.MaxPool3d(2, return_indices=True)(x),
    "module_avg": lambda T, f, x: T.nn.AvgPool3d(3, stride=2, padding=1)(x),
    "module_adaptive_avg": lambda T, f, x: T.nn.AdaptiveAvgPool3d((1, 2, 3))(x),
    "module_adaptive_max": lambda T, f, x: T.nn.AdaptiveMaxPool3d(2)(x),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(POOL))
@pytest.mark.parametrize("batched", [True, False])
def test_pooling3d(case: str, dtype: str, batched: bool) -> None:
    shape = (2, 3, 5, 6, 7) if batched else (3, 5, 6, 7)
    values = RNG.permutation(int(np.prod(shape))).reshape(shape) * 0.01
    _both(POOL[case], [values], dtype)


def test_max_pool3d_nan_wins_like_torch() -> None:
    x = np.arange(16.0).reshape(1, 1, 2, 2, 4)
    x[0, 0, 0, 1, 1] = x[0, 0, 1, 0, 2] = np.nan
    ours = F.max_pool3d(gs.tensor(x), 2, return_indices=True)
    theirs = TF.max_pool3d(torch.tensor(x), 2, return_indices=True)
    np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
    np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())


def _copy_parameters(ours: gs.nn.Module, theirs: Any) -> None:
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    ours.load_state_dict({k: gs.tensor(v) for k, v in state.items()})


@pytest.mark.parametrize("make", [
    lambda nn: nn.Conv3d(2, 4, 3, stride=(1, 2, 1), padding=1),
    lambda nn: nn.Conv3d(2, 4, (1, 3, 3), padding="same", padding_mode="reflect", bias=False),
    lambda nn: nn.Conv3d(2, 4, 2, padding=1, padding_mode="circular", groups=2),
    lambda nn: nn.ConvTranspose3d(2, 3, 3, stride=2, padding=1, output_padding=1),
    lambda nn: nn.BatchNorm3d(2),
    lambda nn: nn.InstanceNorm3d(2, affine=True),
])
def test_modules_match_torch_with_parameter_gradients(make: Callable) -> None:
    torch.manual_seed(0)
    theirs = make(torch.nn).double()
    ours = make(gs.nn).double()
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert repr(ours) == repr(theirs)
    _copy_parameters(ours, theirs)
    x = RNG.normal(size=(2, 2, 4, 5, 6))
    outs = []
    for module, T in ((ours, gs), (theirs, torch)):
        xt = T.tensor(x, requires_grad=True)
        y = module(xt)
        (y * y).sum().backward()
        outs.append((y.detach().numpy(), xt.grad.numpy(), [p.grad.numpy() for p in module.parameters()]))
    np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-9, atol=1e-10)
    for mine, reference in zip(outs[0][2], outs[1][2]):
        np.testing.assert_allclose(mine, reference, rtol=1e-9, atol=1e-9)
    if isinstance(ours, gs.nn.BatchNorm3d):
        np.testing.assert_allclose(ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-12)


def test_batchnorm3d_rejects_4d_input_like_torch() -> None:
    with pytest.raises(ValueError, match="expected 5D input"):
        gs.nn.BatchNorm3d(2)(gs.zeros(2, 2, 3, 3))


def test_conv3d_shape_errors() -> None:
    with pytest.raises(RuntimeError, match="Expected 4D"):
        F.conv3d(gs.zeros(2, 3, 4), gs.zeros(1, 3, 1, 1, 1))
    with pytest.raises(RuntimeError, match="Kernel size can't be greater"):
        F.conv3d(gs.zeros(1, 1, 2, 2, 2), gs.zeros(1, 1, 3, 3, 3))
