"""Every option, declared once: how to parse and check it, from a flag or from ``[tool.gradscope]``.

A :class:`Setting` names an option (``max_norm``: flag ``--max-norm``, config key ``max_norm``)
and its :class:`Kind`, which turns a flag's text or a TOML value into a checked value, with the
same rules for both (NaN, infinities, ranges). A command adds the options it takes with
:func:`option` (choosing their default and help there); at run time :func:`resolve` gives every
one of them its value: the flag when it was given, else ``[tool.gradscope.<command>]``, else
``[tool.gradscope]``, else the default. A bad value is a :class:`SettingError` whose message
names the option and where the value came from (``--lr`` or
``pyproject.toml: tool.gradscope.lr``).

To let a new option come from the config file, add one entry to :data:`SETTINGS` and use
``@option("name", ...)`` on the command.

This module imports only ``click`` and the standard library, so ``gradscope --help`` stays fast.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import click
from click.core import ParameterSource

__all__ = ["SettingError", "Kind", "Integer", "Number", "Switch", "Choice", "Text", "Seed", "TextList",
           "Setting", "SETTINGS", "option", "resolve", "check_config_value"]


class SettingError(ValueError):
    """A value that an option does not accept; the message says which option and where from."""


# ----------------------------------------------------------------------------------------- kinds
class Kind:
    """How a value is parsed from a flag (text) and checked from a TOML value."""

    metavar = "TEXT"

    def from_text(self, text: str) -> Any:
        """The value of a flag, or raise ``ValueError`` saying what was expected."""
        return self.check(text)

    def check(self, value: Any) -> Any:
        """The checked value (from the config file or parsed from a flag), or raise ``ValueError``."""
        raise NotImplementedError


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Integer(Kind):
    """A whole number in ``[minimum, maximum]``; ``limit`` is a sanity bound above which a value
    is surely a typo (refused with its own message)."""

    minimum: int | None = None
    maximum: int | None = None
    limit: int | None = None
    metavar = "INTEGER"

    def _expected(self) -> str:
        if self.minimum is not None and self.maximum is not None:
            return f"a whole number from {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"a whole number >= {self.minimum}"
        return "a whole number"

    def from_text(self, text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise ValueError(f"expected {self._expected()}, got {text!r}") from None
        return self.check(value)

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected {self._expected()}, got {_show(value)}")
        if (self.minimum is not None and value < self.minimum) or (self.maximum is not None and value > self.maximum):
            raise ValueError(f"expected {self._expected()}, got {value}")
        if self.limit is not None and value > self.limit:
            raise ValueError(f"expected at most {self.limit}, got {value}")
        return value


@dataclass(frozen=True)
class Seed(Integer):
    """A random seed, accepted as ``torch.manual_seed`` accepts it: from -2**63 to 2**64 - 1; a
    negative seed means ``2**64 + seed`` (so ``-1`` and ``18446744073709551615`` are the same)."""

    minimum: int | None = -2 ** 63
    maximum: int | None = 2 ** 64 - 1

    def check(self, value: Any) -> int:
        value = super().check(value)
        return value + 2 ** 64 if value < 0 else value


@dataclass(frozen=True)
class Number(Kind):
    """A finite number, at least ``minimum`` (and above it when ``exclusive``)."""

    minimum: float | None = None
    exclusive: bool = False
    maximum: float | None = None
    metavar = "FLOAT"

    def _expected(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>' if self.exclusive else '>='} {self.minimum:g}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum:g}")
        return "a finite number" + (" " + " and ".join(parts) if parts else "")

    def from_text(self, text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError(f"expected {self._expected()}, got {text!r}") from None
        return self.check(value)

    def check(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected {self._expected()}, got {_show(value)}")
        value = float(value)
        too_small = self.minimum is not None and (value <= self.minimum if self.exclusive else value < self.minimum)
        too_large = self.maximum is not None and value > self.maximum
        if not math.isfinite(value) or too_small or too_large:
            raise ValueError(f"expected {self._expected()}, got {value:g}")
        return value


@dataclass(frozen=True)
class Switch(Kind):
    """On or off: a flag (``--overfit/--no-overfit``) or ``true``/``false`` in the config file."""

    metavar = ""

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_show(value)}")
        return value


@dataclass(frozen=True)
class Choice(Kind):
    """One of a fixed set of words."""

    choices: tuple[str, ...] = ()

    @property
    def metavar(self) -> str:  # type: ignore[override]
        return "[" + "|".join(self.choices) + "]"

    def check(self, value: Any) -> str:
        if value not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {_show(value)}")
        return value


@dataclass(frozen=True)
class Text(Kind):
    """A non-empty string (a file name, a pattern)."""

    metavar = "TEXT"

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise ValueError(f"expected a non-empty string, got {_show(value)}")
        return value


@dataclass(frozen=True)
class TextList(Kind):
    """Several strings: a repeatable flag, or a list of strings in the config file."""

    metavar = "TEXT"

    def from_text(self, text: str) -> tuple[str, ...]:
        return self.check([text])

    def check(self, value: Any) -> tuple[str, ...]:
        if isinstance(value, str) or not isinstance(value, (list, tuple)) \
                or not all(isinstance(item, str) and item.strip() for item in value):
            raise ValueError(f"expected a list of non-empty strings, got {_show(value)}")
        return tuple(value)


# -------------------------------------------------------------------------------------- settings
#: The most training steps a command runs: a larger ``--steps`` is a typo, not a plan.
MAX_STEPS = 1_000_000

#: The most local processes ``run --nproc`` starts: more is a typo (and would swamp the machine).
MAX_PROCESSES = 64

# Pairs of settings where the first must be below the second when the user sets both.
_BELOW = (("min_norm", "max_norm"),)


@dataclass(frozen=True)
class Setting:
    """One option: its name (the config key; the flag is ``--`` + the name with dashes), its kind,
    and whether it may come from ``[tool.gradscope]``. ``path`` marks file names, which are
    relative to the directory of the ``pyproject.toml`` they come from."""

    name: str
    kind: Kind
    config: bool = True
    path: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


SETTINGS: dict[str, Setting] = {setting.name: setting for setting in (
    Setting("model", Text(), path=True),
    Setting("steps", Integer(minimum=1, limit=MAX_STEPS)),
    Setting("step", Integer(minimum=0)),
    Setting("lr", Number(minimum=0)),
    Setting("max_norm", Number(minimum=0)),
    Setting("min_norm", Number(minimum=0)),
    Setting("min_ratio", Number(minimum=0, maximum=1)),
    Setting("overfit", Switch()),
    Setting("gradcheck", Switch()),
    Setting("seed", Seed()),
    Setting("nan", Switch()),
    Setting("inf", Switch()),
    Setting("clip", Number(minimum=0)),
    Setting("max", Number(minimum=0)),
    Setting("mode", Choice(("norm", "value"))),
    Setting("scope", Choice(("global", "module"))),
    Setting("depth", Integer(minimum=0)),
    Setting("log", Text(), path=True),
    Setting("bundle", Text(), path=True),
    Setting("save", Text(), path=True),
    Setting("tensorboard", Text(), path=True),
    Setting("ignore", TextList()),
    Setting("engine", Choice(("gradscope", "torch"))),
    Setting("layers", TextList()),
    Setting("nproc", Integer(minimum=1, limit=MAX_PROCESSES), config=False),
    Setting("on_nonfinite", Choice(("stop", "skip"))),
    Setting("max_skips", Integer(minimum=1, limit=MAX_STEPS)),
    Setting("on_spike", Choice(("warn", "skip", "stop"))),
    Setting("allow_inf", TextList()),
    Setting("health", Choice(("warn", "fail"))),
    Setting("debug_on_failure", Switch(), config=False),
)}


def check_config_value(name: str, value: Any) -> Any:
    """Check a ``[tool.gradscope]`` value with its setting's rules.

    Raises:
        KeyError: no configurable setting has this name.
        ValueError: the value is refused (the message says what was expected).
    """
    setting = SETTINGS.get(name)
    if setting is None or not setting.config:
        raise KeyError(name)
    return setting.kind.check(value)


def configurable() -> list[str]:
    """The keys ``[tool.gradscope]`` accepts, sorted."""
    return sorted(name for name, setting in SETTINGS.items() if setting.config)


_F = Callable[..., Any]


def option(name: str, help: str, default: Any = None, required: bool = False,  # noqa: A002
           secondary: str | None = None, flag: str | None = None, multiple: bool = False) -> Callable[[_F], _F]:
    """Add the ``click`` option for setting ``name`` to a command.

    The flag's text is kept as given (``default`` only shows in ``--help``); :func:`resolve`
    checks it, so flags and the config file follow the same rules.

    Args:
        name: a key of :data:`SETTINGS`.
        help: the help text.
        default: the value when neither a flag nor the config gives one (shown in ``--help``).
        required: the value must come from a flag or the config file.
        secondary: for a :class:`Switch`, the off flag (``--no-overfit``); without it the switch
            is a plain flag that turns the setting on.
        flag: the flag's spelling when it differs from the setting's name.
        multiple: the flag may be repeated (for :class:`TextList` settings).
    """
    setting = SETTINGS[name]
    spelling = flag or setting.flag
    shown = f" [default: {_show(default) if not isinstance(default, str) else default}]" \
        if default is not None and default is not False else ""
    if required:
        shown = " [required]"
    if setting.config:
        shown += f" (config: {name})"
    text = help + shown
    if isinstance(setting.kind, Switch):
        declaration = f"{spelling}/{secondary}" if secondary else spelling
        add = click.option(declaration, name, is_flag=True, default=None, help=text)
    else:
        add = click.option(spelling, name, type=str, default=None, metavar=setting.kind.metavar, help=text,
                           multiple=multiple)

    if isinstance(setting.kind, Switch) and default is None:
        default = False

    def decorate(fn: _F) -> _F:
        declared(fn)[name] = Declared(default, required)
        return add(fn)

    return decorate


@dataclass(frozen=True)
class Declared:
    """How a command declared a setting with :func:`option`."""

    default: Any
    required: bool


def declared(fn: Any) -> dict[str, Declared]:
    """The settings a command function declared with :func:`option` (name -> default, required)."""
    if "gradscope_settings" not in fn.__dict__:
        fn.gradscope_settings = {}
    return fn.gradscope_settings


@dataclass(frozen=True)
class Resolved:
    """A setting's value and where it came from (``--lr``, ``pyproject.toml: tool.gradscope.lr``
    or ``default``)."""

    value: Any
    source: str
    base: Any = None


def resolve(ctx: click.Context, config: Any, config_only: Sequence[str] = ()) -> dict[str, Resolved]:
    """The value of every setting the command declared: flag, else config file, else default.

    Args:
        ctx: the command's context (its ``params`` hold the flags' text).
        config: the :class:`~gradscope.cli.config.Config` of this run.
        config_only: settings the command takes from the config file only (no flag; default None).

    Raises:
        SettingError: a flag's value is refused, or a required setting has no value.
    """
    declarations = dict(declared(ctx.command.callback)) if ctx.command.callback is not None else {}
    declarations.update({name: Declared(None, False) for name in config_only})
    values: dict[str, Resolved] = {}
    for name, declaration in declarations.items():
        setting = SETTINGS[name]
        raw = ctx.params.get(name)
        given = ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
        if given and raw is not None and raw != ():
            flag = _flag_spelling(ctx, name) or setting.flag
            try:
                if isinstance(raw, tuple):
                    value: Any = tuple(item for text in raw for item in setting.kind.from_text(text))
                elif isinstance(setting.kind, Switch):
                    value = bool(raw)
                else:
                    value = setting.kind.from_text(raw)
            except ValueError as error:
                raise SettingError(f"{flag}: {error}") from None
            values[name] = Resolved(value, flag)
            continue
        found = config.lookup(name) if setting.config else None
        if found is not None:
            values[name] = Resolved(found.value, found.source, found.base)
        elif declaration.required:
            where = f" or `{name} = ...` in [tool.gradscope]" if setting.config else ""
            raise SettingError(f"missing option {_flag_spelling(ctx, name) or setting.flag}{where}")
        else:
            values[name] = Resolved(declaration.default, "default")
    for low, high in _BELOW:
        given = [values.get(name) for name in (low, high)]
        if all(value is not None and value.source != "default" and value.value is not None for value in given) \
                and given[0].value >= given[1].value:  # type: ignore[union-attr]
            raise SettingError(f"{given[0].source} {given[0].value:g} must be below "  # type: ignore[union-attr]
                               f"{given[1].source} {given[1].value:g}")  # type: ignore[union-attr]
    return values


def _flag_spelling(ctx: click.Context, name: str) -> str | None:
    for parameter in ctx.command.params:
        if parameter.name == name and isinstance(parameter, click.Option):
            return max(parameter.opts, key=len)
    return None
