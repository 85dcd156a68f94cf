"""Breakpoint conditions: parsing, the phases each form is checked at, and matching."""
from __future__ import annotations

import numpy as np
import pytest

from gradscope.debug.conditions import BreakpointTable, ConditionError, Event, parse_condition


@pytest.mark.parametrize("text, phases, canonical", [
    ("nan", {"pre", "post"}, "nan"),
    ("inf", {"pre", "post"}, "inf"),
    ("module encoder.*", {"pre"}, "module encoder.*"),
    ("type Linear", {"pre"}, "type Linear"),
    ("norm > 10", {"pre", "post"}, "norm > 10"),
    ("norm<1e-6", {"pre", "post"}, "norm < 1e-06"),
    ("grad_output norm >= 3", {"pre"}, "grad_output norm >= 3"),
    ("grad_input norm < 0.5", {"post"}, "grad_input norm < 0.5"),
    ("node LogBackward0", {"node"}, "node LogBackward0"),
    ("node Log* and nan", {"node"}, "node Log* and nan"),
    ("forward", {"forward"}, "forward"),
    ("forward nan", {"forward"}, "forward and nan"),
    ("output norm > 5", {"forward"}, "output norm > 5"),
    ("module fc2 post", {"post"}, "module fc2 and post"),
    ("type Linear and grad_input norm > 1", {"post"}, "type Linear and grad_input norm > 1"),
])
def test_parse(text: str, phases: set, canonical: str) -> None:
    breakpoint_ = parse_condition(text)
    assert breakpoint_.phases == phases
    assert breakpoint_.text == canonical
    assert parse_condition(breakpoint_.text).phases == phases


@pytest.mark.parametrize("text, message", [
    ("", "empty breakpoint condition"),
    ("nann", "unknown word 'nann'"),
    ("module", "'module' needs a pattern"),
    ("norm 5", "expected 'norm > X'"),
    ("norm > big", "'big' is not a number"),
    ("grad_input > 5", "expected 'norm' after 'grad_input'"),
    ("nan and", "'and' needs a clause on each side"),
    ("node X pre", "'node' conditions stop after the node ran"),
    ("forward and grad_input norm > 1", "never checked"),
])
def test_parse_errors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConditionError, match=message) as info:
        parse_condition(text)
    assert "nan | inf" in str(info.value) or message in str(info.value)


def _event(phase: str, path: str | None = "encoder.0", type_name: str | None = "Linear", node: str | None = None,
           *arrays: np.ndarray) -> Event:
    return Event(phase, path, type_name, node, tuple(arrays))


def test_matching() -> None:
    finite = np.ones((2, 2), dtype=np.float32)
    with_nan = np.array([1.0, np.nan], dtype=np.float32)
    with_inf = np.array([1.0, np.inf], dtype=np.float32)
    assert parse_condition("nan").matches(_event("post", "a", "T", None, finite, with_nan))
    assert not parse_condition("nan").matches(_event("post", "a", "T", None, with_inf))
    assert parse_condition("inf").matches(_event("pre", "a", "T", None, with_inf))
    assert parse_condition("nonfinite").matches(_event("pre", "a", "T", None, with_inf))
    assert not parse_condition("nan").matches(_event("forward", "a", "T", None, with_nan))
    assert parse_condition("forward nan").matches(_event("forward", "a", "T", None, with_nan))
    assert parse_condition("module encoder.*").matches(_event("pre"))
    assert not parse_condition("module encoder.*").matches(_event("pre", "decoder.0"))
    assert not parse_condition("module encoder.*").matches(_event("post"))
    assert parse_condition("module model").matches(_event("pre", ""))
    third_call = Event("pre", "cell", "Linear", None, (), module_call="cell[2]")
    assert parse_condition("module cell[2]").matches(third_call)
    assert parse_condition("module cell").matches(third_call)
    assert not parse_condition("module cell[1]").matches(third_call)
    assert parse_condition("type Lin*").matches(_event("pre"))
    assert parse_condition("norm > 1.9").matches(_event("pre", "a", "T", None, finite))
    assert not parse_condition("norm > 2").matches(_event("pre", "a", "T", None, finite))
    assert parse_condition("norm < 1").matches(_event("pre", "a", "T", None, finite * 0.1))
    assert not parse_condition("norm < 1").matches(_event("pre", "a", "T", None, None))
    assert parse_condition("node Log*").matches(_event("node", "a", "T", "LogBackward0"))
    assert not parse_condition("node Log*").matches(_event("node", "a", "T", "ExpBackward0"))


def test_table_numbers_enable_and_hits() -> None:
    table = BreakpointTable()
    first = table.add("nan")
    second = table.add("module fc1")
    assert (first.number, second.number) == (1, 2)
    event = _event("pre", "fc1", "Linear", None, np.array([np.nan]))
    assert table.hit(event) == [first, second]
    table.get(1).enabled = False
    assert table.hit(event) == [second]
    assert (first.hits, second.hits) == (1, 2)
    table.delete(2)
    assert table.add("inf").number == 3
    assert not table.wants("node")
    table.add("node MulBackward0")
    assert table.wants("node")


@pytest.mark.parametrize("conditions, loss_kind, expected", [
    (["nan"], "nan", "forward nan"),                      # only backward points look for NaN
    (["module fc1", "inf"], "inf", "forward inf"),
    (["nan"], None, None),                                # the loss is finite
    (["forward nan"], "nan", None),                       # forward lines are already watched
    (["nan", "forward inf"], "nan", None),
    (["module fc1"], "nan", None),                        # no breakpoint looks for NaN/Inf
])
def test_forward_condition_for_a_nonfinite_loss(conditions: list, loss_kind: str | None,
                                                 expected: str | None) -> None:
    table = BreakpointTable()
    for condition in conditions:
        table.add(condition)
    assert table.forward_condition_for(loss_kind) == expected


def test_disabled_breakpoints_do_not_ask_for_a_forward_condition() -> None:
    table = BreakpointTable()
    table.add("nan")
    table.add("forward nan").enabled = False
    assert table.watches_forward_values() is False
    assert table.forward_condition_for("nan") == "forward nan"
    table.get(1).enabled = False
    assert table.forward_condition_for("nan") is None
