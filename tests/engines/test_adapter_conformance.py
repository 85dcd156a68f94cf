"""Adapter conformance: every method of the engine interface (gradscope/engines/spec.py), called on
both engines (torch only where it is installed, and again on a CUDA device where there is one) on a
tiny model, against the contract its docstring states. Expected values come from numpy, so both
engines are held to the same numbers.

``test_every_interface_method_is_covered`` fails when the interface gains a method without a
``test_<method>`` here.
"""
from __future__ import annotations

import inspect
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import gradscope as gs
from gradscope.engines import Engine, GradientNormTaps, OpTrace, get_engine
from gradscope.engines.observers import GraphOpRecorder
from gradscope.engines.spec import ACCUMULATE_NODE, CAPABILITIES, HOOK_NODE

W1 = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(4, 3)
B1 = np.array([0.1, -0.2, 0.3, -0.4], dtype=np.float32)
W2 = np.linspace(0.5, -0.5, 8, dtype=np.float32).reshape(2, 4)
B2 = np.array([0.05, -0.05], dtype=np.float32)
X = np.linspace(-2.0, 2.0, 6, dtype=np.float32).reshape(2, 3)


@dataclass
class Side:
    """One engine under test: its adapter and its library (``gradscope`` or ``torch``)."""

    name: str
    engine: Engine
    lib: Any
    device: str | None = None  # (torch's device for the tensors; None on gradscope's engine)

    def tensor(self, values: Any, requires_grad: bool = False, dtype: str = "float32") -> Any:
        place = {} if self.device is None else {"device": self.device}
        return self.lib.tensor(np.asarray(values), dtype=getattr(self.lib, dtype), requires_grad=requires_grad,
                               **place)

    def model(self) -> Any:
        nn = self.lib.nn
        model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
        if self.device is not None:
            model = model.to(self.device)
        with self.lib.no_grad():
            for parameter, values in zip(model.parameters(), (W1, B1, W2, B2)):
                parameter.copy_(self.tensor(values))
        return model

    def loss(self, model: Any) -> Any:
        return (model(self.tensor(X)) ** 2).sum()


@pytest.fixture(params=["gradscope", "torch", "torch-cuda"])
def side(request: pytest.FixtureRequest) -> Side:
    if request.param == "gradscope":
        return Side("gradscope", get_engine("gradscope"), gs)
    torch = pytest.importorskip("torch")
    if request.param == "torch":
        return Side("torch", get_engine("torch"), torch, "cpu")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return Side("torch", get_engine("torch"), torch, "cuda:0")


def _reference() -> dict[str, Any]:
    """The tiny model's loss and parameter gradients, in float64 numpy."""
    x, w1, b1, w2, b2 = (a.astype(np.float64) for a in (X, W1, B1, W2, B2))
    hidden = np.tanh(x @ w1.T + b1)
    out = hidden @ w2.T + b2
    grad_out = 2 * out
    grad_hidden = grad_out @ w2 * (1 - hidden ** 2)
    return {"loss": float((out ** 2).sum()), "grads": [grad_hidden.T @ x, grad_hidden.sum(0), grad_out.T @ hidden,
                                                      grad_out.sum(0)]}


REFERENCE = _reference()


def _trained(side: Side) -> Any:
    model = side.model()
    side.loss(model).backward()
    return model


def _square(array: np.ndarray) -> float:
    return float(np.sum(np.asarray(array, dtype=np.float64) ** 2))


def _is_entry_point(pair: Any) -> bool:
    owner, attribute = pair
    return isinstance(attribute, str) and callable(getattr(owner, attribute))


# ------------------------------------------------------------------ the meta-test
def interface_members() -> list[str]:
    """Every public method and attribute that a capability section of the interface declares."""
    return sorted(name for section in CAPABILITIES for name in vars(section) if not name.startswith("_"))


def test_every_interface_method_is_covered() -> None:
    members = interface_members()
    assert "squared_norms" in members and "process_group" in members and len(members) >= 40
    assert set(members) <= set(dir(Engine)), "a capability section is missing from Engine"
    tests = {name for name, value in globals().items() if name.startswith("test_") and inspect.isfunction(value)}
    missing = [name for name in members if f"test_{name}" not in tests]
    assert not missing, f"interface members without a conformance test: {missing}"
    for name in members:
        assert "side" in inspect.signature(globals()[f"test_{name}"]).parameters, f"test_{name} runs on one engine"


def test_the_interface_is_abstract_where_every_adapter_must_implement_it(side: Side) -> None:
    assert {"to_numpy", "squared_norms", "is_module", "gradient_norm_taps"} <= Engine.__abstractmethods__
    assert not type(side.engine).__abstractmethods__
    with pytest.raises(TypeError, match="abstract"):
        type("Partial", (Engine,), {"to_numpy": lambda self, tensor: None})()


# ------------------------------------------------------------------ objects
def test_tensor_type(side: Side) -> None:
    assert isinstance(side.tensor([1.0]), side.engine.tensor_type)
    assert isinstance(next(side.model().parameters()), side.engine.tensor_type)


def test_is_module(side: Side) -> None:
    assert side.engine.is_module(side.model()) and side.engine.is_module(side.lib.nn.Tanh())
    assert not side.engine.is_module(side.tensor([1.0])) and not side.engine.is_module(3)


def test_is_tensor(side: Side) -> None:
    assert side.engine.is_tensor(side.tensor([1.0])) and side.engine.is_tensor(next(side.model().parameters()))
    assert not side.engine.is_tensor(np.ones(2)) and not side.engine.is_tensor(None)


def test_tensors_in(side: Side) -> None:
    a, b, c = side.tensor([1.0]), side.tensor([2.0]), side.tensor([3.0])
    assert side.engine.tensors_in(a) == [a]
    found = side.engine.tensors_in((a, [b, {"key": c}], 1, "text"))
    assert len(found) == 3 and all(x is y for x, y in zip(found, (a, b, c)))
    assert side.engine.tensors_in(None) == [] and side.engine.tensors_in("text") == []


# ------------------------------------------------------------------ hooks
def test_register_module_forward_pre_hook(side: Side) -> None:
    model, seen = side.model(), []
    handle = side.engine.register_module_forward_pre_hook(lambda module, args: seen.append(type(module).__name__))
    try:
        model(side.tensor(X))
    finally:
        handle.remove()
    assert seen == ["Sequential", "Linear", "Tanh", "Linear"]
    model(side.tensor(X))
    assert len(seen) == 4


def test_register_module_forward_hook(side: Side) -> None:
    model, seen, with_kwargs = side.model(), [], []
    handle = side.engine.register_module_forward_hook(
        lambda module, args, output: seen.append((type(module).__name__, tuple(output.shape))))
    other = side.engine.register_module_forward_hook(
        lambda module, args, kwargs, output: with_kwargs.append(isinstance(kwargs, dict)), with_kwargs=True)
    try:
        model(side.tensor(X))
    finally:
        handle.remove()
        other.remove()
    assert seen == [("Linear", (2, 4)), ("Tanh", (2, 4)), ("Linear", (2, 2)), ("Sequential", (2, 2))]
    assert with_kwargs == [True] * 4
    model(side.tensor(X))
    assert len(seen) == 4


def _step_hook_test(side: Side, register: Any) -> None:
    model = _trained(side)
    optimizer, seen = side.engine.sgd(model.parameters(), lr=0.1), []
    handle = register(lambda opt, args, kwargs: seen.append((opt is optimizer, args, kwargs)))
    try:
        optimizer.step()
    finally:
        handle.remove()
    assert seen == [(True, (optimizer,), {})]  # (PyTorch passes step's own arguments, self included)
    optimizer.step()
    assert len(seen) == 1


def test_register_optimizer_step_pre_hook(side: Side) -> None:
    _step_hook_test(side, side.engine.register_optimizer_step_pre_hook)


def test_register_optimizer_step_post_hook(side: Side) -> None:
    _step_hook_test(side, side.engine.register_optimizer_step_post_hook)


# ------------------------------------------------------------------ modes
def test_no_grad(side: Side) -> None:
    x = side.tensor([1.0, 2.0], requires_grad=True)
    with side.engine.no_grad():
        assert not (x * 2).requires_grad
    assert (x * 2).requires_grad


def test_record_creation_traces(side: Side) -> None:
    x = side.tensor([1.0, 2.0], requires_grad=True)
    outside = (x * 2).grad_fn
    with side.engine.record_creation_traces():
        inside = (x * 3).grad_fn
    assert side.engine.node_trace(outside) == []
    assert any(file == __file__ for file, _ in side.engine.node_trace(inside))


def test_trace_nonfinite_ops(side: Side) -> None:
    x = side.tensor([-1.0, 1.0], requires_grad=True)
    with side.engine.trace_nonfinite_ops() as trace:
        y = side.lib.log(x) * 2
        line = sys._getframe().f_lineno - 1
    assert isinstance(trace, OpTrace)
    assert "log" in trace.op and trace.kind == "nan" and len(trace.outputs) >= 2
    assert (__file__, line) in trace.frames
    assert trace.node == "LogBackward0"
    assert trace.origin(y) is trace.outputs[0]


# ------------------------------------------------------------------ graph
def test_node_trace(side: Side) -> None:
    with side.engine.record_creation_traces():
        node = (side.tensor([1.0], requires_grad=True).exp()).grad_fn
        line = sys._getframe().f_lineno - 1
    trace = side.engine.node_trace(node)
    assert all(isinstance(file, str) and isinstance(number, int) for file, number in trace)
    assert trace[-1] == (__file__, line) or (__file__, line) in trace


def test_node_sequence_nr(side: Side) -> None:
    x = side.tensor([1.0], requires_grad=True)
    first = (x * 2).grad_fn
    second = (x + 1).grad_fn
    numbers = side.engine.node_sequence_nr(first), side.engine.node_sequence_nr(second)
    assert all(isinstance(number, int) for number in numbers) and numbers[0] < numbers[1]


def test_node_output_shapes(side: Side) -> None:
    x = side.tensor(X, requires_grad=True)
    w = side.tensor(W1.T)
    assert side.engine.node_output_shapes((x @ w).grad_fn) == ((2, 4),)


def test_node_name(side: Side) -> None:
    model = side.model()
    model[0].register_full_backward_hook(lambda module, grad_input, grad_output: None)
    hidden = model[0](side.tensor(X))
    assert hidden.grad_fn.name() == HOOK_NODE
    assert side.engine.node_name(hidden) == "AddmmBackward0"  # (through the hook's identity node)
    assert side.engine.node_name(side.tensor([1.0])) is None


def test_gradient_norm_taps(side: Side) -> None:
    x = side.tensor(X, requires_grad=True)
    factor = side.tensor(np.full((2, 3), 3.0, dtype=np.float32), requires_grad=True)
    product = x * factor
    taps, seen = side.engine.gradient_norm_taps(), []
    assert isinstance(taps, GradientNormTaps)
    taps.add(product.grad_fn, (0,), (0, 1), lambda out, into, nonfinite: seen.append((out, into, nonfinite)))
    product.sum().backward(retain_graph=True)
    taps.close()
    product.sum().backward()
    assert len(seen) == 1
    output_square, input_square, nonfinite = seen[0]
    assert output_square == pytest.approx(6.0) and nonfinite == 0
    assert input_square == pytest.approx(_square(np.full(6, 3.0)) + _square(X))
    np.testing.assert_allclose(side.engine.to_numpy(x.grad), 6.0)  # (observing changed no gradient)


# ------------------------------------------------------------------ numbers
def test_to_numpy(side: Side) -> None:
    array = side.engine.to_numpy(side.tensor(X))
    assert isinstance(array, np.ndarray) and array.dtype == np.float32
    np.testing.assert_array_equal(array, X)
    half = side.engine.to_numpy(side.tensor([1.5, -2.0], dtype="float16"))
    assert half.dtype in (np.float16, np.float32) and half.tolist() == [1.5, -2.0]


def test_squared_norms(side: Side) -> None:
    big = side.tensor([1e20, 1e20])  # (float32 squares overflow: the result must not)
    squares = side.engine.squared_norms([side.tensor(X), None, big, side.tensor([math.nan, 1.0])])
    assert squares[0] == pytest.approx(_square(X)) and squares[1] is None
    assert squares[2] == pytest.approx(2e40) and math.isnan(squares[3])
    assert all(isinstance(value, float) for value in squares if value is not None)


def test_fine_squared_norms(side: Side) -> None:
    rng = np.random.default_rng(3)
    big = rng.standard_normal(3 * (1 << 20) // 2).astype(np.float32)  # (read in two pieces)
    moved = big.copy()
    moved[7] = np.nextafter(moved[7], np.float32(np.inf))  # one entry, one ulp
    values = side.engine.fine_squared_norms([side.tensor(X), side.tensor(big), side.tensor(moved)])
    assert all(isinstance(value, float) for value in values)
    assert values[0] == pytest.approx(_square(X), rel=1e-12)
    assert values[1] == pytest.approx(float(np.dot(big.astype(np.float64), big.astype(np.float64))), rel=1e-12)
    assert values[2] != values[1]  # (a float32 norm of the two is the same)
    assert side.engine.fine_squared_norms([side.tensor(big)]) == [values[1]]  # equal values, equal result
    assert side.engine.fine_squared_norms([]) == []


def test_loss_and_squared_norms(side: Side) -> None:
    model = side.model()
    loss = side.loss(model)
    loss.backward()
    loss_value, squares = side.engine.loss_and_squared_norms(loss, [p.grad for p in model.parameters()] + [None])
    assert isinstance(loss_value, float) and loss_value == pytest.approx(REFERENCE["loss"], rel=1e-5)
    assert squares[:4] == pytest.approx([_square(grad) for grad in REFERENCE["grads"]], rel=1e-4)
    assert squares[4] is None


def test_activation_summary(side: Side) -> None:
    finite = side.engine.activation_summary(side.tensor(X))
    broken = side.engine.activation_summary(side.tensor([1.0, math.inf]))
    finite_square, broken_square = side.engine.squared_norms([finite, broken])
    assert math.isfinite(finite_square) and not math.isfinite(broken_square)


def test_nonfinite_kind(side: Side) -> None:
    kind = side.engine.nonfinite_kind
    assert kind(side.tensor([1.0, math.inf, math.nan])) == "nan"
    assert kind(side.tensor([1.0, -math.inf])) == "inf"
    assert kind(side.tensor(X)) is None and kind(side.tensor([1, 2], dtype="int64")) is None


def test_nonfinite_count(side: Side) -> None:
    count = side.engine.nonfinite_count
    assert count(side.tensor([1.0, math.inf, math.nan, -math.inf])) == 3
    assert count(side.tensor(X)) == 0 and count(side.tensor([1, 2], dtype="int64")) == 0
    assert isinstance(count(side.tensor([math.nan], dtype="float16")), int)


# ------------------------------------------------------------------ training
def test_clip_grad_norm_(side: Side) -> None:
    model = _trained(side)
    expected = math.sqrt(sum(_square(grad) for grad in REFERENCE["grads"]))
    total = side.engine.clip_grad_norm_(model.parameters(), 0.5)
    assert float(total) == pytest.approx(expected, rel=1e-5)
    clipped = math.sqrt(sum(square for square in side.engine.squared_norms([p.grad for p in model.parameters()])))
    assert clipped == pytest.approx(0.5, rel=1e-4)


def test_clip_grad_value_(side: Side) -> None:
    model = _trained(side)
    side.engine.clip_grad_value_(model.parameters(), 0.25)
    for parameter, reference in zip(model.parameters(), REFERENCE["grads"]):
        np.testing.assert_allclose(side.engine.to_numpy(parameter.grad), np.clip(reference, -0.25, 0.25), rtol=1e-5,
                                   atol=1e-6)


def test_sgd(side: Side) -> None:
    model = _trained(side)
    side.engine.sgd(model.parameters(), lr=0.1).step()
    first = side.engine.to_numpy(next(model.parameters()))
    np.testing.assert_allclose(first, W1 - 0.1 * REFERENCE["grads"][0], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ state
def test_manual_seed(side: Side) -> None:
    side.engine.manual_seed(7)
    first = side.engine.to_numpy(side.lib.randn(5)).copy()
    side.engine.manual_seed(7)
    np.testing.assert_array_equal(side.engine.to_numpy(side.lib.randn(5)), first)


def test_get_rng_state(side: Side) -> None:
    state = side.engine.get_rng_state()
    assert isinstance(state, dict) and isinstance(state["cpu"], np.ndarray)
    assert all(isinstance(key, str) and isinstance(value, np.ndarray) for key, value in state.items())


def test_set_rng_state(side: Side) -> None:
    state = side.engine.get_rng_state()
    first = side.engine.to_numpy(side.lib.randn(5)).copy()
    moved = side.engine.get_rng_state()  # (a state taken after numbers were drawn is another one)
    assert any(not np.array_equal(state[key], moved[key]) for key in state)
    side.engine.set_rng_state(state)
    np.testing.assert_array_equal(side.engine.to_numpy(side.lib.randn(5)), first)
    side.engine.set_rng_state(moved)
    again = side.engine.to_numpy(side.lib.randn(5)).copy()
    side.engine.set_rng_state(moved)
    np.testing.assert_array_equal(side.engine.to_numpy(side.lib.randn(5)), again)


def test_clone(side: Side) -> None:
    original = side.tensor(X, requires_grad=True)
    copy = side.engine.clone(original)
    assert not copy.requires_grad and copy.grad_fn is None
    with side.lib.no_grad():
        original.mul_(2)
    np.testing.assert_array_equal(side.engine.to_numpy(copy), X)


def test_clone_all(side: Side) -> None:
    tensors = [side.tensor(X), side.tensor(B1)]
    copies = side.engine.clone_all(tensors)
    assert [side.engine.to_numpy(copy).tolist() for copy in copies] == [X.tolist(), B1.tolist()]
    with side.lib.no_grad():
        tensors[0].mul_(2)
    again = side.engine.clone_all(tensors, into=copies)
    assert all(a is b for a, b in zip(again, copies))
    np.testing.assert_array_equal(side.engine.to_numpy(copies[0]), X * 2)


def test_joined(side: Side) -> None:
    copies = side.engine.clone_all([side.tensor(X), side.tensor(B1)])
    joined = side.engine.joined(copies)
    if joined is not None:
        assert side.engine.squared_norms([joined])[0] == pytest.approx(_square(X) + _square(B1))
    assert side.engine.joined([]) is None


def test_copy_into(side: Side) -> None:
    target = side.tensor(np.zeros(3, dtype=np.float32), requires_grad=True)
    side.engine.copy_into(target, np.array([1.0, 2.0, 3.0]))  # (float64 array, cast to the target's dtype)
    assert side.engine.to_numpy(target).tolist() == [1.0, 2.0, 3.0] and target.grad_fn is None
    side.engine.copy_into(target, side.tensor([4.0, 5.0, 6.0]))
    assert side.engine.to_numpy(target).tolist() == [4.0, 5.0, 6.0]


def test_from_numpy(side: Side) -> None:
    tensor = side.engine.from_numpy(X)
    assert side.engine.is_tensor(tensor) and side.engine.dtype_name(tensor) == "float32"
    np.testing.assert_array_equal(side.engine.to_numpy(tensor), X)
    if side.name == "torch":  # (gradscope's engine keeps the array's own dtype and has no devices)
        placed = side.engine.from_numpy(X, device=side.device, dtype="float64")
        assert side.engine.dtype_name(placed) == "float64" and side.engine.describe_device(placed) == side.device


def test_describe_device(side: Side) -> None:
    device = side.engine.describe_device(side.tensor(X))
    assert device == side.device


def test_storage_key(side: Side) -> None:
    tensor = side.tensor(X)
    key = side.engine.storage_key(tensor)
    assert isinstance(key, tuple) and key[1] == X.nbytes and tuple(key[2]) == X.shape
    assert side.engine.storage_key(tensor.detach()) == key
    assert side.engine.storage_key(side.engine.clone(tensor)) != key


def test_dtype_name(side: Side) -> None:
    names = [side.engine.dtype_name(side.tensor([1], dtype=dtype)) for dtype in ("float32", "float16", "int64")]
    assert names == ["float32", "float16", "int64"]


# ------------------------------------------------------------------ attaching to a script
def test_backward_entry_points(side: Side) -> None:
    points = side.engine.backward_entry_points()
    assert points and all(_is_entry_point(pair) for pair in points)


def test_in_backward(side: Side) -> None:
    x, seen = side.tensor([1.0, 2.0], requires_grad=True), []
    y = x * 2
    y.register_hook(lambda grad: seen.append(side.engine.in_backward()))
    assert not side.engine.in_backward()
    y.sum().backward()
    assert seen == [True] and not side.engine.in_backward()


def test_is_compiling(side: Side) -> None:
    assert side.engine.is_compiling() is False


def test_gradient_scaler_class(side: Side) -> None:
    scaler = side.engine.gradient_scaler_class()
    assert scaler is None or all(hasattr(scaler, name) for name in ("scale", "step", "get_scale"))


def test_process_start_entry_points(side: Side) -> None:
    points = side.engine.process_start_entry_points()
    assert isinstance(points, list) and all(_is_entry_point(pair) for pair in points)


def test_record_graph_ops(side: Side) -> None:
    recorder = side.engine.record_graph_ops(lambda filename: filename == __file__, 10)
    if recorder is None:  # (an engine that cannot record them says so)
        return
    assert isinstance(recorder, GraphOpRecorder)
    x = side.tensor([1.0, 2.0], requires_grad=True)
    recorder.start()
    try:
        y = side.lib.log(x)
        line = sys._getframe().f_lineno - 1
    finally:
        recorder.stop()
    side.lib.exp(x)  # (not recorded: stopped)
    outputs = [record[0] for record in recorder.records]
    assert any(output is y for output in outputs) and len(outputs) == 1
    output, node, where, _operation, _inputs = recorder.records[0]
    assert node is y.grad_fn and where == (__file__, line)
    recorder.clear()
    assert not recorder.records


def test_is_compiled_module(side: Side) -> None:
    assert side.engine.is_compiled_module(side.model()) is False


def test_uncompiled(side: Side) -> None:
    model = side.model()
    assert side.engine.uncompiled(model) is model


# ------------------------------------------------------------------ debugger
def test_gradient_edge(side: Side) -> None:
    leaf = side.tensor([1.0, 2.0], requires_grad=True)
    node, slot = side.engine.gradient_edge(leaf)
    assert node.name() == ACCUMULATE_NODE and slot == 0
    product = leaf * 2
    assert side.engine.gradient_edge(product) == (product.grad_fn, 0)
    assert side.engine.gradient_edge(side.tensor([1.0])) is None


def test_queue_backward_callback(side: Side) -> None:
    x, order = side.tensor([1.0, 2.0], requires_grad=True), []

    def hook(grad: Any) -> None:
        order.append("hook")
        side.engine.queue_backward_callback(lambda: order.append(("callback", side.engine.in_backward())))

    (x * 2).register_hook(hook)
    (x * 2).sum().backward()  # (a pass without the hooked tensor: nothing queued)
    assert order == []
    y = x * 3
    y.register_hook(hook)
    y.sum().backward()
    assert order[0] == "hook" and order[1][0] == "callback" and len(order) == 2


def test_node_creation_frames(side: Side) -> None:
    with side.engine.record_creation_traces():
        node = (side.tensor([1.0], requires_grad=True) * 2).grad_fn
    frames = side.engine.node_creation_frames(node)
    assert all(len(frame) == 3 for frame in frames)
    assert (__file__, "test_node_creation_frames") in [(file, function) for file, _, function in frames]


def test_debug_namespace(side: Side) -> None:
    namespace = side.engine.debug_namespace()
    assert namespace == ({"gs": gs} if side.name == "gradscope" else {"torch": side.lib})


# ------------------------------------------------------------------ distributed
def test_process_group(side: Side) -> None:
    assert side.engine.process_group() is None  # (no process group is up in the test process)


def test_group_teardown_entry_points(side: Side) -> None:
    points = side.engine.group_teardown_entry_points()
    assert isinstance(points, list) and all(_is_entry_point(pair) for pair in points)


def test_local_module(side: Side) -> None:
    model = side.model()
    assert side.engine.local_module(model) is model
