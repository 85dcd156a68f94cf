"""Tables fit the width they are drawn at: no name or number is ever cut."""
from __future__ import annotations

import io
import math

import pytest
from rich.console import Console
from rich.measure import Measurement

from gradscope.monitor.records import (ClipParameterRecord, ClipReport, InspectReport, ModuleRecord,
                                       ParameterRecord, StepRecord)
from gradscope.render import data, tables
from gradscope.render.layout import Column, FittedTable, fit_table

WIDTHS = (60, 80, 120, 160)
LAYERS = [f"encoder.layers.{i}.self_attn.out_proj" for i in range(12)] + ["encoder.layers.11.feed_forward.linear2"]


def _parameter(name: str, scale: float) -> ParameterRecord:
    module = name.rpartition(".")[0]
    return ParameterRecord(name=name, module=module, module_type="Linear", shape=(512, 512), has_grad=True,
                           grad_norm=0.0123456 * scale, grad_mean=-1.23456e-7 * scale, grad_std=0.000345678,
                           grad_abs_max=0.0456789, nonfinite=0, zero_fraction=0.0, dead_unit_fraction=0.0,
                           param_norm=22.6543, grad_to_param=0.000544 * scale)


REPORT = InspectReport(
    model="models/transformer_encoder.py", step=0, loss=2.34567, total_grad_norm=1.98765,
    modules=tuple(ModuleRecord(name, "NonDynamicallyQuantizableLinear", 1, 0.0234567 * (i + 1), 0.0345678, 0)
                  for i, name in enumerate(LAYERS)),
    parameters=tuple(_parameter(f"{name}.{kind}", i + 1) for i, name in enumerate(LAYERS)
                     for kind in ("weight", "bias")),
    findings=())


def render(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def lines_fit(text: str, width: int) -> bool:
    return all(len(line.rstrip()) <= width for line in text.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_inspect_names_and_grad_norms_are_never_cut(width):
    text = render(tables.inspect_view(REPORT), width)
    assert "…" not in text and lines_fit(text, width)
    for module in REPORT.modules:
        assert module.name in text
        assert tables.fmt(module.grad_output_norm) in text
    for parameter in REPORT.parameters:
        assert f"{parameter.name} " in text or text.count(parameter.name)
        assert tables.fmt(parameter.grad_norm) in text
    if width >= 160:
        assert "left out" not in text.split("Parameter gradients")[1]


@pytest.mark.parametrize("width", (46, 52))
def test_too_narrow_for_a_table_stacks_rows(width):
    text = render(tables.inspect_view(REPORT), width)
    assert "…" not in text and lines_fit(text, width)
    for parameter in REPORT.parameters:
        assert parameter.name in text.splitlines() or any(line.strip() == parameter.name for line in text.splitlines())
        assert tables.fmt(parameter.grad_norm) in text


def test_columns_left_out_are_named_uniform_ones_first():
    columns = [Column("name", "left"), Column("varies", drop=1), Column("same", drop=9)]
    rows = [["a" * 20, str(i), "0"] for i in range(3)]
    text = " ".join(render(fit_table(columns, rows, 30), 30).split())
    assert "varies" in text and "left out at this width: same (all 0)" in text


def test_fitted_table_measures_to_its_natural_width():
    console = Console(file=io.StringIO(), width=400)
    view = FittedTable([Column("name", "left"), Column("a long header")], [["x" * 30, "1"]])
    measurement = Measurement.get(console, console.options, view)
    assert measurement.maximum == 30 + 3 + len("a long header")


@pytest.mark.parametrize("width", WIDTHS)
def test_watch_view_lists_every_layer_or_says_how_many_more(width):
    history = [StepRecord(step, 1.0 / (step + 1), 0.5, tuple((name, 0.001 * (i + 1) * (step + 1))
                                                              for i, name in enumerate(LAYERS)))
               for step in range(5)]
    view = tables.WatchView(history, total_steps=50, elapsed=2.0)
    console = Console(file=io.StringIO(), width=width, height=12, color_system=None)
    console.print(view)
    text = console.file.getvalue()
    assert "…" not in text and lines_fit(text, width)
    assert "step 5/50 · 2.0s elapsed · about 18s left" in text
    shown = [name for name in LAYERS if f"{name} " in text or f"{name}\n" in text]
    assert shown and f"+{len(LAYERS) - len(shown)} more layers (choose which with --layers GLOB)" in text
    for i, name in enumerate(shown):
        assert tables.fmt(0.001 * (i + 1) * 5) in text
    everything = render(tables.WatchView(history, 50, 2.0, layers=("encoder.layers.1*",)), width)
    assert "encoder.layers.11.feed_forward.linear2" in everything and "encoder.layers.2." not in everything


def test_watch_view_at_160_columns_shows_all_sixteen_layers():
    names = [f"block{i}.linear" for i in range(16)]
    history = [StepRecord(0, 1.0, 0.5, tuple((name, 0.1 * (i + 1)) for i, name in enumerate(names)))]
    console = Console(file=io.StringIO(), width=160, height=40, color_system=None)
    console.print(tables.WatchView(history, 10, 1.0))
    text = console.file.getvalue()
    assert all(name in text for name in names) and "more layer" not in text


def test_piped_watch_line_stays_readable_for_deep_models():
    record = StepRecord(3, 0.5, 1.5, tuple((name, 0.001 * (i + 1)) for i, name in enumerate(LAYERS)))
    line = tables.watch_line(record, width=160)
    assert len(line) <= 160
    assert "13 layers: min encoder.layers.0.self_attn.out_proj=0.001" in line
    assert "max encoder.layers.11.feed_forward.linear2=0.013" in line
    short = tables.watch_line(StepRecord(0, 1.0, 2.0, (("fc", 0.5), ("", 1.0))), width=160)
    assert short.endswith("fc=0.5 model=1")
    chosen = tables.watch_line(record, width=160, layers=("*.11.*",))
    assert "encoder.layers.11.self_attn.out_proj=0.012" in chosen and "layers.0." not in chosen


@pytest.mark.parametrize("width", WIDTHS)
def test_clip_view_fits(width):
    report = ClipReport(model="m.py", mode="norm", scope="global", max=1.0, steps=1, total_norm_before=4.0,
                        total_norm_after=1.0,
                        parameters=tuple(ClipParameterRecord(f"{name}.weight", 4.01e11, 0.993) for name in LAYERS))
    text = render(tables.clip_view(report), width)
    assert "…" not in text and lines_fit(text, width)
    assert all(f"{name}.weight" in text for name in LAYERS) and "4.01e+11" in text


def test_layers_filter_applies_to_json_and_root_is_model():
    document = data.inspect_to_dict(REPORT, layers=("encoder.layers.3.*",))
    assert [m["name"] for m in document["modules"]] == ["encoder.layers.3.self_attn.out_proj"]
    assert document["modules"][0]["calls"] == 1
    assert len(document["parameters"]) == 2
    assert tables.module_label("") == "model"
    assert math.isclose(document["total_grad_norm"], REPORT.total_grad_norm)


def test_no_deprecated_click_stream_helpers():
    """click 8.5 deprecates get_text_stream; the CLI uses sys.stdin/stdout/stderr (CliRunner swaps them)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "gradscope"
    assert not [path for path in root.rglob("*.py") if "get_text_stream" in path.read_text()]
