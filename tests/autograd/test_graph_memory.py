"""The graph keeps only what the ops saved (issue 25): after the forward pass of a deep MLP, the
memory gradscope holds (numpy reports its allocations to tracemalloc) is the saved tensors and
no more, about what torch saves for the same model; backward frees them as it goes."""
from __future__ import annotations

import gc
import tracemalloc
from typing import Any

import numpy as np
import pytest

import gradscope as gs

DEPTH, WIDTH, BATCH = 16, 128, 64
ACTIVATION_BYTES = BATCH * WIDTH * 4


def _mlp(T: Any, activation: str) -> Any:
    T.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [T.nn.Linear(WIDTH, WIDTH), getattr(T.nn, activation)()]
    return T.nn.Sequential(*layers)


def _saved_bytes(loss: Any, params: set) -> int:
    """Bytes of the distinct arrays the graph's nodes saved, parameters excluded."""
    arrays: dict = {}
    stack, seen = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        saved = node._saved
        if isinstance(saved, np.ndarray):
            saved = (saved,)
        for array in saved or ():
            if isinstance(array, np.ndarray):
                base = array if array.base is None else array.base
                if id(base) not in params:
                    arrays[id(base)] = base.nbytes
        stack.extend(child for child, _ in node.next_functions)
    return sum(arrays.values())


def _held_after_forward(model: Any, x: Any) -> tuple[int, Any]:
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        loss = model(x).square().mean()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return held, loss


@pytest.mark.parametrize("activation", ["ReLU", "Tanh", "Sigmoid"])
def test_forward_holds_only_the_saved_tensors(activation: str) -> None:
    model = _mlp(gs, activation)
    x = gs.randn(BATCH, WIDTH)
    params = {id(p._data) for p in model.parameters()}
    held, loss = _held_after_forward(model, x)
    saved = _saved_bytes(loss, params)
    assert saved <= (DEPTH + 2) * ACTIVATION_BYTES  # one array per layer (an activation's output is the next input)
    # what forward left allocated is the saved arrays plus the (small) graph objects around them
    assert held <= saved + ACTIVATION_BYTES, (held, saved)


@pytest.mark.parametrize("activation", ["ReLU", "Tanh"])
def test_forward_holds_about_what_torch_saves(activation: str) -> None:
    torch = pytest.importorskip("torch")
    model = _mlp(torch, activation)
    x = torch.randn(BATCH, WIDTH)
    storages: dict = {}

    def pack(t: Any) -> Any:
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x).square().mean()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    torch_saved = sum(n for ptr, n in storages.items() if ptr not in params)

    held, loss = _held_after_forward(_mlp(gs, activation), gs.randn(BATCH, WIDTH))
    assert held <= 1.1 * torch_saved, (held, torch_saved)


def test_backward_frees_the_saved_tensors() -> None:
    model = _mlp(gs, "ReLU")
    x = gs.randn(BATCH, WIDTH)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        loss = model(x).square().mean()
        held = tracemalloc.get_traced_memory()[0] - base
        loss.backward()
        after = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    grads = sum(p.grad._data.nbytes for p in model.parameters())
    # backward allocated the .grad arrays and released what the forward pass had saved
    assert held > DEPTH * ACTIVATION_BYTES
    assert after <= grads + 0.1 * held, (after, grads, held)
