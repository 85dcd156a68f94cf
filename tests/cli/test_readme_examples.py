"""The `$ gradscope ...` output blocks of README.md and of every page in docs/ are what the commands
print, byte for byte (apart from the spaces rich pads lines with)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from gradscope.cli import cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLE = re.compile(r"^```\n\$ (gradscope [^\n]*)\n(.*?)^```", re.M | re.S)


def _blocks(page: Path) -> list[tuple[str, str]]:
    return EXAMPLE.findall(page.read_text())


def _needs_torch(command: str) -> bool:
    """Whether the example runs a file of the command line that imports torch."""
    files = [ROOT / word for word in shlex.split(command.split(" < ")[0].split("; echo")[0]) if word.endswith(".py")]
    return any(re.search(r"^\s*(import|from) torch\b", file.read_text(), re.M) for file in files if file.is_file())


def _examples() -> list:
    params = []
    for page in PAGES:
        for command, expected in _blocks(page):
            params.append(pytest.param(command, expected, id=f"{page.name}: {command[:60]}"))
    return params


@pytest.mark.parametrize(("command", "expected"), _examples())
def test_documented_example_output(command, expected, monkeypatch):
    if _needs_torch(command):
        pytest.importorskip("torch")
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("COLUMNS", raising=False)
    words = shlex.split(command.split(" < ")[0].split("; echo")[0])
    if "--nproc" in words:
        pytest.importorskip("torch.distributed")
    result = CliRunner().invoke(cli, words[1:], catch_exceptions=False)
    got = result.stdout + result.stderr
    if "; echo" in command:
        got += f"exit code {result.exit_code}\n"
    assert _lines(got, words) == _lines(expected, words)


def _lines(text: str, words: list[str]) -> list[str]:
    """The lines without the blanks rich pads them with. Under --nproc the ranks' own lines
    interleave differently from run to run: each rank's lines keep their order, ranks in order."""
    lines = [line.rstrip() for line in text.splitlines()]
    if "--nproc" in words:
        ranked = sorted((line for line in lines if re.match(r"\[rank\d+\] ", line)),
                        key=lambda line: int(line[5:line.index("]")]))
        lines = ranked + [line for line in lines if not re.match(r"\[rank\d+\] ", line)]
    return lines


def test_readme_and_docs_have_examples():
    assert len(_blocks(ROOT / "README.md")) >= 1
    assert sum(len(_blocks(page)) for page in PAGES) >= 19


def test_every_docs_page_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    for page in PAGES[1:]:
        assert f"](docs/{page.name})" in readme, page.name


def test_relative_links_between_pages_resolve():
    for page in PAGES:
        for target, anchor in re.findall(r"\]\((?!https?:)([^)#\s]*)(?:#([^)\s]*))?\)", page.read_text()):
            linked = (page.parent / target).resolve() if target else page
            assert linked.is_file(), f"{page.name} links to missing {target}"
            if anchor:
                assert anchor in _anchors(linked), f"{page.name} links to missing anchor {target}#{anchor}"


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings (lower case, punctuation dropped, spaces to '-';
    a repeated heading gets -1, -2, ...)."""
    anchors: set[str] = set()
    fence = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        match = re.match(r"^#{1,6} (.*)", line)
        if match and not fence:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-")
            candidate, n = slug, 0
            while candidate in anchors:
                n += 1
                candidate = f"{slug}-{n}"
            anchors.add(candidate)
    return anchors


SCRIPT_EXAMPLE = re.compile(r"^```python\n(.*?)^```\n+```\n\$ python (\w+\.py)\n(.*?)^```", re.M | re.S)


def _script_examples() -> list:
    return [pytest.param(source, name, expected, id=f"{page.name}: python {name}")
            for page in PAGES for source, name, expected in SCRIPT_EXAMPLE.findall(page.read_text())]


@pytest.mark.parametrize(("source", "name", "expected"), _script_examples())
def test_documented_script_output(source, name, expected, tmp_path):
    """A ```python block followed by a `$ python NAME.py` block: that file prints exactly that."""
    import os
    import subprocess
    import sys

    (tmp_path / name).write_text(source)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("COLUMNS", None)
    result = subprocess.run([sys.executable, name], cwd=tmp_path, env=env, capture_output=True, text=True,
                            stdin=subprocess.DEVNULL, timeout=120)
    got = result.stdout + result.stderr
    assert [line.rstrip() for line in got.splitlines()] == [line.rstrip() for line in expected.splitlines()]


def test_script_examples_found():
    assert len(_script_examples()) >= 1
