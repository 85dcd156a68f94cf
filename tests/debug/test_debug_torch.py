"""The debugger on PyTorch models: the same stops and verdicts as on gradscope's engine, edits
equal to what a plain PyTorch module backward hook returning them gives, and observing leaves
every ``.grad`` (and in-place layers) as they are without it."""
from __future__ import annotations

import io
import os
import re
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from click.testing import CliRunner

from gradscope.cli import cli
from gradscope.debug import DebuggerShell, TextPresenter, run_debug_step

torch = pytest.importorskip("torch")
nn = torch.nn

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"


class Tanh2(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.act = Tanh2()
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class InPlace(nn.Module):
    """In-place ReLU, ``x += y`` after a module, and an argument forward ignores."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.relu = nn.ReLU(inplace=True)
        self.skip = nn.Linear(3, 5)
        self.ignored = nn.Linear(3, 5)
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        h = self.fc1(x)
        h += self.skip(x)
        h = self.relu(h)
        self.ignored(x.detach())
        return self.fc2(h)


class Gate(nn.Module):
    """Two of its nodes send gradient to its argument (``tanh(x) * x``)."""

    def forward(self, x):
        return torch.tanh(x) * x


class Residual(nn.Module):
    """The gate's argument also feeds a residual connection outside it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(3, 5)
        self.gate = Gate()
        self.fc2 = nn.Linear(5, 2)

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(self.gate(h) + h)


def workload(cls: type, seed: int = 0) -> tuple[Any, Callable[[], Any]]:
    torch.manual_seed(seed)
    model = cls()
    x, y = torch.randn(4, 3), torch.randn(4, 2)
    return model, lambda: ((model(x) - y) ** 2).mean()


def script(cls: type, commands: str, *conditions: str) -> tuple[str, str, Any]:
    model, loss = workload(cls)
    out = io.StringIO()
    shell = DebuggerShell(TextPresenter(out), commands=commands.split(";"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the debugger's own hooks must not warn
        outcome = run_debug_step(model, loss, shell, conditions=list(conditions))
    return outcome, out.getvalue(), model


def grads(model: Any) -> dict[str, np.ndarray | None]:
    return {name: None if p.grad is None else p.grad.detach().numpy().copy() for name, p in model.named_parameters()}


def _plain_run(cls: type, phase: str, module_path: str, edit: Callable) -> dict:
    """The oracle: PyTorch's own module full backward hook returning the edit."""
    model, loss = workload(cls)
    target = model.get_submodule(module_path)
    if phase == "post":
        handle = target.register_full_backward_hook(lambda m, grad_input, grad_output: edit(grad_input))
    else:
        handle = target.register_full_backward_pre_hook(lambda m, grad_output: edit(grad_output))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        loss().backward()
    handle.remove()
    return grads(model)


def _each(change: Callable) -> Callable:
    return lambda tensors: tuple(None if t is None else change(t) for t in tensors)


def _clip_norm(limit: float) -> Callable:
    def edit(tensors: tuple) -> tuple:
        total = float(np.sqrt(sum(float((t.double() ** 2).sum()) for t in tensors if t is not None)))
        factor = limit / (total + 1e-6)
        return tuple(None if t is None else (t * factor if factor < 1 else t) for t in tensors)
    return edit


EDITS = [
    ("scale 0.5", _each(lambda t: t * 0.5)),
    ("clip 0.05", _clip_norm(0.05)),
    ("clip 0.01 value", _each(lambda t: t.clamp(-0.01, 0.01))),
    ("zero", _each(torch.zeros_like)),
    ("set (grad_input or grad_output)[0] * 3", _each(lambda t: t * 3)),
]


@pytest.mark.parametrize("phase, module_path", [("post", "act"), ("pre", "fc2"), ("pre", "act")])
@pytest.mark.parametrize("command, edit", EDITS, ids=[e[0] for e in EDITS])
def test_edit_matches_a_torch_module_hook(phase: str, module_path: str, command: str, edit: Callable) -> None:
    outcome, text, model = script(Mlp, f"{command}; finish", f"module {module_path} {phase}")
    assert outcome == "finished" and "error" not in text, text
    expected = _plain_run(Mlp, phase, module_path, edit)
    for name, value in grads(model).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("command, edit", EDITS[:2] + EDITS[3:4], ids=[e[0] for e in EDITS[:2] + EDITS[3:4]])
def test_grad_input_edit_with_several_senders(command: str, edit: Callable) -> None:
    """grad_input summed over two nodes of the module, and a residual sending to the same tensor:
    the edit replaces only the module's part."""
    outcome, text, model = script(Residual, f"{command}; finish", "module gate post")
    assert outcome == "finished" and "error" not in text, text
    expected = _plain_run(Residual, "post", "gate", edit)
    for name, value in grads(model).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-7, err_msg=name)


def test_node_edit_on_a_torch_node() -> None:
    outcome, text, model = script(Mlp, "scale 0.25; finish", "node TanhBackward0")
    assert outcome == "finished" and "error" not in text, text
    reference, loss = workload(Mlp)
    value = loss()
    stack, node = [value.grad_fn], None
    while stack:
        node = stack.pop()
        if node.name() == "TanhBackward0":
            break
        stack.extend(child for child, _ in node.next_functions if child is not None)
    node.register_hook(lambda grad_inputs, grad_outputs: tuple(g * 0.25 for g in grad_inputs))
    value.backward()
    for name, grad in grads(model).items():
        np.testing.assert_allclose(grad, grads(reference)[name], rtol=1e-6, err_msg=name)


def test_stepping_through_in_place_layers_leaves_every_grad_as_without_it() -> None:
    outcome, text, model = script(InPlace, "; ".join(["step"] * 11))
    assert outcome == "finished", text
    assert "error" not in text and "inplace" not in text, text
    for name in ("relu", "skip", "fc2", "fc1"):
        assert f"> stopped at {name} (" in text and f"{name} ({type(model.get_submodule(name)).__name__}) · post" \
            in text, name
    reference, loss = workload(InPlace)
    loss().backward()
    expected = grads(reference)
    assert expected["ignored.weight"] is None
    for name, grad in grads(model).items():
        if expected[name] is None:
            assert grad is None, name
        else:
            np.testing.assert_array_equal(grad, expected[name], err_msg=name)


def test_quit_restores_a_torch_model() -> None:
    model, loss = workload(Mlp)
    for param in model.parameters():
        param.grad = torch.full_like(param, 0.5)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    shell = DebuggerShell(TextPresenter(io.StringIO()), commands=["zero", "continue", "quit"])
    assert run_debug_step(model, loss, shell, conditions=["module fc2 post", "module fc1 post"]) == "quit"
    for name, param in model.named_parameters():
        assert torch.equal(param.detach(), before[name]), name
        assert torch.equal(param.grad, torch.full_like(param, 0.5)), name
    assert not torch.nn.modules.module._global_forward_hooks
    assert not torch.nn.modules.module._global_forward_pre_hooks


def _run(*args: str) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _shape_of_transcript(text: str) -> list[str]:
    """The transcript without numbers and file names: what must agree between the engines."""
    kept = []
    for line in text.splitlines():
        if line.startswith(("  loss:", "  source:", "  note:")):
            continue
        kept.append(re.sub(r"-?\d[\d.e+-]*", "#", line.split("│")[0].rstrip()))
    return kept


@pytest.mark.parametrize("sample, args", [
    ("mlp", ("--commands", "step; step; next; step; next; break module 0 post; continue; where; continue; table")),
    ("nan_norm", ("--step", "3", "--break", "nan", "--commands", "where; continue; where; quit")),
    ("nan_forward", ("--step", "5", "--break", "forward nan", "--commands", "where; continue; where; quit")),
    ("cnn", ("--commands", "finish")),
    ("transformer", ("--break", "type Linear", "--commands", "where; next; where; quit")),
    ("rnn_exploding", ("--break", "module recurrent[27] post", "--commands", "where; quit")),
])
def test_the_same_session_on_both_engines(sample: str, args: tuple) -> None:
    native = _run("debug", str(SAMPLES / f"{sample}.py"), *args)
    on_torch = _run("debug", str(SAMPLES / "torch_models" / f"{sample}.py"), *args)
    assert native.exit_code == on_torch.exit_code == 0, (native.stderr, on_torch.stderr)
    assert _shape_of_transcript(on_torch.stdout) == _shape_of_transcript(native.stdout)


def test_forward_nan_stops_at_the_torch_log_line() -> None:
    sample = SAMPLES / "torch_models" / "nan_forward.py"
    result = _run("debug", str(sample), "--step", "5", "--break", "forward nan", "--commands", "where; quit")
    line = next(i for i, text in enumerate(sample.read_text().splitlines(), 1) if "torch.log(" in text)
    assert result.stdout.startswith("> stopped at LogBackward0 in features (LogFeatures) · forward: a line of "
                                    "forward code made nan")
    assert "  node:    LogBackward0 (made the value)\n" in result.stdout
    assert f"  source:  {os.path.relpath(sample)}:{line}\n" in result.stdout
    assert "this line made nan: return torch.log(counts + 1.0)" in result.stdout


def test_graph_draws_the_grad_fn_graph() -> None:
    result = _run("debug", str(SAMPLES / "torch_models" / "mlp.py"), "--break", "module 2 post", "--commands", "graph; quit")
    assert result.exit_code == 0, result.stderr
    assert "AddmmBackward0 [32, 32] · 2 ✓ ◀ here" in result.stdout
    assert "AccumulateGrad 2.weight [32, 32] · 2 ✓ ◀ here" in result.stdout


def test_breakpoint_on_inside_a_torch_training_loop() -> None:
    from gradscope.debug import breakpoint_on

    model, loss = workload(Mlp)
    out = io.StringIO()
    session = breakpoint_on(model, "module fc1 post", commands=["where", "continue", "zero", "continue"], stdout=out)
    try:
        for _ in range(2):
            model.zero_grad()
            loss().backward()
            with torch.no_grad():
                for param in model.parameters():
                    param -= 0.1 * param.grad
    finally:
        session.detach()
    text = out.getvalue()
    assert text.count("> stopped at fc1 (Linear) · post: grad_input known, after its backward") == 2
    assert "  note:    no input of this module requires grad: grad_input is None" in text
    assert "error: grad_input is all None here: nothing to edit" in text
    assert not torch.nn.modules.module._global_forward_hooks
