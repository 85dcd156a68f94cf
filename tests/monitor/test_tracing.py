"""The shared line tracing of the localisers: which files are followed, what each line leaves
behind, and that the trace function from before is put back."""
from __future__ import annotations

import os
import sys
import sysconfig
import textwrap
from pathlib import Path

import gradscope as gs
from gradscope._tool.frames import is_user_file
from gradscope.engines import get_engine
from gradscope.monitor.tracing import (LineTracer, NonFiniteKinds, encloses, hook_every_node, join_path, lines_of,
                                       module_words, relative_source)


def made_here(x):
    doubled = x * 2
    halved = doubled / 2
    return halved + 1


def test_line_tracer_reports_each_line_and_the_return():
    seen: list[tuple[str, int]] = []
    entered: list = []
    x = gs.ones(2)

    def look(value, filename, line):
        if isinstance(value, gs.Tensor):
            seen.append((float(value.sum().item()), line))

    with LineTracer(lines_of(__file__), look, entered.append):
        made_here(x)
    first = made_here.__code__.co_firstlineno
    assert entered == [x]
    # Each line event shows the locals the previous line left (the first one: the arguments, at
    # the ``def`` line); the return shows the returned value at the returning line.
    assert seen == [(2.0, first), (2.0, first + 1), (4.0, first + 1), (2.0, first + 2), (4.0, first + 2),
                    (2.0, first + 2), (4.0, first + 3)]


def test_line_tracer_puts_the_previous_trace_function_back_once():
    def outer(frame, event, arg):
        return None

    previous = sys.gettrace()
    sys.settrace(outer)
    try:
        tracer = LineTracer(lambda filename, line: False, lambda value, filename, line: None)
        with tracer:
            assert sys.gettrace() == tracer._trace_call
        assert sys.gettrace() is outer
        sys.settrace(None)
        tracer.close()  # a second close leaves the trace function alone
        assert sys.gettrace() is None
    finally:
        sys.settrace(previous)


def test_line_tracer_follows_only_chosen_files():
    asked: set[str] = set()
    looked: set[str] = set()

    def follow(filename, line):
        asked.add(filename)
        return filename == __file__

    with LineTracer(follow, lambda value, filename, line: looked.add(filename)):
        textwrap.dedent("  a")
        made_here(gs.ones(1))
    assert textwrap.__file__ in asked and __file__ in asked
    assert looked == {__file__}


def test_nonfinite_kinds_checks_each_tensor_once():
    engine = get_engine("gradscope")
    kinds = NonFiniteKinds(engine)
    finite, bad = gs.ones(2), gs.tensor([1.0, float("inf")])
    assert not kinds.known(bad)
    assert kinds.first([finite, bad]) == ("inf", bad)
    assert kinds.known(finite) and kinds.known(bad)
    bad.data[1] = float("nan")  # remembered: not read again
    assert kinds.kind(bad) == "inf"
    kinds.clear()
    assert kinds.kind(bad) == "nan"
    assert NonFiniteKinds(engine, floats_only=True).kind(gs.tensor([1, 2])) is None


def test_user_files_are_outside_gradscope_and_the_libraries(tmp_path: Path):
    assert is_user_file(str(tmp_path / "train.py"))
    assert not is_user_file(gs.__file__)
    assert not is_user_file(os.__file__)
    assert not is_user_file(os.path.join(sysconfig.get_paths()["purelib"], "numpy", "core.py"))
    assert not is_user_file("<string>")


def test_places_and_module_paths(tmp_path: Path):
    assert relative_source(os.path.join(os.getcwd(), "a", "b.py"), 3) == f"{os.path.join('a', 'b.py')}:3"
    outside = str(Path(os.getcwd()).parent / "elsewhere.py")
    assert relative_source(outside, 7) == f"{outside}:7"
    assert join_path("", "fc") == "fc" and join_path("block", "") == "block" and join_path("a", "b") == "a.b"
    assert encloses("", "a.b") and encloses("a", "a.b") and encloses("a.b", "a.b")
    assert not encloses("a", "ab.c") and not encloses("a", None)
    assert module_words(None) == "code outside the model's modules"
    assert module_words("") == "the model's own forward" and module_words("fc") == "module 'fc'"


def test_hook_every_node_hooks_each_node_once_but_not_the_leaves():
    a = gs.ones(3, requires_grad=True)
    b = gs.ones(3, requires_grad=True)
    shared = a * b
    loss = (shared.exp() + shared.sin()).sum()
    fired: list[str] = []
    handles = hook_every_node([loss.grad_fn, None, shared.grad_fn],
                              lambda node, grad_inputs, grad_outputs: fired.append(node.name()))
    loss.backward()
    assert sorted(fired) == ["AddBackward0", "ExpBackward0", "MulBackward0", "SinBackward0", "SumBackward0"]
    for handle in handles:
        handle.remove()
