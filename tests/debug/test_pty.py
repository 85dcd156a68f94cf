"""The interactive prompt end to end on a pseudo-terminal: completion, stepping, Ctrl-C, quit."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pexpect = pytest.importorskip("pexpect")

ROOT = Path(__file__).resolve().parents[2]


def test_interactive_session() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1", TERM="xterm", COLUMNS="120")
    child = pexpect.spawn(sys.executable, ["-m", "gradscope", "debug", "sample_models/nan_backward.py"],
                          cwd=str(ROOT), env=env, encoding="utf-8", timeout=30, dimensions=(40, 120))
    try:
        child.expect_exact("> stopped before backward (loss = ")
        child.expect_exact("(gradscope) ")
        child.send("bre\tmodule saf\t")            # tab completes the command and the module path,
        child.expect_exact("safe_log")              # each followed by a space
        child.send("po\t\r")                        # ... and the keyword
        child.expect_exact("breakpoint 1: module safe_log and post (checked at post points)")
        child.expect_exact("(gradscope) ")
        child.sendline("continue")
        child.expect_exact("> stopped at safe_log (SafeLog) · post: grad_input known, after its backward")
        child.expect_exact("(gradscope) ")
        child.sendline("where")
        child.expect_exact("LogBackward0 (produced grad_input)")
        child.expect_exact("(gradscope) ")
        child.sendintr()                            # Ctrl-C at the prompt does not end the session
        child.expect_exact("(interrupted: 'continue' goes on, 'quit' aborts the pass)")
        child.expect_exact("(gradscope) ")
        child.sendline("zero")
        child.expect_exact("grad_input edited (zero); continuing uses the new value")
        child.expect_exact("(gradscope) ")
        child.sendline("step")
        child.expect_exact("> stopped at relu (MaskReLU) · pre")
        child.expect_exact("(gradscope) ")
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    assert child.exitstatus == 0
