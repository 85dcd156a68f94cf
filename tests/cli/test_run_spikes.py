"""``gradscope run``: loss and gradient-norm spikes, with the cause known in each script (both engines).

The script trains a three-layer ReLU network (layers "0", "2", "4", one SGD parameter group each)
on fresh batches of a linear target for 30 steps; at step 15 one thing goes wrong:

* ``lr``: the learning rate of layer "2"'s group becomes 1000x too high. Its update at step 15
  jumps; the gradient everywhere rises at step 16. Expected: a spike at step 16 whose first and
  largest riser is layer "2" (its update of step 15), not "everywhere".
* ``scale``: the batch of step 15 is scaled by 1e4. Expected: a spike at step 15 where every
  layer's gradient rose at once and no update rose before: cause "everywhere" (the data).
* ``healthy``: nothing goes wrong. Expected: no spike.

A second script has attention logits that grow until softmax saturates: from step 15 on, the
query projection's weights are multiplied by 3 before each step. Neither the loss nor the total
gradient norm spikes (the value and head layers dominate it), but the key projection's gradient
does. Expected: a ``layer_grad_norm`` spike of layer "k" at step 15 or 16, where layer "q" rose
first (its weights changed between step 14's and step 15's backward passes) and most; later,
once softmax saturates, the gradients of "q" and "k" vanish.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

SCRIPT = '''
import sys
ENGINE, mode = sys.argv[1], sys.argv[2]
if ENGINE == "torch":
    import torch as T
    from torch import nn
    T.set_num_threads(1)
else:
    import gradscope as T
    from gradscope import nn
T.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
opt = T.optim.SGD([{"params": model[i].parameters()} for i in (0, 2, 4)], lr=0.01)
w = T.randn(8, 1)
for step in range(30):
    x = T.randn(32, 8)
    y = x @ w
    if mode == "scale" and step == 15:
        x = x * 1e4
    if mode == "lr" and step == 15:
        opt.param_groups[1]["lr"] *= 1000
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    print("step", step)
'''


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "spiky.py"
    path.write_text(SCRIPT)
    return path


def _doc(gradscope, *args: str, code: int | None = None) -> dict:
    return json.loads(gradscope("run", "--format", "json", *args, code=code).stdout)


def test_a_healthy_run_has_no_spike(gradscope, engine, script):
    assert _doc(gradscope, str(script), engine, "healthy", code=0)["spikes"] == []


def test_one_group_with_a_learning_rate_1000x_too_high_names_that_groups_layer(gradscope, engine, script):
    result = gradscope("run", "--format", "json", str(script), engine, "lr", code=0)
    spikes = [spike for spike in json.loads(result.stdout)["spikes"] if spike["quantity"] != "layer_grad_norm"]
    assert spikes and {spike["step"] for spike in spikes} == {16}
    for spike in spikes:
        assert spike["cause"] == "layers" and spike["action"] == "warn"
        first = spike["layers"][0]
        assert (first["layer"], first["first_step"]) == ("2", 15)  # its own update, a step before the rest
        assert first["factor"] > 1000 and all(other["first_step"] == 16 for other in spike["layers"][1:])
    assert "spike at step 16" in result.stderr and "rose first and most: 2 x" in result.stderr


def test_one_batch_scaled_by_1e4_is_the_data_everywhere_at_once(gradscope, engine, script):
    result = gradscope("run", "--format", "json", str(script), engine, "scale")
    spikes = [spike for spike in json.loads(result.stdout)["spikes"] if spike["quantity"] != "layer_grad_norm"]
    assert {(spike["step"], spike["quantity"]) for spike in spikes} == {(15, "loss"), (15, "grad_norm")}
    for spike in spikes:
        assert spike["cause"] == "everywhere"
        assert {layer["layer"] for layer in spike["layers"]} == {"0", "2", "4"}
        assert all(layer["first_step"] == 15 for layer in spike["layers"])
    assert "the gradient rose everywhere at once: the batch or the loss of this step (the data)" in result.stderr


def test_on_spike_skip_keeps_the_scaled_batch_away_from_the_weights(gradscope, engine, script, tmp_path):
    log = tmp_path / "steps.jsonl"
    result = gradscope("run", "--on-spike", "skip", "--log", str(log), "--format", "json", str(script), engine,
                       "scale", code=0)
    doc = json.loads(result.stdout)
    assert doc["skipped_steps"] == {"nonfinite": 0, "overflow": 0, "spike": 1}
    assert [record["step"] for record in map(json.loads, log.read_text().splitlines()) if record["skip"]] == [15]
    assert doc["status"] == "ok" and {spike["action"] for spike in doc["spikes"]} == {"skip"}
    healthy = [h["loss"] for h in doc["history"][16:]]
    assert max(healthy) < 100  # without the skip the 1e4 batch's update ruins every later loss
    assert "1 step was skipped at a spike: 15" in result.stderr


def test_on_spike_stop_stops_before_the_spiking_update(gradscope, engine, script):
    result = gradscope("run", "--on-spike", "stop", "--format", "json", str(script), engine, "scale", code=1)
    doc = json.loads(result.stdout)
    assert doc["stopped"] == "spike" and doc["steps_run"] == 16
    assert "step 15" not in result.stderr.replace("spike at step 15", "")  # the script never printed step 15
    assert "stopped at a spike (--on-spike stop)" in result.stderr


ATTENTION = '''
import sys
ENGINE = sys.argv[1]
if ENGINE == "torch":
    import torch as T
    from torch import nn
    T.set_num_threads(1)
else:
    import gradscope as T
    from gradscope import nn


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16)
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        h = self.embed(x)
        logits = self.q(h) @ self.k(h).transpose(-1, -2) / 4.0
        return self.head(T.softmax(logits, dim=-1) @ self.v(h)).mean(1)


T.manual_seed(0)
model = Attention()
opt = T.optim.SGD(model.parameters(), lr=0.01)
w = T.randn(8, 1)
for step in range(30):
    x = T.randn(16, 6, 8)
    y = x.mean(1) @ w
    if step >= 15:
        with T.no_grad():
            model.q.weight.mul_(3.0)
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
'''


def test_attention_logits_growing_until_softmax_saturates(gradscope, engine, tmp_path):
    script = tmp_path / "attention.py"
    script.write_text(ATTENTION)
    result = gradscope("run", "--format", "json", "--log", str(tmp_path / "steps.jsonl"), str(script), engine, code=0)
    spikes = json.loads(result.stdout)["spikes"]
    assert len(spikes) == 1
    spike = spikes[0]
    assert (spike["quantity"], spike["layer"], spike["action"]) == ("layer_grad_norm", "k", "warn")
    assert spike["step"] in (15, 16)
    assert [layer["layer"] for layer in spike["layers"]] == ["q", "k"]
    assert spike["layers"][0]["first_step"] == 14 and spike["layers"][0]["factor"] > 1000
    assert "gradient norm of layer k spike at step" in result.stderr
    last = json.loads((tmp_path / "steps.jsonl").read_text().splitlines()[-1])
    assert last["layers"]["q"] < 1e-6 and last["layers"]["k"] < 1e-6  # saturated: no gradient flows back
