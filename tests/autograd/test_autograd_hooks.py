"""Tensor hooks, post-accumulate-grad hooks, node hooks, multi-grad hooks, saved-tensor hooks and
``RemovableHandle`` -- values and firing order compared with torch."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradscope as gs


def f32(data: Any) -> np.ndarray:
    return np.asarray(data, dtype=np.float32)


# --------------------------------------------------------------------------------------------------
# Tensor hooks
# --------------------------------------------------------------------------------------------------

def test_hooks_on_leaf_and_non_leaf_see_gradients(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        h = x * x
        x.register_hook(lambda g: log.append(["x", g]))
        h.register_hook(lambda g: log.append(["h", g]))
        (h * 3.0).sum().backward()
        return log + [x.grad]

    assert same_as_torch(scenario) == [["h", [3.0, 3.0]], ["x", [6.0, 12.0]], [6.0, 12.0]]


def test_hook_replacement_on_leaf_and_non_leaf(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        w = T.tensor(f32([3.0, 4.0]), requires_grad=True)
        h = x * w
        h.register_hook(lambda g: g * 10.0)
        w.register_hook(lambda g: g + 1.0)
        h.sum().backward()
        return [x.grad, w.grad]

    assert same_as_torch(scenario) == [[30.0, 40.0], [11.0, 21.0]]


def test_hooks_chain_in_registration_order(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0]), requires_grad=True)

        def first(g):
            log.append(["first", g])
            return g * 2.0

        def second(g):
            log.append(["second", g])

        x.register_hook(first)
        x.register_hook(second)
        x.register_hook(first)
        (x * 1.5).sum().backward()
        return log + [x.grad]

    assert same_as_torch(scenario) == [["first", [1.5]], ["second", [3.0]], ["first", [3.0]], [6.0]]


def test_hook_fires_on_every_backward_and_only_when_reached(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0]), requires_grad=True)
        other = T.tensor(f32([1.0]), requires_grad=True)
        x.register_hook(lambda g: log.append("x"))
        other.register_hook(lambda g: log.append("other"))
        y = (x * 2.0).sum()
        y.backward(retain_graph=True)
        y.backward()
        (x + 1.0).sum().backward()
        return log

    assert same_as_torch(scenario) == ["x", "x", "x"]


def test_hook_fires_once_with_summed_gradient(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        h = x * 1.0
        h.register_hook(lambda g: log.append(g))
        (h * 2.0 + h * h + h.exp()).sum().backward()
        return log

    assert len(same_as_torch(scenario)) == 1


def test_wrong_shape_from_hook_raises_and_leaves_grad() -> None:
    x = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    x.register_hook(lambda g: gs.ones(3))
    with pytest.raises(RuntimeError, match="changed the size"):
        (x * 2.0).sum().backward()
    assert x.grad is None
    y = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    h = y * 2.0
    h.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match="changed the size"):
        h.sum().backward()


def test_wrong_dtype_and_non_tensor_from_hook_raise() -> None:
    x = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    handle = x.register_hook(lambda g: gs.tensor(np.array([1.0, 2.0])))
    with pytest.raises(RuntimeError, match="changed the type"):
        (x * 2.0).sum().backward()
    handle.remove()
    x.register_hook(lambda g: [1.0, 2.0])
    with pytest.raises(TypeError, match="hook returned"):
        (x * 2.0).sum().backward()


@pytest.mark.parametrize("make", [
    lambda: gs.tensor(f32([1.0])),
    lambda: gs.tensor(f32([1.0]), requires_grad=True).detach(),
], ids=["constant", "detached"])
def test_register_hook_on_tensor_without_grad_raises(make) -> None:
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        make().register_hook(lambda g: None)


def test_hook_on_root_and_gradient_argument(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        y = x * 3.0
        y.register_hook(lambda g: log.append(["y", g]))
        y.backward(gradient=T.tensor(f32([0.5, -1.0])))
        z = (x * x).sum()
        z.register_hook(lambda g: g * 2.0)
        x.grad = None
        z.backward()
        return log + [x.grad]

    assert same_as_torch(scenario) == [["y", [0.5, -1.0]], [4.0, 8.0]]


def test_hooks_fire_inside_autograd_grad(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        h = x * 2.0
        h.register_hook(lambda g: log.append(["h", g]))
        x.register_hook(lambda g: g * 10.0)
        (grad,) = T.autograd.grad(h.sum(), x)
        return log + [grad, x.grad is None]

    assert same_as_torch(scenario) == [["h", [1.0, 1.0]], [20.0, 20.0], True]


def test_retain_grad(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        h = x * 2.0
        h.retain_grad()
        h.register_hook(lambda g: g * 3.0)
        (h * h).sum().backward(retain_graph=True)
        first = h.grad.clone()
        (h * h).sum().backward()
        return [h.retains_grad, x.retains_grad, first, h.grad, x.grad]

    assert same_as_torch(scenario) == [True, False, [12.0, 24.0], [24.0, 48.0], [48.0, 96.0]]


def test_non_leaf_grad_access_warns() -> None:
    x = gs.tensor(f32([1.0]), requires_grad=True)
    h = x * 2.0
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert h.grad is None


# --------------------------------------------------------------------------------------------------
# Post-accumulate-grad hooks
# --------------------------------------------------------------------------------------------------

def test_post_accumulate_grad_hook(same_as_torch) -> None:
    def scenario(T):
        log = []
        w = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        w.register_hook(lambda g: log.append(["tensor_hook", g]))

        def post(param):
            log.append(["post", param is w, param.grad.clone()])
            param.grad.mul_(0.5)

        w.register_post_accumulate_grad_hook(post)
        (w * 4.0).sum().backward()
        (w * w + w).sum().backward()
        T.autograd.grad((w * 2.0).sum(), w)
        return log + [w.grad]

    assert same_as_torch(scenario) == [
        ["tensor_hook", [4.0, 4.0]], ["post", True, [4.0, 4.0]],
        ["tensor_hook", [3.0, 5.0]], ["post", True, [5.0, 7.0]],
        ["tensor_hook", [2.0, 2.0]],
        [2.5, 3.5],
    ]


def test_post_accumulate_grad_hook_errors() -> None:
    x = gs.tensor(f32([1.0]), requires_grad=True)
    with pytest.raises(RuntimeError, match="non-leaf"):
        (x * 2.0).register_post_accumulate_grad_hook(lambda p: None)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        gs.tensor(f32([1.0])).register_post_accumulate_grad_hook(lambda p: None)
    x.register_post_accumulate_grad_hook(lambda p: p * 2.0)
    with pytest.raises(RuntimeError, match="should return None"):
        (x * 2.0).sum().backward()


# --------------------------------------------------------------------------------------------------
# Node hooks
# --------------------------------------------------------------------------------------------------

def test_node_prehook_and_hook(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        c = T.tensor(f32([3.0, 4.0]))
        y = x * c
        node = y.grad_fn

        def pre(grad_outputs):
            log.append(["pre", type(grad_outputs).__name__, grad_outputs])
            return (grad_outputs[0] * 2.0,)

        def post(grad_inputs, grad_outputs):
            log.append(["post", grad_inputs, grad_outputs])

        node.register_prehook(pre)
        node.register_prehook(lambda g: log.append(["pre2", g]))
        node.register_hook(post)
        y.sum().backward()
        return log + [x.grad, node.name()]

    assert same_as_torch(scenario) == [
        ["pre", "tuple", [[1.0, 1.0]]],
        ["pre2", [[2.0, 2.0]]],
        ["post", [[6.0, 8.0], None], [[2.0, 2.0]]],
        [6.0, 8.0], "MulBackward0",
    ]


def test_node_hook_replaces_grad_inputs_and_none_drops(same_as_torch) -> None:
    def scenario(T):
        a = T.tensor(f32([1.0]), requires_grad=True)
        b = T.tensor(f32([2.0]), requires_grad=True)
        y = a * b
        y.grad_fn.register_hook(lambda grads_in, grads_out: (grads_in[0] * 10.0, None))
        y.sum().backward()
        return [a.grad, b.grad]

    assert same_as_torch(scenario) == [[20.0], None]


def test_accumulate_grad_node_hooks(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        y = x * 3.0
        acc = y.grad_fn.next_functions[0][0]
        acc.register_prehook(lambda g: log.append(["acc_pre", g]))
        acc.register_hook(lambda grads_in, grads_out: log.append(["acc_post", grads_in, grads_out]))
        x.register_hook(lambda g: log.append(["tensor", g]))
        x.register_post_accumulate_grad_hook(lambda p: log.append(["post_acc", p.grad]))
        y.sum().backward()
        return log + [acc.name()]

    assert same_as_torch(scenario) == [
        ["tensor", [3.0, 3.0]], ["acc_pre", [[3.0, 3.0]]], ["post_acc", [3.0, 3.0]],
        ["acc_post", [], [[3.0, 3.0]]], "torch::autograd::AccumulateGrad",
    ]


def test_node_hook_errors() -> None:
    x = gs.tensor(f32([1.0, 2.0]), requires_grad=True)
    y = x * 2.0
    handle = y.grad_fn.register_prehook(lambda g: (g[0], g[0]))
    with pytest.raises(RuntimeError, match="incorrect number of values"):
        y.sum().backward(retain_graph=True)
    handle.remove()
    handle = y.grad_fn.register_prehook(lambda g: g[0])
    with pytest.raises(TypeError, match="expected tuple"):
        y.sum().backward(retain_graph=True)
    handle.remove()
    y.grad_fn.register_hook(lambda grads_in, grads_out: (gs.ones(3), None))
    with pytest.raises(RuntimeError, match="changed the size"):
        y.sum().backward()


# --------------------------------------------------------------------------------------------------
# Multi-grad hooks
# --------------------------------------------------------------------------------------------------

def test_multi_grad_hook_all(same_as_torch) -> None:
    def scenario(T):
        log = []
        a = T.tensor(f32([1.0]), requires_grad=True)
        b = T.tensor(f32([2.0]), requires_grad=True)
        c = T.tensor(f32([3.0]), requires_grad=True)
        handle = T.autograd.graph.register_multi_grad_hook((a, b, c), lambda grads: log.append(["all", grads]))
        (a * b).sum().backward()
        log.append("--")
        (a * b * c).sum().backward(inputs=[a, c])
        handle.remove()
        (a * b).sum().backward()
        return log

    assert same_as_torch(scenario) == [["all", [[2.0], [1.0], None]], "--", ["all", [[6.0], None, [2.0]]]]


def test_multi_grad_hook_any(same_as_torch) -> None:
    def scenario(T):
        log = []
        a = T.tensor(f32([1.0]), requires_grad=True)
        b = T.tensor(f32([2.0]), requires_grad=True)
        constant = T.tensor(f32([5.0]))
        with T.autograd.graph.register_multi_grad_hook((a, b, constant), lambda g: log.append(["any", g]),
                                                       mode="any"):
            (a * b).sum().backward()
            (a * 3.0 + b * 4.0).sum().backward()
        (a * b).sum().backward()
        return log

    assert len(same_as_torch(scenario)) == 2


def test_multi_grad_hook_errors() -> None:
    a = gs.tensor(f32([1.0]), requires_grad=True)
    with pytest.raises(ValueError, match="mode to be one of"):
        gs.autograd.graph.register_multi_grad_hook((a,), lambda g: None, mode="some")
    with pytest.raises(AssertionError):
        gs.autograd.graph.register_multi_grad_hook((a, gs.tensor(f32([1.0]))), lambda g: None)


# --------------------------------------------------------------------------------------------------
# Saved-tensor hooks
# --------------------------------------------------------------------------------------------------

def test_saved_tensors_hooks(same_as_torch) -> None:
    def scenario(T):
        log = []

        def pack(t):
            log.append(["pack", tuple(t.shape)])
            return t.detach() * 1.0

        def unpack(packed):
            log.append("unpack")
            return packed

        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        w = T.tensor(f32([3.0, 4.0]), requires_grad=True)
        with T.autograd.graph.saved_tensors_hooks(pack, unpack):
            y = x * w
            log.append("--exp--")
            z = x.exp()
            log.append("--no_grad--")
            with T.no_grad():
                x * w
            log.append("--constants--")
            T.tensor(f32([1.0])) * T.tensor(f32([2.0]))
        log.append("--backward--")
        y.sum().backward(retain_graph=True)
        y.sum().backward()
        return log + [x.grad, w.grad, z.requires_grad]

    log = same_as_torch(scenario)
    assert log.count("unpack") == 4
    assert log[:4] == [["pack", [2]], ["pack", [2]], "--exp--", ["pack", [2]]]


def test_saved_tensors_hooks_unpack_value_is_used_and_innermost_wins(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        w = T.tensor(f32([3.0, 4.0]), requires_grad=True)
        with T.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t * 100.0):
            with T.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t * 2.0):
                y = x * w
        y.sum().backward()
        return [x.grad, w.grad]

    assert same_as_torch(scenario) == [[6.0, 8.0], [2.0, 4.0]]


# --------------------------------------------------------------------------------------------------
# RemovableHandle
# --------------------------------------------------------------------------------------------------

def test_handles_are_removable_handles() -> None:
    x = gs.tensor(f32([1.0]), requires_grad=True)
    y = x * 2.0
    handles = [
        x.register_hook(lambda g: None),
        x.register_post_accumulate_grad_hook(lambda p: None),
        y.grad_fn.register_hook(lambda gi, go: None),
        y.grad_fn.register_prehook(lambda go: None),
    ]
    for handle in handles:
        assert isinstance(handle, gs.utils.hooks.RemovableHandle)
        assert type(handle).__name__ == "RemovableHandle"
        assert isinstance(handle.id, int)
    assert len({h.id for h in handles}) == 4


def test_remove_is_idempotent_and_only_removes_its_own_entry() -> None:
    log = []
    x = gs.tensor(f32([1.0]), requires_grad=True)
    first = x.register_hook(lambda g: log.append("first"))
    x.register_hook(lambda g: log.append("second"))
    first.remove()
    first.remove()
    (x * 1.0).sum().backward()
    assert log == ["second"]


def test_handle_as_context_manager() -> None:
    log = []
    x = gs.tensor(f32([1.0]), requires_grad=True)
    with x.register_hook(lambda g: log.append("inside")) as handle:
        assert isinstance(handle, gs.utils.hooks.RemovableHandle)
        (x * 1.0).sum().backward()
    (x * 1.0).sum().backward()
    with pytest.raises(KeyError):
        with x.register_hook(lambda g: log.append("raised")):
            raise KeyError("not suppressed")
    (x * 1.0).sum().backward()
    assert log == ["inside"]


def test_remove_after_owner_is_gone() -> None:
    x = gs.tensor(f32([1.0]), requires_grad=True)
    handle = x.register_hook(lambda g: None)
    del x
    handle.remove()
    handle.remove()


def test_hook_removed_during_backward_still_runs_this_pass(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0]), requires_grad=True)
        handles = {}

        def first(g):
            log.append("first")
            handles["second"].remove()
            handles["third"] = x.register_hook(lambda g: log.append("third"))

        x.register_hook(first)
        handles["second"] = x.register_hook(lambda g: log.append("second"))
        (x * 1.0).sum().backward()
        log.append("--")
        handles["third"].remove()
        (x * 1.0).sum().backward()
        return log

    assert same_as_torch(scenario) == ["first", "second", "--", "first"]


# --------------------------------------------------------------------------------------------------
# Hooks and retain_grad inside autograd.grad, and on a 0-dim leaf root
# --------------------------------------------------------------------------------------------------

def test_multi_grad_hook_all_on_non_leaves_in_autograd_grad(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        h1 = x * 2.0
        h2 = x.exp()
        T.autograd.graph.register_multi_grad_hook((h1, h2), lambda grads: log.append(["all", grads]))
        out = (h1 * h1).sum() + h2.sum()
        T.autograd.grad(out, [x], retain_graph=True)
        T.autograd.grad(out, [h1])
        return log

    log = same_as_torch(scenario)
    assert len(log) == 2
    assert log[1][1][1] is None


def test_retained_grad_is_filled_by_autograd_grad(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        h = x * 3.0
        h.retain_grad()
        T.autograd.grad((h * h).sum(), x)
        return [h.grad, x.grad]

    assert same_as_torch(scenario) == [[6.0, 12.0], None]


def test_backward_on_0d_leaf_fires_its_hook(same_as_torch) -> None:
    def scenario(T):
        log = []
        x = T.tensor(2.0, requires_grad=True)
        x.register_hook(lambda g: log.append(g))
        x.backward()
        return log + [x.grad]

    assert same_as_torch(scenario) == [1.0, 1.0]
