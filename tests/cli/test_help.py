"""Meta-tests: every command has help with an example and is in README.md's tour."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gradscope.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTED = ["inspect", "watch", "clip", "check", "replay", "debug", "graph", "run"]
OWN_COMMANDS = {"inspect", "watch", "clip", "check", "replay"}


def test_all_commands_registered():
    assert OWN_COMMANDS <= set(COMMANDS) and set(DOCUMENTED) == set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_overview_sentence_is_the_commands_own(name):
    """``gradscope --help`` lists commands without importing them: their sentence is kept in COMMANDS."""
    command = cli.get_command(None, name)
    assert command.name == name
    assert " ".join(command.help.split("\n\n")[0].split()) == COMMANDS[name][2]


@pytest.mark.parametrize("width", [80, 50])
def test_root_help_shows_every_summary_whole(width):
    """The overview wraps each command's sentence to the terminal instead of cutting it with
    "...", and uses no click API that click deprecates."""
    import warnings

    from click.testing import CliRunner

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = CliRunner().invoke(cli, ["--help"], terminal_width=width, catch_exceptions=False)
    assert result.exit_code == 0
    section = result.stdout.partition("Commands:")[2]
    overview = " ".join(section.split())
    for name in sorted(COMMANDS):
        assert f"{name} {COMMANDS[name][2]}" in overview
    assert all(len(line) <= width for line in section.splitlines())


def test_root_help_imports_no_command():
    code = ("import sys; from gradscope.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "assert not [m for m in sys.modules if m.startswith('gradscope.cli.') and m.split('.')[-1] in "
            f"{sorted(set(COMMANDS) | {'inspect', 'settings'})!r}], sorted(sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "inspect" in result.stdout and "run" in result.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_has_an_example(gradscope, name):
    result = gradscope(name, "--help", code=0)
    assert "Example" in result.stdout
    assert f"gradscope {name} " in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("name", DOCUMENTED)
def test_command_documented(name):
    text = (ROOT / "README.md").read_text()
    assert f"gradscope {name} " in text


@pytest.mark.parametrize("name", DOCUMENTED)
def test_commands_take_debug_and_reporters_take_format(gradscope, name):
    result = gradscope(name, "--help", code=0)
    assert "--debug" in result.stdout
    if name != "debug":  # the interactive debugger prints a session, not a report
        assert "--format" in result.stdout


def test_root_help_lists_exit_codes(gradscope):
    result = gradscope("--help", code=0)
    assert "130 interrupted" in result.stdout
    for name in OWN_COMMANDS:
        assert name in result.stdout


def test_exit_codes_documented():
    from gradscope.cli.app import ExitCode

    text = (ROOT / "docs" / "json-and-exit-codes.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} |" in text


def test_cli_package_imports_no_heavy_modules():
    code = ("import sys, gradscope.cli; "
            "print(','.join(m for m in ('rich', 'gradscope.monitor', 'gradscope.render', 'gradscope.loading') "
            "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == ""


LAYER_RULES = {
    "render": ("gradscope.autograd", "gradscope.ops", "gradscope.nn", "click"),
    "monitor": ("click", "rich", "gradscope.render", "gradscope.cli"),
}


@pytest.mark.parametrize("package", sorted(LAYER_RULES))
def test_layering(package):
    forbidden = LAYER_RULES[package]
    for path in (ROOT / "gradscope" / package).glob("*.py"):
        if package == "render" and path.name == "debug.py":
            continue  # the interactive debugger's renderer (issue 6) is not part of this layer check
        for node in ast.walk(ast.parse(path.read_text())):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not any(name == bad or name.startswith(bad + ".") for bad in forbidden), \
                    f"{path.name} imports {name}"


@pytest.mark.parametrize(("typed", "suggestion"), [
    ("inspetc", "(Did you mean 'inspect'?)"),
    ("wacth", "(Did you mean 'watch'?)"),
    ("Check", "(Did you mean 'check'?)"),
    ("ins", "(Did you mean 'inspect'?)"),
    ("c", "(Did you mean one of: 'check', 'clip'?)"),
])
def test_mistyped_command_gets_did_you_mean(gradscope, typed, suggestion):
    result = gradscope(typed, "model.py", code=2)
    assert result.stderr == f"error: No such command '{typed}'. {suggestion} (see 'gradscope --help')\n"
    assert result.stdout == ""


def test_unknown_command_without_a_near_name_gets_no_guess(gradscope):
    result = gradscope("frobnicate", code=2)
    assert result.stderr == "error: No such command 'frobnicate'. (see 'gradscope --help')\n"


@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_root_help_shows_whole_command_sentences(columns):
    """Each command's summary is its whole first sentence, wrapped under the name, never cut with '...'."""
    result = subprocess.run([sys.executable, "-m", "gradscope", "--help"], capture_output=True, text=True, cwd=ROOT,
                            env={**__import__("os").environ, "COLUMNS": columns}, timeout=60)
    section = result.stdout[result.stdout.index("Commands:"):]
    assert "..." not in section
    entries: dict[str, str] = {}
    for line in section.splitlines()[1:]:
        name, _, text = line.strip().partition(" ") if line.startswith("  ") and line[2] != " " else ("", "", line)
        if name:
            entries[name] = text.strip()
        else:
            last = list(entries)[-1]
            entries[last] += " " + line.strip()
    assert entries == {name: sentence for name, (_, _, sentence) in COMMANDS.items()}


def _takes_model(name: str) -> bool:
    return any(param.name == "model_file" for param in cli.get_command(None, name).params)


def test_model_commands_are_known():
    assert sorted(name for name in COMMANDS if _takes_model(name)) == [
        "check", "clip", "debug", "graph", "inspect", "replay", "watch"]


@pytest.mark.parametrize("name", sorted(name for name in COMMANDS if _takes_model(name)))
def test_help_of_a_model_command_says_what_a_model_file_defines(gradscope, name):
    text = " ".join(gradscope(name, "--help", code=0).stdout.split())
    for defined in ("`model`", "`batch(step)`", "`loss_fn(output, targets)`", "`compute_loss(model, batch)`",
                    "`make_optimizer(parameters)`", "[tool.gradscope]"):
        assert defined in text, (name, defined)
