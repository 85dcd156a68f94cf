"""``[tool.gradscope]`` in the nearest ``pyproject.toml``: option defaults for every command.

Top-level keys apply to every command that takes the option; a table named after a command
(``[tool.gradscope.watch]``) applies to that command only and wins over the top level. Every
value is checked with the option's own rules (:mod:`gradscope.cli.settings`), whichever command
runs, so a bad value is refused the same way everywhere.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradscope.cli.settings import SETTINGS, check_config_value, configurable

COMMANDS = ("inspect", "watch", "clip", "check", "replay", "debug", "graph", "run")


class ConfigError(ValueError):
    """``[tool.gradscope]`` cannot be read, holds an unknown key or a refused value."""


@dataclass(frozen=True)
class Found:
    """A value from the config file, where it came from, and the directory relative paths start from."""

    value: Any
    source: str
    base: Path


@dataclass
class Config:
    """The checked ``[tool.gradscope]`` values of one run (empty without a ``pyproject.toml``)."""

    path: Path | None = None
    command: str = ""
    common: dict[str, Any] = field(default_factory=dict)
    per_command: dict[str, dict[str, Any]] = field(default_factory=dict)
    note: str | None = None

    @property
    def label(self) -> str:
        """The file as messages show it: relative to the current directory when that is shorter."""
        return _shown(self.path) if self.path is not None else "pyproject.toml"

    def lookup(self, name: str) -> Found | None:
        """The value of ``name`` for this run's command, or None when the file does not set it."""
        own = self.per_command.get(self.command, {})
        if self.path is None:
            return None
        if name in own:
            return Found(own[name], f"{self.label}: tool.gradscope.{self.command}.{name}", self.path.parent)
        if name in self.common:
            return Found(self.common[name], f"{self.label}: tool.gradscope.{name}", self.path.parent)
        return None


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` or one of its parents."""
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def read_config(start: Path, command: str = "") -> Config:
    """Read and check ``[tool.gradscope]`` of the nearest ``pyproject.toml`` for ``command``.

    Raises:
        ConfigError: the file cannot be read or parsed (not UTF-8, bad TOML), or the section holds
            an unknown key or a value its option refuses; the message names the file and the key.
    """
    path = find_pyproject(start)
    if path is None:
        return Config(command=command)
    if sys.version_info < (3, 11):
        return Config(command=command,
                      note=f"{_shown(path)}: [tool.gradscope] is read on Python 3.11+ only (tomllib); using defaults")
    import tomllib

    label = _shown(path)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label}: cannot read it: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{label}: not valid TOML: {exc}") from None
    tool = data.get("tool", {})
    section = tool.get("gradscope", {}) if isinstance(tool, dict) else {}
    if not isinstance(section, dict):
        raise ConfigError(f"{label}: tool.gradscope must be a table")
    config = Config(path=path, command=command)
    for key, value in section.items():
        if key in COMMANDS and isinstance(value, dict):
            config.per_command[key] = _checked(value, f"{label}: tool.gradscope.{key}")
        else:
            config.common.update(_checked({key: value}, f"{label}: tool.gradscope"))
    return config


def _checked(table: dict[str, Any], where: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in SETTINGS or not SETTINGS[name].config:
            tables = ", ".join(f"[tool.gradscope.{command}]" for command in COMMANDS)
            raise ConfigError(f"{where}: unknown key {key!r}; known keys: {', '.join(configurable())} "
                              f"(and the tables {tables})")
        try:
            values[name] = check_config_value(name, value)
        except ValueError as error:
            raise ConfigError(f"{where}.{key}: {error}") from None
    return values


def _shown(path: Path) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:
        return str(path)
    return relative if len(relative) <= len(str(path)) else str(path)
