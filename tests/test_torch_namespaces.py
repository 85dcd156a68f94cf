"""Small namespaces model code reaches for, against torch: ``jit`` (eager stand-ins), ``random``,
``special`` and the ``backends.cuda`` attention-kernel switches."""
from __future__ import annotations

import numpy as np
import pytest

import gradscope as gs

torch = pytest.importorskip("torch")


def test_jit_script_and_trace_run_the_python_code_unchanged() -> None:
    results = []
    for engine in (torch, gs):
        @engine.jit.script
        def fused_gelu(x):
            return x * 0.5 * (1.0 + engine.erf(x / 1.41421))

        layer = engine.nn.Linear(2, 2)
        traced = engine.jit.trace(layer, engine.ones(1, 2))
        assert engine.jit.is_scripting() is False
        results.append((fused_gelu(engine.tensor([0.3, -1.2])).numpy(), tuple(traced(engine.ones(1, 2)).shape)))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
    assert results[1][1] == results[0][1]
    assert gs.jit.ignore(len) is len and gs.jit.ignore(drop=True)(len) is len
    assert gs.jit.annotate(list, [1]) == [1] and gs.jit.unused(len) is len and gs.jit.export(len) is len


def test_random_namespace_seeds_and_forks_the_global_generator() -> None:
    gs.random.manual_seed(3)
    first = gs.rand(2).numpy()
    gs.manual_seed(3)
    np.testing.assert_array_equal(gs.rand(2).numpy(), first)
    with gs.random.fork_rng():
        inside = gs.rand(2).numpy()
    np.testing.assert_array_equal(gs.rand(2).numpy(), inside)
    assert gs.random.initial_seed() == 3


@pytest.mark.parametrize("name,args", [("expit", ()), ("logit", ()), ("erf", ()), ("expm1", ()), ("log1p", ()),
                                       ("logsumexp", (1,)), ("softmax", (1,)), ("log_softmax", (1,))])
def test_special_functions_match_torch(name: str, args: tuple) -> None:
    data = np.array([[0.2, 0.7], [0.4, 0.9]])
    want = getattr(torch.special, name)(torch.tensor(data), *args).numpy()
    np.testing.assert_allclose(getattr(gs.special, name)(gs.tensor(data), *args).numpy(), want, rtol=1e-12)


def test_attention_kernel_switches_are_recorded_like_torch() -> None:
    for engine in (torch, gs):
        before = engine.backends.cuda.flash_sdp_enabled()
        engine.backends.cuda.enable_flash_sdp(False)
        assert engine.backends.cuda.flash_sdp_enabled() is False
        engine.backends.cuda.enable_flash_sdp(before)
        assert engine.backends.cuda.math_sdp_enabled() is True
    with gs.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False):
        assert gs.backends.cuda.flash_sdp_enabled() is False
    assert gs.backends.cuda.flash_sdp_enabled() is True
