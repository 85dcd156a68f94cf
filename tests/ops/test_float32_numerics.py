"""float32 numerics against torch's CPU kernels, on ill-conditioned inputs.

torch accumulates some float32 reductions in float64 (BatchNorm's statistics and backward sums,
``var``/``std``) or with a cascade that is about as good (``sum``, ``mean``); numpy's float32 sum
adds in order along a strided axis. Where torch accumulates wide, gradscope must agree with torch
tightly (a few float32 ulps of the result's largest entry). Where torch accumulates in float32
itself (``linalg.vector_norm``, LayerNorm, GroupNorm), its result carries a float32 error too:
gradscope must be about as close to the float64 result as torch is (within a factor of 6).

The last test runs torchvision's ResNet layout (``torchvision_resnet.py``) in float32, train mode,
on both engines with the same weights and compares the loss and all 38 parameter gradients.
"""
from __future__ import annotations

import types
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

ULP = float(np.finfo(np.float32).eps)  # 1.2e-7


def _relative(ours: np.ndarray, reference: np.ndarray) -> float:
    """Largest absolute difference relative to the reference's largest magnitude (normwise)."""
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    return float(np.abs(ours - reference).max() / max(np.abs(reference).max(), 1e-30))


def _run(fn: Callable, x: np.ndarray, seed: int) -> dict:
    """Output and input gradient of ``sum(fn(x) * w)`` on gradscope (float32) and torch (float32,
    float64), ``w`` a fixed random cotangent."""
    results = {}
    for name, lib, dtype in (("gs", gs, None), ("torch", torch, torch.float32), ("torch64", torch, torch.float64)):
        if lib is gs:
            leaf = gs.tensor(x, requires_grad=True)
        else:
            leaf = torch.tensor(x, dtype=dtype, requires_grad=True)
        out = fn(lib, leaf)
        cotangent = np.random.default_rng(seed).standard_normal(tuple(out.shape)).astype(np.float32)
        (out * (gs.tensor(cotangent) if lib is gs else torch.tensor(cotangent, dtype=dtype))).sum().backward()
        results[name] = (out.detach().numpy(), leaf.grad.numpy())
    return results


def _rows(rng: np.random.Generator, shape: tuple, mean: float, spread: float) -> np.ndarray:
    return (rng.standard_normal(shape) * spread + mean).astype(np.float32)


# (id, fn(lib, x), make(rng)): ops that torch accumulates wide on the CPU
WIDE = [
    ("sum-many-strided", lambda T, x: T.sum(x, 0), lambda r: (r.random((200_000, 3)) + 1).astype(np.float32)),
    ("sum-all-many", lambda T, x: T.sum(x), lambda r: (r.random((500, 400)) + 1).astype(np.float32)),
    ("mean-many-strided", lambda T, x: T.mean(x, 0), lambda r: (r.random((200_000, 3)) + 1).astype(np.float32)),
    ("mean-dims-0-2", lambda T, x: x.mean((0, 2)), lambda r: _rows(r, (300, 4, 50), 3.0, 1.0)),
    ("var-large-mean-rows", lambda T, x: T.var(x, 1), lambda r: _rows(r, (4, 1000), 1e4, 1.0)),
    ("var-large-mean-cols", lambda T, x: x.var(0, unbiased=False), lambda r: _rows(r, (1000, 4), 1e3, 1e-2)),
    ("var-all-large-mean", lambda T, x: T.var(x), lambda r: _rows(r, (40, 50), 1e4, 1.0)),
    ("std-large-mean-cols", lambda T, x: T.std(x, 0), lambda r: _rows(r, (1000, 4), 1e3, 1e-2)),
    ("std-correction-2", lambda T, x: T.std(x, 1, correction=2, keepdim=True), lambda r: _rows(r, (3, 500), -5e3, 0.5)),
    ("var_mean", lambda T, x: T.stack(T.var_mean(x, 0)), lambda r: _rows(r, (800, 3), 2e3, 0.1)),
    ("std_mean", lambda T, x: T.stack(T.std_mean(x, 0, unbiased=False)), lambda r: _rows(r, (800, 3), 2e3, 0.1)),
]


@pytest.mark.parametrize("fn, make", [case[1:] for case in WIDE], ids=[case[0] for case in WIDE])
def test_wide_reductions_agree_with_torch_in_float32(fn: Callable, make: Callable) -> None:
    rng = np.random.default_rng(25)
    results = _run(fn, make(rng), 1)
    (ours, ours_grad), (theirs, theirs_grad), (exact, exact_grad) = results["gs"], results["torch"], results["torch64"]
    assert ours.dtype == np.float32 and ours_grad.dtype == np.float32
    # the values: ours are the exact result rounded (about); torch's cascade sum is within a few ulps
    assert _relative(ours, exact) <= 2 * ULP
    assert _relative(ours, theirs) <= _relative(theirs, exact) + 2 * ULP
    # the gradients use the float32 mean as torch does; its sum may differ from ours by an ulp
    assert _relative(ours_grad, exact_grad) <= max(3 * _relative(theirs_grad, exact_grad), 8 * ULP)


# BatchNorm in training mode with few values per channel and a mean far from zero
BATCH_NORM_INPUTS = [
    ((2, 4, 2, 2), 100.0, 0.01),   # 8 values per channel, as layer4 of a ResNet on 64x64 images
    ((4, 3, 5, 5), 1e3, 1.0),
    ((2, 3, 8, 8), 1e4, 1.0),
    ((3, 2, 2), -50.0, 0.1),       # BatchNorm1d on (N, C, L)
    ((2, 3, 4, 2, 2), 300.0, 0.1),  # BatchNorm3d
]
# (With one value per channel and sample, (N, C) or (N, C, 1, 1), torch sums each thread's share
# of the batch in float32: how close it comes depends on its thread count; see NARROW.)


@pytest.mark.parametrize("shape, mean, spread", BATCH_NORM_INPUTS, ids=[f"{s}-{m:g}" for s, m, _ in BATCH_NORM_INPUTS])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_batch_norm_training_agrees_with_torch_in_float32(shape: tuple, mean: float, spread: float,
                                                          affine: bool) -> None:
    rng = np.random.default_rng(7)
    x = _rows(rng, shape, mean, spread)
    channels = shape[1]
    weight = rng.standard_normal(channels).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    cotangent = rng.standard_normal(shape).astype(np.float32)
    running = (rng.standard_normal(channels).astype(np.float32), rng.random(channels).astype(np.float32) + 0.5)

    def run(lib: Any) -> tuple:
        make = (lambda a, grad: gs.tensor(a, requires_grad=grad)) if lib is gs else \
            (lambda a, grad: torch.tensor(a, requires_grad=grad))
        leaf = make(x, True)
        w, b = (make(weight, True), make(bias, True)) if affine else (None, None)
        running_mean, running_var = make(running[0], False), make(running[1], False)
        out = lib.nn.functional.batch_norm(leaf, running_mean, running_var, w, b, training=True, momentum=0.3)
        out.backward(make(cotangent, False))
        grads = [leaf.grad.numpy()] + ([w.grad.numpy(), b.grad.numpy()] if affine else [])
        return out.detach().numpy(), grads, running_mean.numpy(), running_var.numpy()

    ours, theirs = run(gs), run(torch)
    # torch's output carries the rounding of beta = bias - mean * alpha (up to 1e-3 here); ours too
    assert _relative(ours[0], theirs[0]) <= 2 * ULP
    for name, mine, reference in zip(("input", "weight", "bias"), ours[1], theirs[1]):
        assert _relative(mine, reference) <= 4 * ULP, name
    np.testing.assert_allclose(ours[2], theirs[2], rtol=2 * ULP, atol=0)
    np.testing.assert_allclose(ours[3], theirs[3], rtol=4 * ULP, atol=0)


def test_batch_norm_eval_with_large_running_mean_agrees_with_torch() -> None:
    rng = np.random.default_rng(8)
    x = _rows(rng, (2, 6, 3, 3), 500.0, 0.05)
    stats = (_rows(rng, (6,), 500.0, 0.05), rng.random(6).astype(np.float32) * 1e-3)
    weight, bias = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)
    cotangent = rng.standard_normal(x.shape).astype(np.float32)
    outs = []
    for lib in (gs, torch):
        leaf, w, b = (lib.tensor(a, requires_grad=True) for a in (x, weight, bias))
        out = lib.nn.functional.batch_norm(leaf, lib.tensor(stats[0]), lib.tensor(stats[1]), w, b, training=False)
        out.backward(lib.tensor(cotangent))
        outs.append((out.detach().numpy(), leaf.grad.numpy(), w.grad.numpy(), b.grad.numpy()))
    assert _relative(outs[0][0], outs[1][0]) <= 2 * ULP
    for mine, reference in zip(outs[0][1:], outs[1][1:]):
        assert _relative(mine, reference) <= 4 * ULP


NARROW_FACTOR = 6
# (id, fn, make): torch accumulates these in float32 itself
NARROW = [
    # BatchNorm over (N, C) or (N, C, 1, 1): torch sums each thread's share of the rows in float32
    ("batch-norm-1d-rows", lambda T, x: T.nn.functional.batch_norm(x, None, None, training=True),
     lambda r: _rows(r, (64, 5), -50.0, 0.1)),
    ("batch-norm-2-values", lambda T, x: T.nn.functional.batch_norm(x, None, None, training=True),
     lambda r: _rows(r, (2, 8, 1, 1), 10.0, 1e-3)),
    ("vector-norm-many", lambda T, x: T.linalg.vector_norm(x), lambda r: r.standard_normal(1_000_000).astype(np.float32)),
    ("vector-norm-strided", lambda T, x: T.linalg.vector_norm(x, dim=0), lambda r: r.standard_normal((100_000, 3)).astype(np.float32)),
    ("norm-rows", lambda T, x: x.norm(dim=1), lambda r: _rows(r, (3, 200_000), 1.0, 1.0)),
    ("layer-norm-large-mean", lambda T, x: T.nn.functional.layer_norm(x, (64,)), lambda r: _rows(r, (8, 64), 1e3, 1.0)),
    ("layer-norm-2d-large-mean", lambda T, x: T.nn.functional.layer_norm(x, (6, 5)), lambda r: _rows(r, (3, 6, 5), -2e3, 0.5)),
    ("group-norm-large-mean", lambda T, x: T.nn.functional.group_norm(x, 2), lambda r: _rows(r, (2, 4, 5, 5), 1e3, 1.0)),
]


@pytest.mark.parametrize("fn, make", [case[1:] for case in NARROW], ids=[case[0] for case in NARROW])
def test_float32_accumulations_are_about_as_accurate_as_torchs(fn: Callable, make: Callable) -> None:
    rng = np.random.default_rng(26)
    results = _run(fn, make(rng), 2)
    (ours, ours_grad), (theirs, theirs_grad), (exact, exact_grad) = results["gs"], results["torch"], results["torch64"]
    # both round their float32 statistics: which of the two errors is larger is chance (up to 4x
    # over eight seeds for GroupNorm); an unstable formula (E[x^2] - E[x]^2) would be ~1000x off
    assert _relative(ours, exact) <= max(NARROW_FACTOR * _relative(theirs, exact), 4 * ULP)
    assert _relative(ours_grad, exact_grad) <= max(NARROW_FACTOR * _relative(theirs_grad, exact_grad), 8 * ULP)


# ---------------------------------------------------------------- torchvision's ResNet layout
RESNET_SOURCE = (Path(__file__).parent / "torchvision_resnet.py").read_text()
TORCH_IMPORT, GRADSCOPE_IMPORT = "import torch.nn as nn", "import gradscope.nn as nn"
#: gradient tolerance, relative to each gradient's largest magnitude (float32 gives ~1e-7 per op;
#: the convolutions' float32 products, summed in a different order by oneDNN and BLAS, leave ~1e-5)
RESNET_RTOL = 5e-5


def _resnet_module(swap: bool) -> types.ModuleType:
    assert RESNET_SOURCE.count(TORCH_IMPORT) == 1
    module = types.ModuleType("gradscope_resnet" if swap else "torch_resnet")
    source = RESNET_SOURCE.replace(TORCH_IMPORT, GRADSCOPE_IMPORT) if swap else RESNET_SOURCE
    exec(compile(source, module.__name__, "exec"), module.__dict__)
    return module


def test_torchvision_resnet_gradients_agree_with_torch_in_float32() -> None:
    torch.manual_seed(0)
    theirs = _resnet_module(False).ResNet()
    ours = _resnet_module(True).ResNet()
    ours.load_state_dict({name: gs.tensor(value.numpy()) for name, value in theirs.state_dict().items()})
    theirs.train()
    ours.train()
    x = torch.randn(2, 3, 64, 64)
    target = torch.randint(0, 1000, (2,))
    their_loss = torch.nn.functional.cross_entropy(theirs(x), target)
    our_loss = gs.nn.functional.cross_entropy(ours(gs.tensor(x.numpy())), gs.tensor(target.numpy()))
    their_loss.backward()
    our_loss.backward()
    assert our_loss.dtype == gs.float32
    assert abs(our_loss.item() - their_loss.item()) <= 4 * ULP * abs(their_loss.item())
    their_grads = dict(theirs.named_parameters())
    our_grads = dict(ours.named_parameters())
    assert list(our_grads) == list(their_grads) and len(our_grads) == 38
    for name, parameter in their_grads.items():
        assert our_grads[name].grad.dtype == gs.float32
        assert _relative(our_grads[name].grad.numpy(), parameter.grad.numpy()) <= RESNET_RTOL, name
    for name, buffer in theirs.state_dict().items():  # the running statistics BatchNorm updated
        assert _relative(ours.state_dict()[name].numpy(), buffer.numpy()) <= 1e-5, name
