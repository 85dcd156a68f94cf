"""gradscope.scripts: running a file as ``__main__``."""
from __future__ import annotations

import sys

import pytest

from gradscope.scripts import ScriptError, ScriptNotFound, run_script


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


