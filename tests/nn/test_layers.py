"""Every layer against torch: torch's weights are loaded into the gradscope layer by state_dict, the
same inputs go through both, and outputs, input gradients, parameter gradients and buffers are
compared in train and eval mode. Also: parameter/buffer names and order, reprs, default
initialisation, and float64 gradient checks of input and parameters."""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

nn = gs.nn
pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")


@dataclass
class LayerCase:
    id: str
    make: Callable            # make(T) -> module
    inputs: tuple             # ("f", shape) float input requiring grad, ("i", shape, high) int64 input
    call: Callable = staticmethod(lambda m, *xs: m(*xs))
    gradcheck: bool = True
    atol: float = 1e-5


CASES = [
    LayerCase("linear", lambda T: T.nn.Linear(4, 3), (("f", (5, 4)),)),
    LayerCase("linear_3d_no_bias", lambda T: T.nn.Linear(4, 3, bias=False), (("f", (2, 3, 4)),)),
    LayerCase("bilinear", lambda T: T.nn.Bilinear(3, 2, 4), (("f", (5, 3)), ("f", (5, 2)))),
    LayerCase("conv1d", lambda T: T.nn.Conv1d(2, 4, 3, stride=2, padding=1), (("f", (2, 2, 7)),)),
    LayerCase("conv1d_same_groups", lambda T: T.nn.Conv1d(4, 4, 3, padding="same", groups=2, bias=False),
              (("f", (2, 4, 5)),)),
    LayerCase("conv1d_circular", lambda T: T.nn.Conv1d(2, 3, 3, padding=1, padding_mode="circular"),
              (("f", (2, 2, 5)),)),
    LayerCase("conv2d", lambda T: T.nn.Conv2d(3, 4, 3), (("f", (2, 3, 5, 5)),)),
    LayerCase("conv2d_strided_dilated", lambda T: T.nn.Conv2d(2, 4, (3, 2), stride=2, padding=(1, 0), dilation=(1, 2)),
              (("f", (2, 2, 6, 7)),)),
    LayerCase("conv2d_depthwise_same", lambda T: T.nn.Conv2d(3, 6, 3, padding="same", groups=3),
              (("f", (1, 3, 4, 4)),)),
    LayerCase("conv2d_same_even_kernel", lambda T: T.nn.Conv2d(2, 2, (2, 4), padding="same"), (("f", (1, 2, 4, 5)),)),
    LayerCase("conv2d_reflect", lambda T: T.nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect"),
              (("f", (2, 2, 4, 4)),)),
    LayerCase("conv2d_replicate_same", lambda T: T.nn.Conv2d(2, 3, 3, padding="same", padding_mode="replicate"),
              (("f", (1, 2, 4, 3)),)),
    LayerCase("conv2d_unbatched", lambda T: T.nn.Conv2d(2, 3, 2), (("f", (2, 4, 4)),)),
    LayerCase("conv_transpose1d", lambda T: T.nn.ConvTranspose1d(2, 3, 3, stride=2), (("f", (2, 2, 4)),)),
    LayerCase("conv_transpose2d", lambda T: T.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1),
              (("f", (2, 3, 3, 3)),)),
    LayerCase("conv_transpose2d_groups", lambda T: T.nn.ConvTranspose2d(4, 2, 2, groups=2, dilation=2, bias=False),
              (("f", (1, 4, 3, 2)),)),
    LayerCase("conv_transpose2d_output_size", lambda T: T.nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1),
              (("f", (1, 2, 3, 3)),), call=staticmethod(lambda m, x: m(x, output_size=[6, 5]))),
    LayerCase("max_pool2d", lambda T: T.nn.MaxPool2d(2), (("d", (2, 2, 4, 4)),)),
    LayerCase("max_pool2d_options", lambda T: T.nn.MaxPool2d(3, 2, 1, ceil_mode=True), (("d", (1, 2, 6, 5)),)),
    LayerCase("max_pool2d_indices", lambda T: T.nn.MaxPool2d(2, return_indices=True), (("d", (1, 2, 4, 4)),),
              call=staticmethod(lambda m, x: m(x)[0])),
    LayerCase("max_pool1d", lambda T: T.nn.MaxPool1d(3, 2), (("d", (2, 2, 7)),)),
    LayerCase("avg_pool2d", lambda T: T.nn.AvgPool2d(3, 2, 1, count_include_pad=False), (("f", (1, 2, 5, 6)),)),
    LayerCase("avg_pool1d", lambda T: T.nn.AvgPool1d(2), (("f", (2, 2, 6)),)),
    LayerCase("adaptive_avg_pool2d", lambda T: T.nn.AdaptiveAvgPool2d((2, 3)), (("f", (2, 2, 5, 7)),)),
    LayerCase("adaptive_avg_pool2d_global", lambda T: T.nn.AdaptiveAvgPool2d(1), (("f", (2, 3, 3, 2)),)),
    LayerCase("adaptive_avg_pool1d", lambda T: T.nn.AdaptiveAvgPool1d(3), (("f", (2, 2, 7)),)),
    LayerCase("batch_norm1d", lambda T: T.nn.BatchNorm1d(3), (("f", (4, 3)),), atol=5e-5),
    LayerCase("batch_norm1d_3d_cumulative", lambda T: T.nn.BatchNorm1d(3, momentum=None), (("f", (4, 3, 2)),),
              atol=5e-5),
    LayerCase("batch_norm2d", lambda T: T.nn.BatchNorm2d(3, eps=1e-3, momentum=0.3), (("f", (3, 3, 2, 2)),),
              atol=5e-5),
    LayerCase("batch_norm2d_no_affine", lambda T: T.nn.BatchNorm2d(2, affine=False), (("f", (3, 2, 2, 2)),),
              atol=5e-5),
    LayerCase("batch_norm2d_no_bias", lambda T: T.nn.BatchNorm2d(2, bias=False), (("f", (3, 2, 2, 2)),), atol=5e-5),
    LayerCase("batch_norm2d_untracked", lambda T: T.nn.BatchNorm2d(2, track_running_stats=False),
              (("f", (3, 2, 2, 2)),), atol=5e-5),
    LayerCase("layer_norm", lambda T: T.nn.LayerNorm(5), (("f", (2, 3, 5)),), atol=5e-5),
    LayerCase("layer_norm_2d_no_affine", lambda T: T.nn.LayerNorm((3, 4), elementwise_affine=False),
              (("f", (2, 3, 4)),), atol=5e-5),
    LayerCase("layer_norm_no_bias", lambda T: T.nn.LayerNorm(4, eps=1e-3, bias=False), (("f", (3, 4)),), atol=5e-5),
    LayerCase("group_norm", lambda T: T.nn.GroupNorm(2, 4), (("f", (2, 4, 3)),), atol=5e-5),
    LayerCase("group_norm_no_affine", lambda T: T.nn.GroupNorm(3, 6, affine=False), (("f", (2, 6, 2, 2)),),
              atol=5e-5),
    LayerCase("embedding", lambda T: T.nn.Embedding(10, 4), (("i", (3, 5), 10),)),
    LayerCase("embedding_padding", lambda T: T.nn.Embedding(6, 3, padding_idx=-2), (("i", (4, 4), 6),),
              gradcheck=False),
    LayerCase("relu", lambda T: T.nn.ReLU(), (("d", (3, 4)),)),
    LayerCase("relu6", lambda T: T.nn.ReLU6(), (("d", (3, 4)),)),
    LayerCase("leaky_relu", lambda T: T.nn.LeakyReLU(0.2), (("d", (3, 4)),)),
    LayerCase("elu", lambda T: T.nn.ELU(0.5), (("d", (3, 4)),)),
    LayerCase("selu", lambda T: T.nn.SELU(), (("d", (3, 4)),)),
    LayerCase("celu", lambda T: T.nn.CELU(1.5), (("d", (3, 4)),)),
    LayerCase("gelu", lambda T: T.nn.GELU(), (("f", (3, 4)),)),
    LayerCase("gelu_tanh", lambda T: T.nn.GELU("tanh"), (("f", (3, 4)),)),
    LayerCase("silu", lambda T: T.nn.SiLU(), (("f", (3, 4)),)),
    LayerCase("mish", lambda T: T.nn.Mish(), (("f", (3, 4)),)),
    LayerCase("tanh", lambda T: T.nn.Tanh(), (("f", (3, 4)),)),
    LayerCase("sigmoid", lambda T: T.nn.Sigmoid(), (("f", (3, 4)),)),
    LayerCase("log_sigmoid", lambda T: T.nn.LogSigmoid(), (("f", (3, 4)),)),
    LayerCase("hardtanh", lambda T: T.nn.Hardtanh(-0.5, 0.8), (("d", (3, 4)),)),
    LayerCase("hardswish", lambda T: T.nn.Hardswish(), (("d", (3, 4)),)),
    LayerCase("hardsigmoid", lambda T: T.nn.Hardsigmoid(), (("d", (3, 4)),)),
    LayerCase("softplus", lambda T: T.nn.Softplus(2.0, 1.0), (("d", (3, 4)),)),
    LayerCase("softsign", lambda T: T.nn.Softsign(), (("f", (3, 4)),)),
    LayerCase("tanhshrink", lambda T: T.nn.Tanhshrink(), (("f", (3, 4)),)),
    LayerCase("threshold", lambda T: T.nn.Threshold(0.1, -1.0), (("d", (3, 4)),)),
    LayerCase("glu", lambda T: T.nn.GLU(1), (("f", (3, 4)),)),
    LayerCase("prelu", lambda T: T.nn.PReLU(3), (("d", (2, 3, 2)),)),
    LayerCase("softmax", lambda T: T.nn.Softmax(dim=1), (("f", (3, 4)),)),
    LayerCase("log_softmax", lambda T: T.nn.LogSoftmax(dim=-1), (("f", (2, 3, 4)),)),
    LayerCase("softmin", lambda T: T.nn.Softmin(dim=0), (("f", (3, 4)),)),
    LayerCase("dropout_eval_like", lambda T: T.nn.Dropout(0.0), (("f", (3, 4)),)),
]
IDS = [c.id for c in CASES]


def make_inputs(case: LayerCase, dtype: Any) -> list[np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = []
    for spec in case.inputs:
        if spec[0] == "i":
            arrays.append(rng.integers(0, spec[2], spec[1]).astype(np.int64))
        elif spec[0] == "d":  # distinct values away from kinks
            n = int(np.prod(spec[1]))
            arrays.append(((rng.permutation(n) - n / 2 + 0.37) / max(n / 4, 1)).reshape(spec[1]).astype(dtype))
        else:
            arrays.append(rng.standard_normal(spec[1]).astype(dtype))
    return arrays


def copy_weights(ours: Any, theirs: Any) -> None:
    """Load torch's state_dict into the gradscope module (strict: same keys)."""
    state = {k: gs.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()}
    ours.load_state_dict(state)


def forward_backward(T: Any, case: LayerCase, module: Any, arrays: list) -> tuple[Any, list]:
    inputs = [T.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = case.call(module, *inputs)
    upstream = np.random.default_rng(3).standard_normal(tuple(out.shape)).astype(out.detach().numpy().dtype)
    out.backward(T.tensor(upstream))
    return out, inputs


def assert_close(a: Any, b: Any, atol: float, what: str) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=atol, err_msg=what)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_layer_matches_torch(case: LayerCase, training: bool) -> None:
    torch = pytest.importorskip("torch")
    theirs = case.make(torch)
    ours = case.make(gs)
    copy_weights(ours, theirs)
    theirs.train(training)
    ours.train(training)
    for step in range(2):  # the second step sees updated running statistics
        arrays = make_inputs(case, np.float32)
        out, ins = forward_backward(gs, case, ours, arrays)
        ref, ref_ins = forward_backward(torch, case, theirs, arrays)
        assert out.shape == tuple(ref.shape)
        assert_close(out._data, ref.detach().numpy(), case.atol, f"output, step {step}")
        for index, (a, b) in enumerate(zip(ins, ref_ins)):
            if b.requires_grad:
                assert_close(a.grad._data, b.grad.numpy(), case.atol, f"input {index} grad, step {step}")
        ref_params = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            assert_close(p.grad._data, ref_params[name].grad.numpy(), case.atol, f"{name}.grad, step {step}")
        ref_buffers = dict(theirs.named_buffers())
        for name, b in ours.named_buffers():
            assert_close(b._data, ref_buffers[name].numpy(), 1e-6, f"buffer {name}, step {step}")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_names_order_and_repr_match_torch(case: LayerCase) -> None:
    torch = pytest.importorskip("torch")
    ours, theirs = case.make(gs), case.make(torch)
    assert repr(ours) == repr(theirs)
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    for (name, ours_value), theirs_value in zip(ours.state_dict().items(), theirs.state_dict().values()):
        assert ours_value.dtype.name == str(theirs_value.dtype).replace("torch.", ""), name
        assert tuple(ours_value.shape) == tuple(theirs_value.shape), name


def gradcheck_module(module: Any, call: Callable, inputs: list) -> bool:
    """Finite-difference check (float64) of ``call(module, *inputs)`` w.r.t. inputs and parameters."""
    module.double()
    named = list(module.named_parameters())
    params = [gs.tensor(p._data, requires_grad=True) for _, p in named]

    def fn(*args: Any) -> Any:
        xs, ps = args[:len(inputs)], args[len(inputs):]
        saved = []
        for (name, _), p in zip(named, ps):
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name)
            saved.append((owner, leaf, owner._parameters[leaf]))
            owner._parameters[leaf] = p
        try:
            gs.manual_seed(0)
            return call(module, *xs)
        finally:
            for owner, leaf, original in saved:
                owner._parameters[leaf] = original

    return gs.autograd.gradcheck(fn, (*inputs, *params))


@pytest.mark.parametrize("case", [c for c in CASES if c.gradcheck], ids=[c.id for c in CASES if c.gradcheck])
def test_layer_gradcheck_float64(case: LayerCase) -> None:
    gs.manual_seed(0)
    module = case.make(gs)
    inputs = [gs.tensor(a, requires_grad=a.dtype.kind == "f") for a in make_inputs(case, np.float64)]
    assert gradcheck_module(module, case.call, inputs)


def test_batch_norm_eval_gradcheck_uses_running_stats() -> None:
    module = nn.BatchNorm2d(2)
    module.running_mean._data[...] = [0.5, -1.0]
    module.running_var._data[...] = [2.0, 0.5]
    module.eval()
    x = gs.tensor(np.random.default_rng(0).standard_normal((2, 2, 2, 2)), requires_grad=True)
    assert gradcheck_module(module, lambda m, t: m(t), [x])


# ---------------------------------------------------------------- batch norm state
def test_batch_norm_running_stats_and_counter_follow_torch_over_steps() -> None:
    torch = pytest.importorskip("torch")
    for momentum in (0.1, None):
        ours, theirs = nn.BatchNorm1d(3, momentum=momentum), torch.nn.BatchNorm1d(3, momentum=momentum)
        for step in range(4):
            x = np.random.default_rng(step).standard_normal((5, 3)).astype(np.float32) * (step + 1)
            ours(gs.tensor(x))
            theirs(torch.tensor(x))
        assert int(ours.num_batches_tracked.item()) == 4
        np.testing.assert_allclose(ours.running_mean._data, theirs.running_mean.numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours.running_var._data, theirs.running_var.numpy(), rtol=1e-5, atol=1e-6)
        ours.eval()
        x = gs.tensor(np.ones((2, 3), np.float32))
        np.testing.assert_allclose(ours(x)._data, theirs.eval()(torch.ones(2, 3)).detach().numpy(), rtol=1e-5)


def test_batch_norm_eval_does_not_touch_buffers_and_reset_running_stats() -> None:
    bn = nn.BatchNorm2d(2)
    bn(gs.randn(4, 2, 3, 3) + 3)
    mean = bn.running_mean._data.copy()
    bn.eval()
    bn(gs.randn(4, 2, 3, 3))
    np.testing.assert_array_equal(bn.running_mean._data, mean)
    assert bn.num_batches_tracked.item() == 1
    bn.reset_running_stats()
    np.testing.assert_array_equal(bn.running_mean._data, 0)
    np.testing.assert_array_equal(bn.running_var._data, 1)
    assert bn.num_batches_tracked.item() == 0


def test_batch_norm_input_dim_errors_match_torch() -> None:
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(gs.zeros(2, 3, 1, 1))
    with pytest.raises(ValueError, match=r"expected 4D input \(got 2D input\)"):
        nn.BatchNorm2d(3)(gs.zeros(2, 3))


# ---------------------------------------------------------------- dropout, embedding, conv extras
def test_dropout_module_trains_and_evaluates() -> None:
    gs.manual_seed(0)
    drop = nn.Dropout(0.25)
    x = gs.ones(100, 100)
    kept = drop(x)._data != 0
    assert abs(kept.mean() - 0.75) < 0.02
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(-0.1)


def test_dropout_inplace_module_in_a_model() -> None:
    gs.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.5, inplace=True), nn.Linear(8, 1))
    x = gs.randn(4, 3, requires_grad=True)
    model(x).sum().backward()
    assert x.grad is not None and model[0].weight.grad is not None


def test_embedding_from_pretrained_and_padding_row() -> None:
    torch = pytest.importorskip("torch")
    weights = np.arange(12, dtype=np.float32).reshape(4, 3)
    ours = nn.Embedding.from_pretrained(gs.tensor(weights), padding_idx=1)
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(weights), padding_idx=1)
    assert not ours.weight.requires_grad and repr(ours) == repr(theirs)
    np.testing.assert_array_equal(ours(gs.tensor([[3, 1]]))._data, weights[[[3, 1]]])
    fresh = nn.Embedding(5, 2, padding_idx=3)
    np.testing.assert_array_equal(fresh.weight._data[3], 0)
    fresh(gs.tensor([3, 3, 0])).sum().backward()
    np.testing.assert_array_equal(fresh.weight.grad._data[3], 0)
    np.testing.assert_array_equal(fresh.weight.grad._data[0], 1)


def test_conv_transpose_output_size_errors_and_conv_arg_validation() -> None:
    layer = nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1)
    with pytest.raises(ValueError, match="valid sizes range from"):
        layer(gs.zeros(1, 2, 3, 3), output_size=[9, 9])
    with pytest.raises(ValueError, match="in_channels must be divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="padding='same' is not supported for strided convolutions"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")


def test_linear_node_for_2d_input_is_addmm_with_bias_input_weight_edges() -> None:
    layer = nn.Linear(3, 2)
    out = layer(gs.randn(4, 3, requires_grad=True))
    assert out.grad_fn.name() == "AddmmBackward0"
    (bias_acc, _), (_, _), (weight_t, _) = out.grad_fn.next_functions
    assert bias_acc.variable is layer.bias
    assert weight_t.name() == "TBackward0" and weight_t.next_functions[0][0].variable is layer.weight
    assert nn.Linear(3, 2, bias=False)(gs.randn(4, 3)).grad_fn.name() == "MmBackward0"


# ---------------------------------------------------------------- default initialisation
@pytest.mark.parametrize("make, fan_in", [
    (lambda: nn.Linear(50, 40), 50), (lambda: nn.Conv2d(6, 30, 3), 54), (lambda: nn.Conv1d(4, 20, 5, groups=2), 10),
    (lambda: nn.ConvTranspose2d(6, 30, 3), 270),
])
def test_default_init_bounds_like_torch(make: Callable, fan_in: int) -> None:
    gs.manual_seed(0)
    layer = make()
    bound = 1 / math.sqrt(fan_in)
    w = layer.weight._data
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.15 * bound
    b = layer.bias._data
    assert np.abs(b).max() <= bound
    assert layer.weight.dtype == gs.float32 and layer.weight.requires_grad and layer.weight.is_leaf


def test_default_init_of_other_layers() -> None:
    gs.manual_seed(0)
    bilinear = nn.Bilinear(16, 3, 200)
    assert np.abs(bilinear.weight._data).max() <= 0.25 and np.abs(bilinear.bias._data).max() <= 0.25
    emb = nn.Embedding(400, 50)
    assert abs(emb.weight._data.mean()) < 0.02 and abs(emb.weight._data.std() - 1) < 0.02
    for norm in (nn.BatchNorm1d(4), nn.LayerNorm(4), nn.GroupNorm(2, 4)):
        np.testing.assert_array_equal(norm.weight._data, 1)
        np.testing.assert_array_equal(norm.bias._data, 0)
    np.testing.assert_array_equal(nn.PReLU(2).weight._data, 0.25)


def test_default_init_is_reproducible_with_manual_seed_and_respects_dtype() -> None:
    gs.manual_seed(5)
    first = nn.Linear(3, 2).weight._data.copy()
    gs.manual_seed(5)
    np.testing.assert_array_equal(nn.Linear(3, 2).weight._data, first)
    assert nn.Conv2d(1, 1, 1, dtype=gs.float64).weight.dtype == gs.float64


def test_small_cnn_with_batchnorm_matches_torch_end_to_end() -> None:
    torch = pytest.importorskip("torch")

    def build(T: Any) -> Any:
        return T.nn.Sequential(T.nn.Conv2d(1, 4, 3, padding=1), T.nn.BatchNorm2d(4), T.nn.ReLU(), T.nn.MaxPool2d(2),
                               T.nn.Conv2d(4, 6, 3), T.nn.GELU(), T.nn.AdaptiveAvgPool2d(1), T.nn.Flatten(),
                               T.nn.Dropout(0.0), T.nn.Linear(6, 3))

    theirs, ours = build(torch), build(gs)
    copy_weights(ours, theirs)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 3, 4)
    for mode in (True, False):
        ours.train(mode)
        theirs.train(mode)
        ours.zero_grad()
        theirs.zero_grad()
        loss = gs.nn.functional.cross_entropy(ours(gs.tensor(x)), gs.tensor(y))
        ref = torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        ref.backward()
        np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-5)
        for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
            np.testing.assert_allclose(p.grad._data, q.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
