"""GradientNormTaps: per-node squared gradient norms during backward, on both engines.

gradscope's engine taps its nodes with observers (arrays, no hook handle); the base version,
used for torch, is a post-hook per node. Both must give the same sums, observe only, and be gone
after close().
"""
from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest

import gradscope as gs
from gradscope.engines import get_engine

LIBRARIES = ["gradscope", "torch"]


def _library(name: str):
    return gs if name == "gradscope" else pytest.importorskip("torch")


def _graph(lib, scale: float = 1.0):
    """``loss = sum(tanh(x @ w) * f)``: the Mm node has two input slots, the Mul node a tensor and
    a leaf input; ``scale`` multiplies ``x`` (NaN makes non-finite gradients)."""
    x = lib.tensor(np.linspace(-1.0, 1.0, 6).reshape(2, 3) * scale, dtype=lib.float32, requires_grad=True)
    w = lib.tensor(np.linspace(0.5, -0.5, 12).reshape(3, 4), dtype=lib.float32, requires_grad=True)
    f = lib.tensor(np.array([1.0, -2.0, 0.5, 3.0]), dtype=lib.float32, requires_grad=True)
    h = (x @ w).tanh()
    out = h * f
    return x, w, f, h, out


def _squares(*values) -> float:
    return float(sum(np.sum(np.asarray(v, dtype=np.float64) ** 2) for v in values))


@pytest.mark.parametrize("name", LIBRARIES)
def test_taps_sum_the_squared_norms_of_the_chosen_slots(name):
    lib = _library(name)
    engine = get_engine(name)
    x, w, f, h, out = _graph(lib)
    h.retain_grad()
    out.retain_grad()
    got: list = []
    taps = engine.gradient_norm_taps()
    taps.add(out.grad_fn, (0,), (0, 1), lambda *numbers: got.append(("mul",) + numbers))
    taps.add(out.grad_fn, (), (1,), lambda *numbers: got.append(("mul-leaf",) + numbers))  # a second tap, same node
    mm = h.grad_fn.next_functions[0][0]
    taps.add(mm, (0,), (0, 1), lambda *numbers: got.append(("mm",) + numbers))
    out.sum().backward()
    taps.close()
    numpy = {"out": out.grad.detach().numpy(), "h": h.grad.detach().numpy(), "f": f.grad.detach().numpy(),
             "x": x.grad.detach().numpy(), "w": w.grad.detach().numpy()}
    expected = {"mul": (_squares(numpy["out"]), _squares(numpy["h"], numpy["f"]), 0),
                "mul-leaf": (None, _squares(numpy["f"]), 0),
                "mm": (None, _squares(numpy["x"], numpy["w"]), 0)}
    # the Mm node's output gradient is the tanh node's input gradient, which is not retained here
    assert sorted(kind for kind, *_ in got) == ["mm", "mul", "mul-leaf"]
    for kind, output_square, input_square, nonfinite in got:
        want_output, want_input, want_nonfinite = expected[kind]
        if kind == "mm":
            assert output_square is not None and output_square > 0
        else:
            assert output_square == (None if want_output is None else pytest.approx(want_output, rel=1e-6))
        assert input_square == pytest.approx(want_input, rel=1e-6)
        assert nonfinite == want_nonfinite


@pytest.mark.parametrize("name", LIBRARIES)
def test_taps_count_nonfinite_entries(name):
    lib = _library(name)
    engine = get_engine(name)
    x, w, f, h, out = _graph(lib)
    got: list = []
    single: list = []
    taps = engine.gradient_norm_taps()
    taps.add(out.grad_fn, (0,), (0, 1), lambda *numbers: got.append(numbers))
    taps.add(out.grad_fn, (0,), (1,), lambda *numbers: single.append(numbers))  # (one gradient each way)
    out.retain_grad()
    (out * lib.tensor([math.nan, 1.0, math.inf, 1.0])).sum().backward()
    taps.close()
    (output_square, input_square, nonfinite), = got
    assert math.isnan(output_square) and math.isnan(input_square)
    # grad_output has one NaN and one Inf per row (2 rows); both inputs get a NaN and an Inf per row
    assert nonfinite == 4 + 4 + 2
    (output_square, input_square, nonfinite), = single
    assert math.isnan(output_square) and math.isnan(input_square)
    assert nonfinite == 4 + int((~np.isfinite(f.grad.detach().numpy())).sum()) == 4 + 2


@pytest.mark.parametrize("name", LIBRARIES)
def test_taps_observe_only_and_are_gone_after_close(name):
    lib = _library(name)
    engine = get_engine(name)

    def gradients(tapped: bool, retain: bool = False):
        x, w, f, h, out = _graph(lib)
        got: list = []
        taps = engine.gradient_norm_taps()
        if tapped:
            taps.add(out.grad_fn, (0,), (0, 1), lambda *numbers: got.append(numbers))
            taps.add(h.grad_fn, (0,), (0,), lambda *numbers: got.append(numbers))
        loss = out.sum()
        loss.backward(retain_graph=retain)
        taps.close()
        return [t.grad.detach().numpy().copy() for t in (x, w, f)], got, loss, taps

    plain, _, _, _ = gradients(False)
    tapped, got, loss, taps = gradients(True, retain=True)
    for a, b in zip(plain, tapped):
        np.testing.assert_array_equal(a, b)
    assert len(got) == 2
    loss.backward()  # the retained graph runs again: the closed taps see nothing
    assert len(got) == 2
    taps.close()  # (idempotent)


def test_native_taps_run_after_post_hooks_and_do_not_keep_the_graph():
    """An observer sees the gradients that leave the node (a post-hook's replacement included)
    and holds its node weakly: the graph is freed after backward, before close()."""
    engine = get_engine("gradscope")
    x, w, f, h, out = _graph(gs)
    got: list = []
    taps = engine.gradient_norm_taps()
    taps.add(out.grad_fn, (), (1,), lambda *numbers: got.append(numbers))
    out.grad_fn.register_hook(lambda grad_inputs, grad_outputs: (grad_inputs[0], grad_inputs[1] * 0.0))
    node = weakref.ref(out.grad_fn)
    out.sum().backward()
    assert got == [(None, 0.0, 0)]
    assert f.grad.abs().sum().item() == 0.0
    del h, out
    gc.collect()
    assert node() is None
    taps.close()


def test_native_taps_under_autograd_grad_and_anomaly_mode():
    engine = get_engine("gradscope")
    for anomaly in (False, True):
        x, w, f, h, out = _graph(gs)
        got: list = []
        taps = engine.gradient_norm_taps()
        taps.add(out.grad_fn, (0,), (1,), lambda *numbers: got.append(numbers))
        with gs.autograd.set_detect_anomaly(anomaly):
            grad_f, = gs.autograd.grad(out.sum(), [f])
        taps.close()
        assert got == [(pytest.approx(8.0), pytest.approx(_squares(grad_f.numpy()), rel=1e-6), 0)]
