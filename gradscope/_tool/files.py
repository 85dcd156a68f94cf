"""Writing files so that an interruption never leaves half a file behind.

:func:`atomic_write` writes into a temporary file next to the target and renames it over the
target once everything is written and flushed: a crash, Ctrl-C or a full disk leaves either the
old file or the new one, never a truncated one. Targets that are not regular files (``/dev/null``,
``/dev/full``, a named pipe) cannot be replaced by a rename and are written directly.
:func:`check_writable` tells whether a path can be written, creating the directories an output
needs as loggers do (``--log runs/gradscope.jsonl`` in a new project).
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

__all__ = ["atomic_write", "atomic_write_text", "check_writable", "make_parent_directories"]


def _is_special(path: Path) -> bool:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call ``write(file)`` on a temporary file, then rename it to ``path``.

    Raises:
        OSError: the file cannot be written (the target is left as it was).
    """
    target = Path(path)
    if _is_special(target):
        with open(target, "wb") as file:
            write(file)
        return
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        mode = os.stat(target).st_mode & 0o777 if target.exists() else 0o666 & ~_umask()
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """:func:`atomic_write` for UTF-8 text."""
    atomic_write(path, lambda file: file.write(text.encode("utf-8")))


def check_writable(path: str | Path, make_directories: bool = False) -> str | None:
    """Why ``path`` cannot be written (a short phrase), or None when it can.

    An existing file must be a writable file, not a directory; a new file needs a directory in
    which a file can actually be created (probed, so read-only file systems count). With
    ``make_directories``, missing directories above ``path`` are created first (those that could
    be created stay, even when the file then cannot be written).
    """
    target = Path(path)
    if make_directories:
        problem = make_parent_directories(target)
        if problem is not None:
            return problem
    if target.is_dir():
        return "is a directory"
    if target.exists():
        if not os.access(target, os.W_OK):
            return "is not writable"
        if _is_special(target):
            return None
    parent = target.parent
    if not parent.exists():
        return f"directory {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    try:
        descriptor, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=parent)
    except OSError as exc:
        return f"cannot create files in {parent} ({exc.strerror or exc})"
    os.close(descriptor)
    os.unlink(probe)
    return None


def make_parent_directories(path: str | Path) -> str | None:
    """Create the missing directories above ``path``; why they cannot be created, or None."""
    parent = Path(path).parent
    if parent.is_dir():
        return None
    existing = parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot create directory {parent} ({exc.strerror or exc})"
    return None


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current

