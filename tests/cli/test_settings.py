"""One validation path: every option accepts and refuses the same values from a flag and from
``[tool.gradscope]``, and a new option is read from the config file by declaring it once."""
from __future__ import annotations

import math
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from gradscope.cli import settings
from gradscope.cli.config import ConfigError, read_config
from gradscope.cli.settings import SETTINGS, Setting, SettingError, TextList, option, resolve

# (setting, flag text, the same value in TOML)
VALUES = [
    ("lr", "0.1", "0.1"), ("lr", "0", "0"), ("lr", "nan", "nan"), ("lr", "inf", "inf"), ("lr", "-1", "-1"),
    ("lr", "-inf", "-inf"), ("lr", "fast", '"fast"'), ("lr", "true", "true"),
    ("max_norm", "nan", "nan"), ("max_norm", "1e3", "1e3"), ("max_norm", "-1", "-1"),
    ("min_norm", "-0.5", "-0.5"), ("min_norm", "1e-7", "1e-7"), ("min_ratio", "2", "2"),
    ("min_ratio", "0.5", "0.5"), ("clip", "nan", "nan"), ("clip", "1", "1"), ("max", "inf", "inf"),
    ("steps", "0", "0"), ("steps", "-1", "-1"), ("steps", "3", "3"), ("steps", "1.5", "1.5"),
    ("step", "0", "0"), ("step", "-1", "-1"), ("depth", "2", "2"),
    ("seed", "-1", "-1"), ("seed", str(2 ** 64 - 1), str(2 ** 64 - 1)), ("seed", str(2 ** 64), str(2 ** 64)),
    ("seed", "x", '"x"'), ("mode", "norm", '"norm"'), ("mode", "cube", '"cube"'),
]


def _flag(name: str, text: str):
    try:
        return True, SETTINGS[name].kind.from_text(text)
    except ValueError:
        return False, None


def _config(tmp_path: Path, name: str, toml: str):
    (tmp_path / "pyproject.toml").write_text(f"[tool.gradscope]\n{name} = {toml}\n")
    try:
        return True, read_config(tmp_path).lookup(name).value
    except ConfigError as error:
        assert f"tool.gradscope.{name}:" in str(error)
        return False, None


@pytest.mark.parametrize("name,text,toml", VALUES)
def test_flag_and_config_follow_the_same_rules(tmp_path, name, text, toml):
    from_flag = _flag(name, text)
    from_config = _config(tmp_path, name, toml)
    assert from_flag[0] == from_config[0]
    if from_flag[0]:
        assert from_flag[1] == from_config[1]
        assert not isinstance(from_flag[1], float) or math.isfinite(from_flag[1])


def test_a_new_option_is_declared_once(tmp_path, monkeypatch):
    monkeypatch.setitem(SETTINGS, "ignore", Setting("ignore", TextList()))
    seen = {}

    @click.command("inspect")
    @option("ignore", "Waive findings.", default=(), multiple=True)
    @click.pass_context
    def command(ctx, **_):
        from gradscope.cli.config import read_config as read

        seen.update({name: (value.value, value.source) for name, value in resolve(ctx, read(Path.cwd(), "inspect"))
                     .items()})

    monkeypatch.chdir(tmp_path)
    assert CliRunner().invoke(command, [], catch_exceptions=False).exit_code == 0
    assert seen["ignore"] == ((), "default")
    (tmp_path / "pyproject.toml").write_text('[tool.gradscope]\nignore = ["fc.bias:vanishing"]\n'
                                             '[tool.gradscope.inspect]\nignore = ["a:dead", "b:dead"]\n')
    CliRunner().invoke(command, [], catch_exceptions=False)
    assert seen["ignore"] == (("a:dead", "b:dead"), "pyproject.toml: tool.gradscope.inspect.ignore")
    CliRunner().invoke(command, ["--ignore", "x:dead", "--ignore", "y:dead"], catch_exceptions=False)
    assert seen["ignore"] == (("x:dead", "y:dead"), "--ignore")
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope]\nignore = 3\n")
    with pytest.raises(ConfigError, match="tool.gradscope.ignore: expected a list of non-empty strings"):
        read_config(tmp_path)


def test_required_setting_names_flag_and_key(tmp_path, monkeypatch):
    @click.command("clip")
    @option("max", "Limit.", required=True)
    @click.pass_context
    def command(ctx, **_):
        resolve(ctx, read_config(Path.cwd(), "clip"))

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingError, match=r"missing option --max or `max = \.\.\.` in \[tool.gradscope\]"):
        CliRunner().invoke(command, [], catch_exceptions=False)


def test_every_setting_documented():
    text = (Path(__file__).resolve().parents[2] / "docs" / "model-files.md").read_text()
    section = text[text.index("## Configuration: `[tool.gradscope]`"):text.index("## Outputs and errors")]
    for name in settings.configurable():
        assert f"`{name}`" in section, name
