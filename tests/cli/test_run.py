"""``gradscope run SCRIPT``: plain training scripts written into tmp_path, on both engines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# One training script per engine. argv: steps, bad step (-1: none), mode.
# mode "forward": the bad batch overflows exp() in module "1" (Inf, then Inf - Inf = NaN);
# mode "backward": module "2" computes the norm of rows that are exactly zero at the bad step,
# so only the backward pass produces a non-finite value (sqrt'(0) = Inf, times 0 = NaN);
# mode "accumulate": two micro-batches per optimizer step; mode "clip": clip_grad_norm_ before
# step; mode "nooptim": manual updates without an optimizer.
NATIVE = '''
import sys
import gradscope as T
from gradscope import nn

def clip_grad_norm_(params, max_norm):
    return nn.utils.clip_grad_norm_(params, max_norm)

def manual_seed(seed):
    T.manual_seed(seed)
'''
TORCH = '''
import sys
import torch as T
from torch import nn

def clip_grad_norm_(params, max_norm):
    return nn.utils.clip_grad_norm_(params, max_norm)

def manual_seed(seed):
    T.manual_seed(seed)
    T.set_num_threads(1)
'''
BODY = '''

class Exp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc(x)
        return T.exp(h)


class RowNorm(nn.Module):
    def forward(self, x):
        return T.sqrt((x * x).sum(-1, keepdim=True))


def main():
    steps, bad, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), Exp(), RowNorm(), nn.Linear(1, 1))
    optimizer = None if mode == "nooptim" else T.optim.SGD(model.parameters(), lr=0.01)
    x = T.rand(16, 4)
    y = T.rand(16, 1)
    for step in range(steps):
        xb = x
        if step == bad and mode == "forward":
            xb = x * 1000.0
        if step == bad and mode == "backward":
            with T.no_grad():
                model[1].fc.weight.mul_(0.0)
                model[1].fc.bias.fill_(-200.0)
        if optimizer is not None:
            optimizer.zero_grad()
        else:
            model.zero_grad()
        micro = 2 if mode == "accumulate" else 1
        total = 0.0
        for part in range(micro):
            loss = ((model(xb) - y) ** 2).mean() / micro
            loss.backward()
            total += loss.item()
        if mode == "clip":
            clip_grad_norm_(list(model.parameters()), 0.01)
        if optimizer is not None:
            optimizer.step()
        else:
            with T.no_grad():
                for p in model.parameters():
                    p.sub_(0.01 * p.grad)
        print(f"step {step} loss {total:.6f}")


if __name__ == "__main__":
    main()
'''

ENGINES = ["gradscope", "torch"]


@pytest.fixture(params=ENGINES)
def script(request, tmp_path: Path) -> Path:
    if request.param == "torch":
        pytest.importorskip("torch")
    path = tmp_path / f"train_{request.param}.py"
    path.write_text((NATIVE if request.param == "gradscope" else TORCH) + BODY)
    return path


def _python(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def _json(gradscope, *args: str, code: int) -> dict:
    """``gradscope run --format json ARGS`` (options before SCRIPT: what follows it is the script's)."""
    return json.loads(gradscope("run", "--format", "json", *args, code=code).stdout)


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_healthy_run_prints_the_same_losses_and_logs_one_record_per_step(gradscope, script, tmp_path):
    plain = _python(str(script), "4", "-1", "plain", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    log = tmp_path / "steps.jsonl"
    result = gradscope("run", "--nan", "--inf", "--log", str(log), str(script), "4", "-1", "plain", code=0)
    assert result.stdout == plain.stdout
    records = _log(log)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert all(r["schema"] == "gradscope.run.step/1" and r["nonfinite"] is None for r in records)
    assert set(records[0]["layers"]) == {"0", "1.fc", "3"}
    assert list(records[0]["parameters"]) == ["0.weight", "0.bias", "1.fc.weight", "1.fc.bias", "3.weight", "3.bias"]
    printed = [float(line.split()[-1]) for line in plain.stdout.splitlines()]
    assert [round(r["loss"], 6) for r in records] == pytest.approx(printed, abs=2e-6)
    squares = sum(v * v for v in records[0]["parameters"].values())
    assert records[0]["total_grad_norm"] == pytest.approx(squares ** 0.5, rel=1e-6)
    assert "Gradient norm per layer" in result.stderr and "No findings" in result.stderr


def test_forward_nonfinite_from_a_bad_batch_at_step_k(gradscope, script):
    doc = _json(gradscope, "--nan", "--inf", str(script), "5", "2", "forward", code=1)
    assert doc["schema"] == "gradscope.run/1" and doc["status"] == "nonfinite" and doc["steps_run"] == 3
    origin = doc["first_nonfinite"]
    assert origin == {"step": 2, "rank": None, "phase": "forward", "module": "1", "node": "ExpBackward0",
                      "source": f"{script.name}:{_line_of(script, 'return T.exp(h)')}", "kind": "inf"}


def test_backward_only_nonfinite(gradscope, script):
    result = gradscope("run", "--nan", str(script), "5", "1", "backward")
    assert result.exit_code == 1, result.stderr
    assert "step 0 loss" in result.stdout and "step 1" not in result.stdout
    assert "SqrtBackward0" in result.stderr and "backward" in result.stderr
    doc = _json(gradscope, "--nan", str(script), "5", "1", "backward", code=1)
    origin = doc["first_nonfinite"]
    assert (origin["step"], origin["phase"], origin["module"], origin["node"], origin["kind"]) == \
        (1, "backward", "2", "SqrtBackward0", "inf")
    assert origin["source"] == f"{script.name}:{_line_of(script, 'return T.sqrt((x * x).sum(-1, keepdim=True))')}"


def test_without_flags_the_script_runs_on_and_exit_is_1(gradscope, script):
    result = gradscope("run", str(script), "4", "1", "backward", code=1)
    assert "step 3 loss" in result.stdout
    assert "run with --nan/--inf to locate it" in result.stderr


def test_gradient_accumulation_one_record_per_optimizer_step(gradscope, script, tmp_path):
    log = tmp_path / "acc.jsonl"
    result = gradscope("run", "--log", str(log), str(script), "3", "-1", "accumulate", code=0)
    records = _log(log)
    assert len(records) == 3
    printed = [float(line.split()[-1]) for line in result.stdout.splitlines()]
    assert [r["loss"] for r in records] == pytest.approx(printed, abs=2e-6)


def test_clip_grad_norm_before_step_logs_the_norms_before_clipping(gradscope, script, tmp_path):
    log = tmp_path / "clip.jsonl"
    gradscope("run", "--log", str(log), str(script), "2", "-1", "clip", code=0)
    assert all(r["total_grad_norm"] > 0.05 for r in _log(log))  # clip_grad_norm_(..., 0.01) came later


def test_clip_option_logs_norms_before_and_after(gradscope, script, tmp_path):
    log = tmp_path / "clip.jsonl"
    gradscope("run", "--clip", "0.01", "--log", str(log), str(script), "2", "-1", "plain", code=0)
    for record in _log(log):
        assert record["total_grad_norm"] > 0.05
        assert record["clipped"]["total_grad_norm"] == pytest.approx(0.01, rel=1e-4)
        assert set(record["clipped"]["parameters"]) == set(record["parameters"])


def test_script_without_optimizer_one_record_per_backward(gradscope, script, tmp_path):
    log = tmp_path / "noopt.jsonl"
    gradscope("run", "--nan", "--log", str(log), str(script), "3", "-1", "nooptim", code=0)
    assert [r["step"] for r in _log(log)] == [0, 1, 2]
    doc = _json(gradscope, "--nan", str(script), "4", "2", "backward_nooptim", code=0)
    assert doc["steps_run"] == 4


def test_script_arguments_argv_path_and_main(gradscope, tmp_path):
    (tmp_path / "helper_mod.py").write_text("VALUE = 42\n")
    script = tmp_path / "show.py"
    script.write_text(textwrap.dedent('''
        import sys, os
        import helper_mod
        print(sys.argv)
        print(os.path.basename(__file__), __name__, helper_mod.VALUE)
        print(sys.path[0] == os.path.dirname(os.path.realpath(__file__)))
    '''))
    before = (sys.argv[:], sys.path[:], sys.modules["__main__"])
    result = gradscope("run", str(script), "--lr", "0.1", "-x", "pos", code=0)
    assert result.stdout.splitlines() == [repr([str(script), "--lr", "0.1", "-x", "pos"]), "show.py __main__ 42",
                                          "True"]
    assert (sys.argv, sys.path, sys.modules["__main__"]) == before
    assert "no step completed" in result.stderr


def test_sys_exit_code_passes_through(gradscope, tmp_path):
    script = tmp_path / "quit.py"
    script.write_text("import sys\nprint('bye')\nsys.exit(5)\n")
    assert gradscope("run", str(script), code=5).stdout == "bye\n"
    script.write_text("import sys\nsys.exit('fatal: no data')\n")
    assert "fatal: no data" in gradscope("run", str(script), code=1).stderr


def test_script_exception_traceback_and_exit_3(gradscope, tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("def f():\n    raise ValueError('bad config')\n\nf()\n")
    result = gradscope("run", str(script), code=3)
    assert result.stderr.startswith("Traceback (most recent call last):\n"
                                    f'  File "{script}", line 4, in <module>\n')
    assert "ValueError: bad config" in result.stderr
    assert "gradscope" not in result.stderr.split("ValueError")[0].replace("gradscope run", "")


def test_missing_script_is_a_model_error(gradscope, tmp_path):
    result = gradscope("run", str(tmp_path / "nope.py"), code=3)
    assert "no such script" in result.stderr


def test_json_keeps_stdout_for_the_document(gradscope, script):
    result = gradscope("run", "--format", "json", str(script), "2", "-1", "plain", code=0)
    doc = json.loads(result.stdout)
    assert doc["status"] == "ok" and doc["steps_run"] == 2 and doc["first_nonfinite"] is None
    assert "step 1 loss" in result.stderr


def test_python_dash_m_gradscope_run(script, tmp_path):
    result = _python("-m", "gradscope", "run", "--nan", "--inf", str(script), "3", "1", "forward", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "ExpBackward0" in result.stderr
    assert result.stdout == "step 0 loss " + result.stdout.split("step 0 loss ")[1]


def test_torch_is_not_imported_for_a_native_script(tmp_path):
    script = tmp_path / "native.py"
    script.write_text("import sys\nimport gradscope\nprint('torch' in sys.modules)\n")
    result = _python("-m", "gradscope", "run", str(script), cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "False\n", result.stderr


def _line_of(script: Path, text: str) -> int:
    lines = script.read_text().splitlines()
    return next(index for index, line in enumerate(lines, 1) if line.strip() == text)


def test_ctrl_c_prints_the_summary_keeps_the_log_and_exits_130(gradscope, tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(textwrap.dedent('''
        import os, signal
        import gradscope as gs
        from gradscope import nn
        model = nn.Linear(3, 1)
        optimizer = gs.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            optimizer.zero_grad()
            model(gs.ones(2, 3)).sum().backward()
            optimizer.step()
        os.kill(os.getpid(), signal.SIGINT)
    '''))
    log = tmp_path / "steps.jsonl"
    result = gradscope("run", "--log", str(log), str(script), code=130)
    assert "interrupted" in result.stderr and "3 steps" in result.stderr
    assert [r["step"] for r in _log(log)] == [0, 1, 2]


def test_update_phase_names_the_parameter(gradscope, script, tmp_path):
    """Gradients of 1e3 times a learning rate of 1e36: the first update overflows to Inf."""
    header = script.read_text().split("\n\n\nclass Exp")[0]
    update = tmp_path / "update.py"
    update.write_text(header + textwrap.dedent('''

        manual_seed(0)
        model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
        optimizer = T.optim.SGD(model.parameters(), lr=1e36)
        for step in range(3):
            optimizer.zero_grad()
            loss = model(T.ones(4, 2)).sum() * 1000.0
            loss.backward()
            optimizer.step()
            print(step)
    '''))
    doc = _json(gradscope, "--inf", str(update), code=1)
    assert doc["first_nonfinite"] == {"step": 0, "rank": None, "phase": "update", "module": "0", "node": "SGD.step",
                                      "source": None, "kind": "inf"}
    assert doc["steps_run"] == 2


def test_backward_nonfinite_in_the_loss_computation_names_the_node(gradscope, script, tmp_path):
    header = script.read_text().split("\n\n\nclass Exp")[0]
    loss_side = tmp_path / "loss_side.py"
    loss_side.write_text(header + textwrap.dedent('''

        manual_seed(0)
        model = nn.Linear(2, 2)
        optimizer = T.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            optimizer.zero_grad()
            out = model(T.ones(4, 2))
            distance = T.sqrt(((out - out.detach()) ** 2).sum())  # sqrt of an exact zero
            loss = out.sum() + distance
            loss.backward()
            optimizer.step()
            print(step)
    '''))
    doc = _json(gradscope, "--nan", "--inf", str(loss_side), code=1)
    origin = doc["first_nonfinite"]
    assert (origin["step"], origin["phase"], origin["module"], origin["node"], origin["kind"]) == \
        (0, "backward", None, "SqrtBackward0", "inf")


def test_forward_nonfinite_in_a_parameter_free_first_module_names_the_node(gradscope, script, tmp_path):
    """The data does not require grad and the first module has no parameters: the re-run still
    records the node that divided by zero."""
    header = script.read_text().split("\n\n\nclass Exp")[0]
    normalize = tmp_path / "normalize.py"
    normalize.write_text(header + textwrap.dedent('''

        class Normalize(nn.Module):
            def forward(self, x):
                return x / x.norm(dim=1, keepdim=True)


        manual_seed(0)
        model = nn.Sequential(Normalize(), nn.Linear(4, 2))
        optimizer = T.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x = T.ones(3, 4) * (0.0 if step == 1 else 1.0)
            optimizer.zero_grad()
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
            print(step)
    '''))
    doc = _json(gradscope, "--nan", str(normalize), code=1)
    assert doc["first_nonfinite"] == {"step": 1, "rank": None, "phase": "forward", "module": "0",
                                      "node": "DivBackward0", "kind": "nan",
                                      "source": f"{normalize.name}:{_line_of(normalize, 'return x / x.norm(dim=1, keepdim=True)')}"}


def test_a_masked_out_nonfinite_activation_stops_the_run(gradscope, script, tmp_path):
    """log() of negative values is NaN, but where() drops it: the outputs, loss and gradients stay
    finite. The module that returned it is still the origin."""
    header = script.read_text().split("\n\n\nclass Exp")[0]
    masked = tmp_path / "masked.py"
    masked.write_text(header + textwrap.dedent('''

        class Log(nn.Module):
            def forward(self, h):
                return T.log(h)


        class Masked(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(T.ones(4))
                self.log = Log()

            def forward(self, x):
                h = x * self.scale
                return T.where(h > 0, self.log(h), h * 0.0)


        manual_seed(0)
        model = nn.Sequential(Masked(), nn.Linear(4, 1))
        optimizer = T.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            x = T.ones(2, 4) * (-1.0 if step == 1 else 1.0)
            optimizer.zero_grad()
            loss = (model(x) ** 2).mean()
            loss.backward()
            optimizer.step()
            print(step, loss.item())
    '''))
    plain = _python(str(masked), cwd=tmp_path)
    assert plain.returncode == 0 and "nan" not in plain.stdout
    doc = _json(gradscope, "--nan", str(masked), code=1)
    assert doc["first_nonfinite"] == {"step": 1, "rank": None, "phase": "forward", "module": "0.log",
                                      "node": "LogBackward0", "kind": "nan",
                                      "source": f"{masked.name}:{_line_of(masked, 'return T.log(h)')}"}
    assert doc["steps_run"] == 2


def test_backward_on_a_non_scalar_has_no_loss(gradscope, tmp_path):
    script = tmp_path / "vector.py"
    script.write_text(textwrap.dedent('''
        import gradscope as gs
        from gradscope import nn
        model = nn.Linear(3, 2)
        out = model(gs.ones(4, 3))
        out.backward(gs.ones(4, 2))
    '''))
    doc = _json(gradscope, "--nan", str(script), code=0)
    # weight gradient 4 everywhere (2x3), bias gradient 4 (2): total sqrt(6 * 16 + 2 * 16)
    assert doc["history"] == [{"step": 0, "loss": None, "total_grad_norm": pytest.approx(128 ** 0.5, rel=1e-6),
                               "skipped": False, "skip": None}]
    assert doc["status"] == "ok"


def test_a_failure_inside_the_monitor_is_an_internal_error(gradscope, tmp_path, monkeypatch):
    from gradscope.monitor import run as run_monitor

    monkeypatch.setattr(run_monitor, "all_finite", None)  # calling it fails inside the monitor
    script = tmp_path / "fine.py"
    script.write_text("import gradscope as gs\nfrom gradscope import nn\n"
                      "nn.Linear(2, 1)(gs.ones(1, 2)).sum().backward()\n")
    result = gradscope("run", str(script), code=4)
    assert "internal error: TypeError: 'NoneType' object is not callable" in result.stderr


def _raise_through(frames: list[str]) -> BaseException:
    """An exception whose traceback passes through functions compiled under ``frames`` (outermost first)."""
    namespace: dict = {}
    for depth, filename in enumerate(frames):
        inner = f"f{depth + 1}()" if depth + 1 < len(frames) else "raise RuntimeError('boom')"
        exec(compile(f"def f{depth}():\n    {inner}\n", filename, "exec"), namespace)
    try:
        namespace["f0"]()
    except RuntimeError as exc:
        return exc
    raise AssertionError("nothing raised")


def test_who_raised_is_decided_by_the_innermost_gradscope_or_user_frame(tmp_path):
    import sysconfig

    import gradscope
    from gradscope.cli.run import _raised_by_monitor

    package = Path(gradscope.__file__).resolve().parent
    user, library = str(tmp_path / "train.py"), str(Path(sysconfig.get_paths()["purelib"]) / "torch" / "x.py")
    engines, monitor = str(package / "engines" / "torch.py"), str(package / "monitor" / "run.py")
    # gradscope's adapter failed inside a library call it made: gradscope's fault
    assert _raised_by_monitor(_raise_through([user, monitor, engines, library]))
    # the script's own callback (a forward, a hook) failed when gradscope called it: the script's fault
    assert not _raised_by_monitor(_raise_through([user, monitor, user, library]))
    assert not _raised_by_monitor(_raise_through([user, library]))
    # code without a source file (a dataclass's generated __setattr__, <frozen importlib._bootstrap>)
    # is the standard library's, not the script's
    assert _raised_by_monitor(_raise_through([user, monitor, "<string>"]))
    assert _raised_by_monitor(_raise_through([user, engines, "<frozen importlib._bootstrap>", library]))
    # gradscope's wrapper around the script's backward() passed the library's complaint on
    import types

    from gradscope._tool.frames import passes_call_through

    passing = _raise_through([user, monitor, library])
    wrapper = passing.__traceback__.tb_next.tb_next.tb_frame.f_code
    assert _raised_by_monitor(passing)
    passes_call_through(types.FunctionType(wrapper, {}))
    assert not _raised_by_monitor(passing)



def test_an_error_in_the_scripts_loss_under_the_torch_adapters_mode_is_the_scripts(gradscope, tmp_path):
    """With --nan the torch adapter's function mode passes on every call of the loss computation:
    what such a call raises is the script's error (exit 3, not an internal error), and the mode's
    frame is not in the script's traceback."""
    pytest.importorskip("torch")
    script = tmp_path / "loss.py"
    script.write_text("import torch\nfrom torch import nn\nimport torch.nn.functional as F\n\n"
                      "model = nn.Sequential(nn.Linear(4, 3))\n"
                      "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                      "for step in range(2):\n"
                      "    target = torch.zeros(8 if step == 0 else 5, dtype=torch.long)\n"
                      "    loss = F.cross_entropy(model(torch.ones(8, 4)), target)\n"
                      "    optimizer.zero_grad()\n"
                      "    loss.backward()\n"
                      "    optimizer.step()\n")
    result = gradscope("run", "--nan", str(script), code=3)
    assert "the script raised ValueError: Expected input batch_size (8) to match target batch_size (5)" \
        in result.stderr
    assert 'loss.py", line 9, in <module>' in result.stderr
    assert "internal error" not in result.stderr
    assert os.path.join("gradscope", "engines") not in result.stderr

SPLIT_BODY = '''

class Halves(nn.Module):
    def forward(self, x):
        return (x * 2.0).split(4, dim=-1)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 8)
        self.halves = Halves()
        self.head = nn.Linear(4, 1)

    def forward(self, x, bad):
        used, unused = self.halves(self.fc(x))
        if bad:
            used = T.sqrt(used * 0.0)
        return self.head(used)


manual_seed(0)
model = Net()
optimizer = T.optim.SGD(model.parameters(), lr=0.01)
x = T.rand(16, 4)
for step in range(4):
    optimizer.zero_grad()
    loss = model(x, step == 2).pow(2).mean()
    loss.backward()
    optimizer.step()
'''


@pytest.mark.parametrize("engine", ENGINES)
def test_a_module_output_without_gradient_does_not_disturb_the_localisation(gradscope, tmp_path, engine):
    """The unused half of a split gets no gradient: its hooks are called with None (both engines,
    as PyTorch); the backward NaN after it is still found, with its node and line."""
    if engine == "torch":
        pytest.importorskip("torch")
    script = tmp_path / f"split_{engine}.py"
    script.write_text((NATIVE if engine == "gradscope" else TORCH) + SPLIT_BODY)
    doc = _json(gradscope, "--nan", str(script), code=1)
    origin = doc["first_nonfinite"]
    assert (origin["step"], origin["phase"], origin["node"]) == (2, "backward", "SqrtBackward0")
    assert origin["source"] == f"{script.name}:{_line_of(script, 'used = T.sqrt(used * 0.0)')}"
