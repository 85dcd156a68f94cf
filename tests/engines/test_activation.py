"""when_imported: an engine is attached once a script imports its library."""
from __future__ import annotations

import sys
import textwrap

from gradscope.engines.activation import when_imported
from gradscope.scripts import run_script


def test_when_imported_runs_after_the_module_finished_importing(tmp_path, monkeypatch):
    (tmp_path / "late_pkg.py").write_text("READY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    with when_imported("late_pkg", lambda: seen.append(sys.modules["late_pkg"].READY)):
        assert seen == []
        import late_pkg  # noqa: F401
        assert seen == [True]
        del sys.modules["late_pkg"]
        import late_pkg  # noqa: F401,F811 - a second import does not call again
    assert seen == [True]
    assert not any(type(finder).__name__ == "_ImportWatcher" for finder in sys.meta_path)
    del sys.modules["late_pkg"]


def test_when_imported_calls_at_once_for_a_module_already_imported():
    seen = []
    with when_imported("json", lambda: seen.append(1)):
        pass
    assert seen == [1]


def test_script_that_does_not_import_the_module_never_triggers(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import json
        print(json.dumps(1))
    """))
    seen = []
    with when_imported("never_imported_module_xyz", lambda: seen.append(1)):
        run_script(str(script))
    assert seen == []
