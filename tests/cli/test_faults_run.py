"""Faults for ``gradscope run SCRIPT``: bad scripts, scripts that exit or raise in every way, bad
options and outputs, signals.

Each case ends with the documented exit code and exactly one ``error:`` line (none when the
script's own exit code passes through). A script that raises gets its traceback as Python prints
it (``run`` promises that), then gradscope's one line naming the file and line. With
``--format json`` stdout is one ``gradscope.run/1`` document whatever the script writes, and
the steps recorded before the fault are all in the log.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]

TRAIN = """import os, sys
import gradscope as gs
from gradscope import nn

model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
optimizer = gs.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    optimizer.zero_grad()
    loss = (model(gs.ones(2, 3)) ** 2).mean()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
"""


def then(code: str) -> str:
    """TRAIN, then ``code`` after the three steps."""
    return TRAIN + code + "\n"


def first(code: str) -> str:
    """``code`` before anything trains."""
    return "import os, sys\n" + code + "\n" + TRAIN


@dataclass
class Case:
    """One fault of ``run``: files to write, the command line and what must come out."""

    id: str
    argv: list[str]
    code: int
    message: str = ""                 # in the one ``error:`` line (or in stderr when no line is due)
    files: dict[str, Any] = field(default_factory=dict)
    error_line: bool = True           # exactly one ``error:`` line (else none)
    traceback: bool = False           # the script's traceback is shown
    steps_logged: int | None = None   # records in run.jsonl
    check: Callable[[Path, Any], None] | None = None


JSON = ["run", "--format", "json", "--log", "run.jsonl", "train.py"]


def exit_cases() -> list[Case]:
    """What the script does to end: its own exit code passes through, anything raised is exit 3."""
    cases = [
        Case("sys-exit-0", JSON, 0, files={"train.py": then("sys.exit(0)")}, error_line=False, steps_logged=3),
        Case("sys-exit-5", JSON, 5, files={"train.py": then("sys.exit(5)")}, error_line=False, steps_logged=3),
        Case("sys-exit-text", JSON, 1, "bye", files={"train.py": then("sys.exit('bye')")}, error_line=False,
             steps_logged=3),
        Case("sys-exit-none", JSON, 0, files={"train.py": then("sys.exit()")}, error_line=False, steps_logged=3),
        Case("systemexit-before-training", JSON, 4, files={"train.py": first("raise SystemExit(4)")},
             error_line=False, steps_logged=0),
        Case("argparse-refuses", JSON, 2, "the following arguments are required: --epochs",
             files={"train.py": first("import argparse\np = argparse.ArgumentParser()\n"
                                      "p.add_argument('--epochs', required=True)\np.parse_args()")},
             error_line=False),
    ]
    raised = {
        "valueerror": ("raise ValueError('bad config')", "the script raised ValueError: bad config (line 13)"),
        "keyboardinterrupt-raised": ("raise KeyboardInterrupt", "the script raised KeyboardInterrupt (line 13)"),
        "baseexception": ("raise BaseException('odd')", "the script raised BaseException: odd (line 13)"),
        "custom-baseexception": ("class Stop(BaseException):\n    pass\nraise Stop()", "raised Stop (line 15)"),
        "generatorexit": ("raise GeneratorExit", "the script raised GeneratorExit (line 13)"),
        "non-scalar-backward": ("model(gs.ones(2, 3)).expand(2, 2).backward()",
                                "grad can be implicitly created only for scalar outputs"),
        "no-parameters": ("gs.optim.SGD(nn.Tanh().parameters(), lr=0.1)", "optimizer got an empty parameter list"),
    }
    for name, (code, message) in raised.items():
        cases.append(Case(name, JSON, 3, message, {"train.py": then(code)}, traceback=True, steps_logged=3))
    forward = TRAIN.replace("model = ", "class Boom(nn.Module):\n    def forward(self, x):\n"
                                       "        raise RuntimeError('forward broke')\n\n\nmodel = ")
    cases.append(Case("forward-raises", JSON, 3, "the script raised RuntimeError: forward broke (line 7)",
                      {"train.py": forward.replace("nn.Tanh()", "Boom()")}, traceback=True, steps_logged=0))
    return cases


def script_cases() -> list[Case]:
    """Scripts that cannot run at all: exit 3 (a model error), one line, nothing else."""
    return [
        Case("script-missing", ["run", "nope.py"], 3, "nope.py: no such script"),
        Case("script-is-directory", ["run", "."], 3, ".: is a directory"),
        Case("script-dev-null", ["run", "/dev/null"], 3, "/dev/null: not a regular file"),
        Case("script-syntax-error", ["run", "train.py"], 3, "train.py:1: syntax error", {"train.py": "def f(:\n"}),
        Case("script-not-utf8", ["run", "train.py"], 3, "train.py:1: syntax error",
             {"train.py": b"x = '\xff\xfe'\n"}),
        Case("script-null-bytes", ["run", "train.py"], 3, "train.py: syntax error: source code",
             {"train.py": b"x = 1\x00\n"}),
        Case("script-is-a-binary", ["run", "train.py"], 3, "train.py: syntax error",
             {"train.py": b"\x7fELF\x02\x01\x01\x00\x00\x00\xd0\x8f\n"}),
        Case("script-missing-json", ["run", "--format", "json", "nope.py"], 3, "no such script"),
        Case("no-script", ["run"], 2, "Missing argument 'SCRIPT'"),
        Case("nproc-script-missing", ["run", "--nproc", "2", "nope.py"], 3, "nope.py: no such script"),
        Case("nproc-script-is-directory", ["run", "--nproc", "2", "."], 3, ".: is a directory"),
        Case("nproc-script-syntax-error", ["run", "--nproc", "2", "train.py"], 3, "train.py:1: syntax error",
             {"train.py": "def f(:\n"}),
    ]


def _stdout_is_document(root: Path, result: Any) -> None:
    assert json.loads(result.stdout)["schema"] == "gradscope.run/1"


def option_cases() -> list[Case]:
    """Every option of ``run`` from a flag and from ``[tool.gradscope]``: exit 2 naming where it came from."""
    cases = []
    for value in ("nan", "inf", "-inf", "-1", "0", "1e400", "fast", ""):
        cases.append(Case(f"clip-flag-{value or 'empty'}", ["run", "--clip", value, "train.py"], 2, "--clip:",
                          {"train.py": TRAIN}))
    config = {
        "clip-nan": ("clip = nan", "tool.gradscope.clip: expected a finite number >= 0, got nan"),
        "clip-negative": ("clip = -1", "tool.gradscope.clip: expected a finite number >= 0, got -1"),
        "clip-zero-run-table": ("[tool.gradscope.run]\nclip = 0", "tool.gradscope.run.clip: expected a number above 0"),
        "clip-text": ("clip = \"fast\"", "tool.gradscope.clip: expected a finite number >= 0, got 'fast'"),
        "clip-mode-unknown": ("mode = \"max\"", "tool.gradscope.mode: expected one of norm, value"),
        "nan-not-bool": ("nan = \"yes\"", "tool.gradscope.nan: expected true or false, got 'yes'"),
        "log-number": ("log = 3", "tool.gradscope.log: expected a non-empty string, got 3"),
        "unknown-key": ("clip_norm = 1.0", "unknown key 'clip_norm'"),
        "unknown-run-key": ("[tool.gradscope.run]\nepochs = 3", "tool.gradscope.run: unknown key 'epochs'"),
    }
    for name, (text, message) in config.items():
        toml = text if text.startswith("[") else f"[tool.gradscope]\n{text}"
        cases.append(Case(f"config-{name}", ["run", "train.py"], 2, message,
                          {"train.py": TRAIN, "pyproject.toml": toml + "\n"}))
    for value in ("0", "-1", "two", "100000"):
        cases.append(Case(f"nproc-{value}", ["run", "--nproc", value, "train.py"], 2, "--nproc: expected",
                          {"train.py": TRAIN}))
    cases += [
        Case("nproc-in-config", ["run", "train.py"], 2, "unknown key 'nproc'",
             {"train.py": TRAIN, "pyproject.toml": "[tool.gradscope.run]\nnproc = 2\n"}),
        Case("clip-mode-flag-unknown", ["run", "--clip-mode", "max", "train.py"], 2, "--clip-mode: expected one of",
             {"train.py": TRAIN}),
        Case("format-junit-refused", ["run", "--format", "junit", "train.py"], 2, "'junit' is not one of",
             {"train.py": TRAIN}),
        Case("pyproject-not-utf8", ["run", "train.py"], 2, "not UTF-8",
             {"train.py": TRAIN, "pyproject.toml": b"[tool.gradscope]\nlog = '\xff'\n"}),
        Case("pyproject-empty", ["run", "--format", "json", "train.py"], 0,
             files={"train.py": TRAIN, "pyproject.toml": ""}, error_line=False, check=_stdout_is_document),
    ]
    return cases


def _script_untouched(root: Path, result: Any) -> None:
    assert (root / "train.py").read_text() == TRAIN


def _log_in_start_directory(root: Path, result: Any) -> None:
    assert (root / "run.jsonl").exists() and not (root / "sub" / "run.jsonl").exists()
    _stdout_is_document(root, result)


def output_cases() -> list[Case]:
    """Bad ``--log`` paths are exit 2 before the script runs; a chdir does not move the log."""
    marker = first("open('ran', 'w').close()")
    return [
        Case("log-is-directory", ["run", "--log", ".", "train.py"], 2, "--log .: cannot write there: is a directory",
             {"train.py": marker}, check=lambda root, result: not (root / "ran").exists() or pytest.fail("ran")),
        Case("log-under-a-file", ["run", "--log", "train.py/dir/run.jsonl", "train.py"], 2,
             "--log train.py/dir/run.jsonl: cannot write there: ", {"train.py": marker},
             check=lambda root, result: not (root / "ran").exists() or pytest.fail("ran")),
        Case("log-new-directories", ["run", "--format", "json", "--log", "no/dir/run.jsonl", "train.py"], 0, files={"train.py": TRAIN},
             error_line=False, check=lambda root, result: (root / "no" / "dir" / "run.jsonl").read_text()
             or pytest.fail("empty log")),
        Case("log-is-the-script", ["run", "--log", "./train.py", "train.py"], 2,
             "that is the script; refusing to overwrite it", {"train.py": TRAIN}, check=_script_untouched),
        Case("config-log-is-directory", ["run", "train.py"], 2, "tool.gradscope.run.log d: cannot write there",
             {"train.py": TRAIN, "d/keep": "", "pyproject.toml": "[tool.gradscope.run]\nlog = \"d\"\n"}),
        Case("log-dev-full", ["run", "--format", "json", "--log", "/dev/full", "train.py"], 2,
             "cannot write /dev/full (--log)", {"train.py": TRAIN}, check=_stdout_is_document),
        Case("chdir-keeps-the-log", JSON, 0, files={"train.py": first("os.makedirs('sub'); os.chdir('sub')")},
             error_line=False, steps_logged=3, check=_log_in_start_directory),
    ]


CASES = exit_cases() + script_cases() + option_cases() + output_cases()


def test_corpus_is_large_enough():
    assert len(CASES) >= 45
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_run_fault(case: Case, gradscope, tmp_path):
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    result = gradscope(*case.argv, code=case.code)
    stderr = result.stderr
    assert "internal error" not in stderr, stderr
    assert ("Traceback (most recent call last)" in stderr) == case.traceback, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    if case.error_line:
        assert len(errors) == 1, stderr
        assert case.message in errors[0], stderr
    else:
        assert errors == [], stderr
        assert case.message in stderr, stderr
    if "--format" in case.argv and case.argv[case.argv.index("--format") + 1] == "json" and case.code not in (2, 3) \
            or case.traceback:
        assert json.loads(result.stdout)["schema"] == "gradscope.run/1"
    if case.steps_logged is not None:
        log = tmp_path / "run.jsonl"
        lines = log.read_text().splitlines() if log.exists() else []
        assert [json.loads(line)["step"] for line in lines] == list(range(case.steps_logged))
    if case.check is not None:
        case.check(tmp_path, result)


def test_debug_adds_nothing_but_the_script_traceback(gradscope, tmp_path):
    (tmp_path / "train.py").write_text(then("raise ValueError('bad')"))
    result = gradscope("run", "--debug", "train.py", code=3)
    assert result.stderr.count("Traceback (most recent call last)") == 1
    assert "monitor" not in result.stderr.split("ValueError: bad")[0]


def test_monitor_frames_are_not_in_the_script_traceback(gradscope, tmp_path):
    (tmp_path / "train.py").write_text(then("model(gs.ones(2, 3)).expand(2, 2).backward()"))
    stderr = gradscope("run", "train.py", code=3).stderr
    assert os.path.join("gradscope", "monitor") not in stderr


# ------------------------------------------------------------------------------ real processes
def _python(args: list[str], cwd: Path, **kwargs: Any) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.Popen([sys.executable, "-m", "gradscope", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def test_json_stdout_survives_writes_to_descriptor_1(tmp_path):
    (tmp_path / "train.py").write_text(then("os.write(1, b'raw bytes\\n')\n"
                                            "import subprocess\n"
                                            "subprocess.run([sys.executable, '-c', 'print(\"child\")'])\n"
                                            "print('printed')"))
    process = _python(["run", "--format", "json", "train.py"], tmp_path)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert json.loads(stdout)["steps_run"] == 3
    for text in ("raw bytes", "child", "printed", "step 2 loss"):
        assert text in stderr


SLOW = TRAIN.replace("for step in range(3):", "import time\nfor step in range(10_000):") \
    .replace('print(f"step {step}', 'time.sleep(0.02)\n    print(f"step {step}')


@pytest.mark.parametrize("signum, code, word", [(signal.SIGINT, 130, "interrupted"),
                                                 (signal.SIGTERM, 143, "terminated (SIGTERM)")])
def test_signal_mid_run_keeps_the_log_and_the_document(tmp_path, signum, code, word):
    (tmp_path / "train.py").write_text(SLOW.replace('print(f"step', 'print(f"step', 1) + "\n")
    process = _python(["run", "--format", "json", "--log", "run.jsonl", "train.py"], tmp_path)
    deadline = time.monotonic() + 60
    log = tmp_path / "run.jsonl"
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count("\n") < 3):
        time.sleep(0.05)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    document = json.loads(stdout)
    assert document["status"] == "interrupted"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [record["step"] for record in records] == list(range(len(records)))
    assert len(records) >= 3 and document["steps_run"] == len(records)
    assert word in stderr and "Traceback" not in stderr


def test_no_numpy_warnings_leak_from_the_engine(tmp_path):
    """Overflow inside gradscope's engine is reported by gradscope, not as numpy RuntimeWarnings."""
    (tmp_path / "train.py").write_text(TRAIN.replace("lr=0.1", "lr=1e38").replace("gs.ones(2, 3)", "gs.ones(2, 3) * 1e3"))
    process = _python(["run", "--nan", "--inf", "train.py"], tmp_path)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    assert "Warning" not in stderr and "First non-finite value" in stderr, stderr
