"""The engine's scheduling: the count of gradients per node, made walking the graph newest node
first and kept only for the accumulators and the nodes that receive several, and the run it
drives. Random graphs and the shapes that stress the queue (roots feeding each other, an input
fed by a newer sibling, skip connections across long chains) are compared with torch: hook
order, gradients, errors."""
from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest

import gradscope as gs
from gradscope.autograd import engine
from gradscope.autograd.node import AccumulateGrad


def f32(data: Any) -> np.ndarray:
    return np.asarray(data, dtype=np.float32)


X3 = f32([0.5, -1.0, 2.0])


def _hook(log: list, label: Any):
    def hook(grad):
        log.append(label)
    return hook


def random_graph(T: Any, seed: int, leaf_root: bool = False) -> tuple[list, list, list]:
    """A random graph of 8 to 40 ops on three leaves (and a constant), built the same way on
    either library: operands are mostly recent values, sometimes old ones (skip connections),
    sometimes the same value twice; some values get a hook that logs their index.

    Returns the log, the leaves and the roots (the last value summed, and sometimes another)."""
    rng = np.random.default_rng(seed)
    log: list = []
    leaves = [T.tensor(f32(rng.uniform(-1, 1, 3)), requires_grad=True) for _ in range(3)]
    for index, leaf in enumerate(leaves):
        leaf.register_hook(_hook(log, f"leaf{index}"))
        leaf.register_post_accumulate_grad_hook(lambda t, index=index: log.append(f"acc{index}"))
    values = leaves + [T.tensor(f32(rng.uniform(-1, 1, 3)))]

    def pick() -> Any:
        back = int(rng.geometric(0.35)) if rng.random() < 0.8 else int(rng.integers(1, len(values) + 1))
        return values[max(0, len(values) - back)]

    for step in range(int(rng.integers(8, 40))):
        kind = int(rng.integers(0, 7))
        a, b = pick(), pick()
        if kind == 0:
            out = a.tanh()
        elif kind == 1:
            out = a.sin()
        elif kind == 2:
            out = a * 0.5
        elif kind == 3:
            out = a + b
        elif kind == 4:
            out = a * b
        elif kind == 5:
            out = a - b.tanh()
        else:  # a node of several outputs, whose slots are consumed apart
            first, second, third = a.chunk(3)
            out = T.cat([third * 2.0, first, second.sin()])
        if out.requires_grad and rng.random() < 0.4:
            out.register_hook(_hook(log, step))
        values.append(out)
    roots = [values[-1].sum()]
    if rng.random() < 0.5:
        roots.append((values[len(values) // 2] * values[-2]).sum())
    if leaf_root:
        roots.append(leaves[0])
    return log, leaves, roots


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_run_in_torch_order(seed: int, same_as_torch) -> None:
    def scenario(T):
        log, leaves, roots = random_graph(T, seed)
        roots = [r for r in roots if r.requires_grad]
        if roots:
            T.autograd.backward(roots)
        return log + [leaf.grad for leaf in leaves]

    same_as_torch(scenario)


@pytest.mark.parametrize("seed", range(10))
def test_random_graphs_with_a_leaf_among_the_roots(seed: int, same_as_torch) -> None:
    def scenario(T):
        log, leaves, roots = random_graph(T, 100 + seed, leaf_root=True)
        roots = [r for r in roots if r.requires_grad]
        grads = [T.ones_like(r) for r in roots]
        T.autograd.backward(roots, grads)
        return log + [leaf.grad for leaf in leaves]

    same_as_torch(scenario)


@pytest.mark.parametrize("seed", range(10))
def test_random_graphs_in_autograd_grad(seed: int, same_as_torch) -> None:
    def scenario(T):
        log, leaves, roots = random_graph(T, 200 + seed)
        if not roots[0].requires_grad:
            return log
        grads = T.autograd.grad(roots[0], leaves, allow_unused=True)
        return log + list(grads)

    same_as_torch(scenario)


def _brute_force_dependencies(root_nodes: list) -> dict:
    """The gradients each node reachable from the roots receives (one per edge from a reachable
    node, plus a root's own), counted with a set of every node seen."""
    counts = dict.fromkeys(root_nodes, 1)
    seen: set = set()
    stack = list(root_nodes)
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for child, _ in fn.next_functions:
            if child is not None:
                counts[child] = counts.get(child, 0) + 1
                stack.append(child)
    return counts


@pytest.mark.parametrize("seed", range(40))
def test_dependency_counts_of_random_graphs(seed: int) -> None:
    _, _, roots = random_graph(gs, seed, leaf_root=seed % 2 == 1)
    root_nodes = []
    for root in roots:
        node = root.grad_fn if root.grad_fn is not None else root._accumulator()
        if root.requires_grad and node not in root_nodes:
            root_nodes.append(node)
    expected = _brute_force_dependencies(root_nodes)
    assert engine._count_dependencies(root_nodes, every_node=True) == expected
    # without ``every_node``: the accumulators, and the nodes that receive several gradients
    assert engine._count_dependencies(root_nodes) == {
        node: count for node, count in expected.items() if isinstance(node, AccumulateGrad) or count > 1}


def test_a_chain_is_counted_without_an_entry_per_node() -> None:
    x = gs.tensor(X3, requires_grad=True)
    y = x
    for _ in range(1000):
        y = y.tanh() * 1.0001
    y = y * y  # (two edges to one node)
    assert engine._count_dependencies([y.grad_fn]) == {x._accumulator(): 1, y.grad_fn._next[0][0]: 2}
    assert len(engine._count_dependencies([y.grad_fn], every_node=True)) == 2002


def test_backward_of_a_long_chain_allocates_nothing_per_node() -> None:
    """Backward frees each saved output as it goes and keeps no structure over the whole graph:
    its traced peak stays within a few arrays of the memory the graph held before it ran."""
    x = gs.tensor(X3, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y.tanh() * 1.0001
    loss = y.sum()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        loss.backward()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak - before < 20_000  # 20,000 nodes: a dict over them would take ~1 MB
    np.testing.assert_allclose(x.grad.numpy(), _chain_grad(X3, 10_000), rtol=1e-3)


def _chain_grad(x: np.ndarray, pairs: int) -> np.ndarray:
    grad = np.ones_like(x, dtype=np.float64)
    values = [x.astype(np.float64)]
    for _ in range(pairs):
        values.append(np.tanh(values[-1]) * 1.0001)
    for value in reversed(values[:-1]):
        grad = grad * (1 - np.tanh(value) ** 2) * 1.0001
    return grad


def test_roots_that_feed_each_other(same_as_torch) -> None:
    """A root that is also an input of another root runs after it, with both gradients summed;
    a leaf among the roots accumulates once, its own gradient and the graph's together."""
    def scenario(T):
        log: list = []
        x = T.tensor(X3, requires_grad=True)
        x.register_hook(_hook(log, "x"))
        x.register_post_accumulate_grad_hook(lambda t: log.append("acc:x"))
        a = x.exp()
        a.register_hook(_hook(log, "a"))
        b = a.sin() * a
        b.register_hook(_hook(log, "b"))
        T.autograd.backward([a, b, x], [T.ones(3), T.full((3,), 2.0), T.full((3,), 3.0)])
        return log + [x.grad]

    log = same_as_torch(scenario)
    assert log[:4] == ["b", "a", "x", "acc:x"]


def test_input_queued_then_fed_by_a_newer_sibling(same_as_torch) -> None:
    """``a * b`` with ``b`` made from ``a``: ``a`` gets its first gradient before ``b`` runs and must
    wait for ``b``'s, on the fast path (no interior hooks) and with interior hooks."""
    def scenario(T):
        log: list = []
        x = T.tensor(X3, requires_grad=True)
        x.register_hook(_hook(log, "x"))
        a = x.sin()
        b = (a.exp() * 0.5).tanh()
        (a * b + b * 2.0).sum().backward()
        first = x.grad.clone()
        x.grad = None
        a = x.sin()
        a.register_hook(_hook(log, "a"))
        b = (a.exp() * 0.5).tanh()
        b.register_hook(_hook(log, "b"))
        (a * b + b * 2.0).sum().backward()
        return log + [first, x.grad]

    assert same_as_torch(scenario)[:4] == ["x", "b", "a", "x"]


def test_skip_connections_across_a_long_chain(same_as_torch) -> None:
    """A chain of 3,000 nodes whose values also join it again far down, and a second leaf that
    enters in the middle: the queue holds nodes while the chain runs on past them."""
    def scenario(T):
        log: list = []
        x = T.tensor(X3, requires_grad=True)
        w = T.tensor(f32([0.3, -0.2, 0.1]), requires_grad=True)
        for name, t in (("x", x), ("w", w)):
            t.register_hook(_hook(log, name))
            t.register_post_accumulate_grad_hook(lambda p, name=name: log.append(f"acc:{name}"))
        y = x
        kept = []
        for step in range(1000):
            y = y.tanh() * 1.0001
            if step % 97 == 0:
                kept.append(y)
            if step % 131 == 0 and kept:
                y = y + kept[0] * 0.01
            if step == 500:
                y = y * w
                y.register_hook(_hook(log, "joined"))
        y.sum().backward()
        return log + [x.grad, w.grad]

    log = same_as_torch(scenario)
    assert log[:4] == ["joined", "w", "acc:w", "x"]


def test_second_backward_after_retain_graph_and_then_without(same_as_torch) -> None:
    def scenario(T):
        log: list = []
        x = T.tensor(X3, requires_grad=True)
        a = x.tanh()
        out = (a * a.exp() + a).sum()
        out.backward(retain_graph=True)
        log.append(x.grad.clone())
        out.backward()
        log.append(x.grad.clone())
        try:
            out.backward()
        except RuntimeError as error:
            log.append("second time" in str(error))
        return log

    assert same_as_torch(scenario)[-1] is True
