"""Observing must not change what is observed: with every kind of global hook attached, every
sample model's parameter gradients have the same None-ness and values as without hooks."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import gradscope as gs
from gradscope.loading import load_model_file
from gradscope.nn.modules import module as module_hooks

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "sample_models").glob("*.py"))


def _grads(path: Path, observe: bool) -> dict:
    workload = load_model_file(path, seed=0)
    model = workload.model
    handles = []
    seen = []
    if observe:
        def record(*args):
            seen.append(type(args[0]).__name__)

        def record_tensor_grads(module, args, output):
            outputs = output if isinstance(output, tuple) else (output,)
            for t in outputs:
                if isinstance(t, gs.Tensor) and t.requires_grad:
                    handles.append(t.register_hook(lambda g: seen.append("tensor")))
        handles += [
            module_hooks.register_module_forward_pre_hook(record),
            module_hooks.register_module_forward_hook(record),
            module_hooks.register_module_forward_hook(record_tensor_grads),
            module_hooks.register_module_full_backward_pre_hook(record),
            module_hooks.register_module_full_backward_hook(record),
        ]
        for p in model.parameters():
            if p.requires_grad:
                handles.append(p.register_post_accumulate_grad_hook(lambda p: seen.append("post")))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            batch = workload.batch(0)
            loss = workload.loss(batch)
            loss.backward()
    finally:
        for handle in handles:
            handle.remove()
    if observe:
        assert "Linear" in seen or "Conv2d" in seen or seen, "hooks did not fire"
    return {name: None if p.grad is None else p.grad.numpy().copy() for name, p in model.named_parameters()}


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_global_hooks_leave_every_grad_unchanged(path: Path) -> None:
    plain = _grads(path, observe=False)
    observed = _grads(path, observe=True)
    assert plain.keys() == observed.keys()
    for name in plain:
        assert (plain[name] is None) == (observed[name] is None), f"{path.name}: {name} None-ness changed"
        if plain[name] is not None:
            np.testing.assert_allclose(observed[name], plain[name], rtol=1e-6, atol=1e-7, equal_nan=True,
                                       err_msg=f"{path.name}: {name}")
    assert module_hooks._global_backward_hooks == {} and module_hooks._global_forward_hooks == {}


def test_unused_layer_keeps_none_under_full_backward_hooks() -> None:
    """Where PyTorch's full backward hooks would fabricate zeros, gradscope keeps None."""
    path = next(p for p in SAMPLES if p.stem == "unused_detach")
    observed = _grads(path, observe=True)
    assert any(g is None for g in observed.values())
