"""The backward engine: graph shapes, scheduling order, accumulation, retain_graph, errors,
``autograd.grad``, ``backward(inputs=...)`` and node introspection."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradscope as gs

X = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def f32(data: Any) -> np.ndarray:
    return np.asarray(data, dtype=np.float32)


# --------------------------------------------------------------------------------------------------
# Graph shapes
# --------------------------------------------------------------------------------------------------

def test_diamond_graph(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        a = x * 2.0
        b = x.exp()
        out = (a * b).sum() + a.sum()
        out.backward()
        return [out, x.grad]

    out, grad = same_as_torch(scenario)
    x = X.astype(np.float64)
    np.testing.assert_allclose(grad, 2 * np.exp(x) * (1 + x) + 2, rtol=1e-5)


def test_reused_tensor(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        (x * x * x + x + x).sum().backward()
        first = x.grad.clone()
        x.grad = None
        y = x * x
        (y * y).sum().backward()
        return [first, x.grad]

    first, second = same_as_torch(scenario)
    x = X.astype(np.float64)
    np.testing.assert_allclose(first, 3 * x ** 2 + 2, rtol=1e-5)
    np.testing.assert_allclose(second, 4 * x ** 3, rtol=1e-5)


def test_several_roots_and_shared_subgraph(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        w = T.tensor(f32([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]]), requires_grad=True)
        h = (x @ w).tanh()
        T.autograd.backward([h.sum(), (h * h).sum()])
        return [x.grad, w.grad]

    same_as_torch(scenario)


def test_long_chain_does_not_recurse() -> None:
    x = gs.tensor([1.0, 2.0], requires_grad=True)
    y = x
    for _ in range(100_000):
        y = y * 1.0
        y = y + 1.0
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(y.detach().numpy(), [100_001.0, 100_002.0])
    del y


def test_long_chain_autograd_grad() -> None:
    x = gs.tensor(0.5, requires_grad=True)
    y = x
    for _ in range(50_000):
        y = y * 1.0
    (grad,) = gs.autograd.grad(y, x)
    assert grad.item() == 1.0


# --------------------------------------------------------------------------------------------------
# Execution order (recorded from hook firings, compared with torch)
# --------------------------------------------------------------------------------------------------

def _hook(log: list, label: str):
    def hook(grad):
        log.append(label)
    return hook


def order_sum_left(T):
    log: list = []
    a, b, c = (T.tensor(f32([v]), requires_grad=True) for v in (1.0, 2.0, 3.0))
    for name, t in zip("abc", (a, b, c)):
        t.register_hook(_hook(log, name))
    ab = a + b
    ab.register_hook(_hook(log, "ab"))
    ((ab + c) * 2.0).sum().backward()
    return log


def order_sum_right(T):
    log: list = []
    a, b, c = (T.tensor(f32([v]), requires_grad=True) for v in (1.0, 2.0, 3.0))
    for name, t in zip("abc", (a, b, c)):
        t.register_hook(_hook(log, name))
    (a + (b + c)).sum().backward()
    return log


def order_diamond(T):
    log: list = []
    x = T.tensor(X, requires_grad=True)
    x.register_hook(_hook(log, "x"))
    left = x * 2.0
    left.register_hook(_hook(log, "left"))
    right = x.exp()
    right.register_hook(_hook(log, "right"))
    top = left * right + left
    top.register_hook(_hook(log, "top"))
    top.sum().backward()
    return log


def order_two_layer(T):
    log: list = []
    x = T.tensor(f32([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]]), requires_grad=True)
    w1 = T.tensor(f32(np.linspace(-1, 1, 12).reshape(3, 4)), requires_grad=True)
    b1 = T.tensor(f32([0.1, 0.2, 0.3, 0.4]), requires_grad=True)
    w2 = T.tensor(f32([[1.0], [-1.0], [0.5], [2.0]]), requires_grad=True)
    for name, t in (("x", x), ("w1", w1), ("b1", b1), ("w2", w2)):
        t.register_hook(_hook(log, name))
        t.register_post_accumulate_grad_hook(lambda p, name=name: log.append(f"post:{name}"))
    pre = x @ w1 + b1
    pre.register_hook(_hook(log, "pre"))
    h = pre.tanh()
    h.register_hook(_hook(log, "h"))
    out = (h @ w2).sum()
    out.register_hook(_hook(log, "out"))
    out.backward(retain_graph=True)
    log.append("--second pass--")
    out.backward()
    return log


def order_unequal_paths(T):
    log: list = []
    a = T.tensor(f32([0.1, 0.2]), requires_grad=True)
    b = T.tensor(f32([0.3, 0.4]), requires_grad=True)
    a.register_hook(_hook(log, "a"))
    b.register_hook(_hook(log, "b"))
    deep = a.exp()
    deep.register_hook(_hook(log, "deep1"))
    deep = deep.sin()
    deep.register_hook(_hook(log, "deep2"))
    shallow = b * 2.0
    shallow.register_hook(_hook(log, "shallow"))
    mixed = deep * b + shallow.sigmoid()
    mixed.register_hook(_hook(log, "mixed"))
    mixed.sum().backward()
    return log


def order_node_hooks(T):
    log: list = []
    x = T.tensor(X, requires_grad=True)
    y = x.tanh()
    z = y * x
    y.register_hook(_hook(log, "tensor:y"))
    y.grad_fn.register_prehook(lambda grads: log.append("pre:tanh"))
    y.grad_fn.register_hook(lambda grads_in, grads_out: log.append("post:tanh"))
    z.grad_fn.register_prehook(lambda grads: log.append("pre:mul"))
    z.grad_fn.register_hook(lambda grads_in, grads_out: log.append("post:mul"))
    x.register_hook(_hook(log, "tensor:x"))
    x.register_post_accumulate_grad_hook(lambda p: log.append("post_acc:x"))
    z.sum().backward()
    return log


def order_split_cat_index(T):
    log: list = []
    x = T.tensor(f32(np.linspace(-1, 1, 12).reshape(4, 3)), requires_grad=True)
    w = T.tensor(f32([0.5, -1.5, 2.0]), requires_grad=True)
    x.register_hook(_hook(log, "x"))
    w.register_hook(_hook(log, "w"))
    top, bottom = x.split(2)
    top.register_hook(_hook(log, "top"))
    bottom.register_hook(_hook(log, "bottom"))
    picked = bottom[T.tensor([1, 1, 0])]
    picked.register_hook(_hook(log, "picked"))
    joined = T.cat([top * w, picked.exp()], dim=0)
    joined.register_hook(_hook(log, "joined"))
    (joined.sum(dim=1) ** 2).sum().backward()
    return log + [x.grad, w.grad]


def order_multi_output_slots(T):
    log: list = []
    x = T.tensor(f32([1.0, 2.0, 3.0]), requires_grad=True)
    first, second, third = x.chunk(3)
    for name, t in (("first", first), ("second", second), ("third", third)):
        t.register_hook(_hook(log, name))
    (third.exp() + first.exp() + second.exp()).sum().backward()
    return log


def order_restricted_inputs(T):
    log: list = []
    a = T.tensor(f32([1.0, 2.0]), requires_grad=True)
    b = T.tensor(f32([3.0, 4.0]), requires_grad=True)
    h = a * b
    for name, t in (("a", a), ("b", b), ("h", h)):
        t.register_hook(_hook(log, name))
    out = (h.exp() + b).sum()
    out.backward(inputs=[b], retain_graph=True)
    log.append("--grad wrt h--")
    T.autograd.grad(out, [h])
    return log


def order_hooks_on_leaves_only(T):
    """Interior nodes without hooks (the engine's fast path, where a ready node can skip the
    heap): branches of unequal length, a leaf reached from several of them, and one reached
    from a branch that becomes ready before a node created later."""
    log: list = []
    a = T.tensor(f32([0.1, 0.2]), requires_grad=True)
    b = T.tensor(f32([0.3, 0.4]), requires_grad=True)
    c = T.tensor(f32([0.5, 0.6]), requires_grad=True)
    for name, t in (("a", a), ("b", b), ("c", c)):
        t.register_hook(_hook(log, name))
    long = (a.exp() * 2.0).tanh().sin()
    short = b.tanh()
    both = (a * c).exp() * b.sigmoid()
    (long * short + both.tanh() * c.exp() + a.sin()).sum().backward()
    return log + [a.grad, b.grad, c.grad]


@pytest.mark.parametrize("scenario", [order_sum_left, order_sum_right, order_diamond, order_two_layer,
                                      order_unequal_paths, order_node_hooks, order_split_cat_index,
                                      order_multi_output_slots, order_restricted_inputs,
                                      order_hooks_on_leaves_only],
                         ids=lambda f: f.__name__)
def test_hook_order_matches_torch(scenario, same_as_torch) -> None:
    same_as_torch(scenario)


def test_hook_order_examples_from_the_contract() -> None:
    assert order_sum_left(gs) == ["c", "ab", "a", "b"]
    assert order_sum_right(gs) == ["a", "b", "c"]


# --------------------------------------------------------------------------------------------------
# Accumulation and retain_graph
# --------------------------------------------------------------------------------------------------

def test_grads_accumulate_across_backward_calls(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        log = []
        (x * 3.0).sum().backward()
        log.append(x.grad.clone())
        (x * x).sum().backward()
        log.append(x.grad.clone())
        x.grad = None
        (x * 2.0).sum().backward()
        log.append(x.grad.clone())
        x.grad = T.ones(3)
        x.register_hook(lambda g: log.append(["hook", g]))
        (x * 5.0).sum().backward()
        log.append(x.grad)
        return log

    log = same_as_torch(scenario)
    assert log[0] == [3.0, 3.0, 3.0]
    assert log[-1] == [6.0, 6.0, 6.0]
    assert log[-2] == ["hook", [5.0, 5.0, 5.0]]


def test_retain_graph_allows_second_backward(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        y = (x * x).tanh().sum()
        y.backward(retain_graph=True)
        first = x.grad.clone()
        y.backward()
        return [first, x.grad]

    first, second = same_as_torch(scenario)
    np.testing.assert_allclose(second, 2 * np.asarray(first), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("make", [
    lambda x: (x * x).sum(),
    lambda x: x.tanh().sum(),
    lambda x: (x * 2.0).sum(),
    lambda x: x.exp().sum(),
    lambda x: (x @ x),
], ids=["mul", "tanh", "mul_scalar", "exp", "matmul"])
def test_second_backward_without_retain_graph_raises(make) -> None:
    x = gs.tensor(X, requires_grad=True)
    y = make(x)
    y.backward()
    with pytest.raises(RuntimeError, match="(?i)second time"):
        y.backward()


def test_second_backward_through_nodes_without_saved_tensors_is_allowed() -> None:
    x = gs.tensor(X, requires_grad=True)
    y = (x + 1.0).sum()
    y.backward()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0, 2.0])


def test_autograd_grad_second_time_raises() -> None:
    x = gs.tensor(X, requires_grad=True)
    y = (x * x).sum()
    gs.autograd.grad(y, x, retain_graph=True)
    gs.autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="(?i)second time"):
        gs.autograd.grad(y, x)


# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------

def test_implicit_gradient_needs_scalar_output() -> None:
    x = gs.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="(?i)scalar outputs"):
        (x * 2.0).backward()
    assert x.grad is None
    (x * 2.0).backward(gradient=gs.tensor(f32([1.0, 0.0, -1.0])))
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 0.0, -2.0])


def test_single_element_non_scalar_output_is_accepted(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        (x.sum().reshape(1, 1) * 2.0).backward()
        return x.grad

    assert same_as_torch(scenario) == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("make", [
    lambda: gs.tensor(X),
    lambda: gs.tensor(X, requires_grad=True).detach().sum(),
    lambda: (gs.tensor(X) * 2.0).sum(),
], ids=["constant", "detached", "computed_from_constants"])
def test_backward_without_grad_raises(make) -> None:
    t = make()
    with pytest.raises(RuntimeError, match="(?i)does not require grad"):
        t.sum().backward()


def test_gradient_argument_shape_mismatch_raises() -> None:
    x = gs.tensor(X, requires_grad=True)
    with pytest.raises(RuntimeError, match="(?i)shape"):
        (x * 2.0).backward(gradient=gs.ones(2))


# --------------------------------------------------------------------------------------------------
# autograd.grad and backward(inputs=...)
# --------------------------------------------------------------------------------------------------

def test_autograd_grad_returns_tuple_and_leaves_grad_untouched(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        w = T.tensor(f32([2.0, -1.0, 0.5]), requires_grad=True)
        w.grad = T.ones(3)
        y = (x * w).sum()
        single = T.autograd.grad(y, x, retain_graph=True)
        both = T.autograd.grad(y, [x, w])
        return [type(single).__name__, len(single), single[0], type(both).__name__, both,
                x.grad is None, w.grad]

    log = same_as_torch(scenario)
    assert log[:2] == ["tuple", 1]
    assert log[5] is True and log[6] == [1.0, 1.0, 1.0]


def test_autograd_grad_unused_inputs(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        unused = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        y = (x * x).sum()
        log = []
        try:
            T.autograd.grad(y, [x, unused], retain_graph=True)
        except RuntimeError as error:
            log.append(["raised", "allow_unused" in str(error)])
        log.append(T.autograd.grad(y, [x, unused], allow_unused=True, retain_graph=True))
        log.append(T.autograd.grad(y, [x, unused], allow_unused=True, materialize_grads=True))
        return log

    log = same_as_torch(scenario)
    assert log[0] == ["raised", True]
    assert log[1][1] is None
    assert log[2][1] == [0.0, 0.0]


def test_autograd_grad_with_grad_outputs(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        y = x * x
        z = x.exp()
        (gy,) = T.autograd.grad(y, x, grad_outputs=T.tensor(f32([1.0, 2.0, 3.0])), retain_graph=True)
        (gyz,) = T.autograd.grad([y, z], [x], grad_outputs=[T.ones(3), T.tensor(f32([1.0, 0.0, 1.0]))])
        return [gy, gyz]

    gy, gyz = same_as_torch(scenario)
    np.testing.assert_allclose(gy, 2 * X * np.array([1.0, 2.0, 3.0]), rtol=1e-5)


def test_autograd_grad_wrt_tensor_without_grad_raises() -> None:
    x = gs.tensor(X, requires_grad=True)
    c = gs.tensor(X)
    y = (x * c).sum()
    with pytest.raises(RuntimeError, match="(?i)does not require grad"):
        gs.autograd.grad(y, c)


def test_autograd_grad_wrt_intermediate(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        h = x * 3.0
        y = (h * h).sum()
        return list(T.autograd.grad(y, [h, x]))

    h, x = same_as_torch(scenario)
    np.testing.assert_allclose(h, 6 * X, rtol=1e-5)
    np.testing.assert_allclose(x, 18 * X, rtol=1e-5)


def test_backward_inputs_restricts_accumulation(same_as_torch) -> None:
    def scenario(T):
        a = T.tensor(f32([1.0, 2.0]), requires_grad=True)
        b = T.tensor(f32([3.0, 4.0]), requires_grad=True)
        c = T.tensor(f32([5.0, 6.0]), requires_grad=True)
        h = a * b
        out = (h * c).sum()
        out.backward(inputs=[a], retain_graph=True)
        log = [a.grad, b.grad, c.grad]
        out.backward(inputs=[h, c])
        log += [a.grad, h.grad, c.grad, b.grad]
        return log

    log = same_as_torch(scenario)
    assert log[:3] == [[15.0, 24.0], None, None]
    assert log[3:] == [[15.0, 24.0], [5.0, 6.0], [3.0, 8.0], None]


# --------------------------------------------------------------------------------------------------
# Nodes
# --------------------------------------------------------------------------------------------------

NODE_OPS = {
    "add": lambda x, y: x + y, "add_scalar": lambda x, y: x + 2.0, "sub": lambda x, y: x - y,
    "rsub_scalar": lambda x, y: 2.0 - x, "mul": lambda x, y: x * y, "mul_scalar": lambda x, y: x * 2.0,
    "div": lambda x, y: x / y, "div_scalar": lambda x, y: x / 2.0, "neg": lambda x, y: -x,
    "sum": lambda x, y: x.sum(), "mean": lambda x, y: x.mean(), "relu": lambda x, y: x.relu(),
    "tanh": lambda x, y: x.tanh(), "exp": lambda x, y: x.exp(), "log": lambda x, y: x.log(),
    "sigmoid": lambda x, y: x.sigmoid(), "reshape": lambda x, y: x.reshape(3, 2),
    "select": lambda x, y: x[1], "select_column": lambda x, y: x[:, 1], "slice": lambda x, y: x[0:1],
    "mm": lambda x, y: x @ y.t(), "t": lambda x, y: y.t(),
}


@pytest.mark.parametrize("op", list(NODE_OPS), ids=list(NODE_OPS))
def test_node_names_match_torch(op: str) -> None:
    torch = pytest.importorskip("torch")
    data = f32([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    names = []
    for T in (gs, torch):
        x = T.tensor(data, requires_grad=True)
        y = T.tensor(data + 1.0, requires_grad=True)
        names.append(NODE_OPS[op](x, y).grad_fn.name())
    assert names[0] == names[1]


def test_node_names_for_the_contract_table() -> None:
    x = gs.tensor(f32([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    assert (x * x).grad_fn.name() == "MulBackward0"
    assert (x @ x).grad_fn.name() == "MmBackward0"
    assert x[0].grad_fn.name() == "SelectBackward0"
    assert x[0:1].grad_fn.name() == "SliceBackward0"
    assert x.reshape(4).grad_fn.name() == "ViewBackward0"
    assert (x * 2.0).grad_fn.next_functions[0][0].name() == "torch::autograd::AccumulateGrad"


def test_next_functions_structure(same_as_torch) -> None:
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        c = T.tensor(X)
        h = x.exp()
        z = h * c
        w = x * 2.0
        acc_z = h.grad_fn.next_functions[0][0]
        acc_w = w.grad_fn.next_functions[0][0]
        return [
            [(n.name() if n is not None else None, i) for n, i in z.grad_fn.next_functions],
            [(n.name() if n is not None else None, i) for n, i in w.grad_fn.next_functions],
            [(n.name() if n is not None else None, i) for n, i in (h + x).grad_fn.next_functions],
            acc_z is acc_w,
            acc_z.next_functions == (),
            len(x.sum().grad_fn.next_functions),
        ]

    log = same_as_torch(scenario)
    assert log[0] == [["ExpBackward0", 0], [None, 0]]
    assert log[3] is True and log[4] is True and log[5] == 1


def test_next_functions_of_one_input_nodes(same_as_torch) -> None:
    """One-input nodes store their edge flat (no tuple); ``next_functions`` rebuilds it, output
    number included, and a ``tensor * scalar`` node keeps its ``(None, 0)`` second edge."""
    def scenario(T):
        x = T.tensor(X, requires_grad=True)
        second = x.split(1)[1]
        nodes = [second.tanh(), second * 3.0, 2 * second.tanh(), second.sum(), x.exp().sum()]
        edges = [[(n.name() if n is not None else None, i) for n, i in y.grad_fn.next_functions]
                 for y in nodes]
        loss = sum(y.sum() for y in nodes)
        loss.backward()
        return edges, x.grad

    log = same_as_torch(scenario)
    assert log[0][0] == [["SplitBackward0", 1]]
    assert log[0][1] == [["SplitBackward0", 1], [None, 0]]


def test_leaf_and_flag_table(same_as_torch) -> None:
    def scenario(T):
        constant = T.tensor(X)
        leaf = T.tensor(X, requires_grad=True)
        result = leaf * 2.0
        detached = result.detach()
        with T.no_grad():
            under_no_grad = leaf * 2.0
        rows = []
        for t in (constant, leaf, result, detached, under_no_grad):
            rows.append([t.is_leaf, t.requires_grad, t.grad_fn is None])
        return rows

    assert same_as_torch(scenario) == [[True, False, True], [True, True, True], [False, True, False],
                                       [True, False, True], [True, False, True]]


def test_detach_shares_data_and_cuts_the_graph() -> None:
    x = gs.tensor(X, requires_grad=True)
    y = x * 2.0
    d = y.detach()
    assert not d.requires_grad
    np.testing.assert_array_equal(d.numpy(), y.detach().numpy())
    (y.sum() + (d * x).sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 + 2.0 * X)


def test_unbind_outputs_are_the_slots_of_one_node(same_as_torch) -> None:
    """``unbind`` makes one ``UnbindBackward0`` node with an output per slice, as torch does: the
    slices' hooks fire before it runs, and it runs once."""
    def scenario(T):
        x = T.tensor([[1.0, -2.0, 0.5], [3.0, 0.25, -1.5]], requires_grad=True)
        pieces = x.unbind(1)
        order = []
        for index, piece in enumerate(pieces):
            piece.register_hook(lambda g, index=index: order.append(index))
        names = [(piece.grad_fn.name(), piece.output_nr, list(piece.shape)) for piece in pieces]
        (pieces[0] * 2.0 - pieces[1] + pieces[-1].tanh()).sum().backward()
        return names, sorted(order), x.grad

    log = same_as_torch(scenario)
    assert {name for name, _, _ in log[0]} == {"UnbindBackward0"}
    assert [nr for _, nr, _ in log[0]] == list(range(len(log[0])))
