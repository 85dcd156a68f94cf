"""A corpus of bad inputs and faults, each with the exit code and the one line it must give.

Every case is a small project (a model file, maybe a ``pyproject.toml`` or a replay bundle) and a
command line. It must end with the documented exit code, print exactly one clear ``error:`` line
on stderr (no traceback without ``--debug``), keep stdout a single valid document where a
machine-readable format was asked for, and lose nothing that was recorded (log lines).
"""
from __future__ import annotations

import io
import json
import os
import signal
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from xml.etree import ElementTree

import numpy as np
import pytest

from tests.cli.conftest import sample

HEADER = "import os, sys\nimport gradscope as gs\nfrom gradscope import nn\n"
MODEL = HEADER + """
model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
loss_fn = nn.MSELoss()


def batch(step):
    g = gs.Generator().manual_seed(step)
    return gs.randn(5, 3, generator=g), gs.randn(5, 2, generator=g)
"""
NAN_MODEL = MODEL.replace("return gs.randn(5, 3, generator=g), gs.randn(5, 2, generator=g)",
                          "x = gs.randn(5, 3, generator=g)\n"
                          "    return (x * float('nan') if step == 1 else x), gs.randn(5, 2, generator=g)")


def body(code: str) -> str:
    """MODEL with ``code`` appended (later definitions replace earlier ones)."""
    return MODEL + "\n" + code + "\n"


def forward_doing(statement: str) -> str:
    """A model whose forward runs ``statement`` first."""
    return body(f"""
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        {statement}
        return self.fc(x)


model = Net()
""")


@dataclass
class Case:
    """One fault: files to write, the command line, and what must come out."""

    id: str
    argv: list[str]
    code: int
    message: str = ""
    files: dict[str, Any] = field(default_factory=dict)
    stdout: str | None = None            # "json", "junit", "github", "dot", "empty" or None (not checked)
    check: Callable[[Path, Any], None] | None = None
    one_line: bool = True


COMMANDS_ON_MODEL = [
    ("check", ["check", "model.py", "--steps", "1", "--format", "json"]),
    ("inspect", ["inspect", "model.py", "--format", "json"]),
    ("watch", ["watch", "model.py", "--steps", "2", "--nan", "--format", "json"]),
    ("clip", ["clip", "model.py", "--max", "1", "--format", "json"]),
    ("graph", ["graph", "model.py", "--format", "dot"]),
    ("debug", ["debug", "model.py", "--commands", "continue"]),
]


def user_code_cases() -> list[Case]:
    """Whatever the model's code raises is exit 3 with the file and line, never a pass."""
    faults = {
        "sys-exit-0-import": (body("sys.exit(0)"), "running the model file called sys.exit(0)"),
        "sys-exit-5-import": (body("sys.exit(5)"), "running the model file called sys.exit(5)"),
        "sys-exit-none-import": (body("sys.exit()"), "running the model file called sys.exit()"),
        "sys-exit-text-import": (body("sys.exit('bye')"), "called sys.exit('bye')"),
        "systemexit-forward": (forward_doing("raise SystemExit(0)"), "the model's forward called sys.exit(0)"),
        "sys-exit-batch": (body("def batch(step):\n    sys.exit(0)"), "batch(0) called sys.exit(0)"),
        "keyboardinterrupt-import": (body("raise KeyboardInterrupt"), "raised KeyboardInterrupt"),
        "keyboardinterrupt-forward": (forward_doing("raise KeyboardInterrupt('fake')"),
                                      "the model's forward raised KeyboardInterrupt: fake"),
        "baseexception-forward": (forward_doing("raise BaseException('odd')"), "raised BaseException: odd"),
        "generatorexit-batch": (body("def batch(step):\n    raise GeneratorExit"), "batch(0) raised GeneratorExit"),
        "custom-baseexception": (body("class Stop(BaseException):\n    pass\n\ndef loss_fn(o, t):\n    raise Stop()"),
                                 "loss_fn(output, targets) raised Stop"),
    }
    cases = []
    for name, (source, message) in faults.items():
        for command, argv in COMMANDS_ON_MODEL:
            stdout = "empty" if "--format" in argv else None
            cases.append(Case(f"{name}-{command}", argv, 3, message, {"model.py": source}, stdout=stdout))
    more = {
        "sys-exit-loss": (body("def loss_fn(o, t):\n    sys.exit(0)"), "loss_fn(output, targets) called sys.exit(0)"),
        "sys-exit-compute-loss": (body("def compute_loss(model, batch):\n    sys.exit(1)"),
                                  "compute_loss(model, batch) called sys.exit(1)"),
        "sys-exit-build-model": (body("del model\ndef build_model():\n    sys.exit(0)"),
                                 "build_model() called sys.exit(0)"),
        "sys-exit-make-optimizer": (body("def make_optimizer(p):\n    sys.exit(0)"),
                                    "make_optimizer(parameters) called sys.exit(0)"),
        "sys-exit-backward-hook": (forward_doing("x = x.clone().requires_grad_()\n"
                                                 "        x.register_hook(lambda g: sys.exit(0))"),
                                   "backward called sys.exit(0)"),
        "sys-exit-scheduler": (body("class Sched:\n    def step(self):\n        sys.exit(0)\n\n"
                                    "def make_optimizer(p):\n    return gs.optim.SGD(p, lr=0.1), Sched()"),
                               "the scheduler's step() called sys.exit(0)"),
        "sys-exit-optimizer-step": (body("class Opt(gs.optim.SGD):\n    def step(self, closure=None):\n"
                                         "        sys.exit(0)\n\ndef make_optimizer(p):\n"
                                         "    return Opt(p, lr=0.1)"), "the model's code called sys.exit(0)"),
        "argparse-required": (body("import argparse\np = argparse.ArgumentParser()\np.add_argument('--data', "
                                   "required=True)\nargs = p.parse_args()"), "argparse refused them"),
        "no-parameters": (body("model = nn.Sequential(nn.Tanh())\ndef loss_fn(o, t):\n"
                               "    return (o * gs.ones(1, requires_grad=True)).sum()"), "has no parameters"),
        "batch-3-values": (body("def batch(step):\n    return gs.randn(5, 3), gs.randn(5, 2), 1"),
                           "batch(0) returned 3 values"),
        "scheduler-without-step": (body("def make_optimizer(p):\n    return gs.optim.SGD(p, lr=0.1), 3"),
                                   "expected (optimizer, scheduler)"),
    }
    for name, (source, message) in more.items():
        cases.append(Case(name, ["check", "model.py", "--steps", "2", "--format", "junit"], 3, message,
                          {"model.py": source}, stdout="empty"))
    cases.append(Case("keyboardinterrupt-forward-watch-not-130", ["watch", "model.py", "--steps", "3"], 3,
                      "raised KeyboardInterrupt", {"model.py": forward_doing("raise KeyboardInterrupt")}))
    return cases


def argv_cases() -> list[Case]:
    sees_argv = body("assert sys.argv == ['model.py'], sys.argv\nimport argparse\n"
                     "argparse.ArgumentParser().parse_args()")
    optional = body("import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', default=1.0)\n"
                    "args = p.parse_args()\nassert args.lr == 1.0")
    return [
        Case("argv-is-the-model-path", ["inspect", "model.py", "--format", "json"], 0, files={"model.py": sees_argv},
             stdout="json", one_line=False),
        Case("argparse-optional-arguments", ["check", "model.py", "--steps", "1", "--format", "json"], 0,
             files={"model.py": optional}, stdout="json", one_line=False),
    ]


PRINTS = {
    "print-import": body("print('hello from the model file')"),
    "print-forward": forward_doing("print('forward', x.shape)"),
    "print-batch": body("_batch = batch\ndef batch(step):\n    print('batch', step)\n    return _batch(step)"),
    "print-hook": body("model[0].register_forward_hook(lambda m, i, o: print('hook'))"),
    "stdout-write-loss": body("_loss = loss_fn\ndef loss_fn(o, t):\n    sys.stdout.write('loss!\\n')\n"
                              "    return _loss(o, t)"),
}


def stdout_cases() -> list[Case]:
    """With a machine-readable format, what the model prints goes to stderr."""
    cases = []
    commands = [
        ("check-json", ["check", "model.py", "--steps", "2", "--format", "json"], "json"),
        ("check-junit", ["check", "model.py", "--steps", "2", "--format", "junit"], "junit"),
        ("check-github", ["check", "model.py", "--steps", "2", "--format", "github"], "github"),
        ("inspect-json", ["inspect", "model.py", "--format", "json"], "json"),
        ("watch-json", ["watch", "model.py", "--steps", "2", "--format", "json"], "json"),
        ("clip-json", ["clip", "model.py", "--max", "1", "--format", "json"], "json"),
        ("graph-dot", ["graph", "model.py", "--format", "dot"], "dot"),
    ]
    for name, source in PRINTS.items():
        for command, argv, kind in commands:
            cases.append(Case(f"{name}-{command}", argv, 0, files={"model.py": source}, stdout=kind,
                              one_line=False))
    return cases


FLAG_CASES = [
    ("clip-max-nan", ["clip", "model.py", "--max", "nan"], "--max: expected a finite number >= 0, got nan"),
    ("clip-max-inf", ["clip", "model.py", "--max", "inf"], "--max: expected a finite number >= 0, got inf"),
    ("clip-max-negative", ["clip", "model.py", "--max", "-1"], "--max: expected a finite number >= 0, got -1"),
    ("clip-max-text", ["clip", "model.py", "--max", "big"], "--max: expected a finite number >= 0, got 'big'"),
    ("clip-max-missing", ["clip", "model.py"], "missing option --max"),
    ("clip-mode-bad", ["clip", "model.py", "--max", "1", "--mode", "cube"], "--mode: expected one of norm, value"),
    ("check-max-norm-nan", ["check", "model.py", "--max-norm", "nan"], "--max-norm: expected a finite number"),
    ("check-min-norm-nan", ["check", "model.py", "--min-norm", "nan"], "--min-norm: expected a finite number"),
    ("check-min-norm-negative", ["check", "model.py", "--min-norm", "-1"], "--min-norm: expected a finite number"),
    ("inspect-max-norm-nan", ["inspect", "model.py", "--max-norm", "nan"], "--max-norm: expected a finite number"),
    ("inspect-max-norm-inf", ["inspect", "model.py", "--max-norm", "inf"], "--max-norm: expected a finite number"),
    ("check-lr-nan", ["check", "model.py", "--lr", "nan"], "--lr: expected a finite number >= 0, got nan"),
    ("watch-lr-inf", ["watch", "model.py", "--lr", "inf"], "--lr: expected a finite number >= 0, got inf"),
    ("clip-lr-negative", ["clip", "model.py", "--max", "1", "--lr", "-1"], "--lr: expected a finite number >= 0"),
    ("watch-clip-nan", ["watch", "model.py", "--clip", "nan"], "--clip: expected a finite number >= 0, got nan"),
    ("watch-clip-negative", ["watch", "model.py", "--clip", "-0.5"], "--clip: expected a finite number >= 0"),
    ("check-steps-0", ["check", "model.py", "--steps", "0"], "--steps: expected a whole number >= 1, got 0"),
    ("watch-steps-negative", ["watch", "model.py", "--steps", "-3"], "--steps: expected a whole number >= 1"),
    ("clip-steps-0", ["clip", "model.py", "--max", "1", "--steps", "0"], "--steps: expected a whole number >= 1"),
    ("watch-steps-float", ["watch", "model.py", "--steps", "1.5"], "--steps: expected a whole number >= 1, got '1.5'"),
    ("inspect-step-negative", ["inspect", "model.py", "--step", "-1"], "--step: expected a whole number >= 0"),
    ("graph-depth-negative", ["graph", "model.py", "--depth", "-2"], "--depth: expected a whole number >= 0"),
    ("seed-text", ["inspect", "model.py", "--seed", "abc"], "--seed: expected a whole number from"),
    ("seed-too-large", ["inspect", "model.py", "--seed", str(2 ** 64)], "--seed: expected a whole number from"),
    ("seed-too-small", ["inspect", "model.py", "--seed", str(-2 ** 63 - 1)], "--seed: expected a whole number from"),
    ("watch-steps-huge", ["watch", "model.py", "--steps", "99999999999"], "--steps: expected at most 1000000, got 99999999999"),
    ("check-min-norm-above-max-norm", ["check", "model.py", "--min-norm", "5", "--max-norm", "1"],
     "--min-norm 5 must be below --max-norm 1"),
    ("unknown-option", ["inspect", "model.py", "--bogus"], "No such option '--bogus'"),
    ("bad-format", ["inspect", "model.py", "--format", "xml"], "Invalid value for '--format'"),
    ("unknown-command", ["inspekt", "model.py"], "No such command 'inspekt'"),
]

CONFIG_CASES = [
    ("config-max-norm-negative", ["check", "model.py"], "max_norm = -1",
     "pyproject.toml: tool.gradscope.max_norm: expected a finite number >= 0, got -1"),
    ("config-min-norm-negative", ["check", "model.py"], "min_norm = -1",
     "pyproject.toml: tool.gradscope.min_norm: expected a finite number >= 0, got -1"),
    ("config-lr-text", ["check", "model.py"], 'lr = "fast"',
     "pyproject.toml: tool.gradscope.lr: expected a finite number >= 0, got 'fast'"),
    ("config-lr-nan", ["watch", "model.py"], "lr = nan", "pyproject.toml: tool.gradscope.lr: expected a finite"),
    ("config-lr-inf", ["clip", "model.py", "--max", "1"], "lr = inf", "tool.gradscope.lr: expected a finite"),
    ("config-max-norm-nan", ["inspect", "model.py"], "max_norm = nan", "tool.gradscope.max_norm: expected a finite"),
    ("config-steps-0", ["check", "model.py"], "steps = 0",
     "pyproject.toml: tool.gradscope.steps: expected a whole number >= 1, got 0"),
    ("config-steps-0-watch", ["watch", "model.py"], "steps = 0", "tool.gradscope.steps: expected a whole number"),
    ("config-steps-negative", ["check", "model.py"], "steps = -2", "tool.gradscope.steps: expected a whole number"),
    ("config-steps-float", ["check", "model.py"], "steps = 1.5", "tool.gradscope.steps: expected a whole number"),
    ("config-steps-bool", ["check", "model.py"], "steps = true", "tool.gradscope.steps: expected a whole number"),
    ("config-steps-huge", ["watch", "model.py"], "steps = 10_000_000_000", "tool.gradscope.steps: expected at most 1000000"),
    ("config-min-norm-above-max-norm", ["check", "model.py"], "min_norm = 1.0\nmax_norm = 0.5",
     "pyproject.toml: tool.gradscope.min_norm 1 must be below pyproject.toml: tool.gradscope.max_norm 0.5"),
    ("config-max-norm-below-flag-min-norm", ["check", "model.py", "--min-norm", "0.1"], "max_norm = 1e-3",
     "--min-norm 0.1 must be below pyproject.toml: tool.gradscope.max_norm 0.001"),
    ("config-clip-nan", ["watch", "model.py"], "clip = nan", "tool.gradscope.clip: expected a finite number"),
    ("config-max-negative", ["clip", "model.py"], "max = -1", "tool.gradscope.max: expected a finite number"),
    ("config-min-ratio-range", ["check", "model.py"], "min_ratio = 2", "tool.gradscope.min_ratio: expected a finite"),
    ("config-overfit-text", ["check", "model.py"], 'overfit = "yes"',
     "tool.gradscope.overfit: expected true or false, got 'yes'"),
    ("config-seed-text", ["inspect", "model.py"], 'seed = "x"', "tool.gradscope.seed: expected a whole number"),
    ("config-model-number", ["inspect"], "model = 5", "tool.gradscope.model: expected a non-empty string, got 5"),
    ("config-log-empty", ["watch", "model.py"], 'log = ""', "tool.gradscope.log: expected a non-empty string"),
    ("config-unknown-key", ["inspect", "model.py"], "max_nrom = 1", "tool.gradscope: unknown key 'max_nrom'"),
    ("config-command-table", ["check", "model.py"], "[tool.gradscope.check]\nsteps = 0",
     "pyproject.toml: tool.gradscope.check.steps: expected a whole number >= 1, got 0"),
    ("config-bad-value-other-command", ["inspect", "model.py"], "[tool.gradscope.watch]\nlr = -1",
     "tool.gradscope.watch.lr: expected a finite number >= 0, got -1"),
    ("config-not-a-table", ["inspect", "model.py"], None, "tool.gradscope must be a table"),
    ("config-invalid-toml", ["inspect", "model.py"], "steps = = 3", "pyproject.toml: not valid TOML"),
    ("config-not-utf8", ["check", "model.py"], b"steps = 3 # \xff\xfe", "pyproject.toml: cannot read it: not UTF-8"),
    ("config-no-model", ["inspect"], "steps = 3", "missing MODEL"),
    ("no-config-no-model", ["inspect"], "", "missing MODEL"),
]


def option_cases() -> list[Case]:
    cases = [Case(name, argv, 2, message, {"model.py": MARKER_MODEL}, check=_model_not_run)
             for name, argv, message in FLAG_CASES]
    for name, argv, section, message in CONFIG_CASES:
        if section is None:
            text: str | bytes = "[tool]\ngradscope = 5\n"
        elif isinstance(section, bytes):
            text = b"[tool.gradscope]\n" + section + b"\n"
        elif section == "" and name.startswith("no-config"):
            cases.append(Case(name, argv, 2, message, {"model.py": MARKER_MODEL}, check=_model_not_run))
            continue
        else:
            text = "[tool.gradscope]\n" + section + "\n"
        cases.append(Case(name, argv + ["--format", "json"] if argv[0] != "graph" else argv, 2, message,
                          {"model.py": MARKER_MODEL, "pyproject.toml": text}, stdout="empty", check=_model_not_run))
    cases.append(Case("model-null-bytes", ["inspect", "model.py", "--format", "json"], 3,
                      "model.py: syntax error: source code", {"model.py": b"x = 1\x00\n"}, stdout="empty"))
    cases.append(Case("config-model-missing", ["inspect", "--format", "json"], 3,
                      "sub/nope.py: model file not found (from pyproject.toml: tool.gradscope.model = 'sub/nope.py')",
                      {"pyproject.toml": '[tool.gradscope]\nmodel = "sub/nope.py"\n'}, stdout="empty"))
    cases.append(Case("commands-file-not-utf8", ["debug", "model.py", "--commands-file", "cmds.txt"], 2,
                      "--commands-file cmds.txt: not UTF-8 text", {"model.py": MARKER_MODEL, "cmds.txt": b"where\xff\n"},
                      check=_model_not_run))
    return cases


MARKER_MODEL = MODEL + "\nopen(os.path.join(os.path.dirname(__file__), 'ran.marker'), 'w').close()\n"


def _model_not_run(root: Path, result: Any) -> None:
    assert not (root / "ran.marker").exists(), "the model file ran before the options were checked"


# ------------------------------------------------------------------------------------------ outputs
CHDIR_MODEL = NAN_MODEL + "\nos.makedirs('elsewhere', exist_ok=True)\nos.chdir('elsewhere')\n"


def _log_lines(root: Path, name: str = "run.jsonl") -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / name).read_text().splitlines()]


def _outputs_stay_put(root: Path, result: Any) -> None:
    os.chdir(root)
    assert (root / "run.jsonl").exists() and (root / "b.npz").exists()
    assert not (root / "elsewhere" / "run.jsonl").exists() and not (root / "elsewhere" / "b.npz").exists()
    assert [line["step"] for line in _log_lines(root)] == [0, 1]
    assert _log_lines(root)[-1]["nonfinite"] == "loss"


def _dev_full_keeps_log_and_diagnosis(root: Path, result: Any) -> None:
    lines = _log_lines(root)
    assert [line["step"] for line in lines] == [0, 1] and lines[-1]["nonfinite"] == "loss"
    data = json.loads(result.stdout)
    assert data["first_nonfinite"]["step"] == 1 and data["bundle"] is None
    assert "cannot write /dev/full (--bundle)" in result.stderr


def _log_full_keeps_report(root: Path, result: Any) -> None:
    data = json.loads(result.stdout)
    assert data["status"] == "ok" and data["steps_run"] == 2


def _signal_model(signum: int) -> str:
    return body("_batch = batch\n"
                "def batch(step):\n"
                f"    if step == 2:\n        os.kill(os.getpid(), {int(signum)})\n"
                "    return _batch(step)")


def _interrupted_after_2(root: Path, result: Any) -> None:
    assert [line["step"] for line in _log_lines(root)] == [0, 1]
    data = json.loads(result.stdout)
    assert data["status"] == "interrupted" and data["steps_run"] == 2


def _config_relative_paths(root: Path, result: Any) -> None:
    assert (root / "logs" / "run.jsonl").exists()
    assert (root / "logs" / "b.npz").exists()


def _default_bundle(root: Path, result: Any) -> None:
    assert json.loads(result.stdout)["bundle"] == ".gradscope/replay.npz"
    assert (root / ".gradscope" / "replay.npz").exists()
    assert (root / ".gradscope" / ".gitignore").read_text().endswith("*\n")


def output_cases() -> list[Case]:
    nan = {"model.py": NAN_MODEL}
    marker = {"model.py": MARKER_MODEL}
    watch = ["watch", "model.py", "--steps", "4", "--nan", "--format", "json"]
    return [
        Case("log-new-directories", ["watch", "model.py", "--steps", "2", "--log", "no/such/dir/run.jsonl"], 0,
             files={"model.py": MODEL}, check=lambda root, result: _log_lines(root, "no/such/dir/run.jsonl")),
        Case("log-under-a-file", ["watch", "model.py", "--log", "model.py/dir/run.jsonl"], 2,
             "--log model.py/dir/run.jsonl: cannot write there: ", marker, check=_model_not_run),
        Case("log-dash", ["watch", "model.py", "--log", "-"], 2, "--log -: give a file name", marker,
             check=lambda root, result: (_model_not_run(root, result), not (root / "-").exists() or pytest.fail("-"))),
        Case("save-dash", ["inspect", "model.py", "--save", "-"], 2, "--save -: give a file name", marker,
             check=_model_not_run),
        Case("log-is-directory", ["watch", "model.py", "--log", "."], 2, "--log .: cannot write there: is a directory",
             marker, check=_model_not_run),
        Case("bundle-new-directory", watch + ["--bundle", "nope/b.npz"], 1, files=nan, stdout="json",
             check=lambda root, result: (root / "nope" / "b.npz").is_file() or pytest.fail("no bundle"),
             one_line=False),
        Case("bundle-under-a-file", ["watch", "model.py", "--nan", "--bundle", "model.py/b.npz"], 2,
             "--bundle model.py/b.npz: cannot write there: ", marker, check=_model_not_run),
        Case("bundle-unwritable-directory", ["watch", "model.py", "--nan", "--bundle", "/proc/gradscope/b.npz"], 2,
             "--bundle /proc/gradscope/b.npz: cannot write there: cannot create directory /proc/gradscope", marker,
             check=_model_not_run),
        Case("bundle-is-directory", ["watch", "model.py", "--inf", "--bundle", "/"], 2,
             "--bundle /: cannot write there: is a directory", marker, check=_model_not_run),
        Case("save-new-directory", ["inspect", "model.py", "--save", "no/r.svg"], 0, files={"model.py": MODEL},
             check=lambda root, result: (root / "no" / "r.svg").is_file() or pytest.fail("no export")),
        Case("save-under-a-file", ["inspect", "model.py", "--save", "model.py/r.svg"], 2,
             "--save model.py/r.svg: cannot write there: ", marker, check=_model_not_run),
        Case("bundle-over-the-model-file", ["watch", "model.py", "--nan", "--bundle", "model.py"], 2,
             "--bundle model.py: that is the model file; refusing to overwrite it", marker, check=_model_not_run),
        Case("log-over-the-model-file", ["watch", "model.py", "--log", "./model.py"], 2,
             "that is the model file", marker, check=_model_not_run),
        Case("save-bad-suffix", ["inspect", "model.py", "--save", "r.txt"], 2,
             "--save r.txt: use a file name ending in .svg or .html or .htm", marker, check=_model_not_run),
        Case("config-log-under-a-file", ["watch", "model.py"], 2,
             "pyproject.toml: tool.gradscope.log model.py/x.jsonl: cannot write there",
             {**marker, "pyproject.toml": '[tool.gradscope]\nlog = "model.py/x.jsonl"\n'}, check=_model_not_run),
        Case("config-log-new-directory", ["watch", "model.py", "--steps", "2"], 0, files={
            "model.py": MODEL, "sub/.keep": "",
            "pyproject.toml": '[tool.gradscope.watch]\nlog = "runs/gradscope.jsonl"\n'},
             check=lambda root, result: _log_lines(root, "runs/gradscope.jsonl")),
        Case("model-chdir-keeps-outputs", watch + ["--log", "run.jsonl", "--bundle", "b.npz"], 1,
             files={"model.py": CHDIR_MODEL}, stdout="json", check=_outputs_stay_put, one_line=False),
        Case("bundle-dev-full", watch + ["--log", "run.jsonl", "--bundle", "/dev/full"], 1,
             "cannot write /dev/full (--bundle): No space left on device", nan, stdout="json",
             check=_dev_full_keeps_log_and_diagnosis),
        Case("log-dev-full", ["watch", "model.py", "--steps", "2", "--log", "/dev/full", "--format", "json"], 2,
             "cannot write /dev/full (--log)", {"model.py": MODEL}, stdout="json", check=_log_full_keeps_report),
        Case("sigterm-like-ctrl-c", ["watch", "model.py", "--steps", "5", "--log", "run.jsonl", "--format", "json"],
             143, "", {"model.py": _signal_model(signal.SIGTERM)}, stdout="json", check=_interrupted_after_2,
             one_line=False),
        Case("sigint", ["watch", "model.py", "--steps", "5", "--log", "run.jsonl", "--format", "json"], 130, "",
             {"model.py": _signal_model(signal.SIGINT)}, stdout="json", check=_interrupted_after_2, one_line=False),
        Case("sigterm-in-check", ["check", "model.py", "--steps", "5", "--format", "json"], 143,
             "terminated (SIGTERM)", {"model.py": _signal_model(signal.SIGTERM)}, stdout="empty"),
        Case("config-paths-relative-to-pyproject", ["watch", "--steps", "4"], 1, files={
            "sub/model.py": NAN_MODEL, "logs/.keep": "",
            "pyproject.toml": '[tool.gradscope]\nmodel = "sub/model.py"\n[tool.gradscope.watch]\nnan = true\n'
                              'log = "logs/run.jsonl"\nbundle = "logs/b.npz"\n'},
             check=_config_relative_paths, one_line=False),
        Case("default-bundle-in-dot-gradscope", watch, 1, files=nan, stdout="json", check=_default_bundle,
             one_line=False),
    ]


# ------------------------------------------------------------------------------------------ bundles
def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _bundle_members(source: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(source) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def _zip(members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _meta(members: dict[str, bytes]) -> dict[str, Any]:
    return json.loads(np.lib.format.read_array(io.BytesIO(members["meta.npy"])).tobytes())


def _with_meta(members: dict[str, bytes], meta: Any) -> dict[str, bytes]:
    text = meta if isinstance(meta, (str, bytes)) else json.dumps(meta)
    data = text.encode() if isinstance(text, str) else text
    return {**members, "meta.npy": _npy(np.frombuffer(data, dtype=np.uint8))}


def _edit_meta(**changes: Any) -> Callable[[dict[str, bytes]], bytes]:
    def make(members: dict[str, bytes]) -> bytes:
        meta = _meta(members)
        meta.update(changes)
        return _zip(_with_meta(members, meta))
    return make


def _replace_member(name: str, array: Any) -> Callable[[dict[str, bytes]], bytes]:
    return lambda members: _zip({**members, name: _npy(np.asarray(array)) if not isinstance(array, bytes) else array})


def _without(name: str) -> Callable[[dict[str, bytes]], bytes]:
    return lambda members: _zip({key: value for key, value in members.items() if key != name})


def _bad_crc(members: dict[str, bytes]) -> bytes:
    data = bytearray(_zip(members, compression=zipfile.ZIP_STORED))
    offset = data.index(b"\x93NUMPY", data.index(b"param/")) + 130
    data[offset] ^= 0xFF
    return bytes(data)


def _huge_declared_shape(members: dict[str, bytes]) -> bytes:
    header = {"descr": "<f4", "fortran_order": False, "shape": (10 ** 12,)}
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return _zip({**members, "batch/0.npy": buffer.getvalue() + b"\x00" * 64})


def _huge_declared_sizes(members: dict[str, bytes]) -> bytes:
    """Three members whose zip directory entries declare 4 GiB each."""
    extra = {f"param/huge{index}.npy": _npy(np.zeros(4, np.float32)) for index in range(3)}
    data = bytearray(_zip({**members, **extra}, compression=zipfile.ZIP_STORED))
    position = 0
    while True:
        position = data.find(b"PK\x01\x02", position)
        if position < 0:
            break
        name_length = struct.unpack_from("<H", data, position + 28)[0]
        if data[position + 46:position + 46 + name_length].startswith(b"param/huge"):
            struct.pack_into("<I", data, position + 24, 0xFFFFFFF0)
        position += 4
    return bytes(data)


def _nested(members: dict[str, bytes]) -> bytes:
    meta = _meta(members)
    text = json.dumps(meta).replace('"optimizer_state": ', '"optimizer_state": ' + '{"list": [' * 50000, 1)
    text = text.replace(', "batch": ', "]}" * 50000 + ', "batch": ', 1)
    return _zip(_with_meta(members, text))


def _nested_moderately(members: dict[str, bytes]) -> bytes:
    meta = _meta(members)
    spec: Any = {"value": 1}
    for _ in range(200):
        spec = {"list": [spec]}
    meta["optimizer_state"] = spec
    return _zip(_with_meta(members, meta))


BUNDLE_FAULTS: dict[str, tuple[Any, str]] = {
    "empty-file": (lambda members: b"", "an empty file"),
    "truncated": (lambda members: _zip(members)[: len(_zip(members)) // 2], "not a gradscope replay bundle"),
    "bad-crc": (_bad_crc, "not a readable gradscope replay bundle"),
    "npy-not-npz": (lambda members: _npy(np.zeros(3, np.float32)), "a single .npy array"),
    "text-file": (lambda members: b"hello, I am not a bundle\n", "not a zip archive"),
    "string-member": (_replace_member("batch/0.npy", np.array(["a", "b"])), "holds <U1 values"),
    "bytes-member": (_replace_member("batch/0.npy", np.array([b"ab"])), "holds |S2 values"),
    "complex-member": (_replace_member("batch/0.npy", np.ones(3, np.complex64)), "holds complex64 values"),
    "structured-member": (_replace_member("batch/0.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")])),
                          "a bundle holds only numbers"),
    "object-member": (_replace_member("batch/0.npy", np.array([{"x": 1}], dtype=object)), "holds object values"),
    "missing-rng": (_without("rng.npy"), "member 'rng') is missing"),
    "missing-batch-member": (_without("batch/1.npy"), "refers to \"batch/1\", which is not a member"),
    "missing-meta": (_without("meta.npy"), "no metadata"),
    "meta-list": (lambda members: _zip(_with_meta(members, [1, 2, 3])), "the metadata is a JSON list"),
    "meta-not-json": (lambda members: _zip(_with_meta(members, "{not json")), "not valid UTF-8 JSON"),
    "meta-not-utf8": (lambda members: _zip(_with_meta(members, b"\xff\xfe{}")), "not valid UTF-8 JSON"),
    "meta-float-array": (_replace_member("meta.npy", np.zeros(4)), "the metadata is not a UTF-8 JSON document"),
    "meta-wrong-format": (_edit_meta(format="other/9"), "unsupported bundle format 'other/9'"),
    "meta-step-text": (_edit_meta(step="abc"), "meta step is \"abc\"; expected a whole number >= 0"),
    "meta-step-negative": (_edit_meta(step=-4), "meta step is -4"),
    "meta-step-float": (_edit_meta(step=1.5), "meta step is 1.5"),
    "meta-lr-text": (_edit_meta(lr="fast"), "meta lr is \"fast\"; expected a finite number >= 0"),
    "meta-lr-negative": (_edit_meta(lr=-1), "meta lr is -1"),
    "meta-clip-negative": (_edit_meta(clip=-1), "meta clip is -1; expected a finite number >= 0"),
    "meta-clip-text": (_edit_meta(clip="x"), "meta clip is \"x\""),
    "meta-model-number": (_edit_meta(model=3), "meta model is 3; expected a string"),
    "meta-batch-3-tuple": (_edit_meta(batch={"tuple": [{"value": 1}, {"value": 2}, {"value": 3}]}),
                           "meta batch holds 3 values; expected (inputs, targets)"),
    "meta-batch-not-a-tuple": (_edit_meta(batch={"value": 5}), "meta batch holds a value"),
    "meta-batch-bad-spec": (_edit_meta(batch={"what": 1}), "meta batch holds"),
    "meta-batch-requires-grad-int": (_edit_meta(batch={"tuple": [{"tensor": "rng", "requires_grad": True},
                                                                 {"value": 1}]}), "not a member"),
    "meta-requires-grad-text": (_edit_meta(batch={"tuple": [{"tensor": "batch/0", "requires_grad": "yes"},
                                                            {"value": 1}]}), "requires_grad \"yes\""),
    "meta-no-optimizer-state": (lambda members: _zip(_with_meta(members, {
        key: value for key, value in _meta(members).items() if key != "optimizer_state"})), "meta has no optimizer_state"),
    "meta-optimizer-state-not-dict": (_edit_meta(optimizer_state={"value": 3}), "optimizer_state is not a dict"),
    "meta-dict-key-list": (_edit_meta(optimizer_state={"dict": [[{"list": []}, {"value": 1}]]}),
                           "expected a plain value"),
    "meta-nested-deeply": (_nested, "nested too deeply"),
    "meta-nested-200": (_nested_moderately, "nested more than 64 levels deep"),
    "rng-garbage": (_replace_member("rng.npy", np.frombuffer(b"garbage!", np.uint8)),
                    "member 'rng' is not a gradscope random generator state"),
    "rng-float": (_replace_member("rng.npy", np.zeros(3)), "member 'rng' is not a random generator state"),
    "huge-declared-shape": (_huge_declared_shape, "declares shape (1000000000000,)"),
    "huge-declared-sizes": (_huge_declared_sizes, "more than the limit"),
    "unexpected-member": (lambda members: _zip({**members, "notes.txt": b"hi"}), "unexpected member 'notes.txt'"),
    "unknown-array-member": (_replace_member("extra/0.npy", np.zeros(2)), "unexpected member 'extra/0'"),
    "parameter-shape-mismatch": (_replace_member("param/0.weight.npy", np.zeros((2, 2), np.float32)),
                                 "parameter 0.weight has shape (2, 2) in the bundle"),
    "optimizer-state-mismatch": (_edit_meta(optimizer_state={"dict": [[{"value": "state"}, {"value": 5}],
                                                               [{"value": "param_groups"}, {"list": []}]]}),
                                 "the bundle's optimizer state does not fit the model's optimizer (SGD)"),
    "parameter-missing": (_without("param/0.weight.npy"), "the bundle does not match the model"),
}


def bundle_cases() -> list[Case]:
    cases = [Case(f"bundle-{name}", ["replay", "bad.npz", "model.py", "--format", "json"], 2, message,
                  {"model.py": NAN_MODEL, "bad.npz": make}, stdout="empty")
             for name, (make, message) in BUNDLE_FAULTS.items()]
    cases += [
        Case("bundle-not-found", ["replay", "missing.npz", "model.py"], 2, "missing.npz: replay bundle not found",
             {"model.py": MARKER_MODEL}, check=_model_not_run),
        Case("bundle-dev-zero", ["replay", "/dev/zero", "model.py"], 2, "/dev/zero: not a regular file",
             {"model.py": MARKER_MODEL}, check=_model_not_run),
        Case("bundle-fifo", ["replay", "pipe", "model.py"], 2, "pipe: not a regular file",
             {"model.py": MARKER_MODEL, "pipe": lambda members: os.mkfifo("pipe")}, check=_model_not_run),
        Case("replay-bundle-is-directory", ["replay", ".", "model.py"], 2, "is a directory", {"model.py": MARKER_MODEL}),
        Case("bundle-valid-replays", ["replay", "good.npz", "model.py", "--format", "json"], 1,
             files={"model.py": NAN_MODEL, "good.npz": lambda members: _zip(members)}, stdout="json", one_line=False),
    ]
    return cases


CASES = user_code_cases() + argv_cases() + stdout_cases() + option_cases() + output_cases() + bundle_cases()


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    from click.testing import CliRunner

    from gradscope.cli import cli

    root = tmp_path_factory.mktemp("bundle")
    (root / "model.py").write_text(NAN_MODEL)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        result = CliRunner().invoke(cli, ["watch", "model.py", "--steps", "3", "--nan", "--bundle", "b.npz"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 1, result.output
    return _bundle_members(root / "b.npz")


def test_corpus_is_large_enough():
    assert len(CASES) >= 150
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_fault(case: Case, gradscope, tmp_path, good_bundle):
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content = content(good_bundle)
            if content is None:  # the maker created the file itself
                continue
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    result = gradscope(*case.argv, code=case.code)
    stderr = result.stderr
    assert "Traceback" not in stderr, stderr
    assert "internal error" not in stderr, stderr
    if case.code != 0 and case.one_line:
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, stderr
        assert case.message in errors[0], stderr
        if case.stdout in (None, "empty") and case.code in (2, 3):
            assert len(stderr.strip().splitlines()) == 1, stderr
    elif case.message:
        assert case.message in stderr, stderr
    _check_stdout(case.stdout, result.stdout)
    if case.check is not None:
        case.check(tmp_path, result)


def _check_stdout(kind: str | None, stdout: str) -> None:
    if kind == "empty":
        assert stdout == "", stdout
    elif kind == "json":
        json.loads(stdout)
    elif kind == "junit":
        ElementTree.fromstring(stdout)
    elif kind == "github":
        assert all(line.startswith(("::", "gradscope check")) for line in stdout.splitlines()), stdout
    elif kind == "dot":
        assert stdout.startswith("digraph") and stdout.rstrip().endswith("}"), stdout


# ----------------------------------------------------------------------------------- single checks
def test_debug_traceback_with_debug_flag(gradscope, tmp_path):
    (tmp_path / "model.py").write_text(body("sys.exit(0)"))
    result = gradscope("inspect", "model.py", "--debug", code=3)
    assert "Traceback" in result.stderr and "SystemExit" in result.stderr


def test_negative_seed_is_the_same_as_torch(gradscope, tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    minus_one = gradscope.json("inspect", "model.py", "--seed", "-1", code=0)
    wrapped = gradscope.json("inspect", "model.py", "--seed", str(2 ** 64 - 1), code=0)
    assert minus_one == wrapped
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope]\nseed = -1\n")
    assert gradscope.json("inspect", "model.py", code=0) == minus_one
    torch = pytest.importorskip("torch")
    torch.manual_seed(-1)
    first = torch.randn(3)
    torch.manual_seed(2 ** 64 - 1)
    assert torch.equal(first, torch.randn(3))
    import gradscope as gs

    torch.manual_seed(-1)
    gs.manual_seed(-1)
    assert gs.initial_seed() == torch.initial_seed() == 2 ** 64 - 1
    for seed in (2 ** 64, -2 ** 63 - 1):
        with pytest.raises(ValueError):
            gs.manual_seed(seed)
        with pytest.raises((ValueError, RuntimeError)):
            torch.manual_seed(seed)


def test_seed_decides_every_model_command(gradscope, tmp_path):
    """``--seed`` seeds the generator before the model file runs, in every command that loads one:
    the same seed gives the same draws and weights, another seed others."""
    (tmp_path / "model.py").write_text(NAN_MODEL + "sys.stderr.write(f'draw {gs.rand(1).item():.8f} "
                                       "weight {model[0].weight.sum().item():.8f}\\n')\n")
    gradscope("watch", "model.py", "--steps", "3", "--nan", code=1)
    assert (tmp_path / ".gradscope" / "replay.npz").exists()
    commands = {"inspect": ["inspect", "model.py"], "watch": ["watch", "model.py", "--steps", "1"],
                "clip": ["clip", "model.py", "--max", "1"], "check": ["check", "model.py", "--steps", "1"],
                "graph": ["graph", "model.py"], "debug": ["debug", "model.py", "--commands", "continue"],
                "replay": ["replay", ".gradscope/replay.npz", "model.py"]}
    for name, words in commands.items():
        draws = []
        for seed in ("3", "3", "4"):
            result = gradscope(*words, "--seed", seed)
            assert result.exit_code in (0, 1), (name, result.stderr)
            draws.append([line for line in (result.stdout + result.stderr).splitlines() if line.startswith("draw ")])
        assert len(draws[0]) == 1, (name, draws)
        assert draws[0] == draws[1] != draws[2], name
    inspect = [gradscope.json("inspect", "model.py", "--seed", seed, code=0)["loss"] for seed in ("3", "3", "4")]
    assert inspect[0] == inspect[1] != inspect[2]


def test_config_drives_every_command(gradscope, tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "model.py").write_text(NAN_MODEL)
    (tmp_path / "pyproject.toml").write_text('[tool.gradscope]\nmodel = "train/model.py"\nmax_norm = 1e-9\n'
                                             "[tool.gradscope.watch]\nsteps = 4\n")
    data = gradscope.json("inspect", code=1)
    assert data["model"] == os.path.join("train", "model.py")
    assert {f["check"] for f in data["findings"]} == {"exploding"}
    data = gradscope.json("watch", "--nan", code=1)
    assert data["steps_run"] == 2 and data["first_nonfinite"]["step"] == 1
    data = gradscope.json("clip", "--max", "1.0", code=0)
    assert data["max"] == 1.0
    assert gradscope.json("check", "--max-norm", "1000", "--steps", "1", code=0)["passed"]
    sub = tmp_path / "train"
    os.chdir(sub)
    assert gradscope.json("inspect", code=1)["model"] == "model.py"


def test_config_lr_reaches_watch(gradscope, tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    base = gradscope.json("watch", "model.py", "--steps", "3", code=0)["history"]
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope]\nlr = 0.5\n")
    configured = gradscope.json("watch", "model.py", "--steps", "3", code=0)["history"]
    assert configured[0] == base[0] and configured[2]["loss"] != base[2]["loss"]
    assert gradscope.json("watch", "model.py", "--steps", "3", "--lr", "0.01", code=0)["history"] == base


def test_make_optimizer_with_scheduler_steps_it_every_step(gradscope, tmp_path):
    source = body("calls = []\n"
                  "class Recorder(gs.optim.lr_scheduler.StepLR):\n"
                  "    def step(self, epoch=None):\n"
                  "        super().step(epoch)\n"
                  "        sys.stderr.write(f'scheduler lr {self.optimizer.param_groups[0][\"lr\"]:g}\\n')\n"
                  "def make_optimizer(p):\n"
                  "    opt = gs.optim.SGD(p, lr=1.0)\n"
                  "    return opt, Recorder(opt, step_size=1, gamma=0.5)")
    (tmp_path / "model.py").write_text(source)
    result = gradscope("watch", "model.py", "--steps", "3", "--format", "json", code=0)
    # the first line is the scheduler's own step() in its constructor, then one per training step
    assert [line for line in result.stderr.splitlines() if line.startswith("scheduler")] == [
        "scheduler lr 1", "scheduler lr 0.5", "scheduler lr 0.25", "scheduler lr 0.125"]


def test_clip_warns_on_non_finite_gradients(gradscope, tmp_path):
    (tmp_path / "model.py").write_text(NAN_MODEL.replace("if step == 1", "if step == 0"))
    result = gradscope("clip", "model.py", "--max", "1", "--format", "json", code=0)
    json.loads(result.stdout)
    assert "warning: the gradients hold nan before clipping" in result.stderr


def test_check_with_no_step_never_passes():
    import gradscope as gs
    from gradscope import nn
    from gradscope.loading import Workload
    from gradscope.monitor.check import CheckOptions, check_model

    workload = Workload(nn.Linear(3, 1), batch_fn=lambda step: (gs.randn(4, 3), gs.randn(4, 1)),
                        loss_fn=nn.MSELoss())
    report = check_model(workload, CheckOptions(steps=0))
    assert not report.passed
    assert all(result.status != "pass" for result in report.checks)


def test_atomic_write_keeps_the_old_file_on_failure(tmp_path):
    from gradscope._tool.files import atomic_write

    target = tmp_path / "bundle.npz"
    target.write_bytes(b"old")

    def half_then_fail(file):
        file.write(b"new, half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, half_then_fail)
    assert target.read_bytes() == b"old"
    assert [path.name for path in tmp_path.iterdir()] == ["bundle.npz"]
    atomic_write(target, lambda file: file.write(b"new"))
    assert target.read_bytes() == b"new"


def test_user_code_keyboard_interrupt_is_real_without_handlers():
    """As a library (no gradscope signal handlers), Ctrl-C inside user code still interrupts."""
    from gradscope.loading import Workload

    def interrupted(step):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Workload(model=None, batch_fn=interrupted).batch(0)


def test_usage_errors_are_one_line(gradscope):
    result = gradscope("inspect", "--steps", code=2)
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: ")
    result = gradscope("--bogus", code=2)
    assert len(result.stderr.strip().splitlines()) == 1 and "see 'gradscope --help'" in result.stderr


@pytest.mark.parametrize("argv, kind", [
    (["check", "model.py", "--steps", "1", "--format", "json"], "json"),
    (["check", "model.py", "--steps", "1", "--format", "junit"], "junit"),
    (["check", "model.py", "--steps", "1", "--format", "github"], "github"),
    (["inspect", "model.py", "--format", "json"], "json"),
    (["watch", "model.py", "--steps", "2", "--format", "json"], "json"),
    (["graph", "model.py", "--format", "dot"], "dot"),
])
def test_writes_to_descriptor_1_go_to_stderr(tmp_path, argv, kind):
    """``os.write(1, ...)``, C code and child processes bypass ``sys.stdout``: descriptor 1 itself
    points at stderr while the model runs, so stdout still holds one document."""
    import subprocess
    import sys

    (tmp_path / "model.py").write_text(forward_doing("os.write(1, b'raw write\\n')") +
                                       "import subprocess\nsubprocess.run([sys.executable, '-c', 'print(1234567)'])\n")
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, "-m", "gradscope", *argv], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert result.returncode == 0, result.stderr
    _check_stdout(kind, result.stdout)
    assert "raw write" not in result.stdout and "1234567" not in result.stdout
    assert "raw write" in result.stderr and "1234567" in result.stderr


@pytest.mark.parametrize("argv, warning", [
    (["inspect", "model.py", "--layers", "encoder.*"], "warning: --layers encoder.*: matches no module of the model"),
    (["watch", "model.py", "--steps", "1", "--layers", "fc*"], "warning: --layers fc*: matches no module"),
    (["check", "model.py", "--steps", "1", "--ignore", "conv1.bias:vanishing"],
     "warning: --ignore conv1.bias:vanishing: matches no parameter or module of the model (names look like 0.weight"),
])
def test_a_glob_that_matches_nothing_is_a_warning(gradscope, tmp_path, argv, warning):
    (tmp_path / "model.py").write_text(MODEL)
    assert warning in gradscope(*argv, code=0).stderr
    matching = [arg.replace("encoder.*", "0").replace("fc*", "2").replace("conv1.bias", "0.bias") for arg in argv]
    assert "warning" not in gradscope(*matching, code=0).stderr


def test_stdout_closed_early_stops_quietly(tmp_path):
    """``gradscope watch ... | head -1``: no error line, no traceback, exit 141, the log intact."""
    import subprocess
    import sys

    (tmp_path / "model.py").write_text(MODEL)
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen([sys.executable, "-m", "gradscope", "watch", "model.py", "--steps", "100000",
                                "--log", "run.jsonl"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "80"})
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().startswith(b"step    0")
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141, stderr
    assert "error" not in stderr and "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    steps = [line["step"] for line in _log_lines(tmp_path)]
    assert steps == list(range(len(steps))) and steps


def test_bundle_without_nan_or_inf_is_a_warning(gradscope, tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    stderr = gradscope("watch", "model.py", "--steps", "1", "--bundle", "b.npz", code=0).stderr
    assert "warning: --bundle b.npz: a replay bundle is only written with --nan or --inf; ignored" in stderr
    assert "warning" not in gradscope("watch", "model.py", "--steps", "1", "--nan", "--bundle", "b.npz", code=0).stderr


def test_a_command_table_key_the_command_does_not_take_is_a_warning(gradscope, tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "pyproject.toml").write_text("[tool.gradscope.inspect]\nclip = 1.0\n[tool.gradscope.watch]\nclip = 1.0\n")
    stderr = gradscope("inspect", "model.py", code=0).stderr
    assert "warning: pyproject.toml: tool.gradscope.inspect.clip: 'gradscope inspect' has no such option; ignored" \
        in stderr
    assert "warning" not in gradscope("watch", "model.py", "--steps", "1", code=0).stderr
