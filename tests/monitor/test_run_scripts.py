"""gradscope.scripts: running a file as ``__main__`` and reacting to an import."""
from __future__ import annotations

import sys
import textwrap

import pytest

from gradscope.scripts import ScriptError, ScriptNotFound, run_script, when_imported


def test_runs_as_main_and_restores_the_interpreter(tmp_path, capsys):
    script = tmp_path / "s.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:], sys.modules['__main__'].__file__ == __file__)\n")
    before = (sys.argv[:], sys.path[:], sys.modules["__main__"])
    assert run_script(str(script), ["a", "--b"]).exit_code == 0
    assert capsys.readouterr().out == "__main__ ['a', '--b'] True\n"
    assert (sys.argv, sys.path, sys.modules["__main__"]) == before


def test_exit_codes_follow_python(tmp_path):
    script = tmp_path / "s.py"
    for body, expected in (("raise SystemExit", (0, None)), ("raise SystemExit(7)", (7, None)),
                           ("raise SystemExit('no data')", (1, "no data"))):
        script.write_text(body + "\n")
        result = run_script(str(script))
        assert (result.exit_code, result.message) == expected


def test_exception_traceback_starts_at_the_script(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("x = 1\nraise KeyError('k')\n")
    before = sys.argv[:]
    with pytest.raises(ScriptError) as info:
        run_script(str(script))
    assert info.value.traceback_text == (f'Traceback (most recent call last):\n  File "{script}", line 2, in <module>\n'
                                         "    raise KeyError('k')\nKeyError: 'k'\n")
    assert sys.argv == before


def test_base_exceptions_pass_through(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        run_script(str(script))


def test_missing_or_broken_script(tmp_path):
    with pytest.raises(ScriptNotFound, match="no such script"):
        run_script(str(tmp_path / "none.py"))
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    with pytest.raises(ScriptNotFound, match="bad.py:1: syntax error"):
        run_script(str(bad))


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
