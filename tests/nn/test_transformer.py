"""Transformer layers against torch: identical weights (copied by state_dict), the same inputs and
masks; outputs, input gradients and every parameter gradient compared in float32 and float64,
plus submodule names, reprs, causal-mask detection and the eval fast path's padded zeros."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")

D_MODEL, HEADS, FF = 8, 2, 12


def copy_weights(ours: Any, theirs: Any) -> None:
    ours.load_state_dict({k: gs.tensor(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()})


def build(T: Any, kind: str, dtype: Any, **options: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "encoder_layer":
            module = T.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, **options)
        elif kind == "encoder":
            layer = T.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, dropout=0.0, **options)
            module = T.nn.TransformerEncoder(layer, 2, norm=T.nn.LayerNorm(D_MODEL))
        elif kind == "decoder_layer":
            module = T.nn.TransformerDecoderLayer(D_MODEL, HEADS, FF, dropout=0.0, **options)
        elif kind == "decoder":
            layer = T.nn.TransformerDecoderLayer(D_MODEL, HEADS, FF, dropout=0.0, **options)
            module = T.nn.TransformerDecoder(layer, 2)
        else:
            module = T.nn.Transformer(D_MODEL, HEADS, 2, 1, FF, dropout=0.0, **options)
    return module.double() if dtype == np.float64 else module


def masks(T: Any, length: int, batch: int) -> dict:
    padding = np.zeros((batch, length), dtype=bool)
    padding[0, -2:] = True
    return {"causal": T.nn.Transformer.generate_square_subsequent_mask(length),
            "padding": T.tensor(padding)}


def scenario(T: Any, kind: str, dtype: Any, options: dict, call: Callable, theirs: Any = None) -> tuple:
    module = build(T, kind, dtype, **options)
    if theirs is not None:
        copy_weights(module, theirs)
    rng = np.random.default_rng(0)
    batch_first = options.get("batch_first", False)
    shape = (2, 5, D_MODEL) if batch_first else (5, 2, D_MODEL)
    memory_shape = (2, 4, D_MODEL) if batch_first else (4, 2, D_MODEL)
    src = T.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True)
    memory = T.tensor(rng.standard_normal(memory_shape).astype(dtype), requires_grad=True)
    out = call(module, src, memory, masks(T, 5, 2))
    weights = T.tensor(rng.standard_normal(tuple(out.shape)).astype(dtype))
    (out * weights).sum().backward()
    grads = {name: p.grad for name, p in module.named_parameters()}
    return module, out, src.grad, memory.grad, grads


CASES = {
    "encoder_layer_post_norm": ("encoder_layer", {}, lambda m, x, mem, k: m(x)),
    "encoder_layer_pre_norm_gelu_batch_first": ("encoder_layer", {"norm_first": True, "activation": "gelu",
                                                                  "batch_first": True},
                                                lambda m, x, mem, k: m(x, src_key_padding_mask=k["padding"])),
    "encoder_layer_causal": ("encoder_layer", {}, lambda m, x, mem, k: m(x, src_mask=k["causal"], is_causal=True)),
    "encoder_stack_masks": ("encoder", {"batch_first": True},
                            lambda m, x, mem, k: m(x, mask=k["causal"], src_key_padding_mask=k["padding"])),
    "encoder_stack_detects_causal": ("encoder", {}, lambda m, x, mem, k: m(x, mask=k["causal"])),
    "encoder_no_bias": ("encoder", {"bias": False, "norm_first": True}, lambda m, x, mem, k: m(x)),
    "decoder_layer": ("decoder_layer", {}, lambda m, x, mem, k: m(x, mem, tgt_mask=k["causal"])),
    "decoder_layer_pre_norm_batch_first": ("decoder_layer", {"norm_first": True, "batch_first": True},
                                           lambda m, x, mem, k: m(x, mem, tgt_key_padding_mask=k["padding"],
                                                                  tgt_is_causal=False)),
    "decoder_stack": ("decoder", {}, lambda m, x, mem, k: m(x, mem, tgt_mask=k["causal"],
                                                            memory_key_padding_mask=k["padding"][:, :4])),
    "transformer": ("transformer", {}, lambda m, x, mem, k: m(mem, x, tgt_mask=k["causal"])),
    "transformer_batch_first_pre_norm": ("transformer", {"batch_first": True, "norm_first": True,
                                                         "activation": "gelu"},
                                         lambda m, x, mem, k: m(mem, x, tgt_mask=m.generate_square_subsequent_mask(5),
                                                                src_key_padding_mask=k["padding"][:, :4])),
}


def _close(ours: Any, theirs: Any, atol: float, what: str) -> None:
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-4, atol=atol, err_msg=what)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", list(CASES))
def test_matches_torch(case: str, dtype: Any) -> None:
    kind, options, call = CASES[case]
    theirs, ref, ref_src, ref_mem, ref_grads = scenario(torch, kind, dtype, options, call)
    _, out, src_grad, mem_grad, grads = scenario(gs, kind, dtype, options, call, theirs)
    atol = 2e-5 if dtype == np.float32 else 1e-10
    _close(out, ref, atol, "output")
    _close(src_grad, ref_src, atol, "input grad")
    if ref_mem is not None:
        _close(mem_grad, ref_mem, atol, "memory grad")
    assert list(grads) == list(ref_grads)
    for name, grad in grads.items():
        _close(grad, ref_grads[name], atol, name)


@pytest.mark.parametrize("case", list(CASES))
def test_names_and_repr_match_torch(case: str) -> None:
    kind, options, _ = CASES[case]
    ours, theirs = build(gs, kind, np.float32, **options), build(torch, kind, np.float32, **options)
    assert repr(ours) == repr(theirs)
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]


def test_activation_module_is_registered_like_torch() -> None:
    ours = gs.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, activation=gs.nn.GELU())
    theirs = torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, activation=torch.nn.GELU())
    assert repr(ours) == repr(theirs)
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        gs.nn.TransformerEncoderLayer(D_MODEL, HEADS, activation="tanh")


def test_square_subsequent_mask_and_nested_tensor_warning_match_torch() -> None:
    np.testing.assert_array_equal(gs.nn.Transformer.generate_square_subsequent_mask(4).numpy(),
                                  torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    assert gs.nn.Transformer.generate_square_subsequent_mask(3, dtype=gs.float64).dtype == gs.float64
    for T in (gs, torch):
        with pytest.warns(UserWarning, match="self.use_nested_tensor is False because encoder_layer.norm_first"):
            T.nn.TransformerEncoder(T.nn.TransformerEncoderLayer(D_MODEL, HEADS, norm_first=True), 2)


def test_eval_fast_path_zeroes_padded_positions_like_torch() -> None:
    def run(T: Any, theirs: Any = None) -> Any:
        layer = T.nn.TransformerEncoderLayer(D_MODEL, HEADS, FF, batch_first=True)
        module = T.nn.TransformerEncoder(layer, 2, norm=T.nn.LayerNorm(D_MODEL), enable_nested_tensor=True)
        if theirs is not None:
            copy_weights(module, theirs)
        module.eval()
        x = T.tensor(np.random.default_rng(1).standard_normal((2, 5, D_MODEL)).astype(np.float32))
        padding = T.tensor(np.array([[False] * 5, [False] * 3 + [True] * 2]))
        with T.no_grad():
            return module, module(x, src_key_padding_mask=padding)

    theirs, ref = run(torch)
    _, out = run(gs, theirs)
    _close(out, ref, 2e-5, "eval output")


def test_batch_and_feature_checks_match_torch() -> None:
    for T in (gs, torch):
        model = T.nn.Transformer(D_MODEL, HEADS, 1, 1, FF)
        with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
            model(T.zeros(3, 2, D_MODEL), T.zeros(3, 1, D_MODEL))
        with pytest.raises(RuntimeError, match="the feature number of src and tgt must be equal to d_model"):
            model(T.zeros(3, 2, 4), T.zeros(3, 2, 4))
