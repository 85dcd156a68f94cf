"""``gradscope run --nan --debug-on-failure``: the failing step's model call under the debugger (both engines).

The scripts are test_run.py's: in mode "backward", module "2" takes the square root of rows that
are exactly zero at the bad step, so only the backward pass turns non-finite (sqrt'(0) = Inf).
The debugger re-runs the failing call with its inputs, random state and output gradients; a
``break nan`` then stops at the module whose backward made the value.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_run import BODY, NATIVE, TORCH


@pytest.fixture(params=["gradscope", "torch"])
def script(request, tmp_path: Path) -> Path:
    if request.param == "torch":
        pytest.importorskip("torch")
    path = tmp_path / f"train_{request.param}.py"
    path.write_text((NATIVE if request.param == "gradscope" else TORCH) + BODY)
    return path


def test_the_debugger_stops_in_the_failing_steps_backward(gradscope, script):
    result = gradscope("run", "--nan", "--debug-on-failure", "--commands", "break nan; continue; where; quit",
                       str(script), "5", "2", "backward", code=1)
    err = result.stderr
    assert "opening the debugger on step 2's model call" in err
    assert "breakpoint 1 (nan)" in err and "step:    2" in err
    assert "> stopped at 2 (RowNorm) · post: grad_input known, after its backward · breakpoint 1 (nan)" in err
    where = err[err.index("(gradscope) where"):]
    assert "first non-finite gradient of this pass: produced by SqrtBackward0 in 2" in where
    assert f"{script.name}:" in where  # the script's own source line
    assert "quit: the pass was aborted" in err
    assert "First non-finite value (inf) started here" in err  # the report follows the session
    assert "step 2 loss" not in result.stdout  # the script was stopped there


def test_without_a_terminal_and_without_commands_it_is_refused(gradscope, script):
    result = gradscope("run", "--nan", "--debug-on-failure", str(script), "3", "1", "backward", code=2)
    assert "--debug-on-failure needs a terminal" in result.stderr and result.stdout == ""


def test_it_needs_nan_or_inf_and_commands_need_it(gradscope, script):
    assert "needs --nan or --inf" in gradscope("run", "--debug-on-failure", "--commands", "quit", str(script),
                                               code=2).stderr
    assert "--commands needs --debug-on-failure" in gradscope("run", "--nan", "--commands", "quit", str(script),
                                                              code=2).stderr


def test_a_healthy_run_never_opens_it(gradscope, script):
    result = gradscope("run", "--nan", "--debug-on-failure", "--commands", "quit", str(script), "3", "-1", "plain",
                       code=0)
    assert "opening the debugger" not in result.stderr


def test_breakpoints_set_before_the_call_runs_again_stop_in_its_forward(gradscope, script):
    # mode "forward": the bad batch overflows exp() in module "1" (Inf)
    result = gradscope("run", "--inf", "--debug-on-failure", "--break", "forward inf", "--commands", "where; quit",
                       str(script), "4", "1", "forward", code=1)
    assert "> stopped at ExpBackward0 in 1 (Exp) · forward: a line of forward code made inf" in result.stderr
    assert "this line made inf: return T.exp(h)" in result.stderr
    assert "--break 'nonsense'" in gradscope("run", "--nan", "--debug-on-failure", "--break", "nonsense",
                                             "--commands", "quit", str(script), code=2).stderr
    assert "--break needs --debug-on-failure" in gradscope("run", "--nan", "--break", "nan", str(script),
                                                           code=2).stderr
