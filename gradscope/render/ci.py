"""Check reports -> CI formats: JUnit XML and GitHub Actions workflow-command annotations."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ElementTree
from typing import TYPE_CHECKING, Mapping, Union

from gradscope.monitor.records import CHECK_FINDINGS

if TYPE_CHECKING:
    from gradscope.monitor.records import CheckReport, Finding


def check_to_junit(report: "CheckReport", suite_name: str = "gradscope") -> str:
    """One JUnit ``<testcase>`` per check; failing checks carry their findings as the failure text."""
    failures = sum(check.status == "fail" for check in report.checks)
    skipped = sum(check.status == "skip" for check in report.checks)
    suite = ElementTree.Element("testsuite", name=suite_name, tests=str(len(report.checks)),
                                failures=str(failures), errors="0", skipped=str(skipped))
    for check in report.checks:
        case = ElementTree.SubElement(suite, "testcase", classname=f"gradscope.{report.model}", name=check.name)
        if check.status == "fail":
            failure = ElementTree.SubElement(case, "failure", message=check.message, type=check.name)
            failure.text = "\n".join(finding.message for finding in _findings_of(report, check.name)) \
                or check.message
        elif check.status == "skip":
            ElementTree.SubElement(case, "skipped", message=check.message)
    suites = ElementTree.Element("testsuites")
    suites.append(suite)
    ElementTree.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(suites, encoding="unicode") + "\n"


# Finding severity -> GitHub Actions annotation command.
_GITHUB_LEVELS = {"error": "error", "warning": "warning", "info": "notice"}


# Where a module is defined: a line of the model file, or ``(file, line)`` in any file.
Place = Union[int, "tuple[str, int]"]


def check_to_github(report: "CheckReport", file: str, lines: Mapping[str, Place] | None = None) -> str:
    """GitHub Actions annotations: ``::error file=F,line=L,title=T::message`` per finding
    (``::warning`` for a warning, ``::notice`` for an informational note).

    A finding with a ``source`` (the line where a NaN started, a ``.detach()``) points at it, in
    whichever file it is; otherwise at where its module is defined (``lines``); otherwise at
    line 1 of the model file. A path that is the model file is written as ``file`` is.

    Args:
        report: the check report.
        file: the model file path as the annotation should name it.
        lines: module path -> its line in ``file``, or ``(path, line)`` in another file.
    """
    lines = lines or {}
    out = []
    for finding in report.findings:
        level = _GITHUB_LEVELS.get(finding.severity, "warning")
        path, line = _place(finding.source, lines.get(finding.module or ""), file)
        title = f"gradscope {finding.check}"
        out.append(f"::{level} file={_escape_property(path)},line={line},title={_escape_property(title)}::"
                   f"{_escape_data(finding.message)}")
    for check in report.checks:
        if check.status == "fail" and not _findings_of(report, check.name):
            out.append(f"::error file={_escape_property(file)},line=1,title=gradscope {check.name}::"
                       f"{_escape_data(check.message)}")
    summary = "passed" if report.passed else "failed"
    out.append(f"gradscope check {summary}: " + ", ".join(f"{c.name}={c.status}" for c in report.checks))
    return "\n".join(out) + "\n"


def _place(source: str | None, defined: Place | None, file: str) -> tuple[str, int]:
    """``(path, line)`` of an annotation: the finding's ``file:line`` source, else where its module
    is defined, else line 1 of ``file``."""
    if source is not None:
        path, _, line = source.rpartition(":")
        if path and line.isdigit():
            return (file if _same_file(path, file) else path), int(line)
    if isinstance(defined, tuple):
        return (file if _same_file(defined[0], file) else defined[0]), defined[1]
    return file, defined or 1


def _same_file(path: str, file: str) -> bool:
    return os.path.normpath(path) == os.path.normpath(file) or os.path.realpath(path) == os.path.realpath(file)


def _findings_of(report: "CheckReport", check_name: str) -> list["Finding"]:
    kinds = CHECK_FINDINGS.get(check_name, ())
    return [finding for finding in report.findings if finding.check in kinds]


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
