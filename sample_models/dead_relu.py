# A dead-ReLU model: the first layer's bias was initialised to -20, so every ReLU output is 0
# for every input and no gradient reaches the first layer (or the second layer's weight).
# What you should see: `inspect` and `check` report "dead" for hidden.weight, hidden.bias and
# out.weight (gradients identically zero); only out.bias learns.
import gradscope as gs
from gradscope import nn

gs.manual_seed(0)

model = nn.Sequential()
model.add_module("hidden", nn.Linear(8, 32))
model.add_module("relu", nn.ReLU())
model.add_module("out", nn.Linear(32, 3))
nn.init.constant_(model.hidden.bias, -20.0)
loss_fn = nn.CrossEntropyLoss()


def batch(step):
    generator = gs.Generator().manual_seed(7000 + step)
    inputs = gs.randn(32, 8, generator=generator)
    return inputs, gs.randint(0, 3, (32,), generator=generator)
