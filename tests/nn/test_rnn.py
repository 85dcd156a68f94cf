"""RNN, LSTM, GRU and their cells against torch.nn: outputs, input/state/parameter grads, every
option, train and eval, unbatched inputs; float64 gradient checks; names, init, repr, errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

import gradscope as gs
from gradscope import nn
from gradscope.autograd import gradcheck
from gradscope.ops.recurrent import recurrent_layer

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(0)


def _copy_weights(ours, theirs):
    ours_named, theirs_named = list(ours.named_parameters()), list(theirs.named_parameters())
    assert [n for n, _ in ours_named] == [n for n, _ in theirs_named]
    for (_, p), (_, q) in zip(ours_named, theirs_named):
        assert tuple(p.shape) == tuple(q.shape)
        p._data[...] = q.detach().numpy()


def _pair(name, *args, **kwargs):
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    ours = getattr(nn, name)(*args, **kwargs)
    _copy_weights(ours, theirs)
    return ours, theirs


def _leaf(array, lib):
    return gs.tensor(array, requires_grad=True) if lib is gs else torch.tensor(array, requires_grad=True)


def _weighted_sum(tensors, weights, lib):
    total = 0
    for t, w in zip(tensors, weights):
        total = total + (t * (gs.tensor(w) if lib is gs else torch.from_numpy(w))).sum()
    return total


def _flatten(out):
    if isinstance(out, tuple):
        return [t for item in out for t in _flatten(item)]
    return [out]


def _assert_close(ours, theirs, rtol=2e-5, atol=2e-6):
    np.testing.assert_allclose(ours._data, theirs.detach().numpy(), rtol=rtol, atol=atol)


def _compare(ours, theirs, inputs, use=None):
    """Run both modules on the same inputs (nested tuples of arrays); compare every output,
    the gradient of a random weighted sum of the outputs w.r.t. inputs and parameters."""
    def build(value, lib):
        if isinstance(value, tuple):
            return tuple(build(v, lib) for v in value)
        return None if value is None else _leaf(value, lib)

    ours_in, theirs_in = build(inputs, gs), build(inputs, torch)
    ours_out, theirs_out = _flatten(ours(*ours_in)), _flatten(theirs(*theirs_in))
    assert len(ours_out) == len(theirs_out)
    for o, t in zip(ours_out, theirs_out):
        assert tuple(o.shape) == tuple(t.shape)
        _assert_close(o, t)
    use = range(len(ours_out)) if use is None else use
    weights = [RNG.standard_normal(tuple(ours_out[i].shape)).astype(np.float32) for i in use]
    _weighted_sum([ours_out[i] for i in use], weights, gs).backward()
    _weighted_sum([theirs_out[i] for i in use], weights, torch).backward()
    for o, t in zip(_flatten(ours_in), _flatten(theirs_in)):
        if o is not None:
            _assert_close(o.grad, t.grad)
    for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert p.grad is not None, name
        _assert_close(p.grad, q.grad)


def _array(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CONFIGS = [
    {},
    {"num_layers": 2},
    {"bias": False},
    {"batch_first": True},
    {"bidirectional": True},
    {"num_layers": 3, "bidirectional": True, "batch_first": True},
    {"num_layers": 2, "dropout": 0.3},
]
MODULES = [("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("LSTM", {}), ("GRU", {})]


@pytest.mark.parametrize("name,extra", MODULES, ids=["rnn_tanh", "rnn_relu", "lstm", "gru"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_sequence_modules_match_torch(name, extra, config):
    ours, theirs = _pair(name, 3, 5, **extra, **config)
    if config.get("dropout"):
        ours.eval()
        theirs.eval()
    directions = 2 if config.get("bidirectional") else 1
    layers = config.get("num_layers", 1)
    steps, batch = 4, 3
    x = _array(batch, steps, 3) if config.get("batch_first") else _array(steps, batch, 3)
    _compare(ours, theirs, (x,))
    h0 = _array(layers * directions, batch, 5)
    state = (h0, _array(layers * directions, batch, 5)) if name == "LSTM" else h0
    ours.zero_grad()
    theirs.zero_grad()
    _compare(ours, theirs, (x, state))


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_unbatched_input_and_state(name):
    ours, theirs = _pair(name, 2, 3, num_layers=2, bidirectional=True)
    x = _array(6, 2)
    _compare(ours, theirs, (x,))
    h0 = _array(4, 3)
    state = (h0, _array(4, 3)) if name == "LSTM" else h0
    _compare(ours, theirs, (x, state))


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
@pytest.mark.parametrize("use", [[0], [1]], ids=["output_only", "h_n_only"])
def test_gradients_through_a_single_output(name, use):
    ours, theirs = _pair(name, 3, 4, num_layers=2)
    _compare(ours, theirs, (_array(5, 2, 3),), use=use)


@pytest.mark.parametrize("shape", [(1, 1, 2), (7, 1, 2), (2, 6, 2)])
def test_several_shapes(shape):
    ours, theirs = _pair("LSTM", 2, 3)
    _compare(ours, theirs, (_array(*shape),))


def test_train_mode_dropout_between_layers():
    gs.manual_seed(0)
    model = nn.GRU(3, 8, num_layers=2, dropout=0.5)
    x = gs.tensor(_array(6, 4, 3))
    model.eval()
    eval_out, _ = model(x)
    again, _ = model(x)
    np.testing.assert_array_equal(eval_out._data, again._data)
    model.train()
    first, _ = model(x)
    second, _ = model(x)
    assert not np.allclose(first._data, eval_out._data)
    assert not np.allclose(first._data, second._data)
    first.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    single = nn.GRU(3, 8, num_layers=2, dropout=0.0)
    single.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(single(x)[0]._data, eval_out._data)


@pytest.mark.parametrize("name,extra", [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("LSTMCell", {}),
                                        ("GRUCell", {}), ("GRUCell", {"bias": False}), ("LSTMCell", {"bias": False})])
@pytest.mark.parametrize("batched", [True, False])
def test_cells_match_torch(name, extra, batched):
    ours, theirs = _pair(name, 3, 4, **extra)
    x = _array(5, 3) if batched else _array(3)
    _compare(ours, theirs, (x,))
    h = _array(5, 4) if batched else _array(4)
    state = (h, _array(*h.shape)) if name == "LSTMCell" else h
    ours.zero_grad()
    theirs.zero_grad()
    _compare(ours, theirs, (x, state))


def test_cell_loop_matches_torch():
    ours, theirs = _pair("LSTMCell", 2, 3)
    xs = _array(6, 4, 2)
    ours_state = theirs_state = None
    ours_x, theirs_x = _leaf(xs, gs), _leaf(xs, torch)
    ours_total = theirs_total = 0
    for t in range(6):
        ours_state = ours(ours_x[t], ours_state)
        theirs_state = theirs(theirs_x[t], theirs_state)
        ours_total = ours_total + (ours_state[0] ** 2).sum()
        theirs_total = theirs_total + (theirs_state[0] ** 2).sum()
    ours_total.backward()
    theirs_total.backward()
    _assert_close(ours_x.grad, theirs_x.grad)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        _assert_close(p.grad, q.grad)


@pytest.mark.parametrize("mode", ["RNN_TANH", "RNN_RELU", "LSTM", "GRU"])
@pytest.mark.parametrize("reverse", [False, True])
def test_gradcheck_fused_layer(mode, reverse):
    gates = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}[mode]
    rng = np.random.default_rng(1)

    def leaf(*shape):
        return gs.tensor(rng.standard_normal(shape) * 0.7, dtype=gs.float64, requires_grad=True)

    x, h0, c0 = leaf(3, 2, 2), leaf(2, 3), leaf(2, 3)
    w_ih, w_hh, b_ih, b_hh = leaf(3 * gates, 2), leaf(3 * gates, 3), leaf(3 * gates), leaf(3 * gates)

    def fn(x, h0, c0, w_ih, w_hh, b_ih, b_hh):
        out, h_n, c_n = recurrent_layer(mode, x, h0, c0 if mode == "LSTM" else None, w_ih, w_hh, b_ih, b_hh,
                                        reverse)
        return (out, h_n) if c_n is None else (out, h_n, c_n)

    inputs = (x, h0, c0 if mode == "LSTM" else c0.detach(), w_ih, w_hh, b_ih, b_hh)
    assert gradcheck(fn, inputs)


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"])
def test_gradcheck_modules_in_float64(name):
    model = getattr(nn, name)(2, 3, **({} if name.endswith("Cell") else {"num_layers": 2, "bidirectional": True}))
    model.double()
    x = gs.tensor(np.random.default_rng(2).standard_normal((3, 2, 2) if not name.endswith("Cell") else (2, 2)),
                  dtype=gs.float64, requires_grad=True)
    assert gradcheck(lambda inp: model(inp), (x,))


@pytest.mark.parametrize("name,args,kwargs", [
    ("RNN", (3, 4), {"num_layers": 2, "bidirectional": True}),
    ("LSTM", (3, 4), {"bias": False, "num_layers": 2}),
    ("GRU", (3, 4), {"bidirectional": True}),
    ("RNNCell", (3, 4), {}), ("LSTMCell", (3, 4), {"bias": False}), ("GRUCell", (3, 4), {}),
])
def test_names_shapes_state_dict_and_repr_match_torch(name, args, kwargs):
    theirs = getattr(torch.nn, name)(*args, **kwargs)
    ours = getattr(nn, name)(*args, **kwargs)
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    ours.load_state_dict({k: gs.tensor(v.numpy()) for k, v in theirs.state_dict().items()})


@pytest.mark.parametrize("module", [lambda: nn.LSTM(5, 16, num_layers=2), lambda: nn.GRUCell(5, 16)])
def test_default_init_is_uniform_in_torch_bound(module):
    gs.manual_seed(0)
    model = module()
    bound = 1.0 / math.sqrt(16)
    values = np.concatenate([p._data.ravel() for p in model.parameters()])
    assert values.min() >= -bound and values.max() <= bound
    assert values.min() < -0.9 * bound and values.max() > 0.9 * bound
    assert abs(values.mean()) < 0.02
    assert all(p.dtype == gs.float32 and p.requires_grad for p in model.parameters())


def test_repr_variants_match_torch():
    for args, kwargs in [((3, 4), {"nonlinearity": "relu"}), ((3, 4), {"batch_first": True, "dropout": 0.2,
                                                                        "num_layers": 2})]:
        assert repr(nn.RNN(*args, **kwargs)) == repr(torch.nn.RNN(*args, **kwargs))
    assert repr(nn.RNNCell(3, 4, bias=False, nonlinearity="relu")) == \
        repr(torch.nn.RNNCell(3, 4, bias=False, nonlinearity="relu"))


def test_positional_arguments_follow_torch():
    model = nn.RNN(3, 4, 2, "relu", False, True)
    assert (model.num_layers, model.nonlinearity, model.bias, model.batch_first) == (2, "relu", False, True)
    lstm = nn.LSTM(3, 4, 2, False, True, 0.0, True)
    assert (lstm.bias, lstm.batch_first, lstm.bidirectional) == (False, True, True)


def _raises(fn, expected_type, phrase):
    with pytest.raises(expected_type, match=phrase):
        fn()


def test_errors_match_torch():
    _raises(lambda: nn.RNN(3, 4, num_layers=0), ValueError, "num_layers must be greater than zero")
    _raises(lambda: nn.RNN(3, 0), ValueError, "hidden_size must be greater than zero")
    _raises(lambda: nn.RNN(3, 4, dropout=1.5), ValueError, "dropout should be a number in range")
    _raises(lambda: nn.RNN(3, 4, nonlinearity="sig"), ValueError, "Unknown nonlinearity 'sig'")
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(3, 4, dropout=0.5)
    lstm = nn.LSTM(3, 4, num_layers=2)
    _raises(lambda: lstm(gs.randn(5, 2, 3, 1)), ValueError, "LSTM: Expected input to be 2D or 3D, got 4D")
    _raises(lambda: lstm(gs.randn(5, 2, 6)), RuntimeError, r"input.size\(-1\) must be equal to input_size")
    _raises(lambda: lstm(gs.randn(5, 2, 3), (gs.randn(2, 3, 4), gs.randn(2, 2, 4))), RuntimeError,
            r"Expected hidden\[0\] size \(2, 2, 4\), got \[2, 3, 4\]")
    _raises(lambda: lstm(gs.randn(5, 2, 3), (gs.randn(2, 2, 4), gs.randn(2, 3, 4))), RuntimeError,
            r"Expected hidden\[1\] size")
    _raises(lambda: lstm(gs.randn(5, 2, 3), (gs.randn(2, 4), gs.randn(2, 4))), RuntimeError,
            "For batched 3-D input, hx and cx should also be 3-D")
    _raises(lambda: lstm(gs.randn(5, 2, 3, dtype=gs.float64)), ValueError, "does not match weight dtype")
    gru = nn.GRU(3, 4)
    _raises(lambda: gru(gs.randn(5, 2, 3), gs.randn(1, 3, 4)), RuntimeError, r"Expected hidden size \(1, 2, 4\)")
    _raises(lambda: gru(gs.randn(5, 3), gs.randn(1, 1, 4)), RuntimeError, "For unbatched 2-D input, hx should also")
    _raises(lambda: gru(gs.randn(0, 2, 3)), RuntimeError, "Expected sequence length to be larger than 0")
    cell = nn.GRUCell(3, 4)
    _raises(lambda: cell(gs.randn(2, 2, 3)), ValueError, "GRUCell: Expected input to be 1D or 2D, got 3D")
    _raises(lambda: cell(gs.randn(2, 5)), RuntimeError, "input has inconsistent input_size: got 5 expected 3")
    _raises(lambda: cell(gs.randn(2, 3), gs.randn(3, 4)), RuntimeError,
            "Input batch size 2 doesn't match hidden0 batch size 3")
    _raises(lambda: cell(gs.randn(2, 3), gs.randn(2, 5)), RuntimeError,
            "hidden0 has inconsistent hidden_size: got 5, expected 4")
    _raises(lambda: cell(gs.randn(2, 3), gs.randn(2, 2, 4)), ValueError, "Expected hidden to be 1D or 2D")
    _raises(lambda: nn.LSTMCell(3, 4)(gs.randn(2, 3), gs.randn(2, 4)), TypeError, "must be tuple of Tensors")


def test_backward_twice_and_in_place_modification_raise():
    model = nn.LSTM(2, 3)
    x = gs.randn(4, 1, 2, requires_grad=True)
    out, _ = model(x)
    out.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        out.sum().backward()
    out, _ = model(x)
    with gs.no_grad():
        model.weight_hh_l0.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_no_graph_under_no_grad_and_output_is_not_aliased():
    model = nn.GRU(2, 3)
    with gs.no_grad():
        out, h_n = model(gs.randn(4, 1, 2))
    assert out.grad_fn is None and not out.requires_grad
    out, h_n = model(gs.randn(4, 1, 2))
    assert out.grad_fn.name() == "GruLayerBackward0"
    expected = out._data[-1].copy()
    out._data[...] = 0
    np.testing.assert_array_equal(h_n._data[0], expected)


def test_all_weights_and_flatten_parameters():
    model = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    assert len(model.all_weights) == 4 and model.all_weights[1][0] is model.weight_ih_l0_reverse
    model.flatten_parameters()


def _hook_log(lib, module_lib, name, x):
    log = []
    model = getattr(module_lib, name)(3, 4, batch_first=True)
    model.register_full_backward_pre_hook(lambda m, go: log.append(("pre", [None if g is None else tuple(g.shape)
                                                                             for g in go])))
    model.register_full_backward_hook(lambda m, gi, go: log.append(("full", [tuple(g.shape) for g in gi],
                                                                    [None if g is None else tuple(g.shape)
                                                                     for g in go])))
    out, _ = model(x)
    out.sum().backward()
    return log


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_module_backward_hooks_see_what_torch_shows(name):
    x = _array(2, 5, 3)
    assert _hook_log(gs, nn, name, gs.tensor(x, requires_grad=True)) == \
        _hook_log(torch, torch.nn, name, torch.tensor(x, requires_grad=True))


@pytest.mark.parametrize("name", ["RNN", "LSTM", "GRU"])
def test_unbatched_input_with_batch_first(name):
    ours, theirs = _pair(name, 2, 3, batch_first=True)
    _compare(ours, theirs, (_array(6, 2),))
