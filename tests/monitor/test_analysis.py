"""Analysis is pure: parameter records in, findings out."""
from __future__ import annotations

import math

import pytest

from gradscope.monitor.analysis import Thresholds, gradient_findings, has_errors, loss_findings, merge_findings
from gradscope.monitor.records import Finding, ParameterRecord


def record(name: str, grad_norm: float | None, zero_fraction: float = 0.0, nonfinite: int = 0,
           dead_units: float | None = None, module_type: str = "Linear") -> ParameterRecord:
    has_grad = grad_norm is not None
    return ParameterRecord(name=name, module=name.rpartition(".")[0], module_type=module_type, shape=(4, 4),
                           has_grad=has_grad, grad_norm=grad_norm, grad_mean=0.0 if has_grad else None,
                           grad_std=0.0 if has_grad else None, grad_abs_max=0.0 if has_grad else None,
                           nonfinite=nonfinite, zero_fraction=zero_fraction if has_grad else None,
                           dead_unit_fraction=dead_units, param_norm=1.0,
                           grad_to_param=grad_norm if has_grad else None)


def checks(findings: list[Finding]) -> dict[str, str]:
    return {f.parameter: f.check for f in findings}


def test_healthy_parameters_have_no_findings():
    assert gradient_findings([record("a.weight", 0.5), record("b.weight", 2.0), record("b.bias", 0.01)]) == []


def test_each_kind_of_finding():
    params = [record("big.weight", 5e3), record("tiny.weight", 1e-9), record("none.weight", None),
              record("nan.weight", math.nan, nonfinite=3), record("zero.weight", 0.0, zero_fraction=1.0),
              record("half.weight", 1.0, dead_units=0.75), record("ok.weight", 1.0)]
    findings = gradient_findings(params)
    assert checks(findings) == {"big.weight": "exploding", "tiny.weight": "vanishing", "none.weight": "no_grad",
                                "nan.weight": "nonfinite", "zero.weight": "dead", "half.weight": "dead"}
    severities = {f.parameter: f.severity for f in findings}
    assert severities["half.weight"] == "warning" and severities["zero.weight"] == "error"
    exploding = next(f for f in findings if f.check == "exploding")
    assert exploding.value == 5e3 and exploding.threshold == 1e3 and exploding.module == "big"


def test_vanishing_limit_is_relative_by_default_and_absolute_when_given():
    params = [record("a.weight", 1.0), record("b.weight", 1e-5)]
    assert checks(gradient_findings(params)) == {"b.weight": "vanishing"}
    assert gradient_findings(params, Thresholds(min_ratio=1e-6)) == []
    assert checks(gradient_findings(params, Thresholds(min_norm=2.0))) == {"a.weight": "vanishing",
                                                                         "b.weight": "vanishing"}


def test_loss_findings_and_helpers():
    assert loss_findings(1.0) == []
    (finding,) = loss_findings(math.inf)
    assert finding.check == "nonfinite" and "infinite" in finding.message
    assert has_errors([finding]) and not has_errors([Finding("dead", "warning", "m")])
    merged = merge_findings([[finding], [finding, Finding("dead", "warning", "m", parameter="p")]])
    assert len(merged) == 2


def test_parameter_record_statistics_match_numpy():
    import numpy as np

    import gradscope as gs
    from gradscope import nn
    from gradscope.monitor.stats import parameter_record

    gs.manual_seed(0)
    layer = nn.Linear(6, 4)
    grad = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    grad[1] = 0.0
    grad[2, :3] = 0.0
    layer.weight.grad = gs.tensor(grad)
    stats = parameter_record("weight", "Linear", layer.weight.detach().numpy(), grad)
    assert stats.grad_norm == pytest.approx(float(np.linalg.norm(grad)), rel=1e-6)
    assert stats.grad_mean == pytest.approx(float(grad.mean()), abs=1e-7)
    assert stats.grad_std == pytest.approx(float(grad.std()), rel=1e-5)
    assert stats.grad_abs_max == pytest.approx(float(np.abs(grad).max()))
    assert stats.zero_fraction == pytest.approx(9 / 24)
    assert stats.dead_unit_fraction == pytest.approx(1 / 4)
    assert stats.param_norm == pytest.approx(float(np.linalg.norm(layer.weight.detach().numpy())), rel=1e-6)
    assert stats.grad_to_param == pytest.approx(stats.grad_norm / stats.param_norm)
    grad[0, 0] = np.nan
    grad[0, 1] = np.inf
    layer.weight.grad = gs.tensor(grad)
    stats = parameter_record("weight", "Linear", layer.weight.detach().numpy(), grad)
    assert stats.nonfinite == 2 and math.isnan(stats.grad_norm)
