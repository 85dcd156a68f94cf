"""Renderers are pure functions: plain records in, renderables / dicts / XML / text out."""
from __future__ import annotations

import io
import json
import math
import xml.etree.ElementTree as ElementTree

from rich.console import Console

from gradscope.monitor.records import (CheckReport, CheckResult, ClipParameterRecord, ClipReport, Finding,
                                       InspectReport, ModuleRecord, NonFiniteOrigin, ParameterRecord, StepRecord,
                                       WatchReport)
from gradscope.render import ci, data, tables

PARAM = ParameterRecord(name="fc.weight", module="fc", module_type="Linear", shape=(3, 2), has_grad=True,
                        grad_norm=0.5, grad_mean=0.1, grad_std=0.2, grad_abs_max=0.3, nonfinite=0,
                        zero_fraction=0.0, dead_unit_fraction=0.0, param_norm=2.0, grad_to_param=0.25)
NO_GRAD = ParameterRecord(name="aux.weight", module="aux", module_type="Linear", shape=(2, 2), has_grad=False,
                          grad_norm=None, grad_mean=None, grad_std=None, grad_abs_max=None, nonfinite=0,
                          zero_fraction=None, dead_unit_fraction=None, param_norm=1.0, grad_to_param=None)
FINDING = Finding(check="no_grad", severity="error", message="aux.weight receives no gradient", module="aux",
                  parameter="aux.weight")
INSPECT = InspectReport(model="m.py", step=0, loss=math.nan, total_grad_norm=0.5,
                        modules=(ModuleRecord("", "Net", 1, 0.7, None, 0),
                                 ModuleRecord("fc", "Linear", 1, 0.7, None, 0)),
                        parameters=(PARAM, NO_GRAD), findings=(FINDING,))


def render(renderable) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_number_encoding():
    assert data.number(None) is None
    assert data.number(1.5) == 1.5
    assert data.number(math.nan) == "nan"
    assert data.number(-math.inf) == "-inf"


def test_inspect_dict_is_strict_json():
    document = data.inspect_to_dict(INSPECT)
    text = json.dumps(document, allow_nan=False)
    assert json.loads(text)["loss"] == "nan"
    assert document["parameters"][1]["grad_norm"] is None
    assert document["parameters"][0]["shape"] == [3, 2]
    assert document["findings"][0]["parameter"] == "aux.weight"


def test_inspect_view_text():
    text = render(tables.inspect_view(INSPECT))
    assert "model " in text and "(model)" not in text and "fc.weight" in text and "no grad" in text
    assert "aux.weight receives no gradient" in text


def test_norm_bar_is_log_scaled():
    assert tables.norm_bar(None).plain.strip() == ""
    assert tables.norm_bar(math.nan).plain.startswith("!!")
    short, long = tables.norm_bar(1e-6).plain.rstrip(), tables.norm_bar(1e2).plain.rstrip()
    assert 0 < len(short) < len(long) <= tables.BAR_WIDTH
    assert len(tables.norm_bar(1e9).plain.rstrip()) == tables.BAR_WIDTH


def test_sparkline_and_fmt():
    assert tables.sparkline([1.0, 2.0, 3.0]) == "▁▅█"
    assert tables.sparkline([1.0, math.nan]) == "▁!"
    assert tables.fmt(None) == "-" and tables.fmt(math.inf) == "inf" and tables.fmt(0.000123456) == "0.000123"


ORIGIN = NonFiniteOrigin(step=3, phase="backward", module="safe_log", node="LogBackward0", source="m.py:7",
                         kind="nan", propagated=("relu",), detail="the backward pass of module 'safe_log' ...")
WATCH = WatchReport(model="m.py", steps_run=4, status="nonfinite", first_nonfinite=ORIGIN,
                    history=tuple(StepRecord(step, 1.0 / (step + 1), 0.5, (("fc", 0.5),)) for step in range(4)),
                    bundle="b.npz")


def test_watch_dict_and_views():
    document = data.watch_to_dict(WATCH)
    assert document["first_nonfinite"] == {"step": 3, "phase": "backward", "module": "safe_log",
                                           "node": "LogBackward0", "source": "m.py:7", "kind": "nan",
                                           "propagated": ["relu"], "detail": ORIGIN.detail}
    assert document["history"][1] == {"step": 1, "loss": 0.5, "total_grad_norm": 0.5}
    assert data.step_to_dict(WATCH.history[0])["layers"] == {"fc": 0.5}
    text = render(tables.watch_summary(WATCH))
    assert "LogBackward0" in text and "passed on by  relu" in text and "b.npz" in text
    assert "fc" in render(tables.watch_table(list(WATCH.history)))
    assert tables.watch_line(WATCH.history[0]).startswith("step    0  loss")


def test_clip_dict_and_view():
    report = ClipReport(model="m.py", mode="norm", scope="global", max=1.0, steps=1, total_norm_before=4.0,
                        total_norm_after=1.0, parameters=(ClipParameterRecord("fc.weight", 4.0, 1.0),))
    assert data.clip_to_dict(report)["parameters"] == [{"name": "fc.weight", "norm_before": 4.0, "norm_after": 1.0}]
    assert "0.25" in render(tables.clip_view(report))


CHECK = CheckReport(model="m.py", passed=False,
                    checks=(CheckResult("finite", "pass", "ok"),
                            CheckResult("gradients_reach_parameters", "fail", "no gradient reaches: aux.weight"),
                            CheckResult("loss_decreases", "fail", "the loss does not go down"),
                            CheckResult("gradcheck", "skip", "not run")),
                    findings=(FINDING,))


def test_junit():
    root = ElementTree.fromstring(ci.check_to_junit(CHECK))
    suite = root.find("testsuite")
    assert suite.get("tests") == "4" and suite.get("failures") == "2" and suite.get("skipped") == "1"
    failure = suite.find("testcase[@name='gradients_reach_parameters']/failure")
    assert failure.text == "aux.weight receives no gradient"


def test_github_annotations():
    text = ci.check_to_github(CHECK, "m.py", {"aux": 12})
    lines = text.splitlines()
    assert lines[0] == "::error file=m.py,line=12,title=gradscope no_grad::aux.weight receives no gradient"
    assert lines[1].startswith("::error file=m.py,line=1,title=gradscope loss_decreases::")
    assert lines[-1].startswith("gradscope check failed: finite=pass")
    assert "%0A" in ci.check_to_github(CheckReport("m", False, (), (Finding("dead", "warning", "a\nb"),)), "m.py")


def test_check_view():
    text = render(tables.check_view(CHECK))
    assert "FAIL" in text and "SKIP" in text and "some checks failed" in text


def test_run_summary_never_cuts_a_name_or_a_number():
    from gradscope.monitor.records import RunReport

    name = "encoder.layers.1.self_attn.out_proj"
    history = tuple(StepRecord(step, 1.0 / (step + 1), 0.5, ((name, 0.012345 * (step + 1)), ("head", 0.5)))
                    for step in range(3))
    origin = NonFiniteOrigin(step=2, phase="forward", module=name, node="ExpBackward0",
                             source="a/very/long/directory/name/of/the/training/script.py:20", kind="nan")
    report = RunReport(script="train.py", steps_run=3, status="nonfinite", first_nonfinite=origin, history=history)
    for width in (40, 60, 80, 120):
        console = Console(file=io.StringIO(), width=width, color_system=None)
        console.print(tables.run_summary(report))
        text = console.file.getvalue()
        assert "…" not in text, text
        assert name in text and "0.037" in text
        assert origin.source in "".join(text.split()), text
    assert "left out at this width" not in render(tables.run_summary(report))


def test_divergence_puts_zero_initialised_parameters_last():
    from gradscope.monitor.analysis import divergence_finding
    from gradscope.monitor.records import Divergence

    ratios = (("fc.bias", math.inf), ("fc.weight", 3.0), ("head.weight", 40.0))
    finding = divergence_finding(1, 0.5, 5e4, ratios, ())
    assert "largest update/parameter ratios: head.weight 40, fc.weight 3, fc.bias (from 0)" in finding.message
    assert finding.parameter == "head.weight"
    text = render(tables.divergence_view(Divergence(step=1, loss_before=0.5, loss_after=5e4, update_ratios=ratios,
                                                    zeroed_layers=())))
    lines = [line for line in text.splitlines() if line.startswith(("fc.", "head."))]
    assert [line.split()[0] for line in lines] == ["head.weight", "fc.weight", "fc.bias"]
    assert "from 0" in lines[-1] and "!!" not in text


def test_github_levels_follow_the_severity():
    findings = tuple(Finding("vanishing", severity, f"{severity} finding") for severity in ("error", "warning", "info"))
    lines = ci.check_to_github(CheckReport("m", False, (), findings), "m.py").splitlines()
    assert [line.split(" ")[0] for line in lines[:3]] == ["::error", "::warning", "::notice"]
