"""The layers real model code uses beyond the core set (padding, resampling, instance/RMS norm,
adaptive max pooling, shrink activations, distance layers, extra losses), against torch:
outputs, input and parameter gradients and buffers in float32 and float64, train and eval,
plus reprs, parameter names and float64 gradient checks."""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from test_layers import LayerCase, copy_weights, gradcheck_module, make_inputs

import gradscope as gs

nn = gs.nn
F = gs.nn.functional


def _interp(**kwargs: Any) -> Any:
    return staticmethod(lambda m, x: m.F.interpolate(x, **kwargs))


class _Functional:
    """A parameterless module whose forward calls ``fn(F, *inputs)`` on the backend's functional API."""

    @staticmethod
    def make(fn: Any) -> Any:
        def build(T: Any) -> Any:
            class Call(T.nn.Module):
                def forward(self, *inputs: Any) -> Any:
                    return fn(T.nn.functional, *inputs)
            return Call()
        return build


def fn_case(case_id: str, fn: Any, inputs: tuple, **kwargs: Any) -> LayerCase:
    return LayerCase(case_id, _Functional.make(fn), inputs, **kwargs)


CASES = [
    LayerCase("zero_pad2d", lambda T: T.nn.ZeroPad2d((1, 2, 0, 3)), (("f", (2, 2, 3, 3)),)),
    LayerCase("zero_pad2d_crop", lambda T: T.nn.ZeroPad2d((-1, 1, 2, -1)), (("f", (1, 2, 4, 4)),)),
    LayerCase("constant_pad1d", lambda T: T.nn.ConstantPad1d(2, 3.5), (("f", (2, 3, 4)),)),
    LayerCase("constant_pad3d", lambda T: T.nn.ConstantPad3d((1, 0, 0, 1, 1, 1), -1.0), (("f", (1, 1, 2, 2, 2)),)),
    LayerCase("reflection_pad1d", lambda T: T.nn.ReflectionPad1d((2, 1)), (("f", (2, 3, 5)),)),
    LayerCase("reflection_pad2d", lambda T: T.nn.ReflectionPad2d(2), (("f", (2, 2, 4, 5)),)),
    LayerCase("reflection_pad2d_unbatched", lambda T: T.nn.ReflectionPad2d((1, 0, 2, 1)), (("f", (2, 4, 3)),)),
    LayerCase("replication_pad1d", lambda T: T.nn.ReplicationPad1d((3, 1)), (("f", (2, 2, 4)),)),
    LayerCase("replication_pad2d", lambda T: T.nn.ReplicationPad2d((1, 2, 2, 0)), (("f", (1, 2, 3, 3)),)),
    LayerCase("replication_pad3d", lambda T: T.nn.ReplicationPad3d(1), (("f", (1, 2, 2, 3, 2)),)),
    LayerCase("circular_pad2d", lambda T: T.nn.CircularPad2d((1, 1, 2, 0)), (("f", (1, 2, 3, 3)),)),
    LayerCase("pixel_shuffle", lambda T: T.nn.PixelShuffle(2), (("f", (2, 8, 3, 2)),)),
    LayerCase("pixel_unshuffle", lambda T: T.nn.PixelUnshuffle(2), (("f", (2, 3, 4, 6)),)),
    LayerCase("channel_shuffle", lambda T: T.nn.ChannelShuffle(2), (("f", (2, 6, 2, 2)),)),
    LayerCase("upsample_nearest_scale", lambda T: T.nn.Upsample(scale_factor=2), (("f", (2, 2, 3, 4)),)),
    LayerCase("upsample_nearest_size", lambda T: T.nn.Upsample(size=(5, 7)), (("f", (1, 2, 3, 4)),)),
    LayerCase("upsample_nearest_1d", lambda T: T.nn.Upsample(scale_factor=1.5), (("f", (2, 2, 5)),)),
    LayerCase("upsample_bilinear", lambda T: T.nn.Upsample(scale_factor=2, mode="bilinear"), (("f", (2, 2, 3, 4)),)),
    LayerCase("upsample_bilinear_align", lambda T: T.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True),
              (("f", (2, 2, 3, 4)),)),
    LayerCase("upsample_bilinear_down_size", lambda T: T.nn.Upsample(size=(2, 3), mode="bilinear"),
              (("f", (1, 2, 5, 7)),)),
    LayerCase("upsample_linear", lambda T: T.nn.Upsample(size=7, mode="linear"), (("f", (2, 2, 4)),)),
    LayerCase("upsample_bicubic", lambda T: T.nn.Upsample(scale_factor=1.7, mode="bicubic"), (("f", (1, 2, 4, 5)),),
              atol=1e-4),
    LayerCase("upsample_trilinear", lambda T: T.nn.Upsample(scale_factor=(2, 1, 1.5), mode="trilinear"),
              (("f", (1, 2, 2, 3, 2)),)),
    LayerCase("upsampling_bilinear2d", lambda T: T.nn.UpsamplingBilinear2d(scale_factor=2), (("f", (1, 2, 3, 3)),)),
    LayerCase("upsampling_nearest2d", lambda T: T.nn.UpsamplingNearest2d(size=(4, 5)), (("f", (1, 2, 3, 3)),)),
    fn_case("interpolate_area", lambda F, x: F.interpolate(x, size=(2, 3), mode="area"), (("f", (2, 2, 5, 7)),)),
    fn_case("interpolate_nearest_exact", lambda F, x: F.interpolate(x, scale_factor=1.6, mode="nearest-exact"),
            (("f", (1, 2, 4, 5)),)),
    fn_case("interpolate_recompute", lambda F, x: F.interpolate(x, scale_factor=1.7, mode="bilinear",
                                                                recompute_scale_factor=True),
            (("f", (1, 2, 4, 5)),)),
    LayerCase("instance_norm1d", lambda T: T.nn.InstanceNorm1d(3), (("f", (2, 3, 5)),), atol=5e-5),
    LayerCase("instance_norm2d_affine", lambda T: T.nn.InstanceNorm2d(3, affine=True), (("f", (2, 3, 4, 4)),),
              atol=5e-5),
    LayerCase("instance_norm2d_tracked", lambda T: T.nn.InstanceNorm2d(2, affine=True, track_running_stats=True),
              (("f", (3, 2, 3, 3)),), atol=5e-5),
    LayerCase("instance_norm2d_unbatched", lambda T: T.nn.InstanceNorm2d(2, momentum=0.3, track_running_stats=True),
              (("f", (2, 3, 3)),), atol=5e-5),
    LayerCase("rms_norm", lambda T: T.nn.RMSNorm(4), (("f", (2, 3, 4)),), atol=5e-5),
    LayerCase("rms_norm_2d_eps", lambda T: T.nn.RMSNorm((3, 4), eps=1e-3), (("f", (2, 3, 4)),), atol=5e-5),
    LayerCase("rms_norm_no_affine", lambda T: T.nn.RMSNorm(4, elementwise_affine=False), (("f", (3, 4)),), atol=5e-5),
    LayerCase("local_response_norm", lambda T: T.nn.LocalResponseNorm(3), (("f", (2, 5, 3, 3)),), atol=5e-5),
    LayerCase("local_response_norm_3d", lambda T: T.nn.LocalResponseNorm(2, alpha=0.1), (("f", (2, 4, 5)),),
              atol=5e-5),
    LayerCase("adaptive_max_pool2d", lambda T: T.nn.AdaptiveMaxPool2d((2, 3)), (("d", (2, 2, 5, 7)),)),
    LayerCase("adaptive_max_pool2d_global", lambda T: T.nn.AdaptiveMaxPool2d(1), (("d", (2, 3, 4, 4)),)),
    LayerCase("adaptive_max_pool2d_indices", lambda T: T.nn.AdaptiveMaxPool2d((2, None), return_indices=True),
              (("d", (1, 2, 5, 3)),), call=staticmethod(lambda m, x: m(x)[0])),
    LayerCase("adaptive_max_pool1d", lambda T: T.nn.AdaptiveMaxPool1d(3), (("d", (2, 2, 7)),)),
    LayerCase("softmax2d", lambda T: T.nn.Softmax2d(), (("f", (2, 3, 2, 2)),)),
    LayerCase("hardshrink", lambda T: T.nn.Hardshrink(0.3), (("d", (3, 4)),)),
    LayerCase("softshrink", lambda T: T.nn.Softshrink(0.3), (("d", (3, 4)),)),
    fn_case("rrelu_eval", lambda F, x: F.rrelu(x, 0.1, 0.3), (("d", (3, 4)),)),
    LayerCase("cosine_similarity", lambda T: T.nn.CosineSimilarity(dim=-1), (("f", (3, 4)), ("f", (3, 4)))),
    LayerCase("pairwise_distance", lambda T: T.nn.PairwiseDistance(p=1.5, keepdim=True),
              (("f", (3, 4)), ("f", (3, 4)))),
    LayerCase("margin_ranking_loss", lambda T: T.nn.MarginRankingLoss(0.2), (("f", (6,)), ("f", (6,)), ("s", (6,)))),
    LayerCase("hinge_embedding_loss", lambda T: T.nn.HingeEmbeddingLoss(0.5, reduction="sum"),
              (("f", (3, 4)), ("s", (3, 4)))),
    LayerCase("soft_margin_loss", lambda T: T.nn.SoftMarginLoss(), (("f", (3, 4)), ("s", (3, 4)))),
    LayerCase("multilabel_soft_margin_loss", lambda T: T.nn.MultiLabelSoftMarginLoss(reduction="none"),
              (("f", (3, 4)), ("b", (3, 4)))),
    LayerCase("cosine_embedding_loss", lambda T: T.nn.CosineEmbeddingLoss(0.1), (("f", (5, 4)), ("f", (5, 4)),
                                                                                 ("s", (5,)))),
    LayerCase("triplet_margin_loss", lambda T: T.nn.TripletMarginLoss(0.5, swap=True),
              (("f", (4, 3)), ("f", (4, 3)), ("f", (4, 3)))),
    LayerCase("triplet_margin_distance_loss", lambda T: T.nn.TripletMarginWithDistanceLoss(
        distance_function=lambda a, b: 1.0 - T.nn.functional.cosine_similarity(a, b), margin=0.4),
        (("f", (4, 3)), ("f", (4, 3)), ("f", (4, 3)))),
    LayerCase("gaussian_nll_loss", lambda T: T.nn.GaussianNLLLoss(full=True),
              (("f", (4, 3)), ("f", (4, 3)), ("P", (4, 1)))),
    LayerCase("poisson_nll_loss", lambda T: T.nn.PoissonNLLLoss(full=True), (("f", (4, 3)), ("p", (4, 3)))),
    LayerCase("poisson_nll_loss_rate", lambda T: T.nn.PoissonNLLLoss(log_input=False), (("P", (4, 3)), ("p", (4, 3)))),
]
IDS = [c.id for c in CASES]


def inputs_for(case: LayerCase, dtype: Any) -> list:
    """``make_inputs`` plus kinds for losses: "s" signs (+-1), "b" 0/1 labels, "p" positive values
    ("P": positive and requiring grad)."""
    plain = LayerCase(case.id, case.make, tuple(("f", spec[1]) if spec[0] in "sbpP" else spec for spec in case.inputs))
    arrays = make_inputs(plain, dtype)
    for index, spec in enumerate(case.inputs):
        if spec[0] == "s":
            arrays[index] = np.where(arrays[index] > 0, 1.0, -1.0).astype(dtype)
        elif spec[0] == "b":
            arrays[index] = (arrays[index] > 0).astype(dtype)
        elif spec[0] in "pP":
            arrays[index] = (np.abs(arrays[index]) + 0.5).astype(dtype)
    return arrays


def differentiable(case: LayerCase) -> list:
    return [spec[0] in "fdP" for spec in case.inputs]


def run(T: Any, case: LayerCase, module: Any, arrays: list) -> tuple:
    inputs = [T.tensor(a, requires_grad=grad) for a, grad in zip(arrays, differentiable(case))]
    out = case.call(module, *inputs)
    upstream = np.random.default_rng(3).standard_normal(tuple(out.shape)).astype(out.detach().numpy().dtype)
    out.backward(T.tensor(upstream))
    return out, inputs


def close(a: Any, b: Any, atol: float, what: str) -> None:
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=atol, err_msg=what)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_layer_matches_torch(case: LayerCase, training: bool, dtype: Any) -> None:
    torch = pytest.importorskip("torch")
    theirs, ours = case.make(torch), case.make(gs)
    if dtype == np.float64:
        theirs.double()
        ours.double()
    copy_weights(ours, theirs)
    theirs.train(training)
    ours.train(training)
    atol = case.atol if dtype == np.float32 else 1e-9
    for step in range(2):  # the second step sees updated running statistics
        arrays = inputs_for(case, dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out, ins = run(gs, case, ours, arrays)
            ref, ref_ins = run(torch, case, theirs, arrays)
        assert tuple(out.shape) == tuple(ref.shape) and out.dtype.itemsize == ref.dtype.itemsize
        close(out, ref, atol, f"output, step {step}")
        for index, (a, b) in enumerate(zip(ins, ref_ins)):
            if b.grad is not None:
                close(a.grad, b.grad, atol, f"input {index} grad, step {step}")
        ref_params = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            close(p.grad, ref_params[name].grad, atol, f"{name}.grad, step {step}")
        ref_buffers = dict(theirs.named_buffers())
        for name, b in ours.named_buffers():
            close(b, ref_buffers[name], atol, f"buffer {name}, step {step}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_names_and_repr_match_torch(case: LayerCase) -> None:
    torch = pytest.importorskip("torch")
    ours, theirs = case.make(gs), case.make(torch)
    if case.id != "triplet_margin_distance_loss":  # its repr shows a lambda's address
        assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize("case", [c for c in CASES if "max_pool" not in c.id and "shrink" not in c.id],
                         ids=[c.id for c in CASES if "max_pool" not in c.id and "shrink" not in c.id])
def test_layer_gradcheck_float64(case: LayerCase) -> None:
    gs.manual_seed(0)
    module = case.make(gs)
    arrays = inputs_for(case, np.float64)
    inputs = [gs.tensor(a, requires_grad=grad) for a, grad in zip(arrays, differentiable(case))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert gradcheck_module(module, case.call, inputs)


def test_dropout2d_accepts_3d_and_other_ranks_with_torchs_warnings() -> None:
    torch = pytest.importorskip("torch")
    for lib in (gs, torch):
        lib.manual_seed(0)
        x = lib.ones(4, 6, 50)
        with pytest.warns(UserWarning, match="Received a 3D input to dropout2d"):
            out = lib.nn.Dropout2d(0.5)(x)
        kept = out.detach().numpy()
        assert set(np.unique(kept)) <= {0.0, 2.0}
        assert np.all(kept.min(axis=2) == kept.max(axis=2))  # whole (sample, channel) rows dropped
        with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
            lib.nn.functional.dropout2d(lib.ones(3, 4))


def test_interpolate_argument_errors_match_torch() -> None:
    torch = pytest.importorskip("torch")
    for lib in (gs, torch):
        F_ = lib.nn.functional
        x = lib.ones(1, 2, 3, 3)
        with pytest.raises(ValueError, match="only one of size or scale_factor should be defined"):
            F_.interpolate(x, size=4, scale_factor=2)
        with pytest.raises(ValueError, match="either size or scale_factor should be defined"):
            F_.interpolate(x)
        with pytest.raises(ValueError, match="align_corners option can only be set"):
            F_.interpolate(x, scale_factor=2, align_corners=True)
