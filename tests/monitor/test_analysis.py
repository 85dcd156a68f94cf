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


def test_parameter_records_of_many_parameters_match_one_by_one_numpy():
    """Many small float32 gradients are reduced together: every statistic must still be the one
    numpy gives for that gradient alone (also next to NaN/Inf, zeros, other dtypes, an empty and
    a large gradient, and a parameter without one)."""
    import numpy as np

    from gradscope.engines import BATCH_LIMIT
    from gradscope.monitor.stats import parameter_records_of

    rng = np.random.default_rng(0)
    grads: list = [rng.standard_normal(shape).astype(np.float32) * scale
                   for shape, scale in [((8, 5), 1.0), ((7,), 1e-30), ((3, 4), 1e18), ((2, 2), 1.0)] * 5]
    grads[0][1] = 0.0
    grads[1][2] = np.nan
    grads[2][0, 0] = -np.inf
    grads[3][:] = 0.0
    grads += [rng.standard_normal(6).astype(np.float64) * 1e100, rng.standard_normal(9).astype(np.float16),
              np.zeros((0, 3), np.float32), rng.standard_normal(BATCH_LIMIT + 1).astype(np.float32), None]
    entries = [(f"layer{index}.weight", "Linear", np.ones((2, 3), np.float32) * index, grad)
               for index, grad in enumerate(grads)]
    records = parameter_records_of(entries)
    assert [record.name for record in records] == [name for name, _, _, _ in entries]
    for record, grad in zip(records, grads):
        assert record.param_norm == pytest.approx(float(np.linalg.norm(np.ones(6) * records.index(record))))
        if grad is None:
            assert not record.has_grad and record.grad_norm is None
            continue
        wide = grad.astype(np.float64)
        if grad.size == 0:
            assert (record.grad_norm, record.grad_mean, record.grad_abs_max) == (0.0, 0.0, 0.0)
            assert record.dead_unit_fraction is None and record.zero_fraction == 0.0
            continue
        if grad.ndim >= 2 and grad.shape[0] > 1:
            rows = wide.reshape(grad.shape[0], -1)
            assert record.dead_unit_fraction == pytest.approx(float(np.mean(~rows.any(axis=1))))
        else:
            assert record.dead_unit_fraction is None
        if record.param_norm > 0:
            assert record.grad_to_param == pytest.approx(record.grad_norm / record.param_norm, nan_ok=True)
        else:
            assert record.grad_to_param is None
        finite = np.isfinite(wide).all()
        assert record.nonfinite == int(wide.size - np.isfinite(wide).sum())
        assert record.grad_abs_max == float(np.abs(wide).max()) or math.isnan(float(np.abs(wide).max()))
        assert record.zero_fraction == pytest.approx(float(np.mean(wide == 0)))
        if finite:
            assert record.grad_norm == pytest.approx(float(np.sqrt(np.sum(wide * wide))), rel=1e-6)
            assert record.grad_mean == pytest.approx(float(wide.mean()), rel=1e-6, abs=1e-300)
            assert record.grad_std == pytest.approx(float(wide.std()), rel=1e-4, abs=1e-300)
        else:
            assert not math.isfinite(record.grad_norm)


def test_squared_norms_survive_float32_underflow_and_overflow():
    """Squares of float32 values below ~1e-19 or above ~1e19 leave float32's range: the sums are
    recomputed in float64, one array at a time and in a batch."""
    import numpy as np

    from gradscope.engines import squared_norm, squared_norms_of_arrays

    arrays = [np.full(5, scale, np.float32) for scale in (1e-25, 1e-15, 1.0, 1e25, 0.0)] * 4
    expected = [5 * float(np.float32(scale)) ** 2 for scale in (1e-25, 1e-15, 1.0, 1e25, 0.0)] * 4
    assert [squared_norm(array) for array in arrays] == pytest.approx(expected, rel=1e-6)
    assert squared_norms_of_arrays(arrays) == pytest.approx(expected, rel=1e-6)
    assert squared_norms_of_arrays(arrays)[0] > 0


def test_squared_norms_of_a_mixed_batch_are_each_arrays_own():
    """A batch mixing None, other dtypes, non-native byte order, empty, zero, NaN, Inf and
    out-of-range float32 arrays gives, position by position, what ``squared_norm`` gives."""
    import numpy as np

    from gradscope.engines import squared_norm, squared_norms_of_arrays

    rng = np.random.default_rng(0)
    arrays = [rng.random(5, dtype=np.float32), None, np.zeros(3, np.float32), np.full(2, 1e30, np.float32),
              rng.random(4).astype(np.float16), np.array([np.nan], np.float32), np.array([np.inf, 1.0], np.float32),
              rng.random(3), np.arange(4), np.array([1e-25], np.float32), np.zeros((0, 3), np.float32),
              rng.random(7).astype(">f4")]
    got = squared_norms_of_arrays(arrays)
    for index, (value, array) in enumerate(zip(got, arrays)):
        if array is None:
            assert value is None
        else:
            expected = squared_norm(array)
            assert value == expected or (math.isnan(value) and math.isnan(expected)), index
    plain = [array for array in arrays if array is not None and array.dtype == np.float32
             and not np.isnan(array).any()]  # (all float32: the batched path alone)
    assert squared_norms_of_arrays(plain) == [squared_norm(array) for array in plain]


def test_many_vanishing_gradients_are_summed_again_in_float64_together():
    """Vanishing float32 gradients (sums of squares below float32's safe range) are recomputed in
    float64 in one batch; NaN, Inf, empty, large and float64 arrays next to them keep their own."""
    import numpy as np

    from gradscope.engines import BATCH_LIMIT, squared_norms_of_arrays

    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(33).astype(np.float32) * np.float32(10.0 ** -exponent) for exponent in range(16, 26)]
    arrays += [np.zeros(4, np.float32), np.array([np.nan, 1e-30], np.float32), np.array([np.inf, 0.0], np.float32),
               np.zeros(0, np.float32), np.full(BATCH_LIMIT + 1, 1e-20, np.float32), np.array([1e-200, 0.0]),
               np.full(3, 1e30, np.float32)]
    got = squared_norms_of_arrays(arrays)
    for value, array in zip(got, arrays):
        wide = array.astype(np.float64)
        expected = float(np.sum(wide * wide))
        if math.isnan(expected):
            assert math.isnan(value)
        elif array.dtype == np.float64:
            assert value == float(np.vdot(array, array))  # (float64 sums stand as they are)
        else:
            assert value == pytest.approx(expected, rel=1e-6) and (value > 0) == (expected > 0)


def test_small_float32_sums_are_recomputed_only_where_underflow_could_matter():
    """A float32 sum of squares is recomputed in float64 only when squares below float32's normal
    range could have lost more than float32's own rounding; small sums above that bound keep their
    float32 value, which is then within float32 precision of the float64 sum. Both entry points
    (one array, a batch) follow the same rule."""
    import numpy as np

    from gradscope.engines import squared_norm, squared_norms_of_arrays

    rng = np.random.default_rng(3)
    base = rng.standard_normal(1024).astype(np.float32)
    cases = [base * np.float32(10.0 ** -exponent) for exponent in (16, 17, 18, 19, 20, 21, 23, 24, 30)]
    batch = squared_norms_of_arrays(cases)
    for array, batched in zip(cases, batch):
        wide = array.astype(np.float64)
        exact = float(np.vdot(wide, wide))
        single = squared_norm(array)
        assert single == pytest.approx(batched, rel=1e-12)  # (float64 sums, added in another order)
        assert single == pytest.approx(exact, rel=1e-6) and (single > 0) == (exact > 0)
        if exact > array.size * 1e-38 * 10:  # (safely inside the float32 range: the float32 dot product)
            assert single == float(np.vdot(array, array))
        elif exact < array.size * 1e-38 / 10:  # (subnormal squares: summed again in float64)
            assert single == exact
