"""Forward + backward speed of gradscope against hand-written numpy and PyTorch.

Run from the repository root::

    python tests/benchmarks/bench_engine.py            # check, then time every workload
    python tests/benchmarks/bench_engine.py --quick --only chain
    python tests/benchmarks/bench_engine.py --check    # only check that the variants agree
    python tests/benchmarks/bench_engine.py --json results.json

Workloads (every variant computes the same thing from the same float32 data):

* ``mlp_ops``: MLP 784-512-512-10, batch 128, ReLU, cross-entropy written with ops
  (``log_softmax`` + indexing); parameters are leaf tensors.
* ``chain``: 2,000 tiny ops ``x = tanh(x) * 1.0001`` on 16 elements, then ``x.sum().backward()``.
* ``rnn``: tanh RNN, 50 steps, batch 32, input and hidden 128, loss ``mean(h_final ** 2)``.
* ``cnn``: Conv2d(1,8,3)-ReLU-MaxPool2d(2)-Conv2d(8,16,3)-ReLU-Flatten-Linear(1936,10),
  ``CrossEntropyLoss``, batch 32 of 1x28x28 (numpy variant: im2col).
* ``mlp_nn``: the MLP of ``mlp_ops`` as ``nn.Sequential`` + ``nn.CrossEntropyLoss``, against the
  ops version and torch.
* ``hook``: the ``mlp_nn`` training step under one global full backward hook, against the plain
  step (the ``gs_hook`` / ``gs_plain`` variants of ``bench_monitor.py``).

Report ``scaling`` (also selectable with ``--only``): time and memory per node of a chain of
1k, 10k, 100k and 1M nodes, gradscope against torch and against a plain-Python linked list of
as many objects (the growth CPython itself gives); the time per node should stay flat.
"""
from __future__ import annotations

import os

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_name] = "1"

import concurrent.futures  # noqa: E402
import gc  # noqa: E402
import itertools  # noqa: E402
import multiprocessing  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

from benchlib import (Ratio, Variant, Workload, gradscope_nn, import_gradscope,  # noqa: E402
                      import_torch, main)

BATCH = 128
MLP_SIZES = (784, 512, 512, 10)
CHAIN_LENGTH = 2000
CHAIN_SCALE = 1.0001
RNN_STEPS, RNN_BATCH, RNN_INPUT, RNN_HIDDEN = 50, 32, 128, 128
CNN_BATCH = 32
NN_NAMES = ("Sequential", "Linear", "ReLU", "CrossEntropyLoss")
CNN_NN_NAMES = NN_NAMES + ("Conv2d", "MaxPool2d", "Flatten")


def _uniform(rng: np.random.Generator, bound: float, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def _grads(params: list[Any]) -> list[np.ndarray]:
    return [np.array(p.grad.numpy()) for p in params]


def _clear_grads(params: list[Any]) -> None:
    for param in params:
        param.grad = None


def _copy_into(lib: Any, param: Any, array: np.ndarray) -> None:
    with lib.no_grad():
        param.copy_(lib.tensor(array))


# ---------------------------------------------------------------------------------------------
# mlp_ops
# ---------------------------------------------------------------------------------------------

def mlp_data() -> dict[str, Any]:
    """Input, labels and parameters (weights stored ``(in, out)`` for ``x @ W``)."""
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in zip(MLP_SIZES[:-1], MLP_SIZES[1:]):
        bound = 1.0 / np.sqrt(fan_in)
        params += [_uniform(rng, bound, (fan_in, fan_out)), _uniform(rng, bound, (fan_out,))]
    return {"x": rng.standard_normal((BATCH, MLP_SIZES[0]), dtype=np.float32),
            "y": rng.integers(0, MLP_SIZES[-1], BATCH), "params": params}


def mlp_numpy(data: dict[str, Any]) -> Variant:
    """The MLP with its backward written by hand."""
    x, y = data["x"], data["y"]
    w1, b1, w2, b2, w3, b3 = (p.copy() for p in data["params"])
    rows = np.arange(x.shape[0])
    scale = np.float32(1.0 / x.shape[0])
    grads: list[np.ndarray] = []

    def step() -> float:
        h1 = x @ w1
        h1 += b1
        a1 = np.maximum(h1, 0)
        h2 = a1 @ w2
        h2 += b2
        a2 = np.maximum(h2, 0)
        logits = a2 @ w3
        logits += b3
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        sum_exp = exp.sum(axis=1, keepdims=True)
        loss = -(shifted[rows, y] - np.log(sum_exp[:, 0])).mean()
        # d loss / d logits = (softmax - onehot) / n
        d_logits = exp / sum_exp
        d_logits[rows, y] -= 1
        d_logits *= scale
        d_a2 = d_logits @ w3.T
        np.multiply(d_a2, h2 > 0, out=d_a2)
        d_a1 = d_a2 @ w2.T
        np.multiply(d_a1, h1 > 0, out=d_a1)
        grads[:] = [x.T @ d_a1, d_a1.sum(axis=0), a1.T @ d_a2, d_a2.sum(axis=0),
                    a2.T @ d_logits, d_logits.sum(axis=0)]
        return loss

    return Variant("numpy", step, lambda: list(grads))


def mlp_autograd(lib: Any, name: str, data: dict[str, Any]) -> Variant:
    """The MLP with ops on leaf tensors, for ``lib`` = gradscope or torch."""
    x, y = lib.tensor(data["x"]), lib.tensor(data["y"])
    params = [lib.tensor(p, requires_grad=True) for p in data["params"]]
    w1, b1, w2, b2, w3, b3 = params
    rows = lib.arange(x.shape[0])

    def step() -> Any:
        _clear_grads(params)
        hidden = lib.relu(x @ w1 + b1)
        hidden = lib.relu(hidden @ w2 + b2)
        logp = lib.log_softmax(hidden @ w3 + b3, dim=1)
        loss = -(logp[rows, y]).mean()
        loss.backward()
        return loss

    return Variant(name, step, lambda: _grads(params))


# ---------------------------------------------------------------------------------------------
# chain
# ---------------------------------------------------------------------------------------------

def chain_data() -> np.ndarray:
    return np.random.default_rng(1).standard_normal(16, dtype=np.float32)


def chain_numpy(x0: np.ndarray) -> Variant:
    """2,000 x (tanh, scale) forward, then the reverse pass one op at a time."""
    grads: list[np.ndarray] = []

    def step() -> float:
        outputs = []
        x = x0
        for _ in range(CHAIN_LENGTH):
            t = np.tanh(x)
            outputs.append(t)
            x = t * CHAIN_SCALE
        loss = x.sum()
        grad = np.ones_like(x0)
        for t in reversed(outputs):
            grad = grad * CHAIN_SCALE
            grad *= 1 - t * t  # d tanh(u) / du = 1 - tanh(u)^2
        grads[:] = [grad]
        return loss

    return Variant("numpy", step, lambda: list(grads))


def chain_autograd(lib: Any, name: str, x0: np.ndarray) -> Variant:
    leaf = lib.tensor(x0, requires_grad=True)

    def step() -> Any:
        leaf.grad = None
        x = leaf
        for _ in range(CHAIN_LENGTH):
            x = lib.tanh(x) * CHAIN_SCALE
        loss = x.sum()
        loss.backward()
        return loss

    return Variant(name, step, lambda: _grads([leaf]))


# ---------------------------------------------------------------------------------------------
# rnn
# ---------------------------------------------------------------------------------------------

def rnn_data() -> dict[str, Any]:
    rng = np.random.default_rng(2)
    bound = 1.0 / np.sqrt(RNN_HIDDEN)
    return {"xs": list(rng.standard_normal((RNN_STEPS, RNN_BATCH, RNN_INPUT), dtype=np.float32)),
            "h0": np.zeros((RNN_BATCH, RNN_HIDDEN), dtype=np.float32),
            "params": [_uniform(rng, bound, (RNN_INPUT, RNN_HIDDEN)),
                       _uniform(rng, bound, (RNN_HIDDEN, RNN_HIDDEN)),
                       _uniform(rng, bound, (RNN_HIDDEN,))]}


def rnn_numpy(data: dict[str, Any]) -> Variant:
    """Forward through time, then backpropagation through time accumulating per step."""
    xs, h0 = data["xs"], data["h0"]
    w_ih, w_hh, bias = (p.copy() for p in data["params"])
    grads: list[np.ndarray] = []

    def step() -> float:
        hs = [h0]
        h = h0
        for x in xs:
            z = x @ w_ih
            z += h @ w_hh
            z += bias
            h = np.tanh(z, out=z)
            hs.append(h)
        loss = (h * h).mean()
        d_h = h * np.float32(2.0 / h.size)
        d_w_ih = np.zeros_like(w_ih)
        d_w_hh = np.zeros_like(w_hh)
        d_bias = np.zeros_like(bias)
        for t in range(len(xs) - 1, -1, -1):
            d_z = 1 - hs[t + 1] * hs[t + 1]
            d_z *= d_h
            d_w_ih += xs[t].T @ d_z
            d_w_hh += hs[t].T @ d_z
            d_bias += d_z.sum(axis=0)
            if t:
                d_h = d_z @ w_hh.T
        grads[:] = [d_w_ih, d_w_hh, d_bias]
        return loss

    return Variant("numpy", step, lambda: list(grads))


def rnn_autograd(lib: Any, name: str, data: dict[str, Any]) -> Variant:
    xs = [lib.tensor(x) for x in data["xs"]]
    h0 = lib.tensor(data["h0"])
    params = [lib.tensor(p, requires_grad=True) for p in data["params"]]
    w_ih, w_hh, bias = params

    def step() -> Any:
        _clear_grads(params)
        h = h0
        for x in xs:
            h = lib.tanh(x @ w_ih + h @ w_hh + bias)
        loss = (h * h).mean()
        loss.backward()
        return loss

    return Variant(name, step, lambda: _grads(params))


# ---------------------------------------------------------------------------------------------
# cnn
# ---------------------------------------------------------------------------------------------

def cnn_data() -> dict[str, Any]:
    """Input, labels and parameters in PyTorch's layouts (conv ``(O, C, k, k)``, linear ``(out, in)``)."""
    rng = np.random.default_rng(3)
    params = []
    for shape, fan_in in (((8, 1, 3, 3), 9), ((16, 8, 3, 3), 72), ((10, 1936), 1936)):
        bound = 1.0 / np.sqrt(fan_in)
        params += [_uniform(rng, bound, shape), _uniform(rng, bound, (shape[0],))]
    return {"x": rng.standard_normal((CNN_BATCH, 1, 28, 28), dtype=np.float32),
            "y": rng.integers(0, 10, CNN_BATCH), "params": params}


def _im2col(x: np.ndarray, k: int) -> np.ndarray:
    """NCHW input -> ``(N, C*k*k, Ho*Wo)`` patches, one slice copy per kernel offset."""
    n, channels, height, width = x.shape
    out_h, out_w = height - k + 1, width - k + 1
    cols = np.empty((n, channels, k, k, out_h, out_w), dtype=x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = x[:, :, i:i + out_h, j:j + out_w]
    return cols.reshape(n, channels * k * k, out_h * out_w)


def _col2im(d_cols: np.ndarray, shape: tuple[int, ...], k: int) -> np.ndarray:
    """Adjoint of ``_im2col``: scatter-add patch gradients back into an NCHW array."""
    n, channels, height, width = shape
    out_h, out_w = height - k + 1, width - k + 1
    d_cols = d_cols.reshape(n, channels, k, k, out_h, out_w)
    d_x = np.zeros(shape, dtype=d_cols.dtype)
    for i in range(k):
        for j in range(k):
            d_x[:, :, i:i + out_h, j:j + out_w] += d_cols[:, :, i, j]
    return d_x


def _conv(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Valid 2-D convolution (cross-correlation), NCHW; returns the output and the patches."""
    n, _, height, width = x.shape
    out_channels, _, k, _ = weight.shape
    cols = _im2col(x, k)
    out = weight.reshape(out_channels, -1) @ cols  # (N, O, Ho*Wo)
    out += bias[:, None]
    return out.reshape(n, out_channels, height - k + 1, width - k + 1), cols


def _conv_backward(d_out: np.ndarray, cols: np.ndarray, weight: np.ndarray,
                   input_shape: tuple[int, ...] | None) -> list[np.ndarray | None]:
    """Gradients of ``_conv`` for weight, bias and (unless ``input_shape`` is None) input."""
    n, out_channels = d_out.shape[:2]
    d_out = d_out.reshape(n, out_channels, -1)
    d_weight = np.tensordot(d_out, cols, axes=([0, 2], [0, 2])).reshape(weight.shape)
    d_input = None
    if input_shape is not None:
        d_input = _col2im(weight.reshape(out_channels, -1).T @ d_out, input_shape,
                          weight.shape[-1])
    return [d_weight, d_out.sum(axis=(0, 2)), d_input]


def _max_pool2(x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """2x2 max pool of an NCHW array; also returns which window corner won, as 4 masks.

    Ties go to the first corner in row-major order, as in PyTorch.
    """
    corners = [x[:, :, i::2, j::2] for i in (0, 1) for j in (0, 1)]
    pooled = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
    masks, taken = [], np.zeros(pooled.shape, dtype=bool)
    for corner in corners:
        mask = corner == pooled
        mask &= ~taken
        taken |= mask
        masks.append(mask)
    return pooled, masks


def _max_pool2_backward(d_pooled: np.ndarray, masks: list[np.ndarray],
                        shape: tuple[int, ...]) -> np.ndarray:
    d_x = np.empty(shape, dtype=d_pooled.dtype)
    for (i, j), mask in zip(((0, 0), (0, 1), (1, 0), (1, 1)), masks):
        np.multiply(d_pooled, mask, out=d_x[:, :, i::2, j::2])
    return d_x


def cnn_numpy(data: dict[str, Any]) -> Variant:
    """The CNN by hand: NCHW, convolutions as im2col + batched matmul, masked 2x2 max pool."""
    x, y = data["x"], data["y"]
    w1, b1, w2, b2, w3, b3 = (p.copy() for p in data["params"])
    n, rows = x.shape[0], np.arange(x.shape[0])
    scale = np.float32(1.0 / n)
    grads: list[np.ndarray] = []

    def step() -> float:
        h1, cols1 = _conv(x, w1, b1)
        a1 = np.maximum(h1, 0)
        pooled, masks = _max_pool2(a1)
        h2, cols2 = _conv(pooled, w2, b2)
        flat = np.maximum(h2, 0).reshape(n, -1)
        logits = flat @ w3.T
        logits += b3
        shifted = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(shifted)
        sum_exp = exp.sum(axis=1, keepdims=True)
        loss = -(shifted[rows, y] - np.log(sum_exp[:, 0])).mean()

        d_logits = exp / sum_exp
        d_logits[rows, y] -= 1
        d_logits *= scale
        d_h2 = (d_logits @ w3).reshape(h2.shape)
        d_h2 *= h2 > 0
        d_w2, d_b2, d_pooled = _conv_backward(d_h2, cols2, w2, pooled.shape)
        d_h1 = _max_pool2_backward(d_pooled, masks, a1.shape)
        d_h1 *= h1 > 0
        d_w1, d_b1, _ = _conv_backward(d_h1, cols1, w1, None)
        grads[:] = [d_w1, d_b1, d_w2, d_b2, d_logits.T @ flat, d_logits.sum(axis=0)]
        return loss

    return Variant("numpy", step, lambda: list(grads))


def _load_module(lib: Any, model: Any, arrays: list[np.ndarray]) -> list[Any]:
    params = list(model.parameters())
    for param, array in zip(params, arrays, strict=True):
        _copy_into(lib, param, array)
    return params


def nn_variant(lib: Any, nn: Any, name: str, model: Any, x: np.ndarray, y: np.ndarray,
               arrays: list[np.ndarray]) -> Variant:
    """Forward + ``nn.CrossEntropyLoss`` + backward of ``model`` with ``arrays`` as parameters."""
    params = _load_module(lib, model, arrays)
    inputs, targets = lib.tensor(x), lib.tensor(y)
    loss_fn = nn.CrossEntropyLoss()

    def step() -> Any:
        _clear_grads(params)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        return loss

    return Variant(name, step, lambda: _grads(params))


def cnn_model(nn: Any) -> Any:
    return nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3),
                         nn.ReLU(), nn.Flatten(), nn.Linear(1936, 10))


# ---------------------------------------------------------------------------------------------
# mlp_nn
# ---------------------------------------------------------------------------------------------

def mlp_model(nn: Any) -> Any:
    return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10))


def nn_layout(params: list[np.ndarray]) -> list[np.ndarray]:
    """``(in, out)`` weights of the ops MLP -> ``nn.Linear``'s ``(out, in)``."""
    return [np.ascontiguousarray(p.T) for p in params]


def transposed_grads(variant: Variant) -> Variant:
    """The ops MLP reporting its gradients in ``nn.Linear`` layout."""
    return Variant(variant.name, variant.step, lambda: nn_layout(variant.grads()))


# ---------------------------------------------------------------------------------------------

def workloads() -> list[Workload]:
    """Every workload, with builders only for the variants that can run here."""
    torch = import_torch()
    gs, gs_reason = import_gradscope()
    no_torch = "torch is not installed"
    mlp, chain, rnn, cnn = mlp_data(), chain_data(), rnn_data(), cnn_data()
    result = []

    def engine(builders: dict, skipped: dict, name: str, build: Any, lib: Any,
               reason: str | None) -> None:
        if lib is None:
            skipped[name] = reason
        else:
            builders[name] = build

    for key, data, numpy_build, autograd_build, description, ratio_target, tolerances in (
        ("mlp_ops", mlp, mlp_numpy, mlp_autograd, "MLP 784-512-512-10, ops, batch 128", 1.10,
         (1e-4, 1e-6)),
        ("chain", chain, chain_numpy, chain_autograd, "2,000 x (tanh, *1.0001) on 16 elements",
         2.3, (1e-4, 0.0)),
        ("rnn", rnn, rnn_numpy, rnn_autograd, "tanh RNN, 50 steps, batch 32, hidden 128", 1.3,
         (1e-4, 1e-6)),
    ):
        builders = {"numpy": lambda b=numpy_build, d=data: b(d)}
        skipped: dict[str, str] = {}
        engine(builders, skipped, "gradscope",
               lambda b=autograd_build, d=data: b(gs, "gradscope", d), gs, gs_reason)
        engine(builders, skipped, "torch",
               lambda b=autograd_build, d=data: b(torch, "torch", d), torch, no_torch)
        result.append(Workload(
            key, description, builders,
            [Ratio("gradscope", "numpy", ratio_target), Ratio("gradscope", "torch"),
             Ratio("torch", "numpy")],
            reference="torch" if torch is not None else "numpy",
            rtol=tolerances[0], atol=tolerances[1], skipped=skipped))

    cnn_builders = {"numpy": lambda: cnn_numpy(cnn)}
    cnn_skipped: dict[str, str] = {}
    mlp_nn_builders: dict = {}
    mlp_nn_skipped: dict[str, str] = {}
    cnn_nn, cnn_reason = (None, gs_reason) if gs is None else gradscope_nn(gs, CNN_NN_NAMES)
    mlp_nn, mlp_reason = (None, gs_reason) if gs is None else gradscope_nn(gs, NN_NAMES)
    engine(cnn_builders, cnn_skipped, "gradscope",
           lambda: nn_variant(gs, cnn_nn, "gradscope", cnn_model(cnn_nn), cnn["x"], cnn["y"],
                              cnn["params"]), cnn_nn, cnn_reason)
    engine(mlp_nn_builders, mlp_nn_skipped, "gs_nn",
           lambda: nn_variant(gs, mlp_nn, "gs_nn", mlp_model(mlp_nn), mlp["x"], mlp["y"],
                              nn_layout(mlp["params"])), mlp_nn, mlp_reason)
    engine(mlp_nn_builders, mlp_nn_skipped, "gs_ops",
           lambda: transposed_grads(mlp_autograd(gs, "gs_ops", mlp)), gs, gs_reason)
    engine(cnn_builders, cnn_skipped, "torch",
           lambda: nn_variant(torch, torch.nn, "torch", cnn_model(torch.nn), cnn["x"], cnn["y"],
                              cnn["params"]), torch, no_torch)
    engine(mlp_nn_builders, mlp_nn_skipped, "torch_nn",
           lambda: nn_variant(torch, torch.nn, "torch_nn", mlp_model(torch.nn), mlp["x"],
                              mlp["y"], nn_layout(mlp["params"])), torch, no_torch)
    result.append(Workload(
        "cnn", "conv-relu-pool-conv-relu-flatten-linear, batch 32", cnn_builders,
        [Ratio("gradscope", "torch", 2.0), Ratio("gradscope", "numpy"), Ratio("torch", "numpy")],
        reference="torch" if torch is not None else "numpy", rtol=1e-3, atol=1e-6,
        skipped=cnn_skipped))
    result.append(Workload(
        "mlp_nn", "MLP of mlp_ops as nn.Sequential + nn.CrossEntropyLoss", mlp_nn_builders,
        [Ratio("gs_nn", "gs_ops", 1.15), Ratio("gs_nn", "torch_nn")],
        reference="torch_nn" if torch is not None else "gs_ops", rtol=1e-4, atol=1e-6,
        skipped=mlp_nn_skipped))
    return result


# ---------------------------------------------------------------------------------------------
# scaling: cost per node from 1k to 1M nodes
# ---------------------------------------------------------------------------------------------

SCALING_NODES = (1_000, 10_000, 100_000, 1_000_000)


def _chain_loss(lib: Any, leaf: Any, nodes: int) -> Any:
    """``nodes`` graph nodes: (tanh, * 1.0001) pairs on 16 elements, then a sum."""
    x = leaf
    for _ in range(nodes // 2):
        x = lib.tanh(x) * CHAIN_SCALE
    return x.sum()


class _CollectorClock:
    """CPU time the cyclic garbage collector spends while installed (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start

    def __enter__(self) -> "_CollectorClock":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        gc.callbacks.remove(self)


def _fastest_per_node(run: Callable[[], None], nodes: int, repeats: int) -> tuple[float, float]:
    """CPU seconds per node of the fastest of ``repeats`` calls of ``run``, and of the garbage
    collector's work within that call. CPU time of this process, not wall-clock time: a run at
    1M nodes lasts seconds, long enough for other processes on the machine to skew a wall-clock
    comparison between sizes."""
    best = (float("inf"), 0.0)
    for _ in range(repeats):
        with _CollectorClock() as collector:
            start = time.process_time()
            run()
            elapsed = time.process_time() - start
        best = min(best, (elapsed, collector.seconds))
    return best[0] / nodes, best[1] / nodes


def scaling_seconds_per_node(lib: Any, nodes: int, repeats: int) -> tuple[float, float]:
    """Forward + backward + freeing the graph, with the garbage collector on (its work grows
    with the number of live objects, which is part of what is measured): CPU seconds per node,
    and the collector's share of them (see ``_fastest_per_node``)."""
    leaf = lib.tensor(chain_data(), requires_grad=True)

    def run() -> None:
        leaf.grad = None
        loss = _chain_loss(lib, leaf, nodes)
        loss.backward()
        del loss

    return _fastest_per_node(run, nodes, repeats)


class _ListNode:
    """A node of the plain-Python reference chain, with the slots of a gradscope ``Node``."""

    __slots__ = ("previous", "edges", "output_nr", "seq", "saved", "versions", "meta", "extras",
                 "__weakref__")

    def __init__(self, previous: "_ListNode | None", seq: int, saved: np.ndarray | None) -> None:
        self.previous = previous
        self.seq = seq
        self.saved = saved


def python_list_seconds_per_node(nodes: int, repeats: int) -> tuple[float, float]:
    """The chain as a plain-Python linked list, for reference: one slotted object per node
    holding the previous one, a sequence number and (``tanh``'s) the saved output; the reverse
    walk computes the same gradients and drops each saved array; then the list is freed. What
    is left of its growth is CPython's: the collector walking a million live objects, and the
    cache misses of reaching them."""
    x0 = chain_data()
    scale = np.float32(CHAIN_SCALE)

    def run() -> None:
        sequence = itertools.count().__next__
        x = x0
        node = None
        for _ in range(nodes // 2):
            x = np.tanh(x)
            node = _ListNode(node, sequence(), x)
            x = x * scale
            node = _ListNode(node, sequence(), None)
        grad = np.ones_like(x)
        current = node
        while current is not None:
            saved = current.saved
            if saved is None:
                grad = grad * scale
            else:
                grad = grad * (1 - saved * saved)
                current.saved = None
            current = current.previous
        del node

    return _fastest_per_node(run, nodes, repeats)


def _rss_bytes() -> int | None:
    """This process's resident memory (Linux ``/proc``), or None elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def graph_memory(lib_name: str, nodes: int) -> dict[str, float | None]:
    """Bytes per node of a chain graph, measured in a fresh forked process (so that memory freed
    by earlier runs cannot be reused and hide the growth): resident memory added by the forward
    pass, and, for gradscope, the traced peak (``tracemalloc``: Python objects and numpy data)
    over forward + backward."""
    lib = import_torch() if lib_name == "torch" else import_gradscope()[0]
    leaf = lib.tensor(chain_data(), requires_grad=True)
    _chain_loss(lib, leaf, 1_000).backward()
    gc.collect()
    before = _rss_bytes()
    loss = _chain_loss(lib, leaf, nodes)
    after = _rss_bytes()
    del loss
    gc.collect()
    rss = None if before is None or after is None else (after - before) / nodes
    traced = None
    if lib_name == "gradscope":
        tracemalloc.start()
        _chain_loss(lib, leaf, nodes).backward()
        traced = tracemalloc.get_traced_memory()[1] / nodes
        tracemalloc.stop()
    return {"rss_bytes_per_node": rss, "traced_peak_bytes_per_node": traced}


def _in_fresh_process(function: Callable[..., Any], *args: Any) -> Any:
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        return pool.submit(function, *args).result()


def scaling_report(args: Any) -> dict[str, Any]:
    """Per-node time and memory of a growing chain graph, gradscope against torch and a
    plain-Python linked list.

    A time is the fastest over 3 rounds (2 with ``--quick``), each of which times every size
    once, so that a slow spell on a shared machine does not fall on one size only; a small graph
    runs several times per round (as many as make 100,000 nodes), so that a 1,000-node figure is
    not one short run either.
    """
    torch = import_torch()
    gs, reason = import_gradscope()
    libraries = [(name, lib) for name, lib in (("gradscope", gs), ("torch", torch)) if lib is not None]
    rows = []
    for nodes in SCALING_NODES:
        row: dict[str, Any] = {"nodes": nodes, "python": {}}
        for name, _ in libraries:
            row[name] = _in_fresh_process(graph_memory, name, nodes)
        rows.append(row)

    def keep_fastest(entry: dict[str, Any], timing: tuple[float, float]) -> None:
        if timing[0] < entry.get("seconds_per_node", float("inf")):
            entry["seconds_per_node"], entry["gc_seconds_per_node"] = timing

    gc.collect()
    gc.freeze()
    for _ in range(2 if args.quick else 3):
        for row in rows:
            repeats = max(1, 100_000 // row["nodes"])
            for name, lib in libraries:
                keep_fastest(row[name], scaling_seconds_per_node(lib, row["nodes"], repeats))
            keep_fastest(row["python"], python_list_seconds_per_node(row["nodes"], repeats))
    gc.unfreeze()

    def cell(row: dict[str, Any], name: str, key: str, scale: float, digits: int) -> str:
        value = row.get(name, {}).get(key)
        return "n/a" if value is None else f"{value * scale:.{digits}f}"

    lines = ["scaling: chain of (tanh, *1.0001) nodes on 16 floats; time = forward + backward + "
             "freeing the graph (us per node; gc: the collector's part), memory = bytes per node",
             f"{'nodes':>10}{'gs us':>7}{'gs gc':>7}{'py us':>7}{'py gc':>7}{'torch us':>9}"
             f"{'gs traced B':>12}{'gs RSS B':>9}{'torch RSS B':>12}",
             "-" * 80]
    for row in rows:
        lines.append(f"{row['nodes']:>10,}{cell(row, 'gradscope', 'seconds_per_node', 1e6, 2):>7}"
                     f"{cell(row, 'gradscope', 'gc_seconds_per_node', 1e6, 2):>7}"
                     f"{cell(row, 'python', 'seconds_per_node', 1e6, 2):>7}"
                     f"{cell(row, 'python', 'gc_seconds_per_node', 1e6, 2):>7}"
                     f"{cell(row, 'torch', 'seconds_per_node', 1e6, 2):>9}"
                     f"{cell(row, 'gradscope', 'traced_peak_bytes_per_node', 1, 0):>12}"
                     f"{cell(row, 'gradscope', 'rss_bytes_per_node', 1, 0):>9}"
                     f"{cell(row, 'torch', 'rss_bytes_per_node', 1, 0):>12}")
    for name in [name for name, _ in libraries] + ["python"]:
        first, last = rows[0][name], rows[-1][name]
        line = (f"{'python list' if name == 'python' else name}: time per node at {SCALING_NODES[-1]:,} "
                f"nodes / at {SCALING_NODES[0]:,} nodes = "
                f"{last['seconds_per_node'] / first['seconds_per_node']:.2f}")
        if name != "torch":  # (torch's graph is no python objects: its collector's part is nil)
            without = ((last["seconds_per_node"] - last["gc_seconds_per_node"])
                       / (first["seconds_per_node"] - first["gc_seconds_per_node"]))
            line += f"; without the collector's part: {without:.2f}"
        lines.append(line)
    if gs is None:
        lines.append(f"gradscope: n/a -- {reason}")
    return {"text": "\n".join(lines), "data": rows}


def hook_workload() -> Workload:
    """One global full backward hook on the nn MLP's training step (``bench_monitor.py``'s
    ``gs_hook`` against ``gs_plain``), reported here with the engine's figures."""
    import bench_monitor

    monitor = bench_monitor.workloads()[0]
    names = ("gs_plain", "gs_hook")
    return Workload("hook", "nn MLP training step under one global full backward hook",
                    {name: monitor.builders[name] for name in names if name in monitor.builders},
                    [Ratio("gs_hook", "gs_plain", 1.15)], reference="gs_plain", rtol=1e-5, atol=1e-7,
                    skipped={name: monitor.skipped[name] for name in names if name in monitor.skipped})


if __name__ == "__main__":
    sys.exit(main(__doc__.splitlines()[0], lambda: workloads() + [hook_workload()],
                  {"scaling": scaling_report}))
