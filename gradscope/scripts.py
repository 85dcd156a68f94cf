"""Running an unmodified Python script as ``__main__``, the way ``python SCRIPT ARGS`` does.

:func:`run_script` executes the file with ``sys.argv == [SCRIPT, *ARGS]``, ``sys.path[0]`` set to
the script's directory, ``__name__ == "__main__"`` and ``__file__`` set, and restores ``sys.argv``,
``sys.path`` and ``sys.modules["__main__"]`` afterwards; the modules the script imported from its
own folder leave ``sys.modules`` too (:class:`~gradscope._tool.usercode.ImportScope`).
:func:`run_module` does the same for a module, the way ``python -m MODULE ARGS`` does.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Any, Callable

from gradscope._tool.frames import is_instrumentation_file
from gradscope._tool.usercode import ImportScope, describe_raise, describe_syntax_error, passes_through
from gradscope.errors import ModelError

__all__ = ["ProcessFollower", "ScriptError", "ScriptNotFound", "ScriptResult", "check_module", "check_script",
           "run_module", "run_script"]


class ScriptNotFound(ModelError):
    """The script does not exist or cannot be read or compiled."""


class ScriptError(ModelError):
    """The script raised. ``traceback_text`` is the traceback as Python prints it for the script
    (its own frames first, none of gradscope's runner frames)."""

    def __init__(self, original: BaseException, traceback_text: str, line: int | None = None) -> None:
        super().__init__(f"the script {describe_raise(original)}" + (f" (line {line})" if line is not None else ""))
        self.original = original
        self.traceback_text = traceback_text
        self.line = line
        self.__cause__ = original


@dataclass(frozen=True)
class ScriptResult:
    """How the script ended without raising.

    Attributes:
        exit_code: 0 when it ran to its end, else the code of its ``SystemExit``.
        message: what Python prints on stderr for ``sys.exit("text")`` (None otherwise).
    """

    exit_code: int
    message: str | None = None


def run_script(path: str, args: list[str] | tuple[str, ...] = ()) -> ScriptResult:
    """Run the Python file ``path`` as ``__main__`` with ``sys.argv == [path, *args]``.

    What passes through the user-code boundary (:func:`gradscope._tool.usercode.passes_through`:
    a real Ctrl-C or SIGTERM, gradscope's own control flow such as a monitor's stop signal) is
    raised unchanged; anything else the script raises, ``KeyboardInterrupt`` and other
    ``BaseException`` subclasses included, is the script's error.

    Raises:
        ScriptNotFound: the file does not exist, is not a regular file, cannot be read, or has a
            syntax error.
        ScriptError: the script raised.
    """
    absolute = os.path.abspath(path)
    code = _compile(absolute, path)
    module = types.ModuleType("__main__")
    module.__dict__.update({"__file__": absolute, "__builtins__": __builtins__, "__cached__": None,
                            "__loader__": importlib.machinery.SourceFileLoader("__main__", absolute),
                            "__spec__": None, "__package__": None})
    saved_argv, saved_path, saved_main = sys.argv[:], sys.path[:], sys.modules.get("__main__")
    sys.argv[:] = [path, *args]
    script_dir = os.path.dirname(os.path.realpath(absolute))
    if sys.path:
        sys.path[0] = script_dir
    else:
        sys.path.append(script_dir)
    sys.modules["__main__"] = module
    try:
        with ImportScope(script_dir).active():
            exec(code, module.__dict__)
    except SystemExit as exc:
        return _exit_result(exc)
    except BaseException as exc:  # noqa: BLE001 - the script's own error, reported as Python would
        if passes_through(exc):
            raise
        raise ScriptError(exc, _script_traceback(exc, code), _last_line(exc, absolute)) from exc
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        else:
            sys.modules.pop("__main__", None)
    return ScriptResult(0)


def run_module(name: str, args: list[str] | tuple[str, ...] = ()) -> ScriptResult:
    """Run module ``name`` as ``__main__``, as ``python -m name ARGS`` does: ``sys.path[0]`` is the
    current directory (where the module is looked for), ``sys.argv == [the module's file, *args]``,
    a package runs its ``__main__`` submodule, and the module's ``__spec__`` and ``__package__`` are
    set, so relative imports work. Everything else is as in :func:`run_script`.

    Raises:
        ScriptNotFound: no such module, a package without ``__main__``, or its code cannot be
            compiled.
        ScriptError: the module raised.
    """
    saved_argv, saved_path, saved_main = sys.argv[:], sys.path[:], sys.modules.get("__main__")
    if sys.path:
        sys.path[0] = os.getcwd()
    else:
        sys.path.append(os.getcwd())
    try:
        spec, code = _module_code(name)
        module = types.ModuleType("__main__")
        module.__dict__.update({"__file__": spec.origin, "__builtins__": __builtins__, "__cached__": spec.cached,
                                "__loader__": spec.loader, "__spec__": spec, "__package__": spec.parent})
        sys.argv[:] = [spec.origin, *args]
        sys.modules["__main__"] = module
        try:
            exec(code, module.__dict__)
        except SystemExit as exc:
            return _exit_result(exc)
        except BaseException as exc:  # noqa: BLE001 - the module's own error, reported as Python would
            if passes_through(exc):
                raise
            raise ScriptError(exc, _script_traceback(exc, code), _last_line(exc, spec.origin)) from exc
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        else:
            sys.modules.pop("__main__", None)
    return ScriptResult(0)


def check_module(name: str) -> None:
    """Check that module ``name`` can be found from the current directory and compiled, as
    ``python -m`` would find it (before starting processes for it; its parent packages are
    imported, as ``python -m`` imports them).

    Raises:
        ScriptNotFound: see :func:`run_module`.
    """
    saved_path = sys.path[:]
    if sys.path:
        sys.path[0] = os.getcwd()
    try:
        _module_code(name)
    finally:
        sys.path[:] = saved_path


def _module_code(name: str) -> tuple[Any, types.CodeType]:
    """The spec and code of module ``name`` (of ``name.__main__`` for a package), as ``python -m``
    finds them on ``sys.path``; the parent packages are imported on the way."""
    if not name or name.startswith(".") or not all(part.isidentifier() for part in name.split(".")):
        raise ScriptNotFound(f"-m {name}: not a module name (dotted names like package.train)")
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError as exc:
        raise ScriptNotFound(f"-m {name}: no module named {exc.name!r}") from exc
    except Exception as exc:  # noqa: BLE001 - a parent package raised while being imported
        raise ScriptNotFound(f"-m {name}: importing its package {describe_raise(exc)}") from exc
    if spec is None:
        raise ScriptNotFound(f"-m {name}: no module named {name!r}")
    if spec.submodule_search_locations is not None:
        if name.endswith(".__main__"):
            raise ScriptNotFound(f"-m {name}: is a package and cannot be run")
        try:
            spec = importlib.util.find_spec(f"{name}.__main__")
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            raise ScriptNotFound(f"-m {name}: is a package without __main__.py; name the module to run "
                                 f"({name}.train, ...)")
    loader = spec.loader
    if spec.origin is None or loader is None or not hasattr(loader, "get_code"):
        raise ScriptNotFound(f"-m {name}: not a Python module that can be run (no source file)")
    try:
        code = loader.get_code(spec.name)
    except (SyntaxError, ValueError) as exc:
        raise ScriptNotFound(describe_syntax_error(os.path.relpath(spec.origin), exc)) from exc
    except ImportError as exc:
        raise ScriptNotFound(f"-m {name}: cannot read {spec.origin} ({exc})") from exc
    if code is None:
        raise ScriptNotFound(f"-m {name}: {spec.origin} holds no code to run")
    return spec, code


def check_script(path: str) -> None:
    """Check that ``path`` is a Python script that can be run (before starting processes for it).

    Raises:
        ScriptNotFound: it does not exist, is not a regular file, cannot be read, or has a syntax error.
    """
    _compile(os.path.abspath(path), path)


def _compile(absolute: str, path: str) -> types.CodeType:
    if os.path.isdir(absolute):
        raise ScriptNotFound(f"{path}: is a directory; expected a Python script")
    if not os.path.exists(absolute):
        raise ScriptNotFound(f"{path}: no such script")
    if not os.path.isfile(absolute):
        raise ScriptNotFound(f"{path}: not a regular file; expected a Python script")
    try:
        with open(absolute, "rb") as file:
            source = file.read()
    except OSError as exc:
        raise ScriptNotFound(f"{path}: cannot read the script ({exc.strerror})") from exc
    try:
        return compile(source, absolute, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes, on Python before 3.11.4
        raise ScriptNotFound(describe_syntax_error(path, exc)) from exc


def _exit_result(exc: SystemExit) -> ScriptResult:
    """Python's own rules: None is 0, an int is itself, anything else is printed and gives 1."""
    if exc.code is None:
        return ScriptResult(0)
    if isinstance(exc.code, int):
        return ScriptResult(exc.code)
    return ScriptResult(1, str(exc.code))


def _last_line(exc: BaseException, filename: str) -> int | None:
    """The last line of the script file in the traceback of ``exc`` (None when it has none)."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _script_traceback(exc: BaseException, code: types.CodeType) -> str:
    """The traceback starting at the script's module frame, as ``python SCRIPT`` prints it
    (without the frames of gradscope's instrumentation: the monitor wraps ``backward()`` and
    ``step()``, and the torch adapter's function mode passes on the script's torch calls)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    shown = traceback.TracebackException(type(exc), exc, tb or exc.__traceback__)
    shown.stack = traceback.StackSummary.from_list(
        [frame for frame in shown.stack if not is_instrumentation_file(frame.filename)])
    return "".join(shown.format())


#: Environment variables that mark a process started for one rank of a distributed job.
RANK_VARIABLES = ("LOCAL_RANK", "RANK")


class ProcessFollower:
    """Follows the processes a script starts to run itself again (one per rank, as Lightning's
    ``devices=N`` launcher does), the way coverage tools follow subprocesses.

    While active (``with follower:``), ``subprocess.Popen`` of ``python SCRIPT ARGS`` (the same
    script file) becomes ``python -m gradscope run OPTIONS SCRIPT ARGS`` with ``marker`` set in its
    environment, so that the new process is watched too. Another process started with a rank in
    its environment (``LOCAL_RANK``/``RANK``) cannot be followed: it is listed in :attr:`unfollowed`.

    Args:
        script: the script being run.
        child_arguments: ``child_arguments(script, args)``: the interpreter arguments that run
            ``gradscope run`` on ``script`` with the same options.
        marker: ``(name, value)`` of the environment variable that tells the new process it was
            followed.
    """

    def __init__(self, script: str, child_arguments: Callable[[str, list[str]], list[str]],
                 marker: tuple[str, str]) -> None:
        self.script = os.path.realpath(script)
        self.child_arguments = child_arguments
        self.marker = marker
        self.followed: list[list[str]] = []
        self.unfollowed: list[list[str]] = []
        self._original: Any = None

    def __enter__(self) -> "ProcessFollower":
        import subprocess

        self._original = subprocess.Popen.__init__
        original, follower = self._original, self

        @functools.wraps(original)
        def __init__(popen: Any, args: Any, *rest: Any, **kwargs: Any) -> None:
            args, kwargs = follower._rewrite(args, rest, kwargs)
            original(popen, args, *rest, **kwargs)

        subprocess.Popen.__init__ = __init__
        return self

    def __exit__(self, *exc_info: Any) -> None:
        import subprocess

        if self._original is not None:
            subprocess.Popen.__init__ = self._original
            self._original = None

    def _rewrite(self, args: Any, rest: tuple, kwargs: dict) -> tuple[Any, dict]:
        if not isinstance(args, (list, tuple)) or rest or kwargs.get("shell"):
            return args, kwargs
        command = [os.fspath(part) for part in args]
        environment = kwargs.get("env")
        ranked = any(name in (environment if environment is not None else os.environ) for name in RANK_VARIABLES)
        if len(command) >= 2 and _is_python(command[0]) and os.path.realpath(command[1]) == self.script:
            child = dict(environment if environment is not None else os.environ)
            child[self.marker[0]] = self.marker[1]
            self.followed.append(command)
            return [command[0], *self.child_arguments(command[1], command[2:])], {**kwargs, "env": child}
        if ranked and command and _is_python(command[0]):
            self.unfollowed.append(command)
        return args, kwargs


def _is_python(executable: str) -> bool:
    return os.path.realpath(executable) == os.path.realpath(sys.executable) or \
        os.path.basename(executable).startswith("python")
