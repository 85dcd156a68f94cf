"""The records with their own ``__init__`` behave as the frozen dataclasses they are declared as."""
from __future__ import annotations

import dataclasses
import inspect

import pytest

from gradscope.monitor.records import ModuleRecord, ParameterRecord


@pytest.mark.parametrize("cls", [ModuleRecord, ParameterRecord])
def test_init_takes_the_fields_in_order_and_the_record_stays_frozen(cls):
    names = [field.name for field in dataclasses.fields(cls)]
    assert list(inspect.signature(cls.__init__).parameters)[1:] == names
    values = [f"value {index}" for index in range(len(names))]
    positional = cls(*values)
    named = cls(**dict(zip(names, values)))
    assert positional == named and hash(positional) == hash(named)
    assert [getattr(positional, name) for name in names] == values
    assert repr(positional).startswith(f"{cls.__name__}({names[0]}='value 0'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(positional, names[0], "changed")
    changed = dataclasses.replace(positional, **{names[-1]: "last"})
    assert getattr(changed, names[-1]) == "last" and getattr(positional, names[-1]) == values[-1]
    with pytest.raises(TypeError):
        cls(*values[:-1])
