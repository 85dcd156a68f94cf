"""What ``gradscope run --nan/--inf`` keeps alive during a step: only what the localising re-run
needs (the root call's inputs, random state and output gradients), never every module's
activations or output gradients, so that peak memory does not grow with the model's activations."""
from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest

from gradscope.engines import get_engine
from gradscope.monitor.run import RunMonitor, RunOptions


def _library(name: str):
    if name == "torch":
        return pytest.importorskip("torch")
    import gradscope

    return gradscope


@pytest.mark.parametrize("engine_name", ["gradscope", "torch"])
def test_inner_output_gradients_are_freed_during_backward(engine_name: str) -> None:
    """In the first pass the inner modules are called before their parent is known to be the model;
    once it is, their calls (and the gradient hooks on their outputs) are dropped: by the time
    backward reaches the model's input, no inner module's output gradient is still referenced
    (only the model output's, which the localising re-run needs)."""
    lib = _library(engine_name)
    nn = lib.nn
    lib.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Sequential(nn.Linear(8, 8), nn.Tanh()), nn.Linear(8, 1))
    inner_outputs: list = []
    handles = [m.register_forward_hook(lambda module, args, output: inner_outputs.append(output))
               for m in model.modules() if m is not model]
    monitor = RunMonitor(RunOptions(nan=True, inf=True))
    monitor.attach(get_engine(engine_name))
    alive_at_input: list[int] = []
    try:
        for _ in range(2):
            inner_outputs.clear()
            grads: list[weakref.ref] = []
            x = lib.randn(3, 4, requires_grad=True)
            output = model(x)
            for inner in [o for o in inner_outputs if o is not output]:  # (the last layer's is the model's)
                inner.register_hook(lambda grad: grads.append(weakref.ref(grad)))
            inner_outputs.clear()

            def at_input(grad, grads=grads):
                gc.collect()
                alive_at_input.append(sum(ref() is not None for ref in grads))

            x.register_hook(at_input)
            output.sum().backward()
            model.zero_grad()
            del output, inner
        assert len(alive_at_input) == 2
        assert alive_at_input == [0, 0], f"inner output gradients still referenced at the input: {alive_at_input}"
    finally:
        monitor.close()
        for handle in handles:
            handle.remove()


def test_torch_activation_summary_is_nonfinite_exactly_when_the_activation_is() -> None:
    torch = pytest.importorskip("torch")
    engine = get_engine("torch")
    cases = {
        "finite": (torch.randn(5, 7), True),
        "large finite float32 (their squares overflow float32)": (torch.full((1000,), 3e38), True),
        "nan": (torch.tensor([1.0, float("nan")]), False),
        "inf": (torch.tensor([1.0, float("inf")]), False),
        "-inf and +inf": (torch.tensor([float("-inf"), float("inf")]), False),
        "bfloat16 with nan": (torch.tensor([1.0, float("nan")], dtype=torch.bfloat16), False),
        "float16": (torch.randn(4, 4).half(), True),
        "largest float32 of both signs (max - min overflows float32)": (torch.tensor([-3.4e38, 3.4e38]), True),
        "empty": (torch.zeros(0, 3), True),
        "complex": (torch.randn(3, dtype=torch.complex64), True),
        "complex with nan": (torch.tensor([1 + 1j, complex(float("nan"), 0)], dtype=torch.complex64), False),
        "float64 with -inf": (torch.tensor([0.5, float("-inf")], dtype=torch.float64), False),
    }
    for what, (tensor, finite) in cases.items():
        summary = engine.activation_summary(tensor.requires_grad_() if tensor.is_floating_point() else tensor)
        assert summary.numel() <= 2 and not summary.requires_grad, what  # a reduction, not a copy
        (square,) = engine.squared_norms([summary])
        assert math.isfinite(square) is finite, what


def test_native_activation_summary_is_the_tensor_itself() -> None:
    import gradscope as gs

    engine = get_engine("gradscope")
    tensor = gs.tensor(np.array([1.0, 2.0], dtype=np.float32))
    assert engine.activation_summary(tensor) is tensor


def test_torch_activation_summary_makes_no_copy_of_the_activation() -> None:
    """A summary of a 64 MiB activation raises the process's peak RSS by far less than the
    activation (a float64 sum would make a 128 MiB temporary copy)."""
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    code = (
        "import resource, torch\n"
        "from gradscope.engines import get_engine\n"
        "engine = get_engine('torch')\n"
        "x = torch.randn(16 * 1024 * 1024, requires_grad=True)\n"
        "engine.activation_summary(torch.randn(8, requires_grad=True))\n"  # warm-up: the kernels
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "for _ in range(3):\n"
        "    engine.activation_summary(x)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) < 16 * 1024, f"peak RSS grew by {result.stdout.strip()} KiB"
