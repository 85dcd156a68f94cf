"""Whose code a frame runs (gradscope._tool.frames), and the four places that ask."""
from __future__ import annotations

import os
import sysconfig
import types
import warnings
from pathlib import Path

import pytest

import gradscope as gs
from gradscope._tool.frames import (Owner, is_gradscope_file, is_instrumentation_file, is_user_file, owner,
                                    passes_call_through, raised_by_instrumentation)
from gradscope.scripts import ScriptError, run_script

PACKAGE = Path(gs.__file__).resolve().parent
MONITOR = str(PACKAGE / "monitor" / "run.py")
ENGINES = str(PACKAGE / "engines" / "torch.py")
MIRROR = str(PACKAGE / "autograd" / "tensor.py")
LIBRARY = str(Path(sysconfig.get_paths()["purelib"]) / "somelib" / "layers.py")


def test_each_kind_of_file_has_one_owner(tmp_path: Path) -> None:
    assert owner(str(tmp_path / "train.py")) is Owner.USER
    assert owner(MIRROR) is Owner.GRADSCOPE
    assert owner(str(PACKAGE / "cli" / "run.py")) is Owner.GRADSCOPE
    assert owner(MONITOR) is Owner.INSTRUMENTATION
    assert owner(ENGINES) is Owner.INSTRUMENTATION
    assert owner(os.__file__) is Owner.LIBRARY
    assert owner(os.path.realpath(os.__file__)) is Owner.LIBRARY
    assert owner(LIBRARY) is Owner.LIBRARY
    for nameless in ("<string>", "<frozen importlib._bootstrap>", "<stdin>"):
        assert owner(nameless) is Owner.LIBRARY


def test_the_questions_follow_the_owner(tmp_path: Path) -> None:
    user = str(tmp_path / "model.py")
    assert [is_user_file(f) for f in (user, MIRROR, MONITOR, LIBRARY, "<string>")] == [True, False, False, False, False]
    assert [is_gradscope_file(f) for f in (user, MIRROR, MONITOR, LIBRARY)] == [False, True, True, False]
    assert [is_instrumentation_file(f) for f in (user, MIRROR, MONITOR, ENGINES)] == [False, False, True, True]


def _compiled(frames: list[str]) -> types.FunctionType:
    """``f0``: calls ``f1`` ... the last raises; each ``f{i}`` compiled as if in file ``frames[i]``."""
    namespace: dict = {}
    for depth, filename in enumerate(frames):
        inner = f"f{depth + 1}()" if depth + 1 < len(frames) else "raise RuntimeError('boom')"
        exec(compile(f"def f{depth}():\n    {inner}\n", filename, "exec"), namespace)
    return namespace["f0"]


def _traceback(frames: list[str]) -> types.TracebackType:
    with pytest.raises(RuntimeError) as caught:
        _compiled(frames)()
    return caught.value.__traceback__


def test_the_innermost_user_or_instrumentation_frame_decides_who_raised(tmp_path: Path) -> None:
    user = str(tmp_path / "train.py")
    assert raised_by_instrumentation(_traceback([user, MONITOR, LIBRARY]))
    assert raised_by_instrumentation(_traceback([user, ENGINES, MIRROR, LIBRARY]))  # gradscope's mirror: neither
    assert not raised_by_instrumentation(_traceback([user, MONITOR, user, LIBRARY]))
    assert not raised_by_instrumentation(_traceback([user, MIRROR, LIBRARY]))
    assert raised_by_instrumentation(_traceback([user, MONITOR, "<string>"]))  # a dataclass's __setattr__
    assert not raised_by_instrumentation(None)


def test_a_wrapper_marked_as_passing_the_call_through_counts_as_neither(tmp_path: Path) -> None:
    traceback = _traceback([str(tmp_path / "train.py"), ENGINES, LIBRARY])
    assert raised_by_instrumentation(traceback)
    wrapper = traceback.tb_next.tb_next.tb_frame.f_code
    assert passes_call_through(types.FunctionType(wrapper, {})).__code__ is wrapper
    assert not raised_by_instrumentation(traceback)


def test_a_scripts_traceback_leaves_out_the_instrumentation_only(tmp_path: Path) -> None:
    """The frames of gradscope/engines/ (a torch mode passing the script's call on) go, as the
    monitor's do; a library's frames stay, as Python shows them."""
    script = tmp_path / "train.py"
    script.write_text(f"namespace = {{}}\n"
                      f"exec(compile('def through(f):\\n    return f()\\n', {ENGINES!r}, 'exec'), namespace)\n"
                      f"exec(compile('def call(f):\\n    return f()\\n', {LIBRARY!r}, 'exec'), namespace)\n"
                      "def mine():\n"
                      "    raise ValueError('the script')\n"
                      "namespace['through'](lambda: namespace['call'](mine))\n")
    with pytest.raises(ScriptError) as caught:
        run_script(str(script))
    text = caught.value.traceback_text
    assert ENGINES not in text
    assert LIBRARY in text and "in mine" in text and "ValueError: the script" in text


def test_anomaly_mode_keeps_a_librarys_frames_in_a_nodes_creation_stack() -> None:
    """A model defined in an installed package created the node: that is where it was created, so
    only gradscope's own frames leave the stack (not every frame outside the user's files)."""
    namespace: dict = {}
    exec(compile("def forward(x):\n    return x * 2\n", LIBRARY, "exec"), namespace)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with gs.autograd.detect_anomaly():
            out = namespace["forward"](gs.ones(2, requires_grad=True))
    trace = out.grad_fn._trace
    assert trace[-1].filename == LIBRARY
    assert trace[-2].filename == __file__
    assert not any(is_gradscope_file(frame.filename) for frame in trace)
