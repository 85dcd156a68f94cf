"""``[tool.gradscope]`` in ``pyproject.toml``: defaults for ``gradscope check`` (flags win)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

KEYS = {"steps": int, "lr": float, "max_norm": float, "min_norm": float, "min_ratio": float, "overfit": bool,
        "gradcheck": bool}


class ConfigError(ValueError):
    """``[tool.gradscope]`` holds an unknown key or a value of the wrong type."""


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` in ``start`` or one of its parents."""
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def read_config(start: Path) -> tuple[dict[str, Any], Path | None, str | None]:
    """``([tool.gradscope] values, the file they came from, a note for stderr or None)``.

    Raises:
        ConfigError: unknown keys or wrong value types (the message names the file).
    """
    path = find_pyproject(start)
    if path is None:
        return {}, None, None
    if sys.version_info < (3, 11):
        return {}, path, f"{path}: [tool.gradscope] is read on Python 3.11+ only (tomllib); using defaults"
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from exc
    section = data.get("tool", {}).get("gradscope", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: [tool.gradscope] must be a table")
    config: dict[str, Any] = {}
    for key, value in section.items():
        name = key.replace("-", "_")
        if name not in KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in [tool.gradscope]; "
                              f"known keys: {', '.join(sorted(KEYS))}")
        kind = KEYS[name]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        valid = isinstance(value, bool) if kind is bool else number and (kind is float or isinstance(value, int))
        if not valid:
            article = "an" if kind is int else "a"
            raise ConfigError(f"{path}: [tool.gradscope] {key} must be {article} {kind.__name__}, got {value!r}")
        config[name] = kind(value)
    return config, path, None
