"""The pieces under the stack cases, in one process and fast: gradient scalers that did not scale,
the loss-computation recorder, forward redirection, the process follower and the joining reducer."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from gradscope.engines import get_engine
from gradscope.monitor.run import RunMonitor, RunOptions, StopRun

torch = pytest.importorskip("torch")


def _monitor(**options) -> RunMonitor:
    monitor = RunMonitor(RunOptions(**options), main_globals=lambda: {})
    monitor.attach(get_engine("torch"))
    return monitor


def _sqrt_at_zero_step(model, scaler, optimizer) -> None:
    """A backward-only NaN: sqrt'(0) times a zero gradient (the forward is finite)."""
    optimizer.zero_grad()
    hidden = model(torch.ones(1, 2))
    loss = (torch.sqrt(hidden * 0) * 0).sum() + hidden.sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


@pytest.mark.parametrize("make_scaler", [
    lambda: torch.amp.GradScaler("cpu", enabled=False),
    lambda: torch.amp.GradScaler("cuda"),  # no CUDA here: it disables itself
], ids=["enabled=False", "self-disabled"])
def test_a_scaler_that_did_not_scale_leaves_gradient_checks_on(make_scaler):
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA (the scaler must disable itself)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scaler = make_scaler()
    assert not scaler.is_enabled()
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    monitor = _monitor(nan=True)
    try:
        with pytest.raises(StopRun):
            _sqrt_at_zero_step(model, scaler, optimizer)
    finally:
        monitor.close()
    origin = monitor.origin
    assert (origin.step, origin.phase, origin.module, origin.node) == (0, "backward", None, "SqrtBackward0")
    assert origin.source == f"tests/stacks/test_seams.py:{_sqrt_at_zero_step.__code__.co_firstlineno + 4}"
    assert all(torch.isfinite(p).all() for p in model.parameters())  # stopped before AdamW's update


def test_an_enabled_scaler_that_skips_the_step_is_still_not_a_finding():
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    monitor = _monitor(nan=True, inf=True)
    try:
        _sqrt_at_zero_step(model, scaler, optimizer)
    finally:
        monitor.close()
    assert monitor.origin is None and [record.skipped for record in monitor.history] == [True]


def test_recorder_keeps_loss_operations_with_their_line_and_leaves_the_mode_stack_as_it_was():
    from gradscope._tool.frames import is_user_file

    recorder = get_engine("torch").record_graph_ops(is_user_file, 3)
    depth = torch._C._len_torch_function_stack()
    x = torch.ones(2, requires_grad=True)
    recorder.start()
    y = x * 2; z = y.sum() / torch.zeros(()).sum()  # noqa: E702 - one line, two operations
    line = sys._getframe().f_lineno - 1
    recorder.stop()
    recorder.stop()  # harmless
    assert torch._C._len_torch_function_stack() == depth
    names = [(node.name() if node is not None else None, operation.__name__)
             for _, node, _, operation, _ in recorder.records]
    # x * 2, y.sum(), torch.zeros(), .sum(), /: the last 3 of 5
    assert names[1:] == [(None, "sum"), ("DivBackward0", "div")] and names[0][0] is None
    assert {frame for _, _, frame, _, _ in recorder.records} == {(__file__, line)}
    assert recorder.records[-1][0] is z and y.grad_fn is not None
    recorder.clear()
    assert not recorder.records


def test_recorder_under_a_mode_the_script_pushed_later_goes_inert():
    from torch.overrides import TorchFunctionMode

    class PassThrough(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    recorder = get_engine("torch").record_graph_ops(lambda filename: True, 8)
    depth = torch._C._len_torch_function_stack()
    x = torch.ones(2, requires_grad=True)
    recorder.start()
    with PassThrough():
        recorder.stop()  # not on top: left in place, inert
        (x * 2).sum()
    assert not recorder.records
    assert torch._C._len_torch_function_stack() == depth + 1
    recorder.start()  # now on top again: the stale one is removed first
    recorder.stop()
    assert torch._C._len_torch_function_stack() == depth


def test_native_engine_records_no_loss_operations_and_starts_no_processes():
    native = get_engine("gradscope")
    assert native.record_graph_ops(lambda filename: True, 8) is None
    assert native.process_start_entry_points() == []


def test_the_rerun_calls_the_forward_the_module_held_when_called():
    """A Lightning-style forward redirection: the model's forward points at another method for one
    call and restores itself; the localising re-run runs that same call again (under DDP the
    same holds for the module the wrapper holds, which is what gets re-run)."""
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)

        def forward(self, x):
            return self.linear(x)

        def training_step(self, batch):
            return torch.where(batch > 0, self(batch) / batch, torch.zeros_like(batch)).sum()

    model = Model()

    def redirected(batch):
        original = model.forward

        def wrapped_forward(*args):
            model.forward = original
            return model.training_step(*args)

        model.forward = wrapped_forward
        return model(batch)

    monitor = _monitor(nan=True)
    try:
        with pytest.raises(StopRun):
            redirected(torch.tensor([[0.0, 1.0]])).backward()
    finally:
        monitor.close()
    origin = monitor.origin
    assert (origin.phase, origin.module, origin.node) == ("backward", "", "DivBackward0")
    assert model.forward.__func__ is Model.forward  # the re-run left the model as the redirection left it


def test_follower_reruns_the_same_script_under_gradscope_and_names_other_ranked_processes(tmp_path):
    from gradscope.scripts import ProcessFollower

    script = tmp_path / "train.py"
    script.write_text("import os, sys; print(os.environ.get('MARK'), sys.argv[1:])\n")
    follower = ProcessFollower(str(script), lambda path, rest: [path, "--as-child", *rest], ("MARK", "followed"))
    with follower:
        same = subprocess.run([sys.executable, str(script), "a"], capture_output=True, text=True, check=True)
        other = subprocess.run([sys.executable, "-c", "print('other')"], capture_output=True, text=True,
                               env=dict(os.environ, LOCAL_RANK="1"), check=True)
        plain = subprocess.run([sys.executable, "-c", "print('plain')"], capture_output=True, text=True, check=True,
                               env={key: value for key, value in os.environ.items() if key not in ("LOCAL_RANK", "RANK")})
    assert same.stdout == "followed ['--as-child', 'a']\n"
    assert (other.stdout, plain.stdout) == ("other\n", "plain\n")
    assert follower.followed == [[sys.executable, str(script), "a"]]
    assert follower.unfollowed == [[sys.executable, "-c", "print('other')"]]
    assert subprocess.Popen.__init__ is not None and "ProcessFollower" not in repr(subprocess.Popen.__init__)


def test_joining_reducer_stays_one_process_without_a_group():
    from gradscope.monitor.distributed import JoiningReducer

    reducer = JoiningReducer(lambda: True)
    stats = object()
    assert reducer.combine(get_engine("torch"), [], stats) is stats
    assert (reducer.rank, reducer.world_size, reducer.signalled, reducer.inner) == (None, 1, False, None)


def test_loss_backward_ends_the_recording_before_backward_runs():
    """``loss.backward()`` under an active function mode would run inside the mode's handler, where
    the mode cannot be removed: the recorder ends itself first, so backward and everything after
    it run without it."""
    backward = torch.Tensor.__dict__["backward"]
    recorder = get_engine("torch").record_graph_ops(lambda filename: True, 8)
    depth = torch._C._len_torch_function_stack()
    x = torch.ones(2, requires_grad=True)
    recorder.start()
    assert torch.Tensor.__dict__["backward"] is not backward
    loss = (x * 2).sum()
    loss.backward()
    assert torch._C._len_torch_function_stack() == depth and torch.Tensor.__dict__["backward"] is backward
    recorded = len(recorder.records)
    (x * 3).sum()
    assert len(recorder.records) == recorded == 2 and x.grad.tolist() == [2.0, 2.0]
