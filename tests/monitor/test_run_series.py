"""RunSeries: a run's per-layer and per-parameter gradient norms in memory that does not grow
with the number of steps, and the run's history that keeps them only for its first and last steps."""
from __future__ import annotations

import math
import statistics

import pytest

from gradscope.engines import get_engine
from gradscope.monitor.records import StepRecord
from gradscope.monitor.run import KEPT_RECORDS, RunMonitor, RunOptions
from gradscope.monitor.run_series import SAMPLE_LIMIT, RunSeries


def _record(step: int, layers: dict, parameters: dict, skipped: bool = False) -> StepRecord:
    return StepRecord(step=step, loss=1.0, total_grad_norm=1.0, layer_norms=tuple(layers.items()),
                      parameter_norms=tuple(parameters.items()), skipped=skipped)


def test_layer_spans_are_first_last_and_finite_extremes():
    records = [_record(0, {"a": 2.0, "b": math.nan}, {}), _record(1, {"a": 5.0, "b": 1.0}, {}),
               _record(2, {"a": math.inf, "b": None}, {}), _record(3, {"a": 0.5, "b": 3.0}, {})]
    series = RunSeries.of(records)
    a, b = series.layers["a"], series.layers["b"]
    assert (a.first, a.last, a.low, a.high) == (2.0, 0.5, 0.5, 5.0)
    assert math.isnan(b.first) and (b.last, b.low, b.high) == (3.0, 1.0, 3.0)
    assert list(series.layers) == ["a", "b"]


def test_parameter_medians_reach_and_zero_over_the_steps_not_skipped():
    records = [_record(step, {}, {"w": float(step), "z": 0.0, "n": math.nan if step % 2 else None})
               for step in range(9)]
    records.append(_record(9, {}, {"w": 1000.0, "z": 5.0}, skipped=True))  # (left out)
    series = RunSeries.of(records)
    assert series.steps == 9 and series.names == ["w", "z", "n"]
    assert series.median("w") == 4.0 and series.median("z") == 0.0 and series.median("n") is None
    assert series.reached("n") and not series.reached("absent")
    assert series.highest("z") == 0.0 and series.highest("w") == 8.0 and series.highest("n") is None
    even = RunSeries.of(records[:4])
    assert even.median("w") == 1.5  # (the mean of the two middle ones)


def test_a_long_series_keeps_a_bounded_evenly_spread_sample():
    steps = SAMPLE_LIMIT * 5 + 3
    series = RunSeries()
    for step in range(steps):
        series.observe(_record(step, {"layer": float(step)}, {"w": float(step)}))
    kept = series._parameters["w"].sample
    assert len(kept) <= SAMPLE_LIMIT
    assert list(kept) == sorted(kept) and kept[0] == 0.0 and kept[-1] > steps * 0.9  # (spread over the whole run)
    assert series.median("w") == pytest.approx(statistics.median(range(steps)), rel=0.01)
    assert series.highest("w") == steps - 1 and series.layers["layer"].high == steps - 1


@pytest.mark.parametrize("engine_name", ["gradscope", "torch"])
def test_a_long_run_keeps_norms_of_its_first_and_last_steps_and_reports_as_from_every_step(engine_name):
    """The history's middle records lose their per-layer and per-parameter norms; the report's
    series (summary, health rules) is what the full records give, and --log saw every full one."""
    if engine_name == "torch":
        torch = pytest.importorskip("torch")
        lib, nn, optim = torch, torch.nn, torch.optim
        torch.manual_seed(0)
    else:
        import gradscope as lib
        from gradscope import nn, optim
        lib.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    optimizer = optim.SGD(model.parameters(), lr=0.05)
    seen = []
    steps = 2 * KEPT_RECORDS + 40
    with RunMonitor(RunOptions(), on_step=seen.append, main_globals=lambda: {}) as monitor:
        monitor.attach(get_engine(engine_name))
        for step in range(steps):
            optimizer.zero_grad()
            model(lib.ones(2, 3) * (1 + step % 5)).square().mean().backward()
            optimizer.step()
    history = monitor.history
    assert len(history) == steps and [record.step for record in history] == list(range(steps))
    full = [index for index, record in enumerate(history) if record.parameter_norms]
    assert full == [*range(KEPT_RECORDS), *range(steps - KEPT_RECORDS, steps)]
    assert all(not record.layer_norms for record in history[KEPT_RECORDS:steps - KEPT_RECORDS])
    assert [record.loss for record in history] == [record.loss for record in seen]
    assert all(record.parameter_norms for record in seen)  # (--log and --tensorboard: every step whole)
    report = monitor.report("train.py")
    expected = RunSeries.of(seen)
    assert report.series.names == expected.names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    for name in expected.names:
        assert report.series.median(name) == expected.median(name)
    assert {name: vars(span) for name, span in report.series.layers.items()} == \
        {name: vars(span) for name, span in expected.layers.items()}
