"""The nn ops (``gradscope.ops`` linear, convolution, pooling, embedding, padding, normalization,
activations, losses, resampling; through ``nn.functional``), driven by one catalogue.

Every entry's ``fn(T, *tensors)`` is written against PyTorch's API and called with
``T = gradscope`` and ``T = torch``. Checks per entry:

1. values and the gradients of every float input against PyTorch (float32 and float64);
2. gradients against central finite differences in float64 (``gs.autograd.gradcheck``);
3. the name of the output's node.

Inputs keep finite differences away from kinks (ties of max pooling, ReLU-like corners).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

# input specs: (kind, shape[, extra]); kinds:
#   "f" float requiring grad, "c" float constant, "d" distinct well-separated floats requiring grad,
#   "u" floats in (0.05, 0.95) requiring grad, "uc" same but constant, "pc" positive constant,
#   "i" int64 in [0, extra)


@dataclass
class Case:
    id: str
    fn: Callable
    inputs: tuple
    node: str | None
    gradcheck: bool = True
    rtol: float = 1e-4
    atol: float = 1e-5


def F(T: Any) -> Any:
    return T.nn.functional


def make_inputs(case: Case, dtype: Any) -> list[np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = []
    for spec in case.inputs:
        kind, shape = spec[0], spec[1]
        if kind in ("f", "c"):
            arrays.append(rng.standard_normal(shape).astype(dtype))
        elif kind == "d":
            n = int(np.prod(shape))
            values = (rng.permutation(n) - n / 2 + 0.37) / max(n / 4, 1)  # never 0 or another kink
            arrays.append(values.reshape(shape).astype(dtype))
        elif kind in ("u", "uc"):
            arrays.append(rng.uniform(0.05, 0.95, shape).astype(dtype))
        elif kind == "pc":
            arrays.append(rng.uniform(0.5, 2.0, shape).astype(dtype))
        elif kind == "i":
            arrays.append(rng.integers(0, spec[2], shape).astype(np.int64))
        else:
            raise ValueError(kind)
    return arrays


def needs_grad(spec: tuple) -> bool:
    return spec[0] in ("f", "d", "u")


def first(out: Any) -> Any:
    return out[0] if isinstance(out, tuple) else out


CASES = [
    # convolution
    Case("conv2d", lambda T, x, w, b: F(T).conv2d(x, w, b), (("f", (2, 3, 5, 6)), ("f", (4, 3, 3, 2)), ("f", (4,))),
         "ConvolutionBackward0"),
    Case("conv2d_stride_pad_dil",
         lambda T, x, w, b: F(T).conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2)),
         (("f", (2, 2, 6, 5)), ("f", (3, 2, 2, 2)), ("f", (3,))), "ConvolutionBackward0"),
    Case("conv2d_same", lambda T, x, w: F(T).conv2d(x, w, padding="same", dilation=2),
         (("f", (1, 2, 5, 5)), ("f", (2, 2, 2, 3))), "ConvolutionBackward0"),
    Case("conv2d_valid_stride3", lambda T, x, w: F(T).conv2d(x, w, stride=3, padding="valid"),
         (("f", (2, 2, 7, 8)), ("f", (2, 2, 3, 3))), "ConvolutionBackward0"),
    Case("conv2d_groups", lambda T, x, w, b: F(T).conv2d(x, w, b, padding=1, groups=2),
         (("f", (2, 4, 4, 4)), ("f", (6, 2, 3, 3)), ("f", (6,))), "ConvolutionBackward0"),
    Case("conv2d_depthwise_strided", lambda T, x, w: F(T).conv2d(x, w, stride=2, padding=1, groups=3),
         (("f", (1, 3, 5, 5)), ("f", (3, 1, 3, 3))), "ConvolutionBackward0"),
    Case("conv2d_unbatched", lambda T, x, w, b: F(T).conv2d(x, w, b, padding=1),
         (("f", (2, 4, 3)), ("f", (3, 2, 3, 3)), ("f", (3,))), "ConvolutionBackward0"),
    Case("conv2d_input_only", lambda T, x, w: F(T).conv2d(x, w, stride=2),
         (("f", (1, 2, 5, 5)), ("c", (2, 2, 3, 3))), "ConvolutionBackward0"),
    Case("conv1d", lambda T, x, w, b: F(T).conv1d(x, w, b, stride=2, padding=1),
         (("f", (2, 3, 9)), ("f", (4, 3, 3)), ("f", (4,))), "ConvolutionBackward0"),
    Case("conv1d_same_dilated", lambda T, x, w: F(T).conv1d(x, w, padding="same", dilation=2),
         (("f", (2, 2, 7)), ("f", (3, 2, 4))), "ConvolutionBackward0"),
    Case("conv1d_groups_unbatched", lambda T, x, w: F(T).conv1d(x, w, groups=2),
         (("f", (4, 6)), ("f", (2, 2, 2))), "ConvolutionBackward0"),
    Case("conv_transpose2d", lambda T, x, w, b: F(T).conv_transpose2d(x, w, b),
         (("f", (2, 3, 3, 4)), ("f", (3, 2, 2, 3)), ("f", (2,))), "ConvolutionBackward0"),
    Case("conv_transpose2d_stride_pad_outpad",
         lambda T, x, w, b: F(T).conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
         (("f", (1, 2, 3, 3)), ("f", (2, 3, 3, 3)), ("f", (3,))), "ConvolutionBackward0"),
    Case("conv_transpose2d_groups_dilation",
         lambda T, x, w: F(T).conv_transpose2d(x, w, stride=(1, 2), groups=2, dilation=2),
         (("f", (1, 4, 3, 2)), ("f", (4, 1, 2, 2))), "ConvolutionBackward0"),
    Case("conv_transpose1d", lambda T, x, w, b: F(T).conv_transpose1d(x, w, b, stride=3, padding=1),
         (("f", (2, 2, 4)), ("f", (2, 3, 3)), ("f", (3,))), "ConvolutionBackward0"),
    # pooling
    Case("max_pool2d", lambda T, x: F(T).max_pool2d(x, 2), (("d", (2, 2, 4, 6)),), "MaxPool2DWithIndicesBackward0"),
    Case("max_pool2d_overlap_pad", lambda T, x: F(T).max_pool2d(x, 3, stride=2, padding=1),
         (("d", (1, 2, 5, 6)),), "MaxPool2DWithIndicesBackward0"),
    Case("max_pool2d_ceil_dilation", lambda T, x: F(T).max_pool2d(x, (2, 3), stride=(2, 1), dilation=(1, 2),
                                                                 ceil_mode=True),
         (("d", (1, 2, 5, 7)),), "MaxPool2DWithIndicesBackward0"),
    Case("max_pool2d_indices", lambda T, x: F(T).max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
         (("d", (2, 1, 6, 5)),), "MaxPool2DWithIndicesBackward0"),
    Case("max_pool2d_unbatched", lambda T, x: F(T).max_pool2d(x, 2, 1), (("d", (2, 3, 4)),),
         "MaxPool2DWithIndicesBackward0"),
    Case("max_pool1d", lambda T, x: F(T).max_pool1d(x, 3, 2, 1), (("d", (2, 2, 7)),), None),
    Case("avg_pool2d", lambda T, x: F(T).avg_pool2d(x, 2), (("f", (2, 2, 4, 6)),), "AvgPool2DBackward0"),
    Case("avg_pool2d_pad_ceil", lambda T, x: F(T).avg_pool2d(x, 3, 2, 1, ceil_mode=True),
         (("f", (1, 2, 6, 5)),), "AvgPool2DBackward0"),
    Case("avg_pool2d_exclude_pad", lambda T, x: F(T).avg_pool2d(x, (3, 2), 2, 1, True, False),
         (("f", (1, 2, 6, 5)),), "AvgPool2DBackward0"),
    Case("avg_pool2d_divisor", lambda T, x: F(T).avg_pool2d(x, 2, 1, divisor_override=3),
         (("f", (2, 3, 3)),), "AvgPool2DBackward0"),
    Case("avg_pool1d", lambda T, x: F(T).avg_pool1d(x, 3, 2, 1), (("f", (2, 2, 7)),), None),
    Case("adaptive_avg_pool2d", lambda T, x: F(T).adaptive_avg_pool2d(x, (3, 2)), (("f", (2, 2, 5, 7)),),
         "AdaptiveAvgPool2DBackward0"),
    Case("adaptive_avg_pool2d_none", lambda T, x: F(T).adaptive_avg_pool2d(x, (None, 3)), (("f", (2, 4, 5)),),
         "AdaptiveAvgPool2DBackward0"),
    Case("adaptive_avg_pool2d_global", lambda T, x: F(T).adaptive_avg_pool2d(x, 1), (("f", (2, 3, 4, 3)),),
         "MeanBackward1"),
    Case("adaptive_avg_pool1d", lambda T, x: F(T).adaptive_avg_pool1d(x, 4), (("f", (2, 2, 7)),), None),
    # embedding and padding
    Case("embedding", lambda T, w, i: F(T).embedding(i, w), (("f", (7, 3)), ("i", (2, 5), 7)), "EmbeddingBackward0"),
    Case("embedding_padding_idx", lambda T, w, i: F(T).embedding(i, w, padding_idx=2),
         (("f", (5, 3)), ("i", (4, 6), 5)), "EmbeddingBackward0", gradcheck=False),  # by design
    Case("embedding_scale_grad", lambda T, w, i: F(T).embedding(i, w, scale_grad_by_freq=True),
         (("f", (5, 2)), ("i", (8,), 5)), "EmbeddingBackward0", gradcheck=False),  # rescaled by design
    Case("pad_constant", lambda T, x: F(T).pad(x, (1, 2, 0, 1), value=0.5), (("f", (2, 3, 4)),),
         "ConstantPadNdBackward0"),
    Case("pad_constant_negative", lambda T, x: F(T).pad(x, (-1, 2, 1, -2)), (("f", (2, 4, 5)),),
         "ConstantPadNdBackward0"),
    Case("pad_reflect_2d", lambda T, x: F(T).pad(x, (2, 1, 1, 2), mode="reflect"), (("f", (1, 2, 4, 3)),),
         "ReflectionPad2DBackward0"),
    Case("pad_reflect_1d", lambda T, x: F(T).pad(x, (2, 3), mode="reflect"), (("f", (2, 5)),),
         "ReflectionPad1DBackward0"),
    Case("pad_replicate_2d", lambda T, x: F(T).pad(x, (3, 1, 0, 2), mode="replicate"), (("f", (2, 3, 3)),),
         "ReplicationPad2DBackward0"),
    Case("pad_replicate_3d", lambda T, x: F(T).pad(x, (1, 1, 2, 0, 1, 1), mode="replicate"),
         (("f", (1, 1, 2, 3, 2)),), "ReplicationPad3DBackward0"),
    Case("pad_circular", lambda T, x: F(T).pad(x, (1, 2, 2, 1), mode="circular"), (("f", (1, 2, 3, 4)),), None),
    # normalisation
    Case("batch_norm_train", lambda T, x, w, b: F(T).batch_norm(x, None, None, w, b, True, 0.1, 1e-3),
         (("f", (4, 3, 2, 2)), ("f", (3,)), ("f", (3,))), "NativeBatchNormBackward0", atol=5e-5),
    Case("batch_norm_train_2d_no_affine", lambda T, x: F(T).batch_norm(x, None, None, training=True),
         (("f", (5, 3)),), "NativeBatchNormBackward0", atol=5e-5),
    Case("batch_norm_eval", lambda T, x, w, b, m, v: F(T).batch_norm(x, m, v, w, b, False),
         (("f", (3, 2, 4)), ("f", (2,)), ("f", (2,)), ("c", (2,)), ("pc", (2,))), "NativeBatchNormBackward0"),
    Case("layer_norm", lambda T, x, w, b: F(T).layer_norm(x, (4,), w, b), (("f", (2, 3, 4)), ("f", (4,)), ("f", (4,))),
         "NativeLayerNormBackward0", atol=5e-5),
    Case("layer_norm_2d_shape", lambda T, x, w: F(T).layer_norm(x, (2, 3), w, eps=1e-3),
         (("f", (3, 2, 3)), ("f", (2, 3))), "NativeLayerNormBackward0", atol=5e-5),
    Case("layer_norm_plain", lambda T, x: F(T).layer_norm(x, (5,)), (("f", (3, 5)),), "NativeLayerNormBackward0",
         atol=5e-5),
    Case("group_norm", lambda T, x, w, b: F(T).group_norm(x, 2, w, b), (("f", (2, 4, 3, 2)), ("f", (4,)), ("f", (4,))),
         "NativeGroupNormBackward0", atol=5e-5),
    Case("group_norm_3d_plain", lambda T, x: F(T).group_norm(x, 3, eps=1e-3), (("f", (2, 6, 3)),),
         "NativeGroupNormBackward0", atol=5e-5),
    # activations
    Case("gelu", lambda T, x: F(T).gelu(x * 3), (("f", (4, 5)),), None),
    Case("gelu_tanh", lambda T, x: F(T).gelu(x * 3, approximate="tanh"), (("f", (4, 5)),), None),
    Case("gelu_node", lambda T, x: F(T).gelu(x), (("f", (3,)),), "GeluBackward0"),
    Case("elu", lambda T, x: F(T).elu(x, 0.7), (("d", (3, 4)),), "EluBackward0"),
    Case("selu", lambda T, x: F(T).selu(x), (("d", (3, 4)),), "EluBackward0"),
    Case("celu", lambda T, x: F(T).celu(x, 0.5), (("d", (3, 4)),), "CeluBackward0"),
    Case("leaky_relu", lambda T, x: F(T).leaky_relu(x, 0.2), (("d", (3, 4)),), "LeakyReluBackward0"),
    Case("softplus", lambda T, x: F(T).softplus(x * 4, beta=2.0, threshold=3.0), (("d", (3, 5)),), None),
    Case("silu", lambda T, x: F(T).silu(x), (("f", (3, 4)),), "SiluBackward0"),
    Case("mish", lambda T, x: F(T).mish(x), (("f", (3, 4)),), "MishBackward0"),
    Case("hardtanh", lambda T, x: F(T).hardtanh(x * 2, -1.5, 1.0), (("d", (3, 5)),), None),
    Case("relu6", lambda T, x: F(T).relu6(x * 8), (("d", (3, 5)),), None),
    Case("hardsigmoid", lambda T, x: F(T).hardsigmoid(x * 5), (("d", (3, 5)),), None),
    Case("hardswish", lambda T, x: F(T).hardswish(x * 5), (("d", (3, 5)),), None),
    Case("logsigmoid", lambda T, x: F(T).logsigmoid(x * 5), (("f", (3, 4)),), None),
    Case("threshold", lambda T, x: F(T).threshold(x, 0.25, -2.0), (("d", (3, 4)),), "ThresholdBackward0"),
    # losses (core computations)
    Case("nll_loss", lambda T, x, t: F(T).nll_loss(x, t), (("f", (5, 4)), ("i", (5,), 4)), "NllLossBackward0"),
    Case("nll_loss_weight_ignore", lambda T, x, t, w: F(T).nll_loss(x, t, w, ignore_index=1),
         (("f", (6, 3)), ("i", (6,), 3), ("pc", (3,))), "NllLossBackward0"),
    Case("nll_loss_4d_sum", lambda T, x, t: F(T).nll_loss(x, t, reduction="sum"),
         (("f", (2, 3, 2, 2)), ("i", (2, 2, 2), 3)), "NllLoss2DBackward0"),
    Case("nll_loss_3d_none", lambda T, x, t: F(T).nll_loss(x, t, reduction="none"),
         (("f", (2, 4, 3)), ("i", (2, 3), 4)), "NllLossBackward0"),
    Case("nll_loss_unbatched", lambda T, x, t: F(T).nll_loss(x, t[0]), (("f", (4,)), ("i", (1,), 4)),
         "NllLossBackward0"),
    Case("mse_loss", lambda T, x, y: F(T).mse_loss(x, y), (("f", (3, 4)), ("f", (3, 4))), "MseLossBackward0"),
    Case("mse_loss_none", lambda T, x, y: F(T).mse_loss(x, y, reduction="none"), (("f", (3, 4)), ("c", (3, 4))),
         "MseLossBackward0"),
    Case("smooth_l1_loss", lambda T, x, y: F(T).smooth_l1_loss(x, y, beta=0.5), (("f", (4, 4)), ("f", (4, 4))),
         "SmoothL1LossBackward0"),
    Case("huber_loss", lambda T, x, y: F(T).huber_loss(x, y, reduction="sum", delta=0.7),
         (("f", (4, 4)), ("f", (4, 4))), "HuberLossBackward0"),
    Case("binary_cross_entropy", lambda T, x, y: F(T).binary_cross_entropy(x, y), (("u", (3, 4)), ("u", (3, 4))),
         "BinaryCrossEntropyBackward0"),
    Case("binary_cross_entropy_weight", lambda T, x, y, w: F(T).binary_cross_entropy(x, y, w, reduction="sum"),
         (("u", (3, 4)), ("uc", (3, 4)), ("pc", (4,))), "BinaryCrossEntropyBackward0"),
    Case("bce_with_logits", lambda T, x, y: F(T).binary_cross_entropy_with_logits(x, y),
         (("f", (3, 4)), ("u", (3, 4))), "BinaryCrossEntropyWithLogitsBackward0"),
    Case("bce_with_logits_weights", lambda T, x, y, w, p: F(T).binary_cross_entropy_with_logits(
        x * 3, y, w, reduction="none", pos_weight=p), (("f", (3, 4)), ("u", (3, 4)), ("pc", (3, 1)), ("pc", (4,))),
         None),
    # linear
    Case("linear", lambda T, x, w, b: F(T).linear(x, w, b), (("f", (3, 4)), ("f", (2, 4)), ("f", (2,))),
         "AddmmBackward0"),
    Case("linear_no_bias", lambda T, x, w: F(T).linear(x, w), (("f", (3, 4)), ("f", (2, 4))), "MmBackward0"),
    Case("linear_3d", lambda T, x, w, b: F(T).linear(x, w, b), (("f", (2, 3, 4)), ("f", (2, 4)), ("f", (2,))), None),
    Case("linear_1d", lambda T, x, w, b: F(T).linear(x, w, b), (("f", (4,)), ("f", (2, 4)), ("f", (2,))), None),
    Case("bilinear", lambda T, x, y, w, b: F(T).bilinear(x, y, w, b),
         (("f", (3, 2)), ("f", (3, 4)), ("f", (2, 2, 4)), ("f", (2,))), None),
    Case("bilinear_3d", lambda T, x, y, w: F(T).bilinear(x, y, w),
         (("f", (2, 2, 3)), ("f", (2, 2, 2)), ("f", (3, 3, 2))),
         None),
]

IDS = [c.id for c in CASES]


def run(T: Any, case: Case, arrays: list[np.ndarray]) -> tuple[Any, list]:
    tensors = [T.tensor(a, requires_grad=needs_grad(spec)) for a, spec in zip(arrays, case.inputs)]
    return case.fn(T, *tensors), tensors


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_values_and_gradients_match_torch(case: Case, dtype: Any) -> None:
    torch = pytest.importorskip("torch")
    arrays = make_inputs(case, dtype)
    ours, our_inputs = run(gs, case, arrays)
    theirs, their_inputs = run(torch, case, arrays)
    ours_all = ours if isinstance(ours, tuple) else (ours,)
    theirs_all = theirs if isinstance(theirs, tuple) else (theirs,)
    for a, b in zip(ours_all, theirs_all):
        assert a._data.dtype == b.detach().numpy().dtype
        np.testing.assert_allclose(a._data, b.detach().numpy(), rtol=case.rtol, atol=case.atol)
    out, ref = first(ours), first(theirs)
    upstream = np.random.default_rng(1).standard_normal(ref.shape).astype(dtype)
    out.backward(gs.tensor(upstream))
    ref.backward(torch.tensor(upstream))
    for index, (a, b) in enumerate(zip(our_inputs, their_inputs)):
        if not b.requires_grad:
            continue
        assert a.grad is not None, f"input {index} got no gradient"
        np.testing.assert_allclose(a.grad._data, b.grad.numpy(), rtol=case.rtol, atol=case.atol,
                                   err_msg=f"gradient of input {index}")


@pytest.mark.parametrize("case", [c for c in CASES if c.gradcheck], ids=[c.id for c in CASES if c.gradcheck])
def test_gradcheck_float64(case: Case) -> None:
    arrays = make_inputs(case, np.float64)
    tensors = [gs.tensor(a, requires_grad=needs_grad(spec)) for a, spec in zip(arrays, case.inputs)]
    assert gs.autograd.gradcheck(lambda *ts: first(case.fn(gs, *ts)), tensors)


@pytest.mark.parametrize("case", [c for c in CASES if c.node], ids=[c.id for c in CASES if c.node])
def test_node_name(case: Case) -> None:
    out, _ = run(gs, case, make_inputs(case, np.float32))
    assert first(out).grad_fn.name() == case.node


def test_max_pool_indices_match_torch_with_ties_and_nan() -> None:
    torch = pytest.importorskip("torch")
    x = np.array([[[[1, 3, 3, np.nan], [3, 2, np.nan, 1], [0, 0, 5, 5], [5, 5, 1, 1]]]], dtype=np.float32)
    for kernel, stride in ((2, 2), (2, 1), (3, 1)):
        out, idx = gs.nn.functional.max_pool2d(gs.tensor(x), kernel, stride, return_indices=True)
        ref, ref_idx = torch.nn.functional.max_pool2d(torch.tensor(x), kernel, stride, return_indices=True)
        np.testing.assert_array_equal(out._data, ref.numpy())
        np.testing.assert_array_equal(idx._data, ref_idx.numpy())
        assert idx.dtype == gs.int64


def test_max_pool_tie_gradient_goes_to_first_maximum() -> None:
    x = gs.tensor([[[[2.0, 2.0], [1.0, 2.0]]]], requires_grad=True)
    gs.nn.functional.max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad._data, [[[[1.0, 0.0], [0.0, 0.0]]]])


def test_conv_gradient_of_weight_only_skips_input() -> None:
    x = gs.randn(2, 3, 5, 5)
    w = gs.randn(4, 3, 3, 3, requires_grad=True)
    out = gs.nn.functional.conv2d(x, w, padding=1)
    out.sum().backward()
    assert x.grad is None and w.grad.shape == w.shape
    assert [n is None for n, _ in out.grad_fn.next_functions] == [True, False, True]


def test_conv_backward_twice_raises_and_retain_graph_allows_it() -> None:
    x = gs.randn(1, 2, 4, 4, requires_grad=True)
    w = gs.randn(3, 2, 3, 3, requires_grad=True)
    out = gs.nn.functional.conv2d(x, w).sum()
    out.backward(retain_graph=True)
    out.backward()
    with pytest.raises(RuntimeError, match="second time"):
        out.backward()


def test_conv_input_modified_in_place_raises() -> None:
    x = gs.randn(1, 2, 4, 4, requires_grad=True) * 1
    w = gs.randn(3, 2, 3, 3, requires_grad=True)
    out = gs.nn.functional.conv2d(x, w).sum()
    with gs.no_grad():
        x.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_batch_norm_updates_running_stats_like_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((6, 3, 2)).astype(np.float32)
    rm, rv = gs.zeros(3), gs.ones(3)
    trm, trv = torch.zeros(3), torch.ones(3)
    gs.nn.functional.batch_norm(gs.tensor(x), rm, rv, training=True, momentum=0.3)
    torch.nn.functional.batch_norm(torch.tensor(x), trm, trv, training=True, momentum=0.3)
    np.testing.assert_allclose(rm._data, trm.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv._data, trv.numpy(), rtol=1e-5, atol=1e-6)
    assert rm._version == 1


def test_embedding_max_norm_renormalises_rows_in_place_like_torch() -> None:
    torch = pytest.importorskip("torch")
    w = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32) * 2
    idx = np.array([[0, 2], [2, 5]])
    ours = gs.tensor(w)
    theirs = torch.tensor(w)
    out = gs.nn.functional.embedding(gs.tensor(idx), ours, max_norm=1.0)
    ref = torch.nn.functional.embedding(torch.tensor(idx), theirs, max_norm=1.0)
    np.testing.assert_allclose(out._data, ref.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours._data, theirs.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call, error, phrase", [
    (lambda F: F.conv2d(gs.zeros(1, 4, 5, 5), gs.zeros(2, 3, 3, 3)), RuntimeError,
     "expected input[1, 4, 5, 5] to have 3 channels"),
    (lambda F: F.conv2d(gs.zeros(1, 3, 2, 2), gs.zeros(2, 3, 3, 3)), RuntimeError, "Kernel size can't be greater"),
    (lambda F: F.conv2d(gs.zeros(1, 3, 5, 5), gs.zeros(2, 3, 3, 3), stride=2, padding="same"), ValueError,
     "not supported for strided convolutions"),
    (lambda F: F.conv2d(gs.zeros(3, 5), gs.zeros(2, 3, 3, 3)), RuntimeError, "Expected 3D (unbatched) or 4D"),
    (lambda F: F.max_pool2d(gs.zeros(1, 1, 4, 4), 2, padding=2), RuntimeError, "pad should be at most half"),
    (lambda F: F.pad(gs.zeros(1, 1, 3, 3), (3, 3, 0, 0), mode="reflect"), RuntimeError,
     "Padding size should be less"),
    (lambda F: F.pad(gs.zeros(1, 1, 3, 3), (1, 1), mode="replicate"), NotImplementedError,
     "Padding size 2 is not supported for 4D input"),
    (lambda F: F.nll_loss(gs.zeros(2, 3), gs.tensor([0, 3])), IndexError, "Target 3 is out of bounds"),
    (lambda F: F.binary_cross_entropy(gs.tensor([1.5]), gs.tensor([1.0])), RuntimeError, "between 0 and 1"),
    (lambda F: F.layer_norm(gs.zeros(2, 3), (4,)), RuntimeError, "expected input with shape [*, 4]"),
    (lambda F: F.group_norm(gs.zeros(2, 3, 4), 2), RuntimeError, "divisible by num_groups"),
    (lambda F: F.batch_norm(gs.zeros(1, 3), None, None, training=True), ValueError, "more than 1 value per channel"),
    (lambda F: F.batch_norm(gs.zeros(2, 3), None, None, training=False), RuntimeError, "running_mean must be defined"),
    (lambda F: F.embedding(gs.tensor([5]), gs.zeros(5, 2)), IndexError, "index out of range"),
    (lambda F: F.gelu(gs.zeros(2), approximate="fast"), RuntimeError, "approximate argument must be"),
    (lambda F: F.mse_loss(gs.zeros(2), gs.zeros(2), reduction="avg"), ValueError, "is not a valid value"),
    (lambda F: F.linear(gs.zeros(2, 3), gs.zeros(4, 3, dtype=gs.float64), gs.zeros(4)), RuntimeError,
     "self and mat2 must have the same dtype, but got Float and Double"),
    (lambda F: F.conv2d(gs.zeros(1, 1, 3, 3), gs.zeros(1, 1, 2, 2, dtype=gs.float64)), RuntimeError,
     "expected scalar type Float but found Double"),
    (lambda F: F.layer_norm(gs.zeros(2, 3), (3,), gs.zeros(3, dtype=gs.float64)), RuntimeError,
     "mixed dtype (CPU): expect parameter to have scalar type of Float"),
])
def test_errors_match_torch_type_and_phrase(call: Callable, error: type, phrase: str) -> None:
    with pytest.raises(error) as info:
        call(gs.nn.functional)
    assert phrase in str(info.value)
