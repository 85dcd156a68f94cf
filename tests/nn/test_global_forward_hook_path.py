"""Modules observed only through global forward hooks (how gradscope's monitors attach) behave as
in torch: hook order, return-value substitution, hooks registered during forward, always_call."""
from __future__ import annotations

import pytest

import gradscope as gs
from gradscope import nn as gnn

torch = pytest.importorskip("torch")


def _scenario(lib, nn, register_pre, register_post, events):
    class Inner(nn.Module):
        def forward(self, x):
            events.append("inner.forward")
            return x * 2

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            events.append("outer.forward")
            return self.inner(x) + 1

    def pre(module, args):
        events.append(f"pre {type(module).__name__}")
        if isinstance(module, Inner):
            return args[0] + 10  # not a tuple: becomes the only argument

    def post(module, args, output):
        events.append(f"post {type(module).__name__}")
        if isinstance(module, Outer):
            return output * 3

    handles = [register_pre(pre), register_post(post)]
    try:
        return Outer()(lib.tensor([1.0, 2.0])).tolist()
    finally:
        for handle in handles:
            handle.remove()


def test_substitution_and_order_match_torch():
    ours, theirs = [], []
    got = _scenario(gs, gnn, gnn.modules.module.register_module_forward_pre_hook,
                    gnn.modules.module.register_module_forward_hook, ours)
    want = _scenario(torch, torch.nn, torch.nn.modules.module.register_module_forward_pre_hook,
                     torch.nn.modules.module.register_module_forward_hook, theirs)
    assert got == want == [((1 + 10) * 2 + 1) * 3, ((2 + 10) * 2 + 1) * 3]
    assert ours == theirs


def _registered_during_forward(lib, nn, raises):
    events, handles = [], []

    def late(module, args, output):
        events.append(f"late {type(module).__name__} output={'none' if output is None else 'set'}")

    class Leaf(nn.Module):
        def forward(self, x):
            handles.append(nn.modules.module.register_module_forward_hook(late, always_call=raises))
            if raises:
                raise ValueError("forward broke")
            return x + 1

    warm = nn.modules.module.register_module_forward_pre_hook(lambda module, args: None)
    try:
        if raises:
            with pytest.raises(ValueError, match="forward broke"):
                Leaf()(lib.ones(2))
        else:
            Leaf()(lib.ones(2))
    finally:
        for handle in [warm, *handles]:
            handle.remove()
    return events


@pytest.mark.parametrize("raises", [False, True], ids=["returns", "raises"])
def test_a_hook_registered_during_forward_fires_as_in_torch(raises):
    assert _registered_during_forward(gs, gnn, raises) == _registered_during_forward(torch, torch.nn, raises)


@pytest.mark.parametrize("lib, nn", [(gs, gnn), (torch, torch.nn)], ids=["gradscope", "torch"])
def test_global_forward_hooks_changed_between_calls_are_the_ones_called(lib, nn):
    """Every call sees the global forward hooks as they are then: removing one and adding
    another (keyword form, always_call) between calls, or clearing them all."""
    register = nn.modules.module.register_module_forward_hook
    layer = nn.Linear(2, 2)
    x = lib.ones(1, 2)
    events = []
    first = register(lambda module, args, output: events.append("first"))
    second = register(lambda module, args, output: events.append("second"))
    layer(x)
    first.remove()
    third = register(lambda module, args, kwargs, output: events.append(("third", kwargs)), with_kwargs=True)
    layer(x)
    second.remove()
    third.remove()
    layer(x)
    fourth = register(lambda module, args, output: events.append("fourth"), always_call=True)
    layer(x)
    fourth.remove()
    layer(x)
    assert events == ["first", "second", "second", ("third", {}), "fourth"]
