"""The debugger's views at 60, 80 and 200 columns, and summaries that stay on one screen (issue 24).

The debugger's tables follow ``inspect``'s fitting rules: no name or number is cut (no ``…``),
no line is wider than the terminal, columns left out are named, and when even the columns that
must stay do not fit, each row becomes a ``name value`` block. Sparklines are resampled to the
room on their line and keep the first non-finite step visible.
"""
from __future__ import annotations

import io
import math
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from gradscope.cli import App, cli
from gradscope.debug.stats import MissingTensor, TensorStats
from gradscope.debug.text import number
from gradscope.debug.views import (BreakpointList, BreakpointRow, GradGroup, GradsView, LayerRow, LayerTable,
                                   ParamRow, ParamsView)
from gradscope.monitor.records import RunReport, StepRecord, WatchReport
from gradscope.render import tables
from gradscope.render.debug import render_view

SAMPLES = Path(__file__).resolve().parents[2] / "sample_models"
WIDTHS = (60, 80, 200)


def sample(name: str, engine: str) -> str:
    return str(SAMPLES / ("torch_models" if engine == "torch" else "") / f"{name}.py")


def draw(renderable, width: int, height: int = 24) -> str:
    console = Console(file=io.StringIO(), width=width, height=height, force_terminal=True, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def fits(text: str, width: int) -> bool:
    return "…" not in text and all(len(line.rstrip()) <= width for line in text.splitlines())


def on_terminal(*args: str, width: int, height: int = 24) -> tuple[int, str, str]:
    """``gradscope ARGS`` with stdout and stderr consoles that are terminals of this size."""
    app = App()
    screen, errors = io.StringIO(), io.StringIO()
    app._out = Console(file=screen, force_terminal=True, width=width, height=height, color_system=None)
    app._err = Console(file=errors, force_terminal=True, width=width, height=height, color_system=None)
    result = CliRunner().invoke(cli, list(args), obj=app, catch_exceptions=False)
    return result.exit_code, screen.getvalue(), errors.getvalue()


# ------------------------------------------------------------------------------ debugger views
def _stats(label: str, norm: float, nonfinite: int = 0) -> TensorStats:
    return TensorStats(label=label, shape=(16, 16), dtype="float32", norm=norm, mean=-0.004977, abs_max=0.1528,
                       nonfinite=nonfinite, histogram=(1, 1, 2, 5, 9, 14, 20, 16, 9, 4, 2, 1, 1, 1, 1, 1),
                       low=-0.1528, high=0.1515)


GRADS = GradsView(
    title="encoder.layers.3.self_attn (MultiheadAttention) · post: grad_input known, after its backward · "
          "breakpoint 1 (nan)",
    groups=(GradGroup("grad_output", (_stats("grad_output[0]", 0.7488),)),
            GradGroup("grad_input", (_stats("grad_input[0]", math.nan, 108), _stats("grad_input[1]", 12.25),
                                     MissingTensor("grad_input[2]", "no gradient flows to this input")))),
    notes=("first non-finite gradient of this pass",))
TABLE = LayerTable(rows=tuple(
    LayerRow(module=f"encoder.layers.{i}.safe_log_probabilities", module_type="SafeLogProbabilities",
             status="current (post)" if i == 3 else "done" if i > 3 else "pending",
             grad_output_norm=0.7488 * (i + 1) if i >= 3 else None,
             grad_input_norm=math.nan if i == 3 else 1.234 if i > 3 else None,
             param_grad_norm=4.734 if i > 3 else None, nonfinite=108 if i == 3 else 0,
             edits="scale 0.5" if i == 4 else "") for i in range(6)), total_param_grad_norm=4.734)
PARAMS = ParamsView(module="encoder.layers.4.safe_log_probabilities", rows=tuple(
    ParamRow(name=f"encoder.layers.4.safe_log_probabilities.{kind}", shape=(512, 512), status="accumulated",
             grad_norm=4.197 * (i + 1), grad_mean=0.05046, grad_abs_max=1.051, nonfinite=0, param_norm=22.65)
    for i, kind in enumerate(("weight", "bias"))))
BREAKPOINTS = BreakpointList(rows=(BreakpointRow(1, "module encoder.layers.*.self_attn and grad_input norm > 100",
                                                 "post", True, 3),))


@pytest.mark.parametrize("width", WIDTHS)
def test_grads_never_cuts_a_name_or_a_number(width):
    text = draw(render_view(GRADS), width)
    assert fits(text, width), text
    for label, norm in (("grad_output[0]", 0.7488), ("grad_input[0]", math.nan), ("grad_input[1]", 12.25)):
        row = next(line for line in text.splitlines() if line.lstrip().startswith(label))
        assert number(norm) in row or number(norm) in text.split(label, 1)[1].splitlines()[1], text
    assert "108" in text and "grad_input[2]: no gradient flows to this input" in " ".join(text.split())
    if width >= 200:
        assert "left out" not in text and "histogram" in text and "[16, 16]" in text
    else:
        assert "left out at this width:" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_table_never_cuts_a_module_a_status_or_a_norm(width):
    text = draw(render_view(TABLE), width)
    assert fits(text, width), text
    for row in TABLE.rows:
        assert row.module in text
    assert "current (post)" in text and "total parameter gradient norm: 4.734" in text
    flat = " ".join(text.split())
    if width >= 200:
        assert "left out" not in text and "scale 0.5" in text and "nan" in text
    for header, shown in (("edits", "scale 0.5"), ("non-finite", "108"), ("grad_input", "nan")):
        # a column is shown, or it is named among those left out (never silently dropped)
        left_out = flat.partition("left out at this width:")[2].partition("(a wider terminal")[0].strip()
        assert shown in text or f" {header}," in f" {left_out}," or f" {header} (" in left_out, (header, text)


@pytest.mark.parametrize("width", WIDTHS)
def test_params_and_breakpoints_never_cut(width):
    text = draw(render_view(PARAMS), width)
    assert fits(text, width), text
    for row in PARAMS.rows:
        assert row.name in text and number(row.grad_norm) in text
    text = draw(render_view(BREAKPOINTS), width)
    assert fits(text, width), text  # (a condition is words: it may wrap between them)
    assert "module encoder.layers.*.self_attn and grad_input norm > 100" in " ".join(text.split())


def test_too_narrow_for_the_columns_that_stay_gives_name_value_blocks():
    text = draw(render_view(PARAMS), 50)
    assert fits(text, 50), text
    lines = [line.strip() for line in text.splitlines()]
    assert "encoder.layers.4.safe_log_probabilities.weight" in lines
    assert any(line.startswith("grad norm 4.197") or "grad norm 4.197" in line for line in lines), text


@pytest.mark.parametrize("engine", ["gradscope", "torch"])
@pytest.mark.parametrize("width", WIDTHS)
def test_debugger_at_a_nan_stop_fits_the_terminal(engine, width):
    if engine == "torch":
        pytest.importorskip("torch")
    code, screen, _ = on_terminal("debug", sample("nan_backward", engine), "--break", "nan", "--commands",
                                  "grads; table; params; breakpoints; step; step; step; params; quit", width=width)
    assert code == 0
    assert fits(screen, width), screen
    for name in ("grad_output[0]", "grad_input[0]", "safe_log", "current (post)", "hidden.weight", "hidden.bias"):
        assert name in screen, name
    assert "nan" in screen and re.search(r"grad_input\[0\][^\n]*nan", screen), screen
    assert ("left out at this width" in screen) == (width < 200)


# ------------------------------------------------------------------------------ sparklines
def test_sparkline_is_resampled_and_keeps_the_first_nonfinite_step():
    values = [1.0 / (step + 1) for step in range(3000)]
    values[1234] = math.nan
    line = tables.sparkline(values, 40)
    assert len(line) == 40 and line.count("!") == 1
    assert line.index("!") == 1234 * 40 // 3000
    assert tables.sparkline(values[:10], 40) == tables.sparkline(values[:10])
    assert len(tables.resample(list(range(3001)), 7)) == 7


def test_sparkline_resample_means_of_buckets():
    assert tables.resample([1.0, 3.0, 5.0, 7.0], 2) == [2.0, 6.0]
    assert tables.resample([1.0, 2.0, 3.0], 2) == [1.5, 3.0]
    assert math.isnan(tables.resample([1.0, math.inf, 3.0, 4.0], 2)[0])


def _history(steps: int, bad: int | None = None) -> tuple[StepRecord, ...]:
    layers = tuple(f"encoder.layers.{i}" for i in range(6))
    return tuple(StepRecord(step=step, loss=math.nan if step == bad else 2.0 / (step + 1), total_grad_norm=1.0,
                            layer_norms=tuple((name, 0.1 * (i + 1)) for i, name in enumerate(layers)),
                            nonfinite="loss" if step == bad else None) for step in range(steps))


@pytest.mark.parametrize("width", (60, 80, 200))
def test_watch_summary_of_3000_steps_fits_one_line_per_trend(width):
    report = WatchReport(model="m.py", steps_run=3000, status="nonfinite", first_nonfinite=None,
                         history=_history(3000, bad=2999))
    text = draw(tables.watch_summary(report), width)
    assert fits(text, width), text
    trend = text.splitlines()[0]
    assert trend.startswith("3000 steps run   loss 2 -> nan") and trend.rstrip().endswith("!")
    assert len(text.splitlines()) <= 3


def test_run_summary_of_3000_steps_fits_80_by_24():
    report = RunReport(script="train.py", steps_run=3000, status="ok", first_nonfinite=None,
                       history=_history(3000))
    text = draw(tables.run_summary(report), 80)
    assert fits(text, 80) and len(text.splitlines()) <= 24, text
    assert "encoder.layers.5" in text


def test_trend_goes_on_its_own_line_when_the_text_leaves_no_room():
    view = tables.TrendLine("gradscope run a/very/long/path/to/the/training/script/train.py: 3000 steps   "
                            "loss 2.5 -> 0.01  ", [1.0 / (i + 1) for i in range(3000)])
    lines = draw(view, 80).splitlines()
    assert lines[-1].startswith("  ") and len(lines[-1].rstrip()) == 80 and "▁" in lines[-1]
    assert all("▁" not in line for line in lines[:-1])


def test_watch_of_3000_steps_on_an_80x24_terminal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, screen, _ = on_terminal("watch", str(SAMPLES / "mlp.py"), "--steps", "3000", width=80, height=24)
    assert code == 0
    summary = screen[screen.index("3000 steps run"):]
    assert fits(summary, 80) and len(summary.splitlines()) <= 24, summary


RUN_SCRIPT = """
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
optimizer = gs.optim.SGD(model.parameters(), lr=0.05)
x, y = gs.randn(16, 4), gs.randn(16, 1)
for step in range(3000):
    optimizer.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
"""


def test_run_of_3000_steps_summary_fits_80x24(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(textwrap.dedent(RUN_SCRIPT))
    code, _, errors = on_terminal("run", "train.py", width=80, height=24)
    assert code == 0, errors
    summary = errors[errors.index("gradscope run train.py: 3000 steps"):]
    assert fits(summary, 80) and len(summary.splitlines()) <= 24, summary


# ------------------------------------------------------------------- plain text (breakpoint_on)
@pytest.mark.parametrize("width", WIDTHS)
def test_plain_text_views_follow_the_same_rules(width):
    from gradscope.debug.text import TextPresenter

    for view, names in ((GRADS, ["grad_output[0]", "grad_input[0]", "grad_input[1]"]),
                        (TABLE, [row.module for row in TABLE.rows]), (PARAMS, [row.name for row in PARAMS.rows])):
        out = io.StringIO()
        TextPresenter(out, width=width).show(view)
        text = out.getvalue()
        assert all(len(line) <= width for line in text.splitlines() if "left out" not in line
                   and not line.startswith(("note:", GRADS.title[:20]))), text
        for name in names:
            assert name in text.splitlines()[0] + "\n" + text
        narrowed = "left out at this width" in text or any(line.startswith("  ") for line in text.splitlines())
        assert narrowed == (width < 200) or view is PARAMS, text
    out = io.StringIO()
    TextPresenter(out, width=40).show(PARAMS)
    lines = out.getvalue().splitlines()
    assert "encoder.layers.4.safe_log_probabilities.bias" in lines and "  grad norm 8.394" in "\n".join(lines)


def test_plain_text_without_a_terminal_keeps_every_column():
    from gradscope.debug.text import TextPresenter

    out = io.StringIO()
    TextPresenter(out).show(TABLE)
    assert "edits" in out.getvalue() and "scale 0.5" in out.getvalue() and "left out" not in out.getvalue()


def test_debugger_on_a_real_80x24_terminal():
    pexpect = pytest.importorskip("pexpect")
    import os
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    env.update(PYTHONPATH=str(root), NO_COLOR="1", TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "gradscope", "debug", "sample_models/nan_backward.py", "--break",
                                           "nan"], cwd=str(root), env=env, encoding="utf-8", timeout=60,
                          dimensions=(24, 80))
    try:
        child.expect_exact("(gradscope) ")
        shown = []
        for command in ("grads", "table"):
            child.sendline(command)
            child.expect_exact("(gradscope) ")
            shown.append(child.before)
        child.sendline("quit")
        child.expect(pexpect.EOF)
    finally:
        child.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", "".join(shown).replace("\r", ""))  # (bold, dim)
    assert fits(text, 80), text
    for name in ("grad_output[0]", "grad_input[0]", "safe_log", "current (post)", "0.7488"):
        assert name in text, name


@pytest.mark.parametrize("width", WIDTHS)
def test_graph_of_a_deep_model_never_cuts_a_node_name(width):
    code, screen, _ = on_terminal("debug", str(SAMPLES / "transformer.py"), "--commands", "finish; graph all; quit",
                                  width=width)
    assert code == 0
    graph = screen[screen.index("(gradscope) graph all"):]
    assert fits(graph.replace("… ", ""), width), graph
    for name in ("NllLossBackward0", "EmbeddingBackward0", "NativeLayerNormBackward0", "SoftmaxBackward0",
                 "AccumulateGrad embed.weight"):
        assert name in graph, name
    assert ("└── " in graph) == (width >= 200)
    assert ("the number before a node is its depth" in " ".join(graph.split())) == (width < 200)


def test_where_wraps_a_long_value_under_itself():
    code, screen, _ = on_terminal("debug", str(SAMPLES / "nan_backward.py"), "--break", "nan", "--commands",
                                  "where; quit", width=60)
    assert code == 0 and fits(screen, 60)
    lines = screen.splitlines()
    note = next(index for index, line in enumerate(lines) if line.startswith("  note:    "))
    assert lines[note + 1].startswith(" " * 11) and lines[note + 1].strip()
    assert all(line == line.rstrip() for line in lines[note:note + 3])
