"""What every command does before the model runs, in one place.

:func:`start` reads ``[tool.gradscope]``, gives every option its checked value (flag, else
config, else default; :mod:`gradscope.cli.settings`), finds the model file (the ``MODEL``
argument or ``model`` in the config), resolves output files to absolute paths, creates their
missing directories and checks that they can be written, sends whatever the user's code prints
to stderr when stdout carries a machine-readable document, runs the model file with
``sys.argv == [MODEL]``, and loads it.
Any problem is one error line and exit code 2 (options, outputs) or 3 (the model), before any
training starts.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import click

from gradscope.cli.app import App, ExitCode
from gradscope.cli.config import ConfigError, read_config
from gradscope.cli.settings import Resolved, SettingError, resolve

__all__ = ["MACHINE_FORMATS", "DEFAULT_BUNDLE", "Output", "Run", "start"]

# Formats whose stdout must hold one document and nothing else.
MACHINE_FORMATS = ("json", "junit", "github", "dot")
# Where `watch --nan/--inf` writes its replay bundle unless told otherwise.
DEFAULT_BUNDLE = ".gradscope/replay.npz"
_GITIGNORE = "# written by gradscope (replay bundles); safe to delete\n*\n"


@dataclass
class Output:
    """An output file: as the user gave it (``label``), resolved to an absolute ``path`` at start-up."""

    name: str
    label: str
    path: Path
    source: str
    gradscope_directory: bool = False


@dataclass
class Run:
    """The checked options of one command run, its model file and its outputs."""

    app: App
    command: str
    settings: dict[str, Resolved]
    model_file: str | None = None
    failures: list[str] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)

    def protect(self, path: str, what: str) -> None:
        """Refuse any output file that is ``path`` (an input such as the script), naming it ``what``."""
        self.inputs[os.path.realpath(path)] = what

    def __getitem__(self, name: str) -> Any:
        return self.settings[name].value

    def output(self, name: str, suffixes: Sequence[str] = ()) -> Output | None:
        """The output file of setting ``name`` (None when not set), checked to be writable now
        (missing directories above it are created, as loggers do).

        Relative paths are relative to the current directory for a flag, and to the
        ``pyproject.toml``'s directory for a config value; they no longer depend on the current
        directory afterwards (a model file may ``chdir``).
        """
        from gradscope._tool.files import check_writable

        resolved = self.settings[name]
        if resolved.value is None:
            return None
        label = str(resolved.value)
        source = resolved.source if resolved.source != "default" else f"--{name}"
        if label.strip() == "-":
            self.app.abort(f"{source} -: give a file name ('-' does not mean stdout here; /dev/stdout does, when "
                           "stdout carries nothing else)", ExitCode.USAGE)
        path = Path(os.path.abspath(Path(resolved.base or Path.cwd()) / os.path.expanduser(label)))
        if suffixes and path.suffix.lower() not in suffixes:
            self.app.abort(f"{source} {label}: use a file name ending in {' or '.join(suffixes)}", ExitCode.USAGE)
        what = self.inputs.get(os.path.realpath(path))
        if what is not None:
            self.app.abort(f"{source} {label}: that is {what}; refusing to overwrite it", ExitCode.USAGE)
        own_directory = resolved.source == "default" and label == DEFAULT_BUNDLE
        if own_directory and not path.parent.exists():
            problem = check_writable(path.parent)  # .gradscope/ itself is made when a bundle is written
        else:
            problem = check_writable(path, make_directories=True)
        if problem is not None:
            self.app.abort(f"{source} {label}: cannot write there: {problem}", ExitCode.USAGE)
        return Output(name=name, label=label, path=path, source=source, gradscope_directory=own_directory)

    def output_directory(self, name: str) -> Output | None:
        """The output directory of setting ``name`` (``--tensorboard``; None when not set),
        resolved as :meth:`output` resolves files, created now, and checked to take new files."""
        import tempfile

        from gradscope.cli.tensorboard import INSTALL_HINT, available

        resolved = self.settings[name]
        if resolved.value is None:
            return None
        label = str(resolved.value)
        source = resolved.source if resolved.source != "default" else f"--{name}"
        if not available():
            self.app.abort(f"{source} {label}: {INSTALL_HINT}", ExitCode.USAGE)
        path = Path(os.path.abspath(Path(resolved.base or Path.cwd()) / os.path.expanduser(label)))
        problem = None
        if path.exists() and not path.is_dir():
            problem = "is a file, not a directory"
        else:
            try:
                path.mkdir(parents=True, exist_ok=True)
                descriptor, probe = tempfile.mkstemp(prefix=".gradscope.", suffix=".probe", dir=path)
                os.close(descriptor)
                os.unlink(probe)
            except OSError as exc:
                problem = f"cannot create files there ({exc.strerror or exc})"
        if problem is not None:
            self.app.abort(f"{source} {label}: cannot write there: {problem}", ExitCode.USAGE)
        return Output(name=name, label=label, path=path, source=source)

    def write(self, output: Output, write: Callable[[Path], None]) -> bool:
        """Call ``write(absolute path)``; on failure print one error line, remember it, return False."""
        from gradscope.errors import GradscopeError

        try:
            if output.gradscope_directory:
                _make_gradscope_directory(output.path.parent)
            write(output.path)
        except (OSError, GradscopeError) as exc:
            self.fail(output, exc)
            return False
        return True

    def fail(self, output: Output, exc: BaseException) -> None:
        """Report that ``output`` could not be written (the run goes on; the exit code says so)."""
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(exc)
        message = f"cannot write {output.label} ({output.source}): {reason}"
        self.failures.append(message)
        self.app.err.print(f"error: {message}", style="bold red", markup=False)

    def exit(self, code: ExitCode) -> None:
        """Exit with ``code``, or 2 when everything went well but an output could not be written."""
        if self.failures and code == ExitCode.OK:
            code = ExitCode.USAGE
        self.app.exit(code)

    def load_model(self, need_parameters: bool = True) -> Any:
        """Run the model file (seeded with ``--seed`` first) and return its workload.

        Raises:
            ModelFileError: the model has no parameters (when ``need_parameters``).
        """
        from gradscope.loading import ModelFileError, load_model_file

        assert self.model_file is not None
        workload = load_model_file(self.model_file, seed=self.settings["seed"].value if "seed" in self.settings else 0,
                                   engine=self.settings["engine"].value if "engine" in self.settings else None)
        self.app.model_path = workload.path
        if need_parameters and not any(True for _ in workload.model.parameters()):
            raise ModelFileError(f"{workload.label}: the model ({type(workload.model).__name__}) has no parameters: "
                                 "there are no gradients to look at")
        self._warn_unmatched(workload.model)
        return workload

    def _warn_unmatched(self, model: Any) -> None:
        """Warn about each ``--layers`` or ``--ignore`` glob that matches nothing in ``model``: a
        typo there would otherwise silently show nothing or waive nothing."""
        from fnmatch import fnmatchcase

        modules = [name or "model" for name, _ in model.named_modules()]
        parameters = [name for name, _ in model.named_parameters()]
        for name, what, names in (("layers", "module", modules), ("ignore", "parameter or module",
                                                                    [*parameters, *modules, "loss"])):
            resolved = self.settings.get(name)
            for text in (resolved.value or ()) if resolved is not None else ():
                pattern = text.rpartition(":")[0].strip() if name == "ignore" and ":" in text else text.strip()
                if not any(fnmatchcase(candidate, pattern) for candidate in names):
                    example = ", ".join([candidate for candidate in names if candidate != "model"][:3] or names)
                    self.app.warn(f"{resolved.source} {text}: matches no {what} of the model (names look like "
                                  f"{example})")


def _make_gradscope_directory(directory: Path) -> None:
    """Create gradscope's own ``.gradscope/`` directory, with a ``.gitignore`` that ignores it all."""
    directory.mkdir(exist_ok=True)
    ignore = directory / ".gitignore"
    if not ignore.exists():
        ignore.write_text(_GITIGNORE, encoding="utf-8")


def start(ctx: click.Context, config_only: Sequence[str] = (), model: bool = True) -> Run:
    """Check the options of the running command and prepare its run (see the module docstring).

    Args:
        ctx: the command's context; its options added with ``@settings.option`` are resolved.
        config_only: settings taken from the config file only (``min_ratio``).
        model: the command takes a ``MODEL`` argument (``model_file``), which may come from the config.
    """
    app: App = ctx.ensure_object(App)
    command = ctx.info_name or ""
    try:
        config = read_config(Path.cwd(), command)
        settings = resolve(ctx, config, [*config_only, *(["model"] if model else [])])
    except (ConfigError, SettingError) as error:
        app.abort(str(error), ExitCode.USAGE)
    if config.note:
        app.note(config.note)
    for name in config.per_command.get(command, {}):
        if name not in settings:
            app.warn(f"{config.label}: tool.gradscope.{command}.{name}: 'gradscope {command}' has no such option; "
                     "ignored")
    run = Run(app=app, command=command, settings=settings)
    if model:
        run.model_file = _model_file(app, ctx.params.get("model_file"), settings["model"], config)
        run.protect(run.model_file, "the model file")
        ctx.with_resource(_model_argv(run.model_file))
    output_format = ctx.params.get("output_format")
    if output_format in MACHINE_FORMATS:
        ctx.with_resource(app.user_output_to_stderr())
    return run


def _model_file(app: App, argument: str | None, configured: Resolved, config: Any) -> str:
    if argument is not None:
        return argument
    if configured.value is None:
        where = f"in [tool.gradscope] of {config.label}" if config.path is not None else \
            "(no pyproject.toml with [tool.gradscope] was found)"
        app.abort(f"missing MODEL: give the model file, or set model = \"path/to/model.py\" {where}", ExitCode.USAGE)
    path = Path(configured.base) / configured.value
    relative = os.path.relpath(path)
    shown = relative if not relative.startswith("..") else str(path)
    if not path.exists():
        app.abort(f"{shown}: model file not found (from {configured.source} = {configured.value!r})",
                  ExitCode.MODEL_ERROR)
    return shown


def _model_argv(model_file: str) -> Any:
    from gradscope._tool.usercode import model_argv

    return model_argv(model_file)

